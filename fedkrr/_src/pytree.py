"""Frozen dataclasses as PyTrees whose tree structure names their class.

Why not ``jax.tree_util.register_dataclass``: in the JAX versions this project
supports, the tree structures of two such classes with the same field names
(``RBF(gamma)`` and ``Laplace(gamma)``, say) compare *equal* while hashing
differently. A jit cache that meets a hash collision then checks equality and
can hand one class's compiled program to the other: a Laplace learner silently
running the RBF kernel, in some processes and not others. Here the class itself
is part of the auxiliary data, so structures of different classes never compare
equal.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import TypeVar
from typing import cast
from typing import dataclass_transform

import jax

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def pytree_dataclass(cls: type[T]) -> type[T]:
  """Makes ``cls`` a frozen dataclass and registers it as a PyTree.

  Fields with ``metadata=dict(static=True)`` are static (part of the tree
  structure, with the class); all other fields are children (leaves or subtrees).
  """
  cls = dataclasses.dataclass(frozen=True)(cls)
  fields = dataclasses.fields(cast(Any, cls))  # a dataclass now, though still typed type[T]
  data = tuple(f.name for f in fields if not f.metadata.get("static", False))
  meta = tuple(f.name for f in fields if f.metadata.get("static", False))

  def aux(obj):
    return cls, tuple(getattr(obj, name) for name in meta)

  def flatten_with_keys(obj):
    return [(jax.tree_util.GetAttrKey(name), getattr(obj, name)) for name in data], aux(obj)

  def flatten(obj):
    return [getattr(obj, name) for name in data], aux(obj)

  def unflatten(aux, children):
    _, meta_values = aux
    return cls(**dict(zip(data, children)), **dict(zip(meta, meta_values)))

  jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
  return cls
