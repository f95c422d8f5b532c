"""Checkpoints that hold only arrays and plain data: reading one never runs code.

A checkpoint is one ``.npz`` archive (read with ``allow_pickle=False``): the
arrays of the saved PyTree, and ``__skeleton__``, a JSON description of the tree
around them. Plain values (None, bools, numbers, strings) are JSON; containers are
tagged nodes:

* ``{"t": "dict" | "list" | "tuple", "items": ...}``;
* ``{"t": "array", "ref": "a17"}``: an array of the archive;
* ``{"t": "namedtuple", "type": "module:Name", "items": [...]}``: a NamedTuple
  class of ``fedkrr``, ``neural``, ``optax`` or ``flax`` (protocol, method and
  optimiser states);
* ``{"t": "module", "type": "module:Name", "fields": {...}}``: a Flax module of
  those packages, rebuilt from its dataclass fields;
* ``{"t": "flax_model", ...}`` and ``{"t": "forest_model", ...}``: a trained
  ``neural.FlaxModel`` (module and variables) and ``neural.ForestModel`` (the
  scikit-learn forest in skops format, loaded trusting only the tree type).

Types are looked up by name in those packages only, and must be NamedTuples or
Flax modules: a file that names anything else is refused. Every failure to read
is a :class:`CheckpointError` naming the file.

JAX, Flax and scikit-learn are imported only when a checkpoint holding their
objects is written or read: :func:`load_checkpoint_entries` reads a finished
run's round and metric rows without them.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from pathlib import Path
import re
import sys
from typing import Any
import zipfile

import numpy as np

from fedkrr import NpzError
from fedkrr import atomic_write
from fedkrr import read_npz
from fedkrr import savez_bytes

FORMAT = "neural-checkpoint/1"
SKELETON = "__skeleton__"
_PACKAGES = ("fedkrr", "neural", "optax", "flax")
_FOREST_TYPES = ("sklearn.tree._tree.Tree",)   # beyond skops' defaults


class CheckpointError(ValueError):
  """A checkpoint that cannot be written or read (the message names the file)."""


def _type_name(cls: type) -> str:
  return f"{cls.__module__}:{cls.__qualname__}"


_TRUSTED_MODULES: set[str] = set()   # modules that registered a method (trust_module)


def trust_module(module: str) -> None:
  """Lets checkpoints hold the NamedTuples and Flax modules of ``module`` (already imported).

  ``neural.methods.register_method`` calls it for the module of each method's
  config, so that a method written outside ``neural`` can keep NamedTuples in
  its state. Such a module is looked up among the imported modules only: a
  checkpoint never causes an import of it.
  """
  _TRUSTED_MODULES.add(str(module))


def _resolve(name: Any, kind: str) -> type:
  """The class called ``name`` in an allowed package, if it is a NamedTuple / Flax module."""
  module, _, qualname = str(name).partition(":")
  trusted = module in _TRUSTED_MODULES
  if (module.split(".")[0] not in _PACKAGES and not trusted) or not qualname:
    raise CheckpointError(f"it names the type {name!r}, which a checkpoint may not hold")
  try:
    obj = sys.modules[module] if trusted else importlib.import_module(module)
    for part in qualname.split("."):
      obj = getattr(obj, part)
  except (ImportError, AttributeError, KeyError):
    raise CheckpointError(f"it names the type {name!r}, which does not exist here") from None
  if not (isinstance(obj, type) and (
      (kind == "namedtuple" and issubclass(obj, tuple) and hasattr(obj, "_fields"))
      or (kind == "module" and issubclass(obj, _model_types()[0])))):
    raise CheckpointError(f"it names {name!r} as a {kind}, which it is not")
  return obj


def _model_types() -> tuple[type, type, type]:
  """Flax's ``Module``, :class:`neural.FlaxModel` and :class:`neural.ForestModel`."""
  import flax.linen as nn

  from neural._src.forest import ForestModel  # deferred: JAX, Flax, scikit-learn
  from neural._src.learners import FlaxModel  # deferred: JAX, Flax
  return nn.Module, FlaxModel, ForestModel


