"""Bounded reading: every file the toolkits read goes through here, header first.

A file named on a command line or found in a run directory may be anything: a
FIFO that blocks, a device that never ends, a JSON document nested 5,000 levels
deep, an ``.npz`` member whose header declares 10^12 rows or that inflates a
megabyte into a gigabyte. The readers here open regular files only (without
blocking on a FIFO), check every size they are told before reading the data it
describes (against the caller's limit and the memory the machine has free), and
turn every failure into a :class:`ReadError`: one line naming the file and the
field (an array of an archive, a key of a document).

* :func:`open_regular`, :func:`read_bytes`: a regular file, at most ``limit`` bytes.
* :func:`parse_json`, :func:`read_json`: JSON with its nesting bounded and only
  finite numbers (``NaN``, ``Infinity`` and ``1e999`` are refused).
* :func:`read_npz`: an ``.npz`` archive read member by member: the ``.npy`` header
  of each (shape, dtype) is read and checked (no Python objects, declared size =
  stored size, a caller's ``check`` of all headers, the total against free memory)
  before any array data is read; the inflated size of a member is bounded by the
  size its header declares, and a declared size is refused where the bytes stored
  for it could not hold it (:func:`inflation_bound`). Every archive error (a damaged
  zip directory, a bad stream) is the one line "the archive is unusable".
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import errno
import fcntl
import json
import math
import os
import re
import stat
from typing import Any
from typing import BinaryIO
from typing import cast
import zipfile
import zlib

import numpy as np

MAX_JSON_BYTES = 64 * 2**20
MAX_JSON_DEPTH = 64
MAX_NPZ_MEMBERS = 100_000
MAX_NPY_HEADER = 100_000
# The most bytes deflate inflates one byte into (RFC 1951: a 258-byte match in at most
# 2 bits, 1032:1 over a stream), with room for a stream's header and end: a member or a
# .gz file declaring more than this many times its compressed size cannot hold it.
MAX_INFLATION = 1032


def inflation_bound(compressed: int) -> int:
  """The most bytes a deflate (zip, gzip) stream of ``compressed`` bytes inflates to."""
  return MAX_INFLATION * compressed + 2**16


class ReadError(ValueError):
  """A file that cannot be read as what it should be (one line: the file, the field, why)."""


class NpzError(ReadError):
  """A file that :func:`read_npz` does not read (the message says why)."""


class DiskReadError(NpzError):
  """The disk failed while a file was read (EIO and the like): the file itself may be
  intact, and reading it again may work; never a reason to delete it."""


def available_memory() -> int:
  """Bytes of host memory free for new data (``MemAvailable``, else the physical memory)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError):
    return 2**34


