"""Downloading the paper-scale data sets: checked, resumable, atomic (``neural data fetch``).

MNIST, CIFAR-10 and CINIC-10 are not embedded. :func:`fetch_dataset` puts the files
that :func:`neural.load_dataset` reads into a directory, with the standard library
only (``urllib``):

- every file is checked against its published size and checksum before it gets its
  name (SHA-256 where one is published, see :data:`DOWNLOADS`);
- a cut download resumes where it stopped (an HTTP ``Range`` request from the end of
  ``NAME.part``; a server that ignores it sends the whole file again);
- files appear atomically: a download goes to ``NAME.part`` and is renamed once
  checked; an archive is unpacked into a temporary directory, checked (the number
  of files the authors publish), then renamed into place, and deleted;
- files already in place are checked, not fetched again.

The sources and where each checksum comes from are in ``docs/neural_data.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import hashlib
import http.client
import os
from pathlib import Path
import re
import shutil
import stat
import tarfile
import tempfile
from typing import Any
from typing import NamedTuple
import urllib.error
import urllib.parse
import urllib.request

from neural._src.datasets.data import CIFAR10_DIR
from neural._src.datasets.data import CIFAR10_TEST_FILE
from neural._src.datasets.data import CIFAR10_TRAIN_FILES
from neural._src.datasets.data import CINIC10_CLASSES
from neural._src.datasets.data import MNIST_FILES
from neural._src.datasets.data import DataError

CHUNK = 1 << 20   # bytes read per step of a download


class Remote(NamedTuple):
  """One file of a data set on a server.

  Attributes:
    name: the file name, under the data set's base URL and in the target directory.
    size: its size in bytes, as published.
    digest: its published checksum, hex.
    algorithm: the checksum's algorithm ("sha256"; "md5" where no SHA-256 is published).
  """

  name: str
  size: int
  digest: str
  algorithm: str = "sha256"


@dataclasses.dataclass(frozen=True)
class Download:
  """What ``neural data fetch NAME`` fetches.

  Attributes:
    base_url: the directory URL the files are under (``--base-url`` replaces it).
    files: the files.
    unpack: for an archive, the folder it unpacks to in the target directory, and
      the folders under it that must hold ``count`` files each; ``None``: the files
      are used as they are.
  """

  base_url: str
  files: tuple[Remote, ...]
  unpack: tuple[str, tuple[tuple[str, int], ...]] | None = None


# MNIST: the IDX files (read gzipped) from the mirror TensorFlow Datasets uses, with the
# sizes and SHA-256 sums of its url_checksums/mnist.txt (yann.lecun.com refuses scripts).
# CIFAR-10: the authors' python archive; SHA-256 as Keras and torchvision check it (the
# authors publish the MD5 c58f30108f718f92721af3b95e74349a). CINIC-10: the authors'
# archive on Edinburgh DataShare; no SHA-256 is published, so its size and the MD5 that
# DataShare records (and the common loaders check) are checked, then the 9,000 images per
# class in train/ and test/ that the authors' README states.
DOWNLOADS: dict[str, Download] = {
    "mnist": Download("https://storage.googleapis.com/cvdf-datasets/mnist", tuple(
        Remote(f"{MNIST_FILES[key]}.gz", size, digest) for key, size, digest in (
            ("x_train", 9912422,
             "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
            ("y_train", 28881,
             "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
            ("x_test", 1648877,
             "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
            ("y_test", 4542,
             "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6")))),
    "cifar10": Download(
        "https://www.cs.toronto.edu/~kriz",
        (Remote("cifar-10-python.tar.gz", 170498071,
                "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"),),
        unpack=(CIFAR10_DIR, tuple((name, 0) for name in CIFAR10_TRAIN_FILES
                                   + (CIFAR10_TEST_FILE,)))),
    "cinic10": Download(
        "https://datashare.ed.ac.uk/bitstream/handle/10283/3192",
        (Remote("CINIC-10.tar.gz", 687544992, "6ee4d0c996905fe93221de577967a372", "md5"),),
        unpack=("CINIC-10", tuple((f"{split}/{c}", 9000) for split in ("train", "test")
                                  for c in CINIC10_CLASSES))),
}


def _digest(path: Path, algorithm: str) -> str:
  h = hashlib.new(algorithm)
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(CHUNK), b""):
      h.update(block)
  return h.hexdigest()


def _size(path: Path) -> int:
  return path.stat().st_size if path.is_file() else 0


def _check(path: Path, remote: Remote) -> str | None:
  """What is wrong with ``path`` as ``remote`` (size, then checksum), or ``None``."""
  size = path.stat().st_size
  if size != remote.size:
    return f"{size} bytes, expected {remote.size}"
  found = _digest(path, remote.algorithm)
  if found != remote.digest:
    return f"{remote.algorithm} {found}, expected {remote.digest}"
  return None


def _open_part(part: Path, have: int) -> Any:
  """``NAME.part`` opened for writing at byte ``have`` (0: emptied), never through a link.

  ``O_NOFOLLOW`` refuses a symbolic link; the opened file is then checked before a
  byte is written or truncated: a regular file with one link (a hard link to a file
  elsewhere would be overwritten there).
  """
  flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
  try:
    fd = os.open(part, flags, 0o666)
  except OSError as e:
    raise DataError(f"{part}: cannot write the partial download ({e.strerror or e}); remove "
                    f"it if it is a link, and run the command again") from None
  try:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
      what = ("not a regular file" if not stat.S_ISREG(info.st_mode) else
              f"a file of {info.st_nlink} hard links")
      raise DataError(f"{part}: expected a partial download (a regular file) or nothing, "
                      f"found {what}; remove it and run the command again")
    if have:
      os.lseek(fd, 0, os.SEEK_END)
    else:
      os.ftruncate(fd, 0)
    return os.fdopen(fd, "ab")
  except BaseException:
    os.close(fd)
    raise


def _check_range(header: str | None, have: int, remote: Remote, url: str) -> None:
  """A 206 answer must send the bytes asked for: ``Content-Range: bytes HAVE-END/SIZE``."""
  if header is None:   # not sent (RFC 9110 requires it): nothing to check it against
    return
  match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", header)
  if not match or int(match.group(1)) != have or (
      match.group(3) != "*" and int(match.group(3)) != remote.size):
    raise DataError(f"{url}: the server answered 206 with Content-Range {header!r}, not the "
                    f"bytes {have}- of {remote.size} asked for; try again later, or "
                    f"--base-url with a mirror")


def fetch_file(url: str, remote: Remote, target: str | os.PathLike,
               progress: bool = False, timeout: float = 60.0) -> Path:
  """Downloads ``url`` to ``target`` (a file path): resumed, checked, then renamed.

  Bytes go to ``target + ".part"``; if that exists, the download resumes from its
  end with an HTTP ``Range`` request (a server that answers 200 instead of 206 sends
  the whole file, which replaces it). The finished file must have ``remote``'s size
  and checksum; only then is it renamed to ``target``.

  Returns:
    ``target``.

  Raises:
    DataError: the server fails or stops early (the partial file is kept: the next try
      resumes), a malformed URL, a ``.part`` that is a link or not a file, or a whole
      file whose checksum is not the published one (deleted: the next try starts
      afresh). No more than the published size is ever written.
  """
  from tqdm.auto import tqdm

  target = Path(target)
  part = target.with_name(target.name + ".part")
  if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
    raise DataError(f"{url!r}: not a URL this command can fetch (expected http:// or "
                    f"https://); check --base-url")
  if os.path.lexists(part) and (part.is_symlink() or not part.is_file()):
    raise DataError(f"{part}: expected a partial download (a regular file) or nothing, found "
                    f"{'a link' if part.is_symlink() else 'something else'}; remove it and "
                    f"run the command again")
  have = _size(part)
  if have > remote.size:
    part.unlink()
    have = 0
  if have < remote.size:
    try:
      request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
      with urllib.request.urlopen(request, timeout=timeout) as response:
        if have and response.status != 206:   # the Range was ignored: the whole file again
          have = 0
        if have:
          _check_range(response.headers.get("Content-Range"), have, remote, url)
        with _open_part(part, have) as out, tqdm(
            total=remote.size, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
            desc=remote.name, disable=not progress) as bar:
          written = have
          while written < remote.size:   # never past the published size
            block = response.read(min(CHUNK, remote.size - written))
            if not block:
              break
            out.write(block)
            written += len(block)
            bar.update(len(block))
          out.flush()
          os.fsync(out.fileno())
    except DataError:   # a .part that is a link, a 206 of other bytes: said already
      raise
    except urllib.error.HTTPError as e:
      if e.code == 416 and have:   # asked past the end: the part may be whole; check it
        pass
      else:
        raise DataError(f"{url}: the server answered {e.code} {e.reason}; try again later, "
                        f"or --base-url with a mirror") from None
    except (ValueError, http.client.InvalidURL) as e:   # a malformed URL, an unknown scheme
      reason = " ".join(str(e).split())[:160]
      raise DataError(f"{url!r}: not a URL this command can fetch ({reason}); check "
                      f"--base-url") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
      # HTTPException: a cut chunked body, a bad status line, overlong or too many headers.
      reason = getattr(e, "reason", None) or f"{type(e).__name__}: {e}"
      raise DataError(f"{url}: download failed ({' '.join(str(reason).split())[:200]}); run "
                      f"the command again to resume ({_size(part)} of {remote.size} bytes "
                      f"are in {part})") from None
  if _size(part) < remote.size:
    raise DataError(f"{url}: the server stopped sending at {_size(part)} of {remote.size} "
                    f"bytes; run the command again to resume (they are kept in {part})")
  wrong = _check(part, remote)
  if wrong:
    part.unlink()
    raise DataError(f"{url}: the file is not the published one ({wrong}); deleted it, run "
                    f"the command again to download it afresh")
  os.replace(part, target)
  return target


def _safe_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
  """The archive's members, refusing any that would land outside the target directory."""
  members = archive.getmembers()
  for m in members:
    name = Path(m.name)
    if name.is_absolute() or ".." in name.parts or not (m.isfile() or m.isdir()):
      raise DataError(f"archive member {m.name!r} is not a plain file or folder inside it; "
                      f"nothing was unpacked")
  return members


