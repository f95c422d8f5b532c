"""Atomic output files: a temporary file in the target's directory, then a rename.

Every file the toolkit writes (arrays, tables, figures, reports, checkpoints) goes
through :func:`atomic_write`, so a killed or failed command leaves the previous
file as it was (or none), never a half-written one; a command that writes several
files writes them as one set with :func:`write_files` (all of them or none).
:func:`check_output` checks an output before the command does any work. Reading is
in ``fedkrr._src.io.reading`` (bounded, header first).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import errno
import io
import json
import os
from pathlib import Path
import re
import stat
import sys
import tempfile
from typing import Any

import numpy as np

from fedkrr._src.io import interrupts
from fedkrr._src.io import reading


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


class WriteError(OSError):
  """An output that cannot be written, or cannot be written there (the message names it)."""


def _write_reason(e: OSError) -> str:
  return e.strerror or " ".join(str(e).split()) or type(e).__name__


def _stage(path: Path, data: bytes) -> str:
  """Writes ``data`` to a new temporary file beside ``path`` (synced); returns its name."""
  mode = _mode(path)
  try:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  except OSError as e:
    raise WriteError(f"cannot write {path}: {_write_reason(e)}") from None
  interrupts.track_temp(tmp)
  try:
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
  except BaseException as e:
    Path(tmp).unlink(missing_ok=True)
    interrupts.untrack_temp(tmp)
    if isinstance(e, OSError):
      raise WriteError(f"cannot write {path}: {_write_reason(e)}") from None
    raise
  return tmp


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
  """Writes ``data`` to ``path`` atomically (text is UTF-8); returns the path.

  The file gets the permissions of the file it replaces, or of a new file
  (``0o666`` less the umask), not the private mode of a temporary file.

  Raises:
    WriteError: an ``OSError`` naming the file: the directory does not exist, is not
      writable, or the disk is full (the target is untouched).
  """
  return write_files({path: data})[0]


def write_files(files: Mapping[str | os.PathLike, bytes | str]) -> list[Path]:
  """Writes several files as one set: all of them, or (on an error) none of them.

  Every file is first written to a temporary file beside it (the step that can
  fail: a full disk, a read-only directory); only when all are written are they
  renamed into place, in one section that Ctrl-C does not cut
  (``fedkrr._src.io.interrupts.commit``). On a failure the temporary files are
  removed and the old files stay as they were. Before the renames the list of them is
  written beside the first file (a journal), so that a process killed between two
  renames (``kill -9``, a power cut) leaves a set the next :func:`write_files` in that
  folder, or :func:`complete_writes`, rolls forward to the new files.

  Args:
    files: the contents (text is UTF-8) by path.

  Returns:
    The paths, in the order given.

  Raises:
    WriteError: an ``OSError`` naming the file that could not be written.
  """
  items = [(Path(p), d.encode("utf-8") if isinstance(d, str) else bytes(d))
           for p, d in files.items()]
  for folder in dict.fromkeys(path.parent for path, _ in items):
    complete_writes(folder)   # a set an earlier process was killed in the middle of
  staged: list[tuple[str, Path]] = []
  journal: Path | None = None
  try:
    for path, data in items:
      staged.append((_stage(path, data), path))
    if len(staged) > 1:   # the renames' list first: a kill between renames rolls forward
      journal = _journal(items[0][0])
      body = json.dumps({"pid": os.getpid(),
                         "renames": [[tmp, str(path)] for tmp, path in staged]})
      os.replace(_stage(journal, body.encode("utf-8")), journal)
    with interrupts.commit():
      for tmp, path in staged:
        try:
          os.replace(tmp, path)
        except OSError as e:
          raise WriteError(f"cannot write {path}: {_write_reason(e)}") from None
        interrupts.untrack_temp(tmp)
      if journal is not None:
        journal.unlink(missing_ok=True)
  finally:
    for tmp, _ in staged:
      if os.path.lexists(tmp):
        Path(tmp).unlink(missing_ok=True)
      interrupts.untrack_temp(tmp)
    if journal is not None and journal.exists() and not any(
        os.path.lexists(tmp) for tmp, _ in staged):
      journal.unlink(missing_ok=True)   # an error before or during the renames: no set left
  return [path for path, _ in items]


_JOURNAL = ".fedkrr-set.json"   # ``.<first file><_JOURNAL>``: the renames of a set of files


def _journal(first: Path) -> Path:
  return first.parent / f".{first.name}{_JOURNAL}"


def _renames(journal: Path) -> list[tuple[Path, Path]] | None:
  """The (staged file, target) pairs a journal lists, or None if it is not one this
  module wrote: every staged file beside its target and named as :func:`_stage` names
  it (``.<target>.<random>.tmp``), so that a journal cannot move any other file."""
  if journal.is_symlink():
    return None
  try:
    data = reading.read_json(journal, "set journal", limit=1 << 20)
    pairs = [(Path(tmp), Path(target)) for tmp, target in data["renames"]]
    owner = int(data.get("pid", 0))
  except (ValueError, KeyError, TypeError):   # ReadError is a ValueError
    return None
  if owner > 0 and owner != os.getpid() and _alive(owner):
    return None   # its writer is still at work: its own renames end the set
  for tmp, target in pairs:
    if (tmp.parent != journal.parent or target.parent != journal.parent
        or not tmp.name.startswith(f".{target.name}.") or not tmp.name.endswith(".tmp")):
      return None
  return pairs


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except OSError:   # another user's process: alive
    return True
  return True


def complete_writes(folder: str | os.PathLike) -> list[Path]:
  """Completes every set of files :func:`write_files` began in ``folder`` and did not end
  (a process killed between its renames): the staged files still there are renamed into
  place, so the set is the new one throughout, never a mix. Called by every
  :func:`write_files` in that folder first; returns the files completed."""
  done: list[Path] = []
  try:
    journals = sorted(Path(folder).glob(f".*{_JOURNAL}"))
  except OSError:
    return done
  for journal in journals:
    pairs = _renames(journal)
    if pairs is None:
      continue   # not ours: left alone
    with interrupts.commit():
      for tmp, target in pairs:
        if os.path.lexists(tmp) and not os.path.islink(tmp):
          os.replace(tmp, target)
          done.append(target)
      journal.unlink(missing_ok=True)
  return done


def append_file(path: str | os.PathLike, data: bytes | str) -> Path:
  """Appends ``data`` to ``path`` (created if missing), flushed and synced; returns the path.

  The one way a file is appended to (a run's ``metrics.jsonl``): never through a link.
  The file is opened with ``O_NOFOLLOW`` (a symbolic link is refused by the kernel, not
  by a check that a swap could race) and the opened descriptor is checked before a byte
  is written: a regular file, one link (a hard link would write into the other name's
  file, outside the directory), owned by this user.

  Raises:
    WriteError: the file is a link or not a regular file of this user's, or cannot be
      written (the message names it).
  """
  path = Path(path)
  blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
  flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW \
      | getattr(os, "O_NONBLOCK", 0)
  try:
    fd = os.open(path, flags, _mode(path) if not os.path.lexists(path) else 0o666)
  except OSError as e:
    if e.errno == errno.ELOOP:
      raise WriteError(f"cannot write {path}: it is a symbolic link, which is never "
                       f"written through; move it away") from None
    raise WriteError(f"cannot write {path}: {_write_reason(e)}") from None
  try:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
      raise WriteError(f"cannot write {path}: not a regular file")
    if info.st_nlink != 1:
      raise WriteError(f"cannot write {path}: it has {info.st_nlink} hard links, and a "
                       f"write would change the other names' file too; move it away")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
      raise WriteError(f"cannot write {path}: it belongs to another user (uid "
                       f"{info.st_uid}); move it away")
    view = memoryview(blob)
    while view:
      written = os.write(fd, view)
      view = view[written:]
    os.fsync(fd)
  except OSError as e:
    if isinstance(e, WriteError):
      raise
    raise WriteError(f"cannot write {path}: {_write_reason(e)}") from None
  finally:
    os.close(fd)
  return path


STAGING = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp")
"""The names :func:`atomic_write` stages a file ``NAME`` under: ``.NAME.XXXXXXXX.tmp``."""


def remove_staging(directory: str | os.PathLike, names: Sequence[str]) -> list[Path]:
  """Removes the staging files of ``names`` that a killed process left in ``directory``.

  Call it only where no other process can be writing those files (a run directory
  under its lock): a SIGKILL between staging and the rename leaves a hidden
  ``.NAME.XXXXXXXX.tmp`` (as large as the file) that nothing else removes. Only
  regular files (not links) named so are removed.

  Returns:
    The files removed.
  """
  removed = []
  try:
    entries = list(os.scandir(directory))
  except OSError:
    return removed
  for entry in entries:
    match = STAGING.fullmatch(entry.name)
    if match and match.group("name") in names and entry.is_file(follow_symlinks=False):
      try:
        os.unlink(entry.path)
        removed.append(Path(entry.path))
      except OSError:
        pass
  return removed


def stdout_failure() -> str | None:
  """Flushes the standard output; ``None`` if that works, else why it cannot be written.

  A command whose output goes to a full disk, ``/dev/full`` or a closed pipe then says
  so in one line naming the standard output (not a bare ``[Errno 28]``). What is left
  of the output is sent to ``/dev/null``, so that the exit does not fail once more.
  """
  try:
    sys.stdout.flush()
    return None
  except (OSError, ValueError) as e:
    try:
      devnull = os.open(os.devnull, os.O_WRONLY)
      os.dup2(devnull, sys.stdout.fileno())
      os.close(devnull)
    except (OSError, ValueError, AttributeError):
      pass
    return (e.strerror if isinstance(e, OSError) else None) or str(e) or type(e).__name__


def printing_failed(e: BaseException) -> bool:
  """Whether ``e`` is what a ``print`` to a full disk or a closed pipe raises: a plain
  ``OSError`` (or ``BrokenPipeError``) of ENOSPC, EPIPE or EIO naming no file. The files
  the toolkit writes fail with a :class:`WriteError` naming them instead."""
  if type(e) not in (OSError, BrokenPipeError) or getattr(e, "filename", None) is not None:
    return False
  if getattr(e, "errno", None) in (errno.ENOSPC, errno.EPIPE, errno.EIO):
    stdout_failure()   # what is left of the output goes to /dev/null
    return True
  return False


def figure_bytes(fig: Any, path: str | os.PathLike, **kwargs: Any) -> bytes:
  """``fig.savefig`` into memory, in the format of ``path``'s suffix (for :func:`write_files`)."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
  return buffer.getvalue()


# ---------------------------------------------------------------------------
# Outputs checked before any work


def _first_existing(path: Path) -> tuple[Path, list[str]]:
  """The nearest ancestor of ``path`` (itself included) that exists, and the parts below it."""
  missing: list[str] = []
  current = path
  while not os.path.lexists(current):
    if current.parent == current:
      break
    missing.insert(0, current.name)
    current = current.parent
  return current, missing


def check_output(path: str | os.PathLike, flag: str, *, directory: bool = False,
                 inputs: Sequence[str | os.PathLike] = (), create: bool = True) -> None:
  """Checks, before any work, that ``path`` can be written as a file (or a directory).

  The path must not be (or lie under) a regular file, a dangling or looping
  symbolic link, or an unwritable directory, and a file output must not be one
  of ``inputs``. Missing directories are fine when the nearest existing one is
  writable (the command creates them).

  Args:
    path: the output.
    flag: how error messages name it (``--out``, ``workdir``).
    directory: the output is a directory (else a file).
    inputs: files the command reads, which the output must not replace.
    create: missing directories above the output are fine (the command makes them);
      else the output's directory must exist.

  Raises:
    WriteError: an ``OSError`` naming ``flag``, the path and what is wrong.
  """
  if not os.fspath(path):
    raise WriteError(f"{flag}: expected a {'directory' if directory else 'file'} name, got ''")
  path = Path(os.path.abspath(os.fspath(path)))
  shown = os.fspath(path)
  if os.path.islink(path) and not os.path.exists(path):
    try:
      target = os.readlink(path)
    except OSError:
      target = "?"
    try:
      os.stat(path)
      what = "a dangling symbolic link"
    except OSError as e:
      what = ("a symbolic link loop" if e.errno == errno.ELOOP
              else f"a dangling symbolic link (to {target})")
    raise WriteError(f"{flag}: {shown} is {what}; remove it or name another path")
  existing, missing = _first_existing(path)
  if missing and not existing.is_dir():
    kind = "a regular file" if existing.is_file() else "not a directory"
    raise WriteError(f"{flag}: {shown} lies under {existing}, which is {kind}")
  if not create and len(missing) > 1:
    raise WriteError(f"{flag}: directory {path.parent} does not exist")
  if not missing:
    if directory and not path.is_dir():
      raise WriteError(f"{flag}: {shown} exists and is not a directory")
    if not directory and path.is_dir():
      raise WriteError(f"{flag}: expected a file name, got the directory {shown}")
    if not directory and not path.is_file():
      raise WriteError(f"{flag}: {shown} exists and is not a regular file")
  writable_dir = existing if missing else (path if directory else path.parent)
  if not os.access(writable_dir, os.W_OK | os.X_OK):
    raise WriteError(f"{flag}: cannot write in {writable_dir} (permission denied)")
  if not directory:
    for source in inputs:
      source = os.fspath(source)
      if os.path.exists(source) and os.path.exists(path) and os.path.samefile(source, path):
        raise WriteError(f"{flag}: {shown} is the input {source}; writing it would overwrite "
                         f"the input")


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
  return atomic_write(path, figure_bytes(fig, path, **kwargs))
