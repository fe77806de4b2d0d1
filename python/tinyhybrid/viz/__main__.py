"""`python -m tinyhybrid.viz trace.pkl`: serves a session saved by VIZ=1 (VIZ_PATH, or the path it printed)."""
from __future__ import annotations

import argparse
import sys

from tinyhybrid.viz import serve, session


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m tinyhybrid.viz", description="Serve a saved VIZ session in the browser.")
  p.add_argument("trace", help="a session file written by VIZ=1")
  p.add_argument("--port", type=int, default=None, help="port to serve on (default VIZ_PORT or 8000; the next free one if taken)")
  args = p.parse_args(argv)
  try: s = session.load(args.trace)
  except (OSError, ValueError) as e:
    print(f"tinyhybrid.viz: {e}", file=sys.stderr)
    return 2
  serve.serve(s, port=args.port, block=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