def format_size(n: float) -> str:
  """``n`` bytes in the largest binary unit that keeps it >= 1 (e.g. "7.5 GiB")."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
    if n < 1024 or unit == "PiB":
      return f"{n:.3g} {unit}"
    n /= 1024
  return f"{n:.3g} PiB"


def _kind(mode: int) -> str:
  for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                     (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                     (stat.S_ISSOCK, "a socket")):
    if test(mode):
      return name
  return "not a regular file"


def _os_reason(e: OSError) -> str:
  if e.errno == errno.ENOENT:
    return "no such file"
  if e.errno == errno.ELOOP:
    return "a symbolic link loop"
  if e.errno in (errno.EACCES, errno.EPERM):
    return "permission denied"
  if e.errno == errno.EISDIR:
    return "a directory"
  return e.strerror or type(e).__name__


def open_regular(path: str | os.PathLike, what: str = "file") -> BinaryIO:
  """Opens a regular file for binary reading; never blocks on a FIFO or reads a device.

  Raises:
    ReadError: missing, unreadable, or not a regular file (a directory, FIFO, device).
  """
  name = os.fspath(path)
  try:
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
  except OSError as e:
    raise ReadError(f"{name}: cannot read the {what} ({_os_reason(e)})") from None
  try:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
      raise ReadError(f"{name}: cannot read the {what} ({_kind(mode)}, not a regular file)")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")
  except BaseException:
    os.close(fd)
    raise


def read_bytes(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
  """The bytes of a regular file of at most ``limit`` bytes (checked before reading).

  Raises:
    ReadError: not a regular file, unreadable, or larger than ``limit``.
  """
  name = os.fspath(path)
  with open_regular(name, what) as f:
    size = os.fstat(f.fileno()).st_size
    if size > limit:
      raise ReadError(f"{name}: the {what} has {format_size(size)}, more than the "
                      f"{format_size(limit)} it may have")
    try:
      data = f.read(limit + 1)
    except OSError as e:
      raise ReadError(f"{name}: cannot read the {what} ({_os_reason(e)})") from None
  if len(data) > limit:
    raise ReadError(f"{name}: the {what} grew past {format_size(limit)} while it was read")
  return data


# ---------------------------------------------------------------------------
# JSON

_JSON_TOKENS = re.compile(r'\\.|["\[\]{}]', re.S)


def json_depth(text: str, stop: int | None = None) -> int:
  """The deepest nesting of arrays and objects in JSON ``text`` (strings skipped).

  Scans without parsing (no recursion); with ``stop``, returns as soon as the
  depth exceeds it.
  """
  if text.count("[") + text.count("{") <= (stop if stop is not None else -1):
    return text.count("[") + text.count("{")
  depth = deepest = 0
  in_string = False
  for m in _JSON_TOKENS.finditer(text):
    token = m.group()
    if in_string:
      in_string = token != '"'
    elif token == '"':
      in_string = True
    elif token in "[{":
      depth += 1
      if depth > deepest:
        deepest = depth
        if stop is not None and deepest > stop:
          return deepest
    elif token in "]}":
      depth -= 1
  return deepest


def _no_constant(name: str) -> Any:
  raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
  value = float(text)
  if not math.isfinite(value):
    raise ValueError(f"{text} is not a finite number")
  return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """An object's members; a key given twice is an error (JSON leaves it to the reader, and
  Python's "the last wins" would drop a value without a word)."""
  out = dict(pairs)
  if len(out) != len(pairs):
    seen: set[str] = set()
    key = next(k for k, _ in pairs if k in seen or seen.add(k))
    shown = repr(key) if len(repr(key)) <= 40 else repr(key)[:37] + "..."
    raise ValueError(f"the key {shown} is given twice in one object")
  return out


def parse_json(text: str | bytes, where: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
  """JSON ``text`` parsed with its nesting bounded and finite numbers only.

  Args:
    text: the document (bytes are decoded as UTF-8).
    where: what error messages name (a file, a flag, a field).
    max_depth: the deepest nesting of arrays and objects allowed.

  Raises:
    ReadError: not UTF-8, nested deeper than ``max_depth``, not valid JSON, a
      number that is not finite (``NaN``, ``Infinity``, ``1e999``), or a key given
      twice in one object.
  """
  if isinstance(text, bytes):
    try:
      text = text.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ReadError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  depth = json_depth(text, stop=max_depth)
  if depth > max_depth:
    raise ReadError(f"{where}: JSON nested more than {max_depth} levels deep")
  try:
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                      object_pairs_hook=_unique_keys)
  except json.JSONDecodeError as e:
    raise ReadError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column "
                    f"{e.colno})") from None
  except (ValueError, RecursionError) as e:   # a non-finite number; an integer too long
    raise ReadError(f"{where}: not valid JSON ({' '.join(str(e).split())[:100]})") from None


