"""dtypes: scalar facts, vector and pointer forms, ordering, pickling, conversion from names and Python
values, and the promotion lattice (least_upper_dtype), written out as explicit tables."""
from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from tinyhybrid import DType, Ops, Tensor, UOp, dtypes
from tinyhybrid.dtype import least_upper_dtype, least_upper_float, strong_dtype, sum_acc_dtype, to_dtype

# attribute name -> (C name, itemsize, bitsize, struct fmt, repr, priority)
SCALARS = {
  "void":        ("void",            0,   0,   None, "dtypes.void",        -1),
  "bool":        ("bool",            1,   1,   "?",  "dtypes.bool",         0),
  "weakint":     ("weakint",         100, 800, None, "dtypes.weakint",      0),
  "int8":        ("signed char",     1,   8,   "b",  "dtypes.char",         1),
  "uint8":       ("unsigned char",   1,   8,   "B",  "dtypes.uchar",        2),
  "int16":       ("short",           2,   16,  "h",  "dtypes.short",        3),
  "uint16":      ("unsigned short",  2,   16,  "H",  "dtypes.ushort",       4),
  "int32":       ("int",             4,   32,  "i",  "dtypes.int",          5),
  "uint32":      ("unsigned int",    4,   32,  "I",  "dtypes.uint",         6),
  "int64":       ("long",            8,   64,  "q",  "dtypes.long",         7),
  "uint64":      ("unsigned long",   8,   64,  "Q",  "dtypes.ulong",        8),
  "weakfloat":   ("weakfloat",       100, 800, None, "dtypes.weakfloat",    9),
  "fp8e4m3":     ("float8_e4m3",     1,   8,   None, "dtypes.fp8e4m3",     10),
  "fp8e5m2":     ("float8_e5m2",     1,   8,   None, "dtypes.fp8e5m2",     11),
  "fp8e4m3fnuz": ("float8_e4m3fnuz", 1,   8,   None, "dtypes.fp8e4m3fnuz", 10),
  "fp8e5m2fnuz": ("float8_e5m2fnuz", 1,   8,   None, "dtypes.fp8e5m2fnuz", 11),
  "float16":     ("half",            2,   16,  "e",  "dtypes.half",        12),
  "bfloat16":    ("__bf16",          2,   16,  None, "dtypes.bfloat16",    13),
  "float32":     ("float",           4,   32,  "f",  "dtypes.float",       14),
  "float64":     ("double",          8,   64,  "d",  "dtypes.double",      15),
}

ALIASES = {"half": "float16", "float": "float32", "double": "float64", "uchar": "uint8", "ushort": "uint16",
           "uint": "uint32", "ulong": "uint64", "char": "int8", "short": "int16", "int": "int32", "long": "int64"}


def dt(name: str) -> DType: return getattr(dtypes, name)


# ---------------------------------------------------------------- scalar facts

@pytest.mark.parametrize("attr", SCALARS)
def test_scalar_facts(attr):
  name, itemsize, bitsize, fmt, rep, prio = SCALARS[attr]
  d = dt(attr)
  assert isinstance(d, DType)
  assert d.name == name and d.itemsize == itemsize and d.bitsize == bitsize and d.fmt == fmt
  assert repr(d) == rep and d.priority == prio
  assert d.count == 1 and not d.is_ptr
  assert d.scalar() is d and d.base is d


@pytest.mark.parametrize("alias,canonical", ALIASES.items())
def test_aliases_are_the_same_object(alias, canonical):
  assert dt(alias) is dt(canonical)
  assert hash(dt(alias)) == hash(dt(canonical))


def test_groups():
  assert dtypes.floats == (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz, dtypes.float16,
                           dtypes.bfloat16, dtypes.float32, dtypes.float64)
  assert set(dtypes.uints) == {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64}
  assert set(dtypes.sints) == {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}
  assert set(dtypes.all) == set(dtypes.floats) | set(dtypes.ints) | {dtypes.bool}
  assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32


