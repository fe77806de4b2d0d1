#!/usr/bin/env python3
"""Runs the Python suite's core files against a sanitized _core module (ctest's python_asan; see CMakeLists.txt here).

The package is staged from the source tree with the sanitized module in it, and the interpreter starts with -S so that
no installed or editable tinyhybrid can shadow it; the site directories go on PYTHONPATH instead, so pytest and numpy
are still found. The ASan runtime is preloaded (the interpreter itself is not instrumented). Leak checking is off:
CPython frees little at exit; tests/test_leaks.py covers leaks with its own bounds."""
from __future__ import annotations

import argparse
import os
import site
import subprocess
import sys
import time

# The files that drive the C++ core hardest: nodes, rewrites, symbolic, ranges, folding, queues, SPEC, live nodes, and
# realize end to end. The resident-memory bounds of test_leaks.py do not hold under ASan, which keeps freed memory in
# quarantine; its live-node tests run.
CORE_FILES = ["test_uop_basic.py", "test_rewrite.py", "test_symbolic.py", "test_vmin_vmax.py", "test_fold.py",
              "test_hcq.py", "test_device_fault.py", "test_spec.py", "test_leaks.py", "test_realize.py"]
DESELECT = "not rss_flat"


def stage_package(source: str, module: str, stage: str) -> None:
  pkg = os.path.join(stage, "tinyhybrid")
  os.makedirs(pkg, exist_ok=True)
  src_pkg = os.path.join(source, "python", "tinyhybrid")
  for name in os.listdir(src_pkg) + [os.path.basename(module)]:
    target = module if name == os.path.basename(module) else os.path.join(src_pkg, name)
    if name.startswith("_core") and target != module: continue  # a module built elsewhere is not the one under test
    link = os.path.join(pkg, name)
    if os.path.lexists(link): os.unlink(link)
    os.symlink(target, link)


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--module", required=True)
  ap.add_argument("--source", required=True)
  ap.add_argument("--cxx", required=True)
  ap.add_argument("--stage", required=True)
  ap.add_argument("files", nargs="*")
  args = ap.parse_args()
  args.module, args.source, args.stage = (os.path.abspath(p) for p in (args.module, args.source, args.stage))
  stage_package(args.source, args.module, args.stage)
  # libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw interceptor must find the
  # real one when it starts, or the first C++ exception aborts the process
  preload = [subprocess.run([args.cxx, f"-print-file-name={lib}"], capture_output=True, text=True, check=True).stdout.strip()
             for lib in ("libasan.so", "libstdc++.so")]
  if not all(os.path.isabs(p) for p in preload):
    print(f"python_asan: {args.cxx} does not know where {preload} are", file=sys.stderr)
    return 1
  sites = [p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)]
  env = dict(os.environ, LD_PRELOAD=" ".join(preload), PYTHONPATH=os.pathsep.join([args.stage] + sites),
             ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:strict_string_checks=1",
             UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", PYTHONDONTWRITEBYTECODE="1")
  files = [os.path.join(args.source, "tests", f) for f in (args.files or CORE_FILES)]
  check = "import tinyhybrid._core as c, sys; sys.exit(0 if c.__file__.startswith(sys.argv[1]) else f'loaded {c.__file__}')"
  if subprocess.run([sys.executable, "-S", "-c", check, args.stage], env=env).returncode: return 1
  t0 = time.perf_counter()
  rc = subprocess.run([sys.executable, "-S", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", DESELECT, "--durations=5", *files], env=env,
                      cwd=args.source).returncode
  print(f"python_asan: {len(files)} files in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
  return rc


if __name__ == "__main__":
  sys.exit(main())
