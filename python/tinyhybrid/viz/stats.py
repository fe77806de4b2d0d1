"""TRACK_MATCH_STATS=1: at exit, how often each rule fired and how many rewrites ran, from the recorded session."""
from __future__ import annotations

import sys
from collections import Counter

from tinyhybrid.viz.session import Session


def match_stats(s: Session) -> tuple[Counter, Counter]:
  """(rule fires by (name, location), calls by rewrite name)."""
  fired: Counter = Counter()
  calls: Counter = Counter()
  for g in s.groups:
    for c in g.calls:
      if c.stage: continue
      calls[c.name] += 1
      for st in c.steps: fired[(st.rule, st.location)] += 1
  return fired, calls


def print_match_stats(s: Session, top: int = 40, file=sys.stderr) -> None:
  fired, calls = match_stats(s)
  print(f"TRACK_MATCH_STATS: {sum(calls.values())} rewrites ({', '.join(f'{n} {k}' for k, n in calls.most_common(6))}), "
        f"{sum(fired.values())} rules fired", file=file)
  for (rule, loc), n in fired.most_common(top): print(f"{n:9d}  {rule[:60]:<60}  {loc}", file=file)