@pytest.mark.parametrize("d,is_float,is_int,is_unsigned,is_bool", [
  (dtypes.bool, False, False, False, True),
  (dtypes.int8, False, True, False, False),
  (dtypes.uint32, False, True, True, False),
  (dtypes.weakint, False, True, False, False),
  (dtypes.weakfloat, True, False, False, False),
  (dtypes.half, True, False, False, False),
  (dtypes.fp8e5m2, True, False, False, False),
  (dtypes.double, True, False, False, False),
  (dtypes.void, False, False, False, False),
])
def test_classification(d, is_float, is_int, is_unsigned, is_bool):
  assert (dtypes.is_float(d), dtypes.is_int(d), dtypes.is_unsigned(d), dtypes.is_bool(d)) == \
         (is_float, is_int, is_unsigned, is_bool)


@pytest.mark.parametrize("d,lo,hi", [
  (dtypes.bool, False, True),
  (dtypes.int8, -128, 127),
  (dtypes.uint8, 0, 255),
  (dtypes.int16, -32768, 32767),
  (dtypes.uint16, 0, 65535),
  (dtypes.int32, -2**31, 2**31 - 1),
  (dtypes.uint32, 0, 2**32 - 1),
  (dtypes.int64, -2**63, 2**63 - 1),
  (dtypes.uint64, 0, 2**64 - 1),
  (dtypes.half, float("-inf"), float("inf")),
  (dtypes.float32, float("-inf"), float("inf")),
  (dtypes.float64, float("-inf"), float("inf")),
])
def test_min_max(d, lo, hi):
  assert (d.min, d.max) == (lo, hi)
  assert type(d.min) is type(lo) and type(d.max) is type(hi)


@pytest.mark.parametrize("d,finfo", [(dtypes.half, (5, 10)), (dtypes.bfloat16, (8, 7)), (dtypes.float, (8, 23)),
                                     (dtypes.double, (11, 52)), (dtypes.fp8e4m3, (4, 3)), (dtypes.fp8e5m2, (5, 2))])
def test_finfo(d, finfo):
  assert dtypes.finfo(d) == finfo


def test_finfo_rejects_ints():
  with pytest.raises(ValueError):
    dtypes.finfo(dtypes.int)


# ---------------------------------------------------------------- vector and pointer forms

def test_vec():
  v = dtypes.float.vec(4)
  assert v is dtypes.float.vec(4) and v is not dtypes.float.vec(2)
  assert repr(v) == "dtypes.float.vec(4)" and v.name == "float4"
  assert v.count == 4 and v.itemsize == 16 and not v.is_ptr
  assert v.scalar() is dtypes.float and v.base is v
  assert dtypes.float.vec(1) is dtypes.float
  assert repr(dtypes.int8.vec(3)) == "dtypes.char.vec(3)" and dtypes.int8.vec(3).name == "signed char3"
  assert dtypes.half.vec(8).itemsize == 16


def test_vec_errors():
  with pytest.raises(ValueError):
    dtypes.float.vec(0)
  with pytest.raises(ValueError):
    dtypes.float.vec(-1)
  with pytest.raises(ValueError):
    dtypes.float.vec(4).vec(2)
  with pytest.raises(ValueError):
    dtypes.float.ptr().vec(2)


def test_ptr():
  p = dtypes.float.ptr(16)
  assert p is dtypes.float.ptr(16) and p is not dtypes.float.ptr(8) and p is not dtypes.float.ptr()
  assert repr(p) == "dtypes.float.ptr(16)" and p.name == "float*"
  assert p.is_ptr and p.itemsize == 8 and p.size == 16
  assert p.base is dtypes.float and p.scalar() is dtypes.float
  u = dtypes.float.ptr()
  assert repr(u) == "dtypes.float.ptr()" and u.size == -1
  from tinyhybrid import AddrSpace
  loc = dtypes.half.ptr(8, AddrSpace.LOCAL)
  assert repr(loc) == "dtypes.half.ptr(8, AddrSpace.LOCAL)" and loc.addrspace is AddrSpace.LOCAL
  assert dtypes.half.ptr(8, addrspace=AddrSpace.LOCAL) is loc and dtypes.half.ptr(size=8) is dtypes.half.ptr(8)
  assert p.addrspace is AddrSpace.GLOBAL
  pv = dtypes.float.vec(4).ptr()
  assert repr(pv) == "dtypes.float.vec(4).ptr()" and pv.name == "float4*"
  assert pv.base is dtypes.float.vec(4) and pv.scalar() is dtypes.float and pv.itemsize == 8
  with pytest.raises(ValueError):
    p.ptr()


# ---------------------------------------------------------------- ordering, hashing, pickling

