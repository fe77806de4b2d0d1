"""Renderers that write a kernel as machine instructions rather than source for a compiler: instruction selection
(rule sets over the kernel IR), register allocation (codegen/late/regalloc.py), and an encoder in the C++ core
(drivers/cpu/x86_encode.cpp) that makes the bytes."""
