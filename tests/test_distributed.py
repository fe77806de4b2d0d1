"""tinyhybrid.distributed under mpirun on loopback: 2 and 3 ranks (an odd count), dead and stuck ranks."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="the mpi extra (pip install '.[mpi]'); CI installs it")

WORKER = Path(__file__).with_name("dist_worker.py")


def mpirun(n: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
  exe = shutil.which("mpirun")
  assert exe is not None, "mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  # root in containers and CI needs Open MPI's explicit consent; more ranks than cores need --oversubscribe
  env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
  return subprocess.run([exe, "-np", str(n), "--oversubscribe", sys.executable, str(WORKER), *args], env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_match_numpy(n):
  p = mpirun(n, "collectives")
  assert p.returncode == 0, p.stdout + p.stderr
  # mpirun forwards each rank's output as it comes: two ranks' lines may share one line of p.stdout
  assert sorted(re.findall(r"OK rank \d+ of \d+", p.stdout)) == [f"OK rank {r} of {n}" for r in range(n)]


def test_stuck_rank_is_named_within_the_timeout():
  p = mpirun(3, "stuck", "1")
  assert p.returncode != 0
  for r in (0, 2):
    assert f"rank {r} error: rank {r}: allreduce: rank 1 did not reach the call within 1 s" in p.stdout, p.stdout + p.stderr


def test_killed_rank_ends_the_job():
  p = mpirun(2, "killed", "30", timeout=60)  # far below the collective's timeout: the launcher ends the job
  assert p.returncode != 0
  assert "rank 1" in p.stdout + p.stderr and "OK rank 0" not in p.stdout


def test_train_digits_mpi_matches_one_process():
  example = Path(__file__).resolve().parent.parent / "examples" / "train_digits_mpi.py"
  exe = shutil.which("mpirun")
  assert exe is not None
  # a collective that waits past DIST_TIMEOUT fails naming the missing rank, well before the test's own timeout
  env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "DIST_TIMEOUT": "120"}
  p = subprocess.run([exe, "-np", "2", "--oversubscribe", sys.executable, str(example), "4"], env=env, capture_output=True,
                     text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  line = next(x for x in p.stdout.splitlines() if x.startswith("largest weight difference"))
  assert float(line.rsplit(" ", 1)[1]) < 1e-5, line