def test_ordering_by_priority():
  order = sorted(dt(n) for n in SCALARS if n != "void")
  prios = [d.priority for d in order]
  assert prios == sorted(prios)
  assert sorted([dtypes.float, dtypes.int8, dtypes.bool, dtypes.half]) == \
         [dtypes.bool, dtypes.int8, dtypes.half, dtypes.float]
  assert dtypes.bool < dtypes.weakint < dtypes.int8 < dtypes.uint8 < dtypes.int16
  assert dtypes.uint64 < dtypes.weakfloat < dtypes.fp8e4m3 < dtypes.float16 < dtypes.bfloat16 < dtypes.float32
  # equal priority and bitsize: by name
  assert dtypes.fp8e4m3 < dtypes.fp8e4m3fnuz and dtypes.fp8e5m2 < dtypes.fp8e5m2fnuz
  assert max(dtypes.int8, dtypes.float16, dtypes.uint64) is dtypes.float16
  assert dtypes.void < dtypes.bool
  assert dtypes.float <= dtypes.float and dtypes.float >= dtypes.float
  assert dtypes.float == dtypes.float32 and dtypes.float != dtypes.half


def test_hash_and_dict_key():
  d = {dt(n): n for n in SCALARS}
  assert d[dtypes.float] == "float32" and d[dtypes.char] == "int8"
  assert len({dtypes.float.vec(4), dtypes.float.vec(4), dtypes.float.ptr(), dtypes.float.ptr()}) == 2


ALL_FORMS = [dt(n) for n in SCALARS] + [dtypes.float.vec(4), dtypes.half.vec(2), dtypes.float.ptr(16),
                                        dtypes.int.ptr(), dtypes.float.vec(4).ptr(64)]


