"""Ctrl-C and ``kill``: every long command stops the same way, at once, nothing half-written.

The command lines of ``fedkrr`` and ``neural`` wrap their ``main`` in
:func:`exits_on_signals`. While it runs, SIGINT and SIGTERM end the process
within a second or two of the signal:

* one line on stderr (``fedkrr: interrupted by SIGINT; ...``), and exit status
  128 + the signal's number: 130 for SIGINT, 143 for SIGTERM;
* nothing half-written: the temporary files of :func:`fedkrr.io.atomic_write` that
  are being written are removed, and a :func:`commit` (renaming a set of files
  into place, appending a round's metrics with its checkpoint) is finished
  before the process ends;
* the process ends by ``os._exit`` after that: no exception is raised into the
  running code (where a finaliser could swallow it, as a ``KeyboardInterrupt``
  in a ``WeakKeyDictionary`` callback is), and no interpreter shutdown runs
  beside XLA's threads.

A signal normally reaches Python code between two bytecodes of the main
thread; a main thread inside a long XLA computation or a C library call does
not run Python code until it returns. A watcher thread, woken through
:func:`signal.set_wakeup_fd`, ends the process in that case too.

A command that starts worker processes registers, with :func:`before_exit`, what
stops them; the signal then ends the workers (each cleanly, by the same rules)
before the command itself, so that nothing is left writing after the exit status.

Outside :func:`exits_on_signals` (library use, tests calling functions) nothing
is installed and Ctrl-C raises ``KeyboardInterrupt`` as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
import contextlib
import functools
import os
import signal
import sys
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WATCHER_DELAY = 0.25   # seconds the main thread gets to act on a signal itself

_commit_lock = threading.RLock()   # held while a commit renames or appends
_exit_lock = threading.Lock()      # the first to take it ends the process
_temps: set[str] = set()           # temporary files being written (removed on exit)
_hooks: list[Callable[[int], None]] = []   # called with the signal before the process ends
_state: dict[str, Any] = {"prog": None, "note": "", "pending": None, "depth": 0, "quiet": False}


def exit_status(signum: int) -> int:
  """The exit status of a command stopped by signal ``signum``: 128 + its number."""
  return 128 + int(signum)


def track_temp(path: str) -> None:
  """Registers a temporary file being written (removed if the process is interrupted)."""
  _temps.add(path)


def untrack_temp(path: str) -> None:
  """Forgets a temporary file (renamed into place or removed)."""
  _temps.discard(path)


@contextlib.contextmanager
def before_exit(hook: Callable[[int], None]) -> Iterator[None]:
  """While inside, a signal that ends the process first calls ``hook(signum)``.

  For a command with worker processes: the hook stops them and waits for them.
  An exception in the hook is ignored (the process ends all the same).
  """
  _hooks.append(hook)
  try:
    yield
  finally:
    _hooks.remove(hook)


def end_process(signum: int) -> None:
  """Ends the process as signal ``signum`` would (after a commit in progress); no return.

  For a thread that finds the process should stop, e.g. a worker whose parent is gone.
  """
  with _commit_lock:
    _exit(signum)


@contextlib.contextmanager
def commit() -> Iterator[None]:
  """A section a signal does not cut: the process ends after it, not inside it.

  Used around the renames of a set of files and around a round's metrics and
  checkpoint, so that they are all done or none is. Nested sections are one.
  """
  with _commit_lock:
    _state["depth"] += 1
    try:
      yield
    finally:
      _state["depth"] -= 1
  if _state["depth"] == 0 and _state["pending"] is not None:
    _exit(_state["pending"])


def _exit(signum: int) -> None:
  """Removes the temporary files, prints the one line and ends the process (no return)."""
  if not _exit_lock.acquire(blocking=True, timeout=30):
    os._exit(exit_status(signum))
  for hook in reversed(_hooks):
    try:
      hook(signum)
    except Exception:   # the process ends all the same
      pass
  for path in list(_temps):
    try:
      os.unlink(path)
    except OSError:
      pass
  name = signal.Signals(signum).name
  note = _state["note"]
  line = f"{_state['prog'] or 'interrupted'}: interrupted by {name}" + (f"; {note}" if note
                                                                         else "") + "\n"
  if _state["quiet"]:
    os._exit(exit_status(signum))
  try:
    if threading.current_thread() is threading.main_thread():
      for stream in (sys.stdout, sys.stderr):
        stream.flush()
  except Exception:   # a stream in use by the code the signal cut: its tail is lost
    pass
  try:   # on a line of its own, after a progress bar's partial line
    prefix = "\r\x1b[K" if os.isatty(2) else "\n"
    os.write(2, (prefix + line).encode("utf-8", "replace"))
  except OSError:
    pass
  os._exit(exit_status(signum))


def _handler(signum: int, frame: Any) -> None:
  """The main thread's handler: end now, or after the commit it is inside."""
  del frame
  if _exit_lock.locked():   # a second signal while the first ends the process
    return
  if _state["depth"] > 0:
    _state["pending"] = signum
    return
  with _commit_lock:   # another thread may be entering a commit (runs batched in threads)
    _exit(signum)


def _watch(read_fd: int) -> None:
  """The watcher thread: ends the process when the main thread cannot run Python code."""
  import time
  while True:
    try:
      data = os.read(read_fd, 1)
    except OSError:
      return
    if not data:
      return
    signum = data[0]
    if signum not in SIGNALS:
      continue
    time.sleep(_WATCHER_DELAY)
    with _commit_lock:   # waits for a commit in progress
      _exit(signum)


@contextlib.contextmanager
def signals_exit(prog: str, note: str = "", quiet: bool = False) -> Iterator[None]:
  """While inside, SIGINT and SIGTERM end the process as the module docstring says.

  Args:
    prog: the command's name, the start of the line printed.
    note: what the line adds, e.g. how to resume.
    quiet: print no line (a worker process, whose command prints it).

  Installs nothing when called outside the main thread.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  old = {s: signal.getsignal(s) for s in SIGNALS}
  old_state = dict(_state)
  _state.update(prog=prog, note=note, pending=None, quiet=quiet)
  old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  for s in SIGNALS:
    signal.signal(s, _handler)
  watcher = threading.Thread(target=_watch, args=(read_fd,), name="signals-exit", daemon=True)
  watcher.start()
  try:
    yield
  finally:
    for s in SIGNALS:
      signal.signal(s, old[s] if old[s] is not None else signal.SIG_DFL)
    signal.set_wakeup_fd(old_fd)
    _state.update(prog=old_state["prog"], note=old_state["note"], quiet=old_state["quiet"])
    os.close(write_fd)   # the watcher reads end-of-file and returns
    watcher.join(timeout=1.0)
    os.close(read_fd)


def exits_on_signals(prog: str, notes: dict[str, str] | None = None,
                     default: str = "no file was left half-written"
                     ) -> Callable[[Callable[..., int]], Callable[..., int]]:
  """Decorates a command line's ``main(argv=None)``: it runs inside :func:`signals_exit`.

  Args:
    prog: the command's name.
    notes: the line's note per subcommand (the first argument that is not an
      option), e.g. how to resume; ``default`` for the others.
    default: the note of the other subcommands.
  """
  notes = dict(notes or {})

  def decorate(main: Callable[..., int]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapped(argv: Any = None) -> int:
      args = list(sys.argv[1:] if argv is None else argv)
      command = next((a for a in args if not str(a).startswith("-")), "")
      with signals_exit(prog, notes.get(str(command), default)):
        return main(argv)
    return wrapped

  return decorate