def read_json(path: str | os.PathLike, what: str = "JSON file", *,
              limit: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
  """A JSON file: at most ``limit`` bytes, nesting bounded, finite numbers only.

  Raises:
    ReadError: see :func:`read_bytes` and :func:`parse_json`; the message names the file.
  """
  name = os.fspath(path)
  return parse_json(read_bytes(name, limit, what), name, max_depth=max_depth)


class _NotJson:
  def __repr__(self) -> str:
    return "NOT_JSON"


NOT_JSON: Any = _NotJson()   # a line of a JSON Lines file that does not parse


def read_json_lines(path: str | os.PathLike, what: str = "JSON Lines file",
                    limit: int | None = None) -> list[tuple[int, Any]]:
  """Each non-blank line of a JSON Lines file as (its number from 1, its value).

  A line that is not JSON (a write cut by a crash) has the value :data:`NOT_JSON`, so
  the caller says what it drops and why. The file is read whole through
  :func:`read_bytes` (at most ``limit`` bytes; default a quarter of the available
  memory), its bytes decoded as UTF-8 with undecodable ones replaced.

  Raises:
    ReadError: see :func:`read_bytes`.
  """
  text = read_bytes(path, available_memory() // 4 if limit is None else limit, what).decode(
      "utf-8", errors="replace")
  lines: list[tuple[int, Any]] = []
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      lines.append((number, parse_json(line, f"line {number}")))
    except ReadError:
      lines.append((number, NOT_JSON))
  return lines


# ---------------------------------------------------------------------------
# .npz archives


class _Counting:
  """A read-only stream that counts the bytes read through it."""

  def __init__(self, stream):
    self.stream = stream
    self.count = 0

  def read(self, n: int = -1) -> bytes:
    data = self.stream.read(n)
    self.count += len(data)
    return data


Headers = Mapping[str, tuple[tuple[int, ...], np.dtype]]


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, name: str
                   ) -> tuple[tuple[int, ...], bool, np.dtype, int]:
  """(shape, fortran order, dtype, header bytes) of one member, its data unread.

  Opening the member is inside the ``try``: a damaged zip directory (a local header
  offset that points elsewhere, overlapping entries) is refused there."""
  try:
    with zf.open(info) as raw:
      stream = _Counting(raw)
      version = np.lib.format.read_magic(stream)   # type: ignore[arg-type]
      if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(
            stream, max_header_size=MAX_NPY_HEADER)   # type: ignore[arg-type]
      elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(
            stream, max_header_size=MAX_NPY_HEADER)   # type: ignore[arg-type]
      else:
        raise NpzError(f"{name}: {key}: .npy format version {version} is not read "
                       f"(1.0 and 2.0 are)")
      count = stream.count
  except NpzError:
    raise
  except (zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
    raise NpzError(f"{name}: {key}: the archive is unusable (a damaged zip directory or "
                   f"stream: {' '.join(str(e).split())[:100]})") from None
  except OSError as e:
    raise DiskReadError(f"{name}: {key}: the disk failed while it was read "
                        f"({e.strerror or e})") from None
  except (ValueError, EOFError, SyntaxError, TypeError, RecursionError, MemoryError) as e:
    raise NpzError(f"{name}: {key}: not a .npy array ({' '.join(str(e).split())[:100]})") \
        from None
  if dtype.hasobject:
    raise NpzError(f"{name}: {key} holds Python objects, which are never loaded")
  return tuple(int(s) for s in shape), bool(fortran), dtype, count


def read_npz(path: str | os.PathLike, *, check: Callable[[Headers], None] | None = None,
             limit: int | None = None, keep: Callable[[str], bool] | None = None
             ) -> dict[str, np.ndarray]:
  """The arrays of an ``.npz`` archive; nothing in it runs code, no size is trusted.

  Every member's ``.npy`` header (shape, dtype) is read first. The archive is
  refused before any array data is read if a member holds Python objects, if its
  header declares another size than the archive stores, if ``check`` rejects the
  headers, or if the arrays together need more than ``limit`` bytes (default:
  the memory free on this machine). A member never inflates past the size it
  declares.

  Args:
    path: the archive.
    check: ``check(headers)``, ``headers[name] = (shape, dtype)`` of every array;
      raises ``ValueError`` (its message is prefixed with the file) to refuse it.
    limit: the most bytes the arrays may hold together.
    keep: ``keep(name)``: whether to read the array ``name`` (default: all). The
      headers of the others are checked all the same, their data never read.

  Raises:
    NpzError: not an ``.npz`` archive (a text or ``.npy`` file, a truncated one),
      a member that is not a plain array, sizes over the bounds, a refusal of
      ``check``; the message names the file and the array.
  """
  name = os.fspath(path)
  try:
    f = open_regular(name, ".npz archive")
  except ReadError as e:
    raise NpzError(str(e)) from None
  with f:
    try:
      zf = zipfile.ZipFile(f)
    except OSError as e:
      raise DiskReadError(f"{name}: the disk failed while it was read ({e.strerror or e})") \
          from None
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
      raise NpzError(f"{name}: not an .npz archive (np.savez writes one; truncated, or another "
                     f"format: {' '.join(str(e).split())[:80]})") from None
    with zf:
      infos = zf.infolist()
      if len(infos) > MAX_NPZ_MEMBERS:
        raise NpzError(f"{name}: {len(infos)} members, more than the {MAX_NPZ_MEMBERS} read")
      members: dict[str, tuple[zipfile.ZipInfo, tuple[int, ...], bool, np.dtype, int]] = {}
      total = packed = 0
      size = os.fstat(f.fileno()).st_size
      for info in infos:
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if info.is_dir() or not info.filename.endswith(".npy"):
          raise NpzError(f"{name}: member {info.filename!r} is not a .npy array")
        if key in members:
          raise NpzError(f"{name}: the array {key!r} is stored twice")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
          raise NpzError(f"{name}: {key}: compression method {info.compress_type} is not read "
                         f"(np.savez and np.savez_compressed use stored and deflated)")
        stored = info.compress_size if info.compress_type == zipfile.ZIP_DEFLATED else \
            info.file_size
        if info.compress_size != stored or info.file_size > inflation_bound(stored):
          raise NpzError(f"{name}: {key}: the archive is unusable: its directory declares "
                         f"{format_size(info.file_size)} from {format_size(info.compress_size)} "
                         f"stored, more than they can hold")
        packed += info.compress_size
        if packed > size:
          raise NpzError(f"{name}: {key}: the archive is unusable: its directory declares "
                         f"{format_size(packed)} stored in a file of {format_size(size)}")
        shape, fortran, dtype, header = _member_header(zf, info, key, name)
        nbytes = math.prod(shape) * dtype.itemsize
        if header + nbytes != info.file_size:
          raise NpzError(f"{name}: {key}: its header declares shape {shape} of {dtype} "
                         f"({format_size(nbytes)}), but the archive stores "
                         f"{format_size(max(info.file_size - header, 0))} for it")
        total += nbytes if keep is None or keep(key) else 0
        members[key] = (info, shape, fortran, dtype, header)
      if check is not None:
        try:
          check({k: (m[1], m[3]) for k, m in members.items()})
        except ReadError as e:
          raise NpzError(str(e)) from None
        except ValueError as e:
          raise NpzError(f"{name}: {' '.join(str(e).split())}") from None
      bound = available_memory() if limit is None else limit
      if total > bound:
        where = "free on this machine" if limit is None else "allowed"
        raise NpzError(f"{name}: its arrays hold {format_size(total)}, more than the "
                       f"{format_size(bound)} {where}")
      return {key: _member_data(zf, name, key, *m) for key, m in members.items()
              if keep is None or keep(key)}


def _member_data(zf: zipfile.ZipFile, name: str, key: str, info: zipfile.ZipInfo,
                 shape: tuple[int, ...], fortran: bool, dtype: np.dtype, header: int
                 ) -> np.ndarray:
  """The data of a member whose header was checked: read into a preallocated array."""
  out = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
  if out.nbytes == 0:
    return out
  view = memoryview(cast(Any, out.reshape(-1, order="A").view(np.uint8)))
  try:
    with zf.open(info) as stream:
      stream.read(header)
      filled = 0
      while filled < len(view):
        chunk = stream.read(min(len(view) - filled, 2**24))
        if not chunk:
          raise NpzError(f"{name}: {key}: the archive ends inside the array (truncated)")
        view[filled:filled + len(chunk)] = chunk
        filled += len(chunk)
      if stream.read(1):   # also checks the CRC
        raise NpzError(f"{name}: {key}: more data than its header declares")
  except NpzError:
    raise
  except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error) as e:
    raise NpzError(f"{name}: {key}: the archive is unusable "
                   f"({' '.join(str(e).split())[:100]})") from None
  except OSError as e:
    raise DiskReadError(f"{name}: {key}: the disk failed while it was read "
                        f"({e.strerror or e})") from None
  return out