@pytest.mark.parametrize("d", ALL_FORMS, ids=repr)
@pytest.mark.parametrize("proto", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_pickle(d, proto):
  assert pickle.loads(pickle.dumps(d, protocol=proto)) is d


def test_pickle_local_pointer():
  from tinyhybrid import AddrSpace
  d = dtypes.half.ptr(8, AddrSpace.LOCAL)
  assert pickle.loads(pickle.dumps(d)) is d
  assert pickle.loads(pickle.dumps((d, [dtypes.float]))) == (d, [dtypes.float])


def test_dtype_as_uop_arg():
  assert UOp(Ops.NOOP, arg=dtypes.float.vec(4)).arg is dtypes.float.vec(4)
  assert UOp(Ops.NOOP, arg=dtypes.float) is UOp(Ops.NOOP, arg=dtypes.float32)


# ---------------------------------------------------------------- names and Python values

@pytest.mark.parametrize("name,expected", [
  ("float32", dtypes.float32), ("float", dtypes.float32), ("FLOAT32", dtypes.float32), ("half", dtypes.float16),
  ("float16", dtypes.float16), ("bfloat16", dtypes.bfloat16), ("int", dtypes.int32), ("int64", dtypes.int64),
  ("uchar", dtypes.uint8), ("uint8", dtypes.uint8), ("bool", dtypes.bool), ("double", dtypes.float64),
  ("fp8e4m3", dtypes.fp8e4m3), ("long", dtypes.int64),
])
def test_to_dtype(name, expected):
  assert to_dtype(name) is expected


def test_to_dtype_passes_dtypes_through():
  assert to_dtype(dtypes.int) is dtypes.int
  assert to_dtype(dtypes.float.vec(4)) is dtypes.float.vec(4)


@pytest.mark.parametrize("name", ["nope", "float33", "", "int 32"])
def test_unknown_name_raises_attribute_error(name):
  with pytest.raises(AttributeError):
    to_dtype(name)
  with pytest.raises(AttributeError):
    getattr(dtypes, name)
  with pytest.raises(AttributeError):
    DType.from_name(name)


@pytest.mark.parametrize("value,expected", [
  (1, dtypes.weakint), (0, dtypes.weakint), (-5, dtypes.weakint), (2**100, dtypes.weakint),
  (1.0, dtypes.weakfloat), (float("nan"), dtypes.weakfloat),
  (True, dtypes.bool), (False, dtypes.bool),
  ([1, 2], dtypes.int32), ([1, 2.0], dtypes.float32), ((True, False), dtypes.bool), ([True, 1], dtypes.int32),
  ([], dtypes.float32), ([[1.0], [2]], dtypes.float32),
])
def test_from_py(value, expected):
  assert dtypes.from_py(value) is expected


def test_from_py_rejects_other_types():
  with pytest.raises(RuntimeError):
    dtypes.from_py("x")


# ---------------------------------------------------------------- promotion lattice

# least_upper_dtype by tinygrad's (JAX-style) lattice:
#   bool -> weakint -> {int8, uint8}; int8 -> int16 -> int32 -> int64 -> weakfloat;
#   uint8 -> {int16, uint16}; uint16 -> {int32, uint32}; uint32 -> {int64, uint64}; uint64 -> weakfloat;
#   weakfloat -> every fp8; every fp8 -> {float16, bfloat16}; float16, bfloat16 -> float32 -> float64.
LATTICE = [
  (("bool", "bool"), "bool"),
  (("bool", "weakint"), "weakint"),
  (("bool", "int8"), "int8"),
  (("bool", "uint8"), "uint8"),
  (("bool", "float32"), "float32"),
  (("bool", "weakfloat"), "weakfloat"),
  (("weakint", "int8"), "int8"),
  (("weakint", "uint64"), "uint64"),
  (("weakint", "weakfloat"), "weakfloat"),
  (("weakint", "float16"), "float16"),
  (("weakfloat", "int32"), "weakfloat"),
  (("weakfloat", "uint64"), "weakfloat"),
  (("weakfloat", "float16"), "float16"),
  (("weakfloat", "bfloat16"), "bfloat16"),
  (("weakfloat", "fp8e4m3"), "fp8e4m3"),
  (("int8", "uint8"), "int16"),
  (("int8", "int16"), "int16"),
  (("int8", "uint16"), "int32"),
  (("uint8", "uint16"), "uint16"),
  (("uint8", "int16"), "int16"),
  (("int16", "uint16"), "int32"),
  (("int32", "uint32"), "int64"),
  (("uint32", "int64"), "int64"),
  (("uint32", "uint64"), "uint64"),
  (("int64", "uint64"), "weakfloat"),
  (("int8", "uint64"), "weakfloat"),
  (("int32", "float16"), "float16"),
  (("int64", "float32"), "float32"),
  (("uint64", "float16"), "float16"),
  (("uint8", "bfloat16"), "bfloat16"),
  (("float16", "bfloat16"), "float32"),
  (("fp8e4m3", "fp8e5m2"), "float16"),
  (("fp8e4m3", "fp8e4m3fnuz"), "float16"),
  (("fp8e4m3", "bfloat16"), "bfloat16"),
  (("fp8e5m2fnuz", "float16"), "float16"),
  (("fp8e4m3", "int32"), "fp8e4m3"),
  (("float16", "float16"), "float16"),
  (("float32", "float64"), "float64"),
  (("bfloat16", "float64"), "float64"),
  (("int32", "int32"), "int32"),
  (("uint16",), "uint16"),
  (("int8", "uint8", "float16"), "float16"),
  (("bool", "uint8", "int8"), "int16"),
  (("uint8", "uint16", "uint32"), "uint32"),
  (("int8", "uint32"), "int64"),
]


@pytest.mark.parametrize("args,expected", LATTICE, ids=lambda x: ",".join(x) if isinstance(x, tuple) else x)
def test_least_upper_dtype(args, expected):
  ds = [dt(a) for a in args]
  assert least_upper_dtype(*ds) is dt(expected)
  assert least_upper_dtype(*reversed(ds)) is dt(expected)


def test_least_upper_dtype_of_vectors_uses_the_scalar():
  assert least_upper_dtype(dtypes.float.vec(4), dtypes.int) is dtypes.float


def test_least_upper_dtype_matches_tinygrad():
  tgd = pytest.importorskip("tinygrad.dtype")
  names = [n for n in SCALARS if n != "void"]
  for a, b in itertools.product(names, repeat=2):
    ours = least_upper_dtype(dt(a), dt(b))
    theirs = tgd.least_upper_dtype(getattr(tgd.dtypes, a), getattr(tgd.dtypes, b))
    assert ours.name == theirs.name, (a, b, ours, theirs)


def test_scalar_facts_match_tinygrad():
  tgd = pytest.importorskip("tinygrad.dtype")
  for n in SCALARS:
    ours, theirs = dt(n), getattr(tgd.dtypes, n)
    assert (ours.priority, ours.bitsize, ours.name, ours.fmt, ours.itemsize, repr(ours)) == \
           (theirs.priority, theirs.bitsize, theirs.name, theirs.fmt, theirs.itemsize, repr(theirs)), n


def test_strong_float_and_sum_acc():
  assert strong_dtype(dtypes.weakint) is dtypes.int32 and strong_dtype(dtypes.weakfloat) is dtypes.float32
  assert strong_dtype(dtypes.half) is dtypes.half
  assert least_upper_float(dtypes.int8) is dtypes.float32 and least_upper_float(dtypes.half) is dtypes.half
  assert least_upper_float(dtypes.weakint) is dtypes.weakfloat
  assert sum_acc_dtype(dtypes.uint8) is dtypes.uint32 and sum_acc_dtype(dtypes.int8) is dtypes.int32
  assert sum_acc_dtype(dtypes.bool) is dtypes.int32 and sum_acc_dtype(dtypes.half) is dtypes.float32
  assert sum_acc_dtype(dtypes.double) is dtypes.double and sum_acc_dtype(dtypes.int64) is dtypes.int64


# ---------------------------------------------------------------- regressions: core bugs these tests found

def test_bug_vec_count_truncated():
  with pytest.raises((ValueError, OverflowError)):
    dtypes.float.vec(2**32 + 2)


def test_bug_vec_ptr_huge_count():
  with pytest.raises((TypeError, ValueError)):
    dtypes.float.vec(2**70)
  with pytest.raises((TypeError, ValueError)):
    dtypes.float.ptr(2**70)


def test_can_lossless_cast_matches_tinygrad():
  from tinyhybrid.dtype import can_lossless_cast
  assert not can_lossless_cast(dtypes.int8, dtypes.uint64) and not can_lossless_cast(dtypes.int32, dtypes.uint32)
  assert can_lossless_cast(dtypes.uint8, dtypes.int16) and can_lossless_cast(dtypes.uint32, dtypes.int64)
  assert not can_lossless_cast(dtypes.int32, dtypes.float) and not can_lossless_cast(dtypes.int64, dtypes.double)
  assert can_lossless_cast(dtypes.int16, dtypes.float) and can_lossless_cast(dtypes.uint32, dtypes.double)
  assert can_lossless_cast(dtypes.int8, dtypes.half) and not can_lossless_cast(dtypes.int8, dtypes.bfloat16)
  assert can_lossless_cast(dtypes.fp8e4m3, dtypes.half) and can_lossless_cast(dtypes.bool, dtypes.int8)
  assert can_lossless_cast(dtypes.int64, dtypes.weakint) and not can_lossless_cast(dtypes.float, dtypes.weakint)
  # every value of the source survives a round trip through the destination, where the rule says so
  for a in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16):
    vals = np.arange(a.min, a.max + 1)
    for b in (dtypes.half, dtypes.float32, dtypes.int16, dtypes.int32, dtypes.uint16):
      if can_lossless_cast(a, b): np.testing.assert_array_equal(Tensor(vals, dtype=a).cast(b).cast(a).numpy(), vals)


def test_uop_arithmetic_of_two_dtypes_promotes_both_as_the_lattice_does():
  # the C++ builder's join (dtype.cpp least_upper) gives dtype.py's least_upper_dtype for every pair of strong
  # scalars; an int and a long Variable added make a long (tinygrad's test_large_range_variable_jit), compared a bool
  strong = [d for d in dtypes.all if d.count == 1 and not d._is_weak and d is not dtypes.void]
  for a, b in itertools.product(strong, repeat=2):
    x, y = UOp.variable("x", 0, 1, a) if a._is_int else UOp.const(1, a), UOp.variable("y", 0, 1, b) if b._is_int else UOp.const(1, b)
    want = least_upper_dtype(a, b)
    assert (x + y).dtype == want and (x * y).dtype == want and (x < y).dtype == dtypes.bool, (a, b)
    if a != b: assert {s.dtype for s in (x + y).src} == {want}
  i, long = UOp.variable("i", 0, 2**10, dtypes.int).bind(3), UOp.variable("l", 0, 2**40, dtypes.long).bind(2**35)
  assert Tensor(i + long).item() == 2**35 + 3
