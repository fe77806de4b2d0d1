"""SHA-256 for cache keys and file checks, from CPython's own implementation (the same digests as hashlib's): importing
hashlib loads OpenSSL's libcrypto, 3.6 MB resident in every process that only hashes kernel sources."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def _constructor() -> Callable[..., Any]:
  for name in ("_sha2", "_sha256"):  # (CPython 3.12+, and before)
    try: return importlib.import_module(name).sha256
    except (ImportError, AttributeError): pass
  import hashlib  # another interpreter: its hashlib
  return hashlib.sha256


sha256 = _constructor()
