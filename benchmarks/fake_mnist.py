"""Writes synthetic data of MNIST's shape and size: the four IDX files of `neural`'s "mnist".

    python benchmarks/fake_mnist.py DIR          # 60,000 + 10,000 images of 28 x 28, 10 classes

For timing paper-scale configs where the real files cannot be fetched (a GPU machine with
no network): `neural reproduce --figure 6 --scale paper --data-dir DIR` then trains on
exactly MNIST's shapes, sizes and number of classes. The images are class prototypes
(a random 28 x 28 pattern per class) plus noise, so that the networks learn something,
but the accuracies and the verdicts of such a run say nothing about MNIST.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

SIZES = {"train": 60_000, "t10k": 10_000}


def _write(path: Path, magic: int, array: np.ndarray) -> None:
  header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_bytes(header + np.ascontiguousarray(array, np.uint8).tobytes())
  os.replace(tmp, path)


def write_fake_mnist(directory: str | os.PathLike, seed: int = 0) -> None:
  """The four IDX files (raw, not gzipped) in ``directory`` (created)."""
  out = Path(directory)
  out.mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(seed)
  prototypes = rng.uniform(0, 255, (10, 28, 28))
  for split, n in SIZES.items():
    labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
    noise = rng.normal(0.0, 80.0, (n, 28, 28))
    images = np.clip(prototypes[labels] + noise, 0, 255).astype(np.uint8)
    _write(out / f"{split}-images-idx3-ubyte", 0x00000803, images)
    _write(out / f"{split}-labels-idx1-ubyte", 0x00000801, labels)


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("directory", help="where the four files go (created)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  write_fake_mnist(args.directory, args.seed)
  print(f"wrote MNIST-shaped synthetic data to {args.directory}")


if __name__ == "__main__":
  main()
