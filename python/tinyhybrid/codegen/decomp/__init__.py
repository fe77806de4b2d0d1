"""Decompositions: operations a device lacks, written as the ALU operations it has (tinygrad's codegen/decomp):
transcendental functions (transcendental.py) and other operations (op.py)."""