def _unpack(archive: Path, directory: Path, folder: str,
            counts: Sequence[tuple[str, int]]) -> Path:
  """Unpacks ``archive`` into a temporary folder of ``directory``, checks ``counts``
  (``(path under folder, files it holds; 0: a file that must exist)``), renames
  ``folder`` into place."""
  temp = Path(tempfile.mkdtemp(prefix=f".{folder}.", dir=directory))
  try:
    with tarfile.open(archive, "r:*") as tar:
      members = _safe_members(tar)
      if hasattr(tarfile, "data_filter"):   # Python >= 3.11.4: refuse links, devices, ...
        tar.extractall(temp, members=members, filter="data")
      else:
        tar.extractall(temp, members=members)
    found = temp / folder
    if not found.is_dir():   # an archive of the folder's contents (CINIC-10's)
      found = temp
    for sub, count in counts:
      path = found / sub
      if count == 0 and not path.is_file():
        raise DataError(f"{archive.name} lacks {folder}/{sub}")
      if count and (not path.is_dir() or sum(1 for _ in path.iterdir()) != count):
        have = sum(1 for _ in path.iterdir()) if path.is_dir() else 0
        raise DataError(f"{archive.name}: {folder}/{sub} holds {have} files, the authors "
                        f"publish {count}")
    final = directory / folder
    os.replace(found, final)
    return final
  finally:
    shutil.rmtree(temp, ignore_errors=True)


