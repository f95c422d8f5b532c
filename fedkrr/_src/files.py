"""Atomic output files: a temporary file in the target's directory, then a rename.

Every file the toolkit writes (arrays, tables, figures, reports, checkpoints) goes
through :func:`atomic_write`, so a killed or failed command leaves the previous
file as it was (or none), never a half-written one.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
import stat
import tempfile
from typing import Any
import zipfile

import numpy as np


def _umask() -> int:
  try:   # Linux: read it without changing it
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError):
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def _mode(path: Path) -> int:
  """An existing file's permissions, else those ``open(path, "w")`` would give."""
  try:
    return stat.S_IMODE(path.stat().st_mode)
  except FileNotFoundError:
    return 0o666 & ~_umask()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
  """Writes ``data`` to ``path`` atomically (text is UTF-8); returns the path.

  The file gets the permissions of the file it replaces, or of a new file
  (``0o666`` less the umask), not the private mode of a temporary file.

  Raises:
    OSError: the directory does not exist or is not writable (the target is untouched).
  """
  path = Path(path)
  if isinstance(data, str):
    data = data.encode("utf-8")
  mode = _mode(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise
  return path


class NpzError(ValueError):
  """A file that :func:`read_npz` does not read (the message says why)."""


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """The arrays of an ``.npz`` archive, read with ``allow_pickle=False``: never runs code.

  Raises:
    NpzError: not an ``.npz`` archive (a text or ``.npy`` file, a truncated one), or one
      holding Python objects, which are never loaded.
  """
  try:
    blob = Path(path).read_bytes()
    if not zipfile.is_zipfile(io.BytesIO(blob)):
      raise NpzError("not an .npz archive (np.savez writes one; truncated, or another format)")
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
      return {k: data[k] for k in data.files}
  except NpzError:
    raise
  except ValueError as e:
    if "pickle" in str(e):
      raise NpzError("it holds Python objects, which are never loaded") from None
    raise NpzError(f"not a readable .npz archive ({' '.join(str(e).split())[:120]})") from None
  except (OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
    raise NpzError(f"not a readable .npz archive ({type(e).__name__}: "
                   f"{' '.join(str(e).split())[:120]})") from None


def savez_bytes(**arrays: Any) -> bytes:
  """The ``.npz`` archive of ``arrays`` as bytes (``np.savez`` without touching a file)."""
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  return buffer.getvalue()


def atomic_savez(path: str | os.PathLike, **arrays: Any) -> Path:
  """``np.savez`` to exactly ``path`` (no ``.npz`` appended), atomically."""
  return atomic_write(path, savez_bytes(**arrays))


def atomic_savefig(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
  """``fig.savefig`` (format from the suffix) to ``path``, atomically."""
  path = Path(path)
  buffer = io.BytesIO()
  fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", **kwargs)
  return atomic_write(path, buffer.getvalue())
