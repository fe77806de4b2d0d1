"""The long mode flag of the fuzzers (see fuzzlib.py): --fuzz-long when tests/fuzz is named on the command line."""
import os


def pytest_addoption(parser):
  parser.addoption("--fuzz-long", action="store_true", help="run the fuzzers' long mode (as FUZZ_LONG=1)")


def pytest_configure(config):
  if config.getoption("--fuzz-long", default=False): os.environ["FUZZ_LONG"] = "1"
