"""A command line run in a real process and stopped by a real signal once it reports progress.

Shared by the tests of Ctrl-C and ``kill`` (tests/fedkrr/io/test_interrupts.py,
tests/neural/test_neural_interrupts.py); imported by name from pytest's pythonpath
(pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import os
from pathlib import Path
import select
import subprocess
import sys
import time

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Stopped:
  """What a process stopped by a signal did: exit status, its output, and the seconds it
  took to exit after the signal."""

  returncode: int
  stdout: str
  stderr: str
  seconds: float
  reached: bool   # the marker appeared before the signal
  pid: int = 0    # the process's id
  children: tuple[int, ...] = ()   # its child processes when the signal was sent


def env() -> dict[str, str]:
  """The environment of the command lines in tests: this checkout first, CPU only."""
  path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
  return os.environ | {"JAX_PLATFORMS": "cpu", "PYTHONPATH": path}


def stop_when(args: list[str], marker: str, signum: int, *, delay: float = 0.0,
              timeout: float = 240.0, cwd: str | None = None,
              until: Callable[[], bool] | None = None) -> Stopped:
  """Starts ``python -m ARGS``, waits until ``marker`` is in its output, sends ``signum``.

  Args:
    args: the module and its arguments, e.g. ``["fedkrr._src.cli", "toy", ...]``.
    marker: text of the progress report to wait for (stdout or stderr).
    signum: the signal to send.
    delay: seconds to wait after the marker appears.
    timeout: the most seconds to wait for the marker, and then for the exit.
    cwd: the working directory.
    until: also wait until this returns true (e.g. a file the process writes exists).
  """
  proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env(), cwd=cwd)
  out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
  streams: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
  start = time.monotonic()
  reached = False
  while time.monotonic() - start < timeout:
    ready, _, _ = select.select(list(streams), [], [], 0.2)
    for fd in ready:
      chunk = os.read(fd, 65536)
      if chunk:
        streams[fd].append(chunk)
    text = b"".join(streams[out_fd] + streams[err_fd])
    if marker.encode() in text and (until is None or until()):
      reached = True
      break
    if proc.poll() is not None:
      break
  time.sleep(delay)
  kids = tuple(children(proc.pid))
  sent = time.monotonic()
  if proc.poll() is None:
    proc.send_signal(signum)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
  seconds = time.monotonic() - sent
  stdout = (b"".join(streams[out_fd]) + out).decode(errors="replace")
  stderr = (b"".join(streams[err_fd]) + err).decode(errors="replace")
  return Stopped(proc.returncode, stdout, stderr, seconds, reached, proc.pid, kids)


def _stat(pid: int | str) -> list[str]:
  """The fields of /proc/PID/stat after the command's name (state first, then the parent)."""
  return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
  """The processes whose parent is ``pid`` (Linux's /proc)."""
  found = []
  for entry in Path("/proc").iterdir():
    if entry.name.isdigit():
      try:
        if int(_stat(entry.name)[1]) == pid:
          found.append(int(entry.name))
      except (OSError, IndexError, ValueError):   # ended while we looked
        pass
  return found


def ended(pid: int, timeout: float) -> bool:
  """Whether process ``pid`` ends (or is a zombie) within ``timeout`` seconds."""
  deadline = time.monotonic() + timeout
  while True:
    try:
      if _stat(pid)[0] == "Z":
        return True
    except (OSError, IndexError):
      return True
    if time.monotonic() > deadline:
      return False
    time.sleep(0.1)


def last_line(text: str) -> str:
  """The last line of a stream that progress bars wrote to (their carriage returns split)."""
  lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
  return lines[-1] if lines else ""


def leftovers(directory: Path) -> list[str]:
  """Temporary files of atomic writes left in ``directory`` (none after a clean stop)."""
  return sorted(p.name for p in directory.rglob("*.tmp"))


def run(args: list[str], timeout: float = 240.0) -> subprocess.CompletedProcess:
  """``python -m ARGS`` to its end, in the environment of :func:`env`."""
  return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                        env=env(), timeout=timeout)
