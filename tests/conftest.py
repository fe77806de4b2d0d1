"""Settings for the whole test run."""
import os

# The suite runs with SPEC=1: every graph that reaches a pass boundary (tensor graph, kernel graph, lowered,
# linearized) is checked against the type rules of its ops (tinyhybrid/uop/spec.py). It adds no measurable time (the
# checks run once per compiled kernel); SPEC=0 in the environment turns it off, SPEC=2 adds the stricter late rules.
os.environ.setdefault("SPEC", "1")
