"""llm/quantized.py's planes: every quantized type taken apart at load and packed into bit planes must give back the
file's values bit for bit (gguf's reference dequantizer), for rows picked by an index, and in a matmul, at both chunk
widths (64-element chunks, and 32 where a row is an odd number of 32-element blocks); the planes take about the
file's bytes."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tinyhybrid import Tensor  # noqa: E402
from tinyhybrid.llm.gguf import GGUFTensor  # noqa: E402
from tinyhybrid.llm.quantized import MappedRows, QuantizedWeight, pack_plane, unpack_plane  # noqa: E402
from tinyhybrid.nn.quant import FIELDS, GGML_QUANT, HALVES  # noqa: E402
from tinyhybrid.schedule.kernelize import base_buffer  # noqa: E402


def random_blocks(ggml_type: int, nb: int, rng: np.random.Generator) -> np.ndarray:
  blocks = rng.integers(0, 256, (nb, GGML_QUANT[ggml_type][2]), dtype=np.uint8)
  for name, (a, _) in FIELDS[ggml_type].items():  # finite float16 scales (random bytes could be inf or nan)
    if name in HALVES: blocks[:, a:a + 2] = (rng.standard_normal(nb) * 4).astype(np.float16).view(np.uint8).reshape(nb, 2)
  return blocks


@pytest.mark.parametrize("bits,word", [(1, 8), (2, 8), (4, 8), (8, 8), (4, 16), (2, 16)])
@pytest.mark.parametrize("chunk", [32, 64])
def test_planes_round_trip(bits, word, chunk):
  codes = np.random.default_rng(bits).integers(0, 1 << bits, (3, 4 * chunk), dtype=np.uint8)
  plane = pack_plane(Tensor(codes), bits, chunk, word) if bits != 8 else Tensor(codes).reshape(3, 4, chunk)
  assert plane.shape == (3, 4, chunk * bits // word) and plane.dtype.itemsize * 8 == word
  # word c of a chunk holds elements c, c + L, ... (L: the chunk's words): 16 elements at one shift are 16 words
  L = chunk * bits // word
  c = min(5, L - 1)
  if bits != 8: assert int(plane.numpy()[1, 2, c]) >> bits & ((1 << bits) - 1) == codes[1, 2 * chunk + L + c]
  np.testing.assert_array_equal(unpack_plane(plane, bits).numpy(), codes)


@pytest.mark.parametrize("ggml_type", list(GGML_QUANT), ids=[v[0] for v in GGML_QUANT.values()])
def test_planes_hold_the_files_values(ggml_type):
  rng = np.random.default_rng(ggml_type)
  _, block, size = GGML_QUANT[ggml_type]
  for cols in ((96, 128) if block == 32 else (256, 512)):
    rows = 5
    blocks = random_blocks(ggml_type, rows * cols // block, rng)
    ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols)
    w = QuantizedWeight(GGUFTensor("w", (rows, cols), ggml_type, blocks.tobytes(), 0, blocks.nbytes))
    np.testing.assert_array_equal(w.dequantized().numpy(), ref)
    np.testing.assert_array_equal(w.rows(Tensor(np.array([3, 0], np.int32))).numpy(), ref[[3, 0]])
    np.testing.assert_array_equal(w.rows((1, 3)).numpy(), ref[1:3])
    x = rng.standard_normal((2, cols)).astype(np.float32)
    np.testing.assert_allclose(w.matmul(Tensor(x)).numpy(), x @ ref.T, rtol=1e-4, atol=1e-4 * np.abs(x @ ref.T).max())
    assert w.nbytes <= 1.25 * blocks.nbytes, (w.nbytes, blocks.nbytes)


def test_block_scales_are_computed_once_per_vector():
  # a Q4_K decode matmul's kernel: each 16-lane vector of weights lies in one 32-weight group, whose scale byte is
  # read, converted and multiplied once and broadcast, not widened and converted in all 16 lanes
  import re
  from tinyhybrid import Device
  from tinyhybrid.codegen.heuristic import hand_coded_optimizations
  from tinyhybrid.codegen.lower import Lowerer
  from tinyhybrid.codegen import finalize
  from tinyhybrid.schedule.kernelize import create_schedule, normalize
  rng = np.random.default_rng(0)
  rows, cols = 256, 1536
  blocks = random_blocks(12, rows * cols // 256, rng)
  w = QuantizedWeight(GGUFTensor("w", (rows, cols), 12, blocks.tobytes(), 0, blocks.nbytes))
  x = rng.standard_normal((1, cols)).astype(np.float32)
  t = w.matmul(Tensor(x).realize())
  key, inputs, _ = normalize([t.uop])
  (item,) = create_schedule(key, len(inputs)).items
  k, dev = Lowerer(item).lower(), Device["CPU"]
  src = dev.renderer.render(finalize(k, hand_coded_optimizations(k), dev.renderer.vec))
  # no loaded byte broadcast to 16 lanes (a constant shift amount, made once at the kernel's top, may be)
  def loaded(name: str) -> bool:
    (defn,) = re.findall(rf"\b{name} = (.*);", src)
    return "[" in defn or any(loaded(v) for v in re.findall(r"\bv\d+\b", defn))
  for name in re.findall(r"\(th_unsigned_char16\)\{(v\d+), \1,", src): assert not loaded(name), name
  ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(12)).reshape(rows, cols)
  np.testing.assert_allclose(t.numpy(), x @ ref.T, rtol=1e-4, atol=1e-4 * np.abs(x @ ref.T).max())


def _int_dot_types():
  from tinyhybrid.llm.quantized import int_dot_block
  from tinyhybrid.nn.quant import FORMATS
  return [t for t in GGML_QUANT if int_dot_block(FORMATS[t]) is not None]


@pytest.mark.parametrize("ggml_type", _int_dot_types(), ids=lambda t: GGML_QUANT[t][0])
def test_int_matvec_is_exact_where_the_activations_are(ggml_type):
  # a decode step's product in panels: x quantized to int8 per block, int16 sums of products. Where x's blocks are
  # int8 values times a power of two, with one of them at +-127 (so the block's scale is exact), the quantization
  # loses nothing, and the product must equal the float64 product of the file's values to float32 rounding
  from tinyhybrid.llm.quantized import int_dot_block
  from tinyhybrid.nn.quant import FORMATS
  rng = np.random.default_rng(ggml_type)
  _, block, _ = GGML_QUANT[ggml_type]
  n = int_dot_block(FORMATS[ggml_type])
  for rows, panel in ((128, 64), (96, 32)):
    cols = 512
    blocks = random_blocks(ggml_type, rows * cols // block, rng)
    ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols).astype(np.float64)
    w = QuantizedWeight(GGUFTensor("w", (rows, cols), ggml_type, blocks.tobytes(), 0, blocks.nbytes), panels=True)
    assert w.panel == panel
    xq = rng.integers(-127, 128, (cols // n, n))
    xq[:, 0] = 127 * rng.choice([-1, 1], cols // n)
    x = (xq * 2.0 ** rng.integers(-6, 2, (cols // n, 1))).reshape(1, cols).astype(np.float32)
    want = x.astype(np.float64) @ ref.T
    np.testing.assert_allclose(w.matmul(Tensor(x)).numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())
    # the worst cases for the int16 sums, every activation 127: every code 0 (centered, -2**(bits-1)), and every code
    # at its top (the uncentered sum wraps past int16, the centered one fits)
    for fill in (0, 255):
      ext = blocks.copy()
      for name, (a, b) in FIELDS[ggml_type].items():
        if name in ("qs", "qh", "ql", "hmask"): ext[:, a:b] = fill
      eref = gguf.quants.dequantize(ext, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols).astype(np.float64)
      we = QuantizedWeight(GGUFTensor("w", (rows, cols), ggml_type, ext.tobytes(), 0, ext.nbytes), panels=True)
      worst = np.full((1, cols), 127.0, np.float32)
      np.testing.assert_allclose(we.matmul(Tensor(worst)).numpy(), worst @ eref.T, rtol=0, atol=1e-6 * np.abs(worst @ eref.T).max())
    # a general x: within int8 quantization's error, and the panels unpack to the file's values for every other use
    xr = rng.standard_normal((1, cols)).astype(np.float32)
    np.testing.assert_allclose(w.matmul(Tensor(xr)).numpy(), xr @ ref.T, rtol=0, atol=2e-2 * np.abs(xr @ ref.T).max())
    np.testing.assert_array_equal(w.dequantized().numpy(), ref.astype(np.float32))
    x2 = rng.standard_normal((3, cols)).astype(np.float32)
    np.testing.assert_allclose(w.matmul(Tensor(x2), int8=False).numpy(), x2 @ ref.T, rtol=1e-4, atol=1e-4 * np.abs(x2 @ ref.T).max())
    # a prompt's rows: as int_matvec's row where the codes are in pairs with inner block sums (int_rows), exact where
    # each row's activations are, else in float32
    rows3 = np.concatenate([x, x * -0.5, x * 4]).astype(np.float32)
    want3 = rows3.astype(np.float64) @ ref.T
    np.testing.assert_allclose(w.matmul(Tensor(rows3)).numpy(), want3, rtol=0, atol=1e-6 * np.abs(want3).max())
    tol = 2e-2 if w.int_rows else 1e-4
    np.testing.assert_allclose(w.matmul(Tensor(x2)).numpy(), x2 @ ref.T, rtol=0, atol=tol * np.abs(x2 @ ref.T).max())
    with pytest.raises(ValueError, match="panels"): w.rows((0, 2))


def test_stored_block_sums_of_many_panels_take_pieces_of_memory(monkeypatch):
  # Q6_K's 8-element blocks are summed through memory (shorter than the scheduler's inner sums): a product of many
  # panels does that in pieces of at most PARTIAL_BYTES, which a TinyJit's plan puts in one piece's memory (the 0.5B
  # model's output layer held 12 MB of them in each capture); the pieces give the one product's values
  import tinyhybrid.llm.quantized as quantized
  from tinyhybrid import TinyJit
  q6_k = next(t for t, v in GGML_QUANT.items() if v[0] == "Q6_K")
  rng = np.random.default_rng(6)
  rows, cols = 512, 512  # 8 panels of 64 rows, 64 blocks of 8 a row: 64 KB of int16 sums
  blocks = random_blocks(q6_k, rows * cols // 256, rng)
  w = QuantizedWeight(GGUFTensor("w", (rows, cols), q6_k, blocks.tobytes(), 0, blocks.nbytes), panels=True)
  x = rng.standard_normal((1, cols)).astype(np.float32)
  whole = w.matmul(Tensor(x)).numpy()
  monkeypatch.setattr(quantized, "PARTIAL_BYTES", 16 << 10)
  product = TinyJit(lambda t: w.matmul(t).realize())
  for _ in range(3): np.testing.assert_array_equal(product(Tensor(x)).numpy(), whole)
  captured = product.captured
  assert len(captured.jit_cache) > 4 and max(captured.objs[i].nbytes for i in captured.shared) <= 16 << 10


def test_int16_sums_cannot_overflow():
  # int_dot_block's bound, checked against the worst products: |centered code| * 127 * elements <= 32767
  from tinyhybrid.llm.quantized import int_dot_block
  from tinyhybrid.nn.quant import FORMATS
  for t, fmt in FORMATS.items():
    n = int_dot_block(fmt)
    if n is None:
      assert fmt.value != "int" or fmt.bits == 8 or 8 * (1 << (fmt.bits - 1)) * 127 > 32767, GGML_QUANT[t]
      continue
    assert n * (1 << (fmt.bits - 1)) * 127 <= 32767 and fmt.group % n == 0 and n >= 8


def test_panels_only_for_the_types_int_matvec_reads():
  rng = np.random.default_rng(1)
  for t, want in ((8, 0), (20, 0), (12, 64), (14, 64)):
    rows, cols = 64, 256
    blocks = random_blocks(t, rows * cols // GGML_QUANT[t][1], rng)
    w = QuantizedWeight(GGUFTensor("w", (rows, cols), t, blocks.tobytes(), 0, blocks.nbytes), panels=True)
    assert w.panel == want, GGML_QUANT[t]
  blocks = random_blocks(12, 40 * 256 // 256, rng)  # 40 rows: not whole panels of 32, kept by row
  assert QuantizedWeight(GGUFTensor("w", (40, 256), 12, blocks.tobytes(), 0, blocks.nbytes), panels=True).panel == 0


@pytest.mark.parametrize("ggml_type", [12, 14, 8, 1], ids=["Q4_K", "Q6_K", "Q8_0", "F16"])
def test_mapped_rows_are_the_files_rows_read_from_its_pages(ggml_type, tmp_path):
  # an embedding with an output layer of its own stays in the file: its rows come from the file's mapped pages (so a
  # prompt brings into memory only the rows it looks up), unpacked to the reference dequantizer's values
  rng = np.random.default_rng(ggml_type)
  rows, cols = 40, 512
  if ggml_type == 1:
    raw = rng.standard_normal((rows, cols)).astype(np.float16)
    ref = raw.astype(np.float32)
  else:
    raw = random_blocks(ggml_type, rows * cols // GGML_QUANT[ggml_type][1], rng)
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols)
  path = tmp_path / "w.bin"
  path.write_bytes(b"\0" * 4160 + raw.tobytes())  # 64-byte aligned data past the first page
  w = MappedRows(GGUFTensor("w", (rows, cols), ggml_type, str(path), 4160, raw.nbytes))
  np.testing.assert_array_equal(w.rows(Tensor(np.array([37, 0, 5], np.int32))).numpy(), ref[[37, 0, 5]])
  np.testing.assert_array_equal(w.rows((2, 4)).numpy(), ref[2:4])
  addr = base_buffer(w.blocks.uop).arg._address
  maps = [line.split() for line in open("/proc/self/maps") if line.rstrip().endswith(str(path))]
  assert any(int(m[0].split("-")[0], 16) <= addr < int(m[0].split("-")[1], 16) for m in maps), "not read from the file's pages"
  # where the data is not 64-byte aligned in the file, it is read (kernels load aligned vectors)
  path.write_bytes(b"\0" * 4170 + raw.tobytes())
  w = MappedRows(GGUFTensor("w", (rows, cols), ggml_type, str(path), 4170, raw.nbytes))
  np.testing.assert_array_equal(w.rows((2, 4)).numpy(), ref[2:4])


@pytest.mark.parametrize("ggml_type", [0, 1], ids=["F32", "F16"])
def test_float_weights_in_panels(ggml_type):
  # a float weight stored in panels (each panel's columns of 64 rows contiguous, as the quantized ones): the same
  # products, one row (a decode step) and many (a prompt), and the same bytes; rows() is for weights stored by row
  rng = np.random.default_rng(ggml_type)
  w = rng.standard_normal((128, 96)).astype(np.float32 if ggml_type == 0 else np.float16)
  qw = QuantizedWeight(GGUFTensor("w", w.shape, ggml_type, w.tobytes(), 0, w.nbytes), panels=True)
  assert qw.panel == 64 and qw.nbytes == w.nbytes
  for rows in (1, 5):
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    np.testing.assert_allclose(qw.matmul(Tensor(x)).numpy(), x @ w.astype(np.float32).T, rtol=1e-5, atol=1e-4)
  np.testing.assert_array_equal(qw.dequantized().numpy(), w.astype(np.float32))
  with pytest.raises(ValueError, match="panels"): qw.rows((0, 2))


@pytest.mark.parametrize("lanes,has_local,int8", [(8, False, True), (16, False, False), (1, False, False), (8, True, False)])
def test_the_output_layer_multiplies_in_int8_where_cpu_vectors_are_narrow(monkeypatch, lanes, has_local, int8):
  # with AVX2's 8 lanes the output layer's float product dequantizes too slowly (10 of a 30 ms Q4_K_M step), so a
  # decode step takes int_matvec for it; with AVX-512 (16 lanes), scalar code and GPU-style devices, float32
  from tinyhybrid import Device
  from tinyhybrid.llm.dense import _int8_output
  ren = Device["CPU"].renderer
  monkeypatch.setattr(ren, "vec", lanes)
  monkeypatch.setattr(ren, "has_local", has_local)
  assert _int8_output("CPU") is int8 and _int8_output(("CPU", "CPU:1")) is False


def _panel_weight_with_its_exact_product(name: str, block: int, seed: int) -> tuple[QuantizedWeight, np.ndarray, np.ndarray, np.ndarray]:
  """A 128 x 512 weight of type `name` in panels, the file's values (gguf's dequantizer), and an activation row whose
  blocks of `block` quantize exactly to int8 with the float64 product it must give."""
  ggml_type = next(t for t, v in GGML_QUANT.items() if v[0] == name)
  rng = np.random.default_rng(seed)
  rows, cols = 128, 512
  blocks = random_blocks(ggml_type, rows * cols // 256, rng)
  ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols).astype(np.float64)
  w = QuantizedWeight(GGUFTensor("w", (rows, cols), ggml_type, blocks.tobytes(), 0, blocks.nbytes), panels=True)
  xq = rng.integers(-127, 128, (cols // block, block))
  xq[:, 0] = 127
  x = (xq / 64).reshape(1, cols).astype(np.float32)
  return w, ref, x, x.astype(np.float64) @ ref.T


# the three layouts of a panel's codes: in column pairs for BYTEDOT (an AVX2 CPU whose renderer has it), 16-bit words
# (AVX2 without it), bytes (elsewhere)
LAYOUTS = {"pairs": (True, True), "words": (True, False), "bytes": (False, False)}


def _layout(monkeypatch, layout: str) -> None:
  from tinyhybrid.llm import quantized
  eight, pairs = LAYOUTS[layout]
  monkeypatch.setattr(quantized, "eight_lanes", lambda device: eight)
  monkeypatch.setattr(quantized, "byte_pairs", lambda device: pairs)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_four_bit_codes_are_laid_out_for_the_cpus_int16_sums(monkeypatch, layout):
  # on a CPU whose vectors hold 8 floats (AVX2), a panel's 4-bit codes are 16-bit words. In pairs, word w of a column
  # pair holds rows r and r + 16 of both columns (r = (w // 16) * 32 + w % 16), the low byte the even column's: a shift
  # and a mask give 16 rows' codes of two columns, which one BYTEDOT multiplies with two activations. Without BYTEDOT,
  # a column's word j holds rows j, j + 16, j + 32 and j + 48. Elsewhere they are 32 bytes, byte j holding rows j and
  # j + 32. Each way the weight unpacks to the file's values, and the decode step's product is the file's product
  # where the activations quantize exactly
  from tinyhybrid import dtypes
  _layout(monkeypatch, layout)
  w, ref, x, want = _panel_weight_with_its_exact_product("Q4_K", 32, 11)
  ((_, bits, plane),) = w.planes
  shape = {"pairs": (2, 256, 32), "words": (2 * 512, 1, 16), "bytes": (2 * 512, 1, 32)}[layout]
  assert bits == 4 and w.pairs == (layout == "pairs") and (plane.dtype, plane.shape) == (dtypes.uint8 if layout == "bytes" else dtypes.uint16, shape)
  np.testing.assert_array_equal(w.dequantized().numpy(), ref.astype(np.float32))
  np.testing.assert_allclose(w.matmul(Tensor(x)).numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())
  # in pairs a prompt's rows multiply as the decode step's row does (int_rows): exact too where their blocks quantize so
  rows3 = np.concatenate([x, x * -2, x * 0.25]).astype(np.float32)
  want3 = rows3.astype(np.float64) @ ref.T
  assert w.int_rows == (layout == "pairs")
  np.testing.assert_allclose(w.matmul(Tensor(rows3)).numpy(), want3, rtol=0, atol=(1e-6 if w.int_rows else 1e-4) * np.abs(want3).max())


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_q6_k_high_bits_are_laid_out_for_the_cpus_int16_sums(monkeypatch, layout):
  # Q6_K's 2-bit plane beside those 4-bit codes: in pairs a word holds rows j, j + 16, j + 32, j + 48 of a column pair
  # (four rows a byte, the low byte the even column's); as 16-bit words, the same rows of two neighbouring columns, so
  # the kernel takes 16 rows' high bits with 16-bit shifts (bytes took shifts x86 lacks). The weight unpacks to the
  # file's values, and the decode step's product (its 8-element blocks) and a prompt's are the file's
  from tinyhybrid import dtypes
  _layout(monkeypatch, layout)
  w, ref, x, want = _panel_weight_with_its_exact_product("Q6_K", 8, 12)
  (_, low_bits, low), (_, high_bits, high) = w.planes
  assert (low_bits, high_bits) == (4, 2)
  shape = {"pairs": (2, 256, 16), "words": (low.shape[0] // 2, 1, 16), "bytes": (low.shape[0], 1, 16)}[layout]
  assert high.dtype == (dtypes.uint8 if layout == "bytes" else dtypes.uint16) and high.shape == shape
  np.testing.assert_array_equal(w.dequantized().numpy(), ref.astype(np.float32))
  np.testing.assert_allclose(w.matmul(Tensor(x)).numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())
  x3 = np.random.default_rng(13).standard_normal((3, 512)).astype(np.float32)
  np.testing.assert_allclose(w.matmul(Tensor(x3)).numpy(), x3 @ ref.T, rtol=1e-4, atol=1e-4 * np.abs(x3 @ ref.T).max())


@pytest.mark.parametrize("name", ["Q2_K", "Q4_K", "Q5_K"])
def test_group_scales_in_panels_take_their_bits_as_the_file_does(name):
  # a K-quant's group scales and mins (6 bits, Q2_K's 4) stored in planes of that many bits where a panel's groups come
  # in fours: the weight takes the file's bytes exactly, and still unpacks to its values and multiplies as they do
  ggml_type = next(t for t, v in GGML_QUANT.items() if v[0] == name)
  rng = np.random.default_rng(ggml_type)
  rows, cols = 128, 512
  blocks = random_blocks(ggml_type, rows * cols // 256, rng)
  ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(ggml_type)).reshape(rows, cols)
  w = QuantizedWeight(GGUFTensor("w", (rows, cols), ggml_type, blocks.tobytes(), 0, blocks.nbytes), panels=True)
  assert set(w.scale_planes) == {"sc", "mn"} and w.nbytes == blocks.nbytes
  np.testing.assert_array_equal(w.dequantized().numpy(), ref)
  x = rng.standard_normal((1, cols)).astype(np.float32)
  np.testing.assert_allclose(w.matmul(Tensor(x)).numpy(), x @ ref.T, rtol=0, atol=2e-2 * np.abs(x @ ref.T).max())
