// SPEC from C++ alone: the rule table finds planted violations at the stage and level they belong to, and reports the
// deepest failing node.
#include "check.h"
#include "tinyhybrid/graph.h"
#include "tinyhybrid/spec.h"

using namespace th;

namespace {

struct Kernel {
  UOpRef param = UOp::make(Ops::PARAM, DType::float32().ptr(16), {}, Arg::integer(0));
  UOpRef index = UOp::make(Ops::INDEX, DType::float32(), {param, UOp::const_int(DType::weakint(), 3)});
  UOpRef load = UOp::make(Ops::LOAD, DType::float32(), {index});
  UOpRef sink(const UOpRef& value) const {
    return UOp::make(Ops::SINK, DType::void_(), {UOp::make(Ops::STORE, DType::void_(), {index, value})});
  }
};

void test_clean_kernel_passes_every_level() {
  const Kernel k;
  const UOpRef s = k.sink(alu(Ops::ADD, {k.load, UOp::const_float(DType::float32(), 1.0)}));
  for (int level : {1, 2}) CHECK(!spec_find(s.get(), SpecStage::Lowered, level));
  const auto order = toposort(s.get());
  CHECK(!spec_find_linear(order, 2));
}

void test_movement_op_after_lowering() {
  const Kernel k;
  const UOpRef reshape = UOp::make(Ops::RESHAPE, DType::float32(), {k.load}, Arg::tuple({Arg::integer(1)}));
  const UOpRef expand = UOp::make(Ops::EXPAND, DType::float32(), {reshape}, Arg::tuple({Arg::integer(4)}));
  const auto v = spec_find(k.sink(expand).get(), SpecStage::Lowered, 1);
  CHECK(v);
  CHECK(v->node == reshape.get());  // the deeper of the two, whose sources pass
  CHECK_EQ(v->rule, std::string("tensor-graph ops are gone after lowering"));
  // the same graph is fine as a tensor graph, apart from its kernel ops
  const auto t = spec_find(expand.get(), SpecStage::Tensor, 1);
  CHECK(t && t->node == k.param.get());
  const std::string msg = spec_message(*v, "lower");
  CHECK(msg.rfind("SPEC: lower (lowered): RESHAPE breaks rule 'tensor-graph ops are gone after lowering'", 0) == 0);
  CHECK_THROWS(spec_check(k.sink(expand), SpecStage::Lowered, 1, "lower"), SpecError);
}

void test_level_two_rules() {
  const Kernel k;
  const UOpRef load_param = UOp::make(Ops::LOAD, DType::float32(), {k.param});
  CHECK(!spec_find(load_param.get(), SpecStage::Lowered, 1));
  const auto v = spec_find(load_param.get(), SpecStage::Lowered, 2);
  CHECK(v && v->rule == "a LOAD reads through an INDEX" && v->detail == "source 0 is PARAM");
  CHECK(!spec_find(load_param.get(), SpecStage::Lowered, 0));  // level 0: SPEC off
}

void test_linear_order() {
  const Kernel k;
  const UOp* program[] = {k.param.get(), k.load.get(), k.index.get()};
  const auto v = spec_find_linear(program, 1);
  CHECK(v && v->node == k.load.get() && v->rule == "a linearized program lists sources before their users");
}

void test_stage_names() {
  for (SpecStage s : {SpecStage::Tensor, SpecStage::Kernel, SpecStage::Lowered, SpecStage::Linear})
    CHECK(spec_stage_from_name(spec_stage_name(s)) == s);
  CHECK(!spec_stage_from_name("scheduled"));
}

}  // namespace

int main() {
  test_clean_kernel_passes_every_level();
  test_movement_op_after_lowering();
  test_level_two_rules();
  test_linear_order();
  test_stage_names();
  return 0;
}
