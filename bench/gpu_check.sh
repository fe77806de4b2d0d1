#!/usr/bin/env bash
# The prepared check for a lent NVIDIA GPU (an H200), in one call of under 8 minutes from the repository's root:
#   bash bench/gpu_check.sh [OUT_DIR]       (OUT_DIR: $OUT when set, else ./gpu_check)
# 1. builds tinyhybrid there (no network: the machine's python3 must have scikit-build-core, pybind11, cmake, ninja,
#    numpy, torch and nvidia-cuda-nvrtc; missing wheels carried in .whl/ are installed first, cffi among them);
# 2. the torch-comparison suite (the modules tests/conftest.py runs on a device) on DEV=CUDA, then DEV=CUDA:PTX;
#    (tests/test_cuda_tc.py among them: fp16/bf16 matmuls on the tensor cores checked against NumPy on the device);
# 3. bench/cuda.py on both: 8192^3 fp16 matmul (tensor cores, and TC=0 for comparison), 1 GiB add, jitted launch
#    overhead, each against torch.
# Writes OUT_DIR/gpu_check.log (everything) and OUT_DIR/gpu_check.json (one object: the suite's summaries and the
# benchmark lines). Each step has its own time limit, so a hang in one still leaves the others' results.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-${OUT:-gpu_check}}"
mkdir -p "$out"
log="$out/gpu_check.log"
: >"$log"
export PYTHONUNBUFFERED=1
say() { printf '[gpu_check %s] %s\n' "$(date +%T)" "$*" | tee -a "$log"; }

if compgen -G '.whl/*.whl' >/dev/null; then
  say "installing carried wheels: $(ls .whl | tr '\n' ' ')"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$log" 2>&1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
say "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "building"
timeout 100 python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build/gpu -e . >>"$log" 2>&1 || say "build failed (see the log)"

suite() {  # $1: the device
  say "suite on DEV=$1"
  DEV="$1" timeout 125 python3 -m pytest -q -p no:cacheprovider tests/test_tensor_ops.py tests/test_tensor_nn.py tests/test_tensor_movement.py \
    tests/test_tensor_indexing.py tests/test_tensor_extra.py tests/test_nn.py tests/test_jit.py tests/test_cuda_tc.py >"$out/suite_$1.txt" 2>&1
  local rc=$?
  tail -n 40 "$out/suite_$1.txt" >>"$log"
  say "suite on DEV=$1: rc=$rc, $(tail -n 1 "$out/suite_$1.txt")"
}
suite CUDA
suite CUDA:PTX

: >"$out/bench.jsonl"
for dev in CUDA CUDA:PTX; do
  say "bench/cuda.py on DEV=$dev"
  DEV="$dev" timeout 60 python3 bench/cuda.py 2>>"$log" | tee -a "$out/bench.jsonl" "$log"
done

python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
summary = {"suite": {d: (out / f"suite_{d}.txt").read_text().strip().splitlines()[-1:] for d in ("CUDA", "CUDA:PTX") if (out / f"suite_{d}.txt").exists()},
           "bench": [json.loads(line) for line in (out / "bench.jsonl").read_text().splitlines() if line.startswith("{")]}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
EOF
say "done: $out/gpu_check.log, $out/gpu_check.json"
