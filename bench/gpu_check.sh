#!/usr/bin/env bash
# The prepared check for a lent NVIDIA GPU (an H200), in one call of under 8 minutes from the repository's root:
#   bash bench/gpu_check.sh [OUT_DIR]       (OUT_DIR: $OUT when set, else ./gpu_check)
# 1. builds tinyhybrid there (no network: the machine's python3 must have scikit-build-core, pybind11, cmake, ninja,
#    numpy, torch and nvidia-cuda-nvrtc; missing wheels carried in .whl/ are installed first, cffi among them);
# 2. bench/nv_probe.py: DEV=NV's kernel-driver layer on the real GPU, one JSON line per stage (nv_probe.jsonl);
# 3. the torch-comparison suite (the modules tests/conftest.py runs on a device) on DEV=CUDA and DEV=CUDA:PTX side by side;
#    (tests/test_cuda_tc.py among them: fp16/bf16 matmuls on the tensor cores checked against NumPy on the device);
# 4. bench/cuda.py on both: 8192^3 fp16 matmul (tensor cores, and TC=0 for comparison), 1 GiB add, jitted launch
#    overhead, each against torch; then bench/cuda_tc_sweep.py: the tensor-core matmul's register and group tiles.
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
say "driver files: $(ls -l /dev/nvidia* 2>&1 | tr '\n' ';') version: $(head -1 /proc/driver/nvidia/version 2>&1); kernel: $(uname -r)"
say "building"
timeout 100 python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build/gpu -e . >>"$log" 2>&1 || say "build failed (see the log)"

suite() {  # $1: the device; the two devices' suites run side by side, each on 6 workers
  DEV="$1" timeout 170 python3 -m pytest -q -n 6 -p no:cacheprovider tests/test_tensor_ops.py tests/test_tensor_nn.py tests/test_tensor_movement.py \
    tests/test_tensor_indexing.py tests/test_tensor_extra.py tests/test_nn.py tests/test_jit.py tests/test_cuda_tc.py >"$out/suite_${1/:/_}.txt" 2>&1
  local rc=$?
  say "suite on DEV=$1: rc=$rc, $(tail -n 1 "$out/suite_${1/:/_}.txt")"
}
if [ -f bench/nv_probe.py ]; then  # the NV kernel-driver layer, stage by stage (RM and UVM ioctls, memory, a channel)
  say "bench/nv_probe.py"
  timeout 60 python3 bench/nv_probe.py >"$out/nv_probe.jsonl" 2>>"$log"
  say "nv_probe: rc=$?, $(tail -n 1 "$out/nv_probe.jsonl")"
  cat "$out/nv_probe.jsonl" >>"$log"
fi
say "suites on DEV=CUDA and DEV=CUDA:PTX"
suite CUDA & suite CUDA:PTX & wait
for d in CUDA CUDA_PTX; do grep -E "^(FAILED|ERROR)" "$out/suite_$d.txt" | head -n 60 >>"$log"; done

: >"$out/bench.jsonl"
for dev in CUDA CUDA:PTX; do
  say "bench/cuda.py on DEV=$dev"
  DEV="$dev" timeout 60 python3 bench/cuda.py 2>>"$log" | tee -a "$out/bench.jsonl" "$log"
done

say "bench/cuda_tc_sweep.py on DEV=CUDA"
DEV=CUDA timeout 90 python3 bench/cuda_tc_sweep.py 2>>"$log" | tee -a "$out/tc_sweep.jsonl" "$log"

python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
summary = {"suite": {d: (out / f"suite_{d}.txt").read_text().strip().splitlines()[-1:] for d in ("CUDA", "CUDA_PTX") if (out / f"suite_{d}.txt").exists()},
           "bench": [json.loads(line) for line in (out / "bench.jsonl").read_text().splitlines() if line.startswith("{")]}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
EOF
say "done: $out/gpu_check.log, $out/gpu_check.json"
