"""Checkpoints that hold only arrays and plain data, restored into a target built from the config.

A checkpoint is one ``.npz`` archive: the arrays of the saved tree, and
``__skeleton__``, a JSON description of the tree around them (plain values as
JSON; containers as tagged nodes ``{"t": "dict" | "list" | "tuple" |
"namedtuple", "items": ...}``, ``{"t": "array", "ref": "a17"}`` for an array of
the archive, ``{"t": "flax_model", ...}`` for a trained network's variables,
``{"t": "forest_model", ...}`` for a random forest in skops format).

**A checkpoint never decides which types are built.** Reading one
(:func:`read_checkpoint`) gives plain data: dicts, lists, tuples, arrays and
inert :class:`Node` records for the tagged nodes. :func:`restore_checkpoint` then fills a
*target*: the tree the run itself builds from its config (a method's ``init``,
the KD protocols' state replayed with stand-in models: see
``neural.train_and_evaluate``), the way ``orbax.checkpoint`` restores into a
target. Every NamedTuple, Flax module and model of the result is the target's;
the file contributes arrays (each of the target's shape and dtype) and plain
values (each of the target's type), checked node by node. A type named in the
file is compared with the target's, as a string, never looked up: nothing in a
checkpoint is imported, resolved or called. Forests are read by skops trusting
only scikit-learn's tree types.

Why not ``orbax.checkpoint`` itself: its checkpoints are directories (OCDBT or
tensorstore files and metadata) finalised by a rename from background threads,
and importing it takes seconds; a run here keeps its state, its metric rows and
skops forests in one file written atomically beside ``metrics.jsonl``, which is
checked against the rows the checkpoint holds. The restore-into-target rule is
the same.

JAX, Flax and scikit-learn are imported only when a checkpoint holding their
objects is written or restored: :func:`load_checkpoint_entries` reads a finished
run's round and metric rows without them.

Every failure to read is a :class:`CheckpointError` naming the file and the
place in the tree (``state.params[1]['Dense_0']['kernel']: shape (3, 4) in the
file, (5, 4) expected``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any
from typing import NamedTuple
from typing import cast

import numpy as np

from fedkrr.io import DiskReadError
from fedkrr.io import NpzError
from fedkrr.io import ReadError
from fedkrr.io import atomic_write
from fedkrr.io import parse_json
from fedkrr.io import read_npz
from fedkrr.io import savez_bytes

FORMAT = "neural-checkpoint/2"
FORMATS = ("neural-checkpoint/1", FORMAT)   # /1 named types as module:Name; read the same way
SKELETON = "__skeleton__"
MAX_SKELETON_CHARS = 256 * 2**20
MAX_DEPTH = 200
_FOREST_TYPES = ("sklearn.tree._tree.Tree",)   # beyond skops' defaults


class CheckpointError(ValueError):
  """A checkpoint that cannot be written or read (the message names the file)."""


class CheckpointReadFailed(CheckpointError):
  """The disk failed while a checkpoint was read (EIO): it may be intact; read it again."""


class Node(NamedTuple):
  """A tagged node of a checkpoint as read: inert data, never a type of the file's choosing.

  Attributes:
    tag: ``"namedtuple"``, ``"module"``, ``"flax_model"`` or ``"forest_model"``.
    name: the type name the file gives (compared with the target's, never looked up).
    items: the decoded children (a tuple for NamedTuples, a dict for the others).
  """

  tag: str
  name: str
  items: Any


@dataclasses.dataclass(frozen=True)
class ModelSlot:
  """The target of a trained model: a network of this module and variables, or a forest.

  A stand-in model as well: ``predict`` gives zeros of the right shape, so a
  protocol can be replayed with it to build the target of a whole state.

  Attributes:
    module: the network's Flax module (from the config); ``None`` for a random forest.
    variables: arrays of the shapes and dtypes of its variables (``None`` for a forest).
    num_classes: C, the width of its predictions.
    epoch_accuracy: always empty (the stand-in of ``neural.training.FlaxModel``'s field).
    best_epoch_right: always empty (likewise).
  """

  module: Any
  variables: Any
  num_classes: int
  epoch_accuracy: tuple[float, ...] = ()
  best_epoch_right: bytes = b""

  def predict(self, x: Any) -> np.ndarray:
    """Zeros of shape (n, C): the shape of the model's predictions."""
    return np.zeros((int(np.shape(x)[0]), self.num_classes), np.float32)


class _Types(NamedTuple):
  module: type
  flax_model: type
  forest_model: type
  arrays: tuple[type, ...]


@functools.lru_cache(maxsize=1)
def _types() -> _Types:
  """Flax's ``Module``, the two models and JAX's array types, imported when first needed
  (reading a finished run's rows needs none of them)."""
  import flax.linen as nn  # deferred: JAX, Flax
  import jax  # deferred: JAX

  from neural._src.learners.forest import ForestModel  # deferred: JAX, Flax, scikit-learn
  from neural._src.learners.learners import FlaxModel  # deferred: JAX, Flax
  return _Types(nn.Module, FlaxModel, ForestModel, (jax.Array, jax.ShapeDtypeStruct))


def _type_name(cls: type) -> str:
  return f"{cls.__module__}:{cls.__qualname__}"


def _short(name: str) -> str:
  """The class name of ``module:Qual.Name`` (or of a bare name)."""
  return str(name).rpartition(":")[2].rpartition(".")[2]


# ---------------------------------------------------------------------------
# Writing


class _Encoder:
  def __init__(self):
    self.arrays: dict[str, np.ndarray] = {}

  def array(self, value) -> dict[str, Any]:
    value = np.asarray(value)
    if value.dtype == object:
      raise CheckpointError("cannot store an array of Python objects")
    ref = f"a{len(self.arrays)}"
    self.arrays[ref] = value
    return {"t": "array", "ref": ref}

  def __call__(self, value) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
      return value
    if isinstance(value, float):
      return value if np.isfinite(value) else self.array(np.float64(value))
    types = _types()
    if isinstance(value, (np.ndarray, np.generic, *types.arrays)):
      return self.array(value)
    if isinstance(value, types.flax_model):
      return {"t": "flax_model", "module": self.module(value.model),
              "variables": self(value.variables)}
    if isinstance(value, types.forest_model):
      import skops.io  # a slow import, needed only for forests
      blob = np.frombuffer(skops.io.dumps(value.forest), dtype=np.uint8)
      return {"t": "forest_model", "skops": self.array(blob), "num_outputs": value.num_outputs}
    if isinstance(value, types.module):
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


def save_checkpoint(path: str | os.PathLike, tree: Any) -> None:
  """Writes ``tree`` (dicts, lists, tuples, NamedTuples, arrays, plain values, Flax and
  forest models) to ``path`` atomically.

  Raises:
    CheckpointError: the tree holds something else.
  """
  encoder = _Encoder()
  skeleton = {"format": FORMAT, "tree": encoder(tree)}
  arrays = {**encoder.arrays, SKELETON: np.asarray(json.dumps(skeleton, allow_nan=False))}
  atomic_write(path, savez_bytes(**arrays))


# ---------------------------------------------------------------------------
# Reading: plain data only


def _items(node: dict[str, Any], kind: type) -> Any:
  items = node.get("items")
  if not isinstance(items, list):
    raise CheckpointError(f"a {node.get('t')} node without a list of items")
  if kind is dict and not all(isinstance(p, list) and len(p) == 2
                              and isinstance(p[0], (str, int)) for p in items):
    raise CheckpointError("a dict node whose items are not [key, value] pairs")
  return items


def _decode(node: Any, arrays: dict[str, np.ndarray]) -> Any:
  """The skeleton's node as plain data: containers, arrays, plain values and :class:`Node`."""
  if node is None or isinstance(node, (bool, int, float, str)):
    return node
  if not isinstance(node, dict) or not isinstance(node.get("t"), str):
    raise CheckpointError(f"an unknown node {str(node)[:60]!r}")
  tag = node["t"]
  if tag == "array":
    ref = node.get("ref")
    if not isinstance(ref, str) or ref not in arrays:
      raise CheckpointError(f"a missing array {str(ref)[:40]!r}")
    return arrays[ref]
  if tag == "dict":
    out = {}
    for k, v in _items(node, dict):
      if k in out:
        raise CheckpointError(f"a dict node with the key {k!r} twice")
      out[k] = _decode(v, arrays)
    return out
  if tag in ("list", "tuple"):
    values = [_decode(v, arrays) for v in _items(node, list)]
    return values if tag == "list" else tuple(values)
  if tag == "namedtuple":
    return Node(tag, str(node.get("type", "")), tuple(_decode(v, arrays)
                                                      for v in _items(node, list)))
  if tag == "module":
    fields = node.get("fields")
    if not isinstance(fields, dict):
      raise CheckpointError("a module node without fields")
    return Node(tag, str(node.get("type", "")), {k: _decode(v, arrays) for k, v in fields.items()})
  if tag == "flax_model":
    return Node(tag, "FlaxModel", {"module": _decode(node.get("module"), arrays),
                                   "variables": _decode(node.get("variables"), arrays)})
  if tag == "forest_model":
    return Node(tag, "ForestModel", {"skops": _decode(node.get("skops"), arrays),
                                     "num_outputs": node.get("num_outputs")})
  raise CheckpointError(f"an unknown node type {tag[:40]!r}")


def _check_headers(headers) -> None:
  for name, (shape, dtype) in headers.items():
    if name == SKELETON and (shape != () or dtype.kind != "U"
                             or dtype.itemsize > 4 * MAX_SKELETON_CHARS):
      raise ValueError(f"{SKELETON}: expected a JSON string of at most {MAX_SKELETON_CHARS} "
                       f"characters, got shape {shape} of {dtype}")
  if SKELETON not in headers:
    raise ValueError(f"no {SKELETON} (it is not a {FORMAT} file)")


def read_checkpoint(path: str | os.PathLike) -> Any:
  """A checkpoint as plain data (see the module docstring); builds no type, runs no code.

  Raises:
    CheckpointError: the file is unreadable, truncated, too large for this machine,
      of another format, or nested deeper than a run's state is; the message names it.
  """
  path = Path(path)
  try:
    arrays = read_npz(path, check=_check_headers)
    skeleton = parse_json(str(arrays.pop(SKELETON)), f"{path}: {SKELETON}",
                          max_depth=MAX_DEPTH)
    if not isinstance(skeleton, dict) or skeleton.get("format") not in FORMATS:
      raise CheckpointError(f"it is not a {FORMAT} file")
    return _decode(skeleton.get("tree"), arrays)
  except DiskReadError as e:
    raise CheckpointReadFailed(f"checkpoint {e}") from None
  except NpzError as e:
    raise CheckpointError(f"checkpoint {e}") from None
  except ReadError as e:
    raise CheckpointError(f"checkpoint {e}") from None
  except CheckpointError as e:
    raise CheckpointError(f"checkpoint {path} is unusable: {e}") from None
  except RecursionError:
    raise CheckpointError(f"checkpoint {path} is unusable: nested too deep") from None


# ---------------------------------------------------------------------------
# Restoring into a target


def _where(where: str) -> str:
  return where or "the checkpoint"


def _a(word: str) -> str:
  return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def _describe(value: Any) -> str:
  if isinstance(value, Node):
    return _a(_short(value.name) or value.tag)
  if isinstance(value, np.ndarray):
    return f"an array {value.shape} of {value.dtype}"
  return _a(type(value).__name__)


def _mismatch(where: str, value: Any, expected: str) -> CheckpointError:
  return CheckpointError(f"{_where(where)}: {_describe(value)} in the file where "
                         f"{expected} belongs")


def _restore_array(value: Any, target: Any, where: str) -> np.ndarray:
  shape, dtype = tuple(np.shape(target)), np.dtype(target.dtype)
  if not isinstance(value, np.ndarray):
    raise _mismatch(where, value, f"an array {shape} of {dtype}")
  if value.shape != shape or value.dtype != dtype:
    raise CheckpointError(f"{_where(where)}: an array {value.shape} of {value.dtype} in the "
                          f"file, {shape} of {dtype} expected")
  return value


def _restore_forest(value: Any, slot: ModelSlot, where: str) -> Any:
  if not (isinstance(value, Node) and value.tag == "forest_model"):
    raise _mismatch(where, value, "a random forest")
  blob, outputs = value.items["skops"], value.items["num_outputs"]
  if not (isinstance(blob, np.ndarray) and blob.dtype == np.uint8 and blob.ndim == 1):
    raise CheckpointError(f"{_where(where)}: a forest whose skops data is not bytes")
  if outputs != slot.num_classes or isinstance(outputs, bool):
    raise CheckpointError(f"{_where(where)}: a forest of {outputs!r} outputs, "
                          f"{slot.num_classes} expected")
  import skops.io  # a slow import, needed only for forests
  data = blob.tobytes()
  try:
    untrusted = [t for t in skops.io.get_untrusted_types(data=data) if t not in _FOREST_TYPES]
    if untrusted:
      raise CheckpointError(f"{_where(where)}: its forest holds types that are not trusted: "
                            f"{untrusted[:3]}")
    return _types().forest_model(skops.io.loads(data, trusted=list(_FOREST_TYPES)),
                                 int(outputs))
  except CheckpointError:
    raise
  except Exception as e:   # skops' own errors on a damaged archive
    raise CheckpointError(f"{_where(where)}: an unreadable forest ({type(e).__name__})") \
        from None


def restore_checkpoint(value: Any, target: Any, where: str = "") -> Any:
  """``value`` (from :func:`read_checkpoint`) restored into the structure of ``target``.

  The result has the target's containers, NamedTuples, Flax modules and models;
  its arrays are the file's, each checked against the target's shape and dtype,
  and its plain values are the file's, each of the target's type. A
  :class:`ModelSlot` of the target becomes a ``neural.training.FlaxModel`` (the slot's
  module, the file's variables) or a ``neural.training.ForestModel``.

  Args:
    value: the file's node.
    target: the expected tree (built from the run's config).
    where: the node's path, for error messages.

  Raises:
    CheckpointError: the first node that differs, named by its path.
  """
  types = _types()
  if isinstance(target, ModelSlot):
    if target.module is None:
      return _restore_forest(value, target, where)
    if not (isinstance(value, Node) and value.tag == "flax_model"):
      raise _mismatch(where, value, "a trained network")
    variables = restore_checkpoint(value.items["variables"], target.variables, f"{where}.variables")
    return types.flax_model(target.module, variables)
  if isinstance(target, types.flax_model):
    return restore_checkpoint(value, ModelSlot(target.model, target.variables, 0), where)
  if isinstance(target, types.forest_model):
    return _restore_forest(value, ModelSlot(None, None, target.num_outputs), where)
  if isinstance(target, types.module):
    if not (isinstance(value, Node) and value.tag == "module"
            and _short(value.name) == type(target).__name__):
      raise _mismatch(where, value, f"the module {type(target).__name__}")
    return target
  if target is None:
    if value is not None:
      raise _mismatch(where, value, "None")
    return None
  if isinstance(target, (np.ndarray, np.generic, *types.arrays)):
    return _restore_array(value, target, where)
  if isinstance(target, bool) or isinstance(target, (int, float, str)):
    kind = type(target)
    if kind is float and isinstance(value, np.ndarray) and value.shape == () \
        and value.dtype == np.float64:   # a non-finite float is stored as an array
      return float(value)
    if type(value) is not kind:
      raise _mismatch(where, value, _a(kind.__name__))
    return value
  if isinstance(target, tuple) and hasattr(target, "_fields"):
    name = type(target).__name__
    if not (isinstance(value, Node) and value.tag == "namedtuple"):
      raise _mismatch(where, value, _a(name))
    if _short(value.name) != name or len(value.items) != len(target):
      raise CheckpointError(f"{_where(where)}: {_a(_short(value.name))} of {len(value.items)} "
                            f"fields in the file where {_a(name)} of {len(target)} belongs")
    fields = cast(Any, target)._fields
    return type(target)(*[restore_checkpoint(v, t, f"{where}.{field}")
                          for v, t, field in zip(value.items, target, fields)])
  if isinstance(target, (list, tuple)):
    kind = type(target)
    if type(value) is not kind:
      raise _mismatch(where, value, _a(kind.__name__))
    if len(value) != len(target):
      raise CheckpointError(f"{_where(where)}: a {kind.__name__} of {len(value)} items in the "
                            f"file, {len(target)} expected")
    return kind(restore_checkpoint(v, t, f"{where}[{i}]")
                for i, (v, t) in enumerate(zip(value, target)))
  if isinstance(target, dict):
    if not isinstance(value, dict):
      raise _mismatch(where, value, "a dict")
    if set(value) != set(target):
      missing = sorted(map(repr, set(target) - set(value)))[:3]
      extra = sorted(map(repr, set(value) - set(target)))[:3]
      raise CheckpointError(f"{_where(where)}: a dict whose keys differ from the expected ones"
                            + (f" (missing {', '.join(missing)})" if missing else "")
                            + (f" (unexpected {', '.join(extra)})" if extra else ""))
    return {k: restore_checkpoint(value[k], t, f"{where}[{k!r}]") for k, t in target.items()}
  raise CheckpointError(f"{_where(where)}: cannot restore into a {type(target).__name__}")


def load_checkpoint(path: str | os.PathLike, target: Any) -> Any:
  """Reads a checkpoint written by :func:`save_checkpoint` into ``target``.

  See :func:`read_checkpoint` and :func:`restore_checkpoint`.

  Args:
    path: the file.
    target: the expected tree: what the run builds from its config (the same
      structure, shapes and dtypes; its values are not used). Plain data such as
      metric rows can be left to the file by :func:`read_checkpoint` instead.

  Raises:
    CheckpointError: the file is unreadable, of another format, or differs from
      ``target``; the message names the file and the place.
  """
  raw = read_checkpoint(path)
  try:
    return restore_checkpoint(raw, target)
  except CheckpointError as e:
    raise CheckpointError(f"checkpoint {path} is unusable: {e}") from None


def load_checkpoint_entries(path: str | os.PathLike, names: tuple[str, ...]) -> dict[str, Any]:
  """Top-level entries ``names`` of a checkpoint holding a dict, as plain data.

  What a finished run's rerun needs (its ``round`` and metric ``rows``, which hold
  plain values only): read with :func:`read_checkpoint`, so no model, no JAX and no
  type of the file's choosing is built.

  Raises:
    CheckpointError: the file is unreadable, not a dict, or lacks one of ``names``;
      the message names the file.
  """
  tree = read_checkpoint(path)
  if not isinstance(tree, dict):
    raise CheckpointError(f"checkpoint {path} is unusable: it does not hold a dict")
  missing = [n for n in names if n not in tree]
  if missing:
    raise CheckpointError(f"checkpoint {path} is unusable: it has no entry {missing[0]!r}")
  return {n: tree[n] for n in names}