def fetch_dataset(name: str, directory: str | os.PathLike, base_url: str | None = None,
                  progress: bool = False, downloads: dict[str, Download] | None = None
                  ) -> list[Path]:
  """Downloads data set ``name`` into ``directory`` for ``load_dataset(name, directory)``.

  Args:
    name: "mnist", "cifar10" or "cinic10" (the keys of :data:`DOWNLOADS`).
    directory: where the files go (created).
    base_url: the URL the files are under, instead of the authors' site (a mirror).
    progress: a progress bar per file.
    downloads: the table to use instead of :data:`DOWNLOADS` (tests).

  Returns:
    The paths of the data set's files or folder in ``directory``.

  Raises:
    DataError: an unknown name, a server error, a file that is not the published one,
      or an archive that does not unpack to the published files.
  """
  table = DOWNLOADS if downloads is None else downloads
  if name not in table:
    raise DataError(f"name: expected one of {', '.join(table)}, got {name!r}")
  spec = table[name]
  directory = Path(directory)
  if directory.exists() and not directory.is_dir():
    raise DataError(f"--dir: {directory} is a file; expected a directory")
  directory.mkdir(parents=True, exist_ok=True)
  if spec.unpack is not None and (directory / spec.unpack[0]).is_dir():
    return [directory / spec.unpack[0]]   # unpacked before (and checked then)
  if base_url is not None and (not isinstance(base_url, str) or not base_url.strip()):
    raise DataError(f"--base-url: expected a URL (http:// or https://), got {base_url!r}")
  base = (spec.base_url if base_url is None else base_url).rstrip("/")
  paths = []
  for remote in spec.files:
    target = directory / remote.name
    if target.exists():
      wrong = _check(target, remote)
      if wrong:
        raise DataError(f"{target} is not the published file ({wrong}); delete it and run "
                        f"the command again")
    else:
      fetch_file(f"{base}/{remote.name}", remote, target, progress=progress)
    paths.append(target)
  if spec.unpack is None:
    return paths
  folder, counts = spec.unpack
  unpacked = [_unpack(path, directory, folder, counts) for path in paths]
  for path in paths:
    path.unlink()
  return unpacked
