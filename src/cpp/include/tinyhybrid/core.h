// Everything a C++ program needs to build, walk and rewrite UOp graphs.
#pragma once
#include "tinyhybrid/arg.h"
#include "tinyhybrid/dtype.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/ops.h"
#include "tinyhybrid/uop.h"
