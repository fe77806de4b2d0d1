"""Environment knobs and small shared utilities, with tinygrad's names (getenv, Context, DEBUG, ...)."""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, ClassVar, Iterator


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable `key`, converted to the type of `default`."""
  return type(default)(os.getenv(key, default))


class ContextVar:
  """A named setting read from the environment once, and changed for a block with `Context`."""
  _cache: ClassVar[dict[str, ContextVar]] = {}
  value: int | str

  def __init__(self, key: str, default_value: int | str):
    if key in ContextVar._cache: raise RuntimeError(f"attempt to recreate ContextVar {key}")
    ContextVar._cache[key] = self
    self.key = key
    self.value = getenv(key, default_value)

  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x  # type: ignore[operator]
  def __gt__(self, x: int) -> bool: return self.value > x  # type: ignore[operator]
  def __lt__(self, x: int) -> bool: return self.value < x  # type: ignore[operator]
  def __le__(self, x: int) -> bool: return self.value <= x  # type: ignore[operator]
  def __repr__(self) -> str: return f"ContextVar({self.key!r}, {self.value!r})"


class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2): ...` sets ContextVars for the block and restores them after."""

  def __init__(self, **kwargs: int | str):
    unknown = [k for k in kwargs if k not in ContextVar._cache]
    if unknown: raise KeyError(f"unknown ContextVar(s): {', '.join(unknown)}")
    self.kwargs = kwargs

  def __enter__(self) -> None:
    self.old = {k: ContextVar._cache[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): ContextVar._cache[k].value = v

  def __exit__(self, *exc: object) -> None:
    for k, v in self.old.items(): ContextVar._cache[k].value = v


DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)
TRAINING = ContextVar("TRAINING", 0)  # as Tensor.training, for tinygrad scripts that say Context(TRAINING=1)


def is_training(tensor_cls: type) -> bool:
  """Whether layers run in training mode: Tensor.training (Tensor.train()) or Context(TRAINING=1)."""
  return bool(getattr(tensor_cls, "training", False) or TRAINING)
JIT = ContextVar("JIT", 1)
PROFILE = ContextVar("PROFILE", 0)
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32")
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32")


def prod(xs: Iterator[Any] | list[Any] | tuple[Any, ...], start: Any = 1) -> Any:
  """The product of the items (1 for none)."""
  return functools.reduce(lambda a, b: a * b, xs, start)


def all_same(items: list[Any] | tuple[Any, ...]) -> bool:
  return all(x == items[0] for x in items)


def flatten(items: Any) -> list[Any]:
  return [x for sub in items for x in sub]