class _Encoder:
  def __init__(self):
    self.arrays: dict[str, np.ndarray] = {}
    self.module_type, self.flax_model, self.forest_model = _model_types()

  def array(self, value) -> dict[str, Any]:
    value = np.asarray(value)
    if value.dtype == object:
      raise CheckpointError("cannot store an array of Python objects")
    ref = f"a{len(self.arrays)}"
    self.arrays[ref] = value
    return {"t": "array", "ref": ref}

  def __call__(self, value) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
      return value
    if isinstance(value, (np.ndarray, np.generic)) or _is_jax_array(value):
      return self.array(value)
    if isinstance(value, self.flax_model):
      return {"t": "flax_model", "module": self.module(value.model),
              "variables": self(value.variables)}
    if isinstance(value, self.forest_model):
      import skops.io  # a slow import, needed only for forests
      blob = np.frombuffer(skops.io.dumps(value.forest), dtype=np.uint8)
      return {"t": "forest_model", "skops": self.array(blob), "num_outputs": value.num_outputs}
    if isinstance(value, self.module_type):
      return self.module(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
      return {"t": "namedtuple", "type": _type_name(type(value)),
              "items": [self(v) for v in value]}
    if isinstance(value, (list, tuple)):
      return {"t": type(value).__name__, "items": [self(v) for v in value]}
    if isinstance(value, dict):
      if not all(isinstance(k, (str, int)) for k in value):
        raise CheckpointError("cannot store a dict whose keys are not strings or ints")
      return {"t": "dict", "items": [[k, self(v)] for k, v in value.items()]}
    raise CheckpointError(f"cannot store a {type(value).__name__}")

  def module(self, module: Any) -> dict[str, Any]:
    fields = {f.name: self(getattr(module, f.name)) for f in dataclasses.fields(module)
              if f.init and f.name not in ("parent", "name")}
    return {"t": "module", "type": _type_name(type(module)), "fields": fields}


def _decode(node: Any, arrays: dict[str, np.ndarray]) -> Any:
  if node is None or isinstance(node, (bool, int, float, str)):
    return node
  if not isinstance(node, dict) or "t" not in node:
    raise CheckpointError(f"an unknown node {str(node)[:60]!r}")
  tag = node["t"]
  dec = lambda v: _decode(v, arrays)
  if tag == "array":
    if node.get("ref") not in arrays:
      raise CheckpointError(f"a missing array {node.get('ref')!r}")
    return arrays[node["ref"]]
  if tag == "dict":
    return {k: dec(v) for k, v in node["items"]}
  if tag == "list":
    return [dec(v) for v in node["items"]]
  if tag == "tuple":
    return tuple(dec(v) for v in node["items"])
  if tag == "namedtuple":
    return _resolve(node["type"], "namedtuple")(*[dec(v) for v in node["items"]])
  if tag == "module":
    return _resolve(node["type"], "module")(**{k: dec(v) for k, v in node["fields"].items()})
  if tag == "flax_model":
    return _model_types()[1](dec(node["module"]), dec(node["variables"]))
  if tag == "forest_model":
    import skops.io  # a slow import, needed only for forests
    blob = dec(node["skops"]).tobytes()
    untrusted = [t for t in skops.io.get_untrusted_types(data=blob) if t not in _FOREST_TYPES]
    if untrusted:
      raise CheckpointError(f"its forest holds types that are not trusted: {untrusted[:3]}")
    return _model_types()[2](skops.io.loads(blob, trusted=list(_FOREST_TYPES)),
                             int(node["num_outputs"]))
  raise CheckpointError(f"an unknown node type {tag!r}")


def save_checkpoint(path: str | os.PathLike, tree: Any) -> None:
  """Writes ``tree`` (dicts, lists, tuples, NamedTuples, arrays, plain values, Flax and
  forest models) to ``path`` atomically.

  Raises:
    CheckpointError: the tree holds something else.
  """
  encoder = _Encoder()
  skeleton = {"format": FORMAT, "tree": encoder(tree)}
  arrays = {**encoder.arrays, SKELETON: np.asarray(json.dumps(skeleton))}
  atomic_write(path, savez_bytes(**arrays))


def load_checkpoint(path: str | os.PathLike) -> Any:
  """Reads a checkpoint written by :func:`save_checkpoint`; runs no code from the file.

  Raises:
    CheckpointError: the file is unreadable, truncated, of another format, or names
      a type it may not hold; the message names the file.
  """
  path = Path(path)
  try:
    arrays = read_npz(path)
    skeleton = json.loads(str(arrays.pop(SKELETON)))
    if not isinstance(skeleton, dict) or skeleton.get("format") != FORMAT:
      raise CheckpointError(f"it is not a {FORMAT} file")
    return _decode(skeleton["tree"], arrays)
  except (CheckpointError, NpzError) as e:
    raise CheckpointError(f"checkpoint {path} is unusable: {e}") from None
  except (ValueError, KeyError, TypeError) as e:   # a skeleton that is not ours
    raise CheckpointError(f"checkpoint {path} is unreadable ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]})") from None


def load_checkpoint_entries(path: str | os.PathLike, names: tuple[str, ...]) -> dict[str, Any]:
  """Top-level entries ``names`` of a checkpoint that holds a dict, read alone.

  Reads the skeleton and only the arrays these entries hold (a run's ``round`` and
  metric ``rows`` hold none), so neither the models nor JAX are loaded.

  Raises:
    CheckpointError: the file is unreadable, not of this format, not a dict, or lacks
      one of ``names``; the message names the file.
  """
  path = Path(path)
  try:
    with np.load(path, allow_pickle=False) as data:
      skeleton = json.loads(str(data[SKELETON]))
      if not isinstance(skeleton, dict) or skeleton.get("format") != FORMAT:
        raise CheckpointError(f"it is not a {FORMAT} file")
      tree = skeleton["tree"]
      if not isinstance(tree, dict) or tree.get("t") != "dict":
        raise CheckpointError("it does not hold a dict")
      items = dict(tree["items"])
      missing = [n for n in names if n not in items]
      if missing:
        raise CheckpointError(f"it has no entry {missing[0]!r}")
      refs = set(re.findall(r'"ref": "(a[0-9]+)"', json.dumps([items[n] for n in names])))
      arrays = {ref: data[ref] for ref in refs}
    return {n: _decode(items[n], arrays) for n in names}
  except CheckpointError as e:
    raise CheckpointError(f"checkpoint {path} is unusable: {e}") from None
  except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
    raise CheckpointError(f"checkpoint {path} is unreadable ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]})") from None


def _is_jax_array(value: Any) -> bool:
  """Whether ``value`` is a JAX array (without importing JAX: a JAX array means it is)."""
  jax = sys.modules.get("jax")
  return jax is not None and isinstance(value, jax.Array)
