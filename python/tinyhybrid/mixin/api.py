"""The Tensor API assembled from its parts; Tensor (tensor.py) supplies the primitives they are built on."""
from tinyhybrid.mixin.creation import CreationMixin
from tinyhybrid.mixin.elementwise import ElementwiseMixin
from tinyhybrid.mixin.hashing import HashMixin
from tinyhybrid.mixin.indexing import IndexingMixin
from tinyhybrid.mixin.movement import MovementMixin
from tinyhybrid.mixin.nnfunc import NNMixin
from tinyhybrid.mixin.random import RandomMixin
from tinyhybrid.mixin.reduce import ReduceMixin


class TensorAPI(CreationMixin, ElementwiseMixin, MovementMixin, ReduceMixin, IndexingMixin, RandomMixin, NNMixin, HashMixin):
  __slots__ = ()
