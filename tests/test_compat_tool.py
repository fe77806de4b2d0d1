"""tests/compat/tinygrad_suite.py: tinygrad's test files run against tinyhybrid with only the import changed."""
import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).parent / "compat" / "tinygrad_suite.py"


def test_the_suite_runs_a_file_that_imports_tinygrad(tmp_path: Path):
  (tmp_path / "test").mkdir()
  (tmp_path / "test" / "test_alias.py").write_text(
    "from tinygrad import Tensor\nfrom tinygrad.helpers import getenv\nimport tinygrad.nn as nn\n"
    "def test_ok(): assert (Tensor([1, 2]) + 1).tolist() == [2, 3] and Tensor.__module__.startswith('tinyhybrid')\n"
    "def test_fails(): assert Tensor([1]).item() == 2\n"
    "def test_nn(): assert nn.Linear(2, 3)(Tensor.ones(1, 2)).shape == (1, 3)\n")
  out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "test/test_alias.py"], capture_output=True, text=True, timeout=300)
  lines = [json.loads(x) for x in out.stdout.splitlines()]
  assert lines[0] == {"file": "test/test_alias.py", "failed": 1, "passed": 2}, out.stdout + out.stderr
  assert lines[-1] == {"file": "total", "failed": 1, "passed": 2}
