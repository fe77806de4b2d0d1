"""Eight threads realizing, compiling and BEAM searching at once, each from a fresh cache in a fresh process, so the
first use of the device, its driver and every cache write happen from all of them together."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# a worker that hangs prints every thread's stack and exits before the test's timeout, so a deadlock shows where it is
WORKER = """
import faulthandler, sys, threading, traceback
faulthandler.dump_traceback_later(480, exit=True)
import numpy as np
from tinyhybrid import Tensor
rounds, errors = int(sys.argv[1]), []
def work(i):
  try:
    rng = np.random.default_rng(i)
    for j in range(rounds):
      a, b = rng.random((17 + i, 9 + j), dtype=np.float32), rng.random((9 + j, 5), dtype=np.float32)
      got = ((Tensor(a) @ Tensor(b)) * (i + 1) + j).relu().sum(1).numpy()
      np.testing.assert_allclose(got, ((a @ b) * (i + 1) + j).clip(0).sum(1), rtol=1e-4)
  except Exception: errors.append(traceback.format_exc())
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("".join(errors) or "ok")
"""


def has_cl() -> bool:
  try:
    from tinyhybrid.runtime.ops_cl import device_ids
    return bool(device_ids())
  except (ImportError, RuntimeError): return False


@pytest.mark.parametrize("dev,beam,rounds", [("CPU", 0, 3), ("CL", 0, 2), ("CPU", 1, 1), ("CL", 1, 1)])
def test_eight_threads_at_once(tmp_path: Path, dev: str, beam: int, rounds: int):
  if dev == "CL" and not has_cl(): pytest.skip("no OpenCL device")
  env = {**os.environ, "DEV": dev, "BEAM": str(beam), "TINYHYBRID_CACHE": str(tmp_path), "POCL_CACHE_DIR": str(tmp_path / "pocl")}
  res = subprocess.run([sys.executable, "-c", WORKER, str(rounds)], env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-12000:]
  assert res.stdout.strip().splitlines()[-1] == "ok", res.stdout[-3000:]
  assert not [p for p in tmp_path.rglob("*.tmp")]  # every cache write was renamed into place
