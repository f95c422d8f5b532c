"""Runs as Ray tasks: ``neural reproduce --executor ray`` runs a sweep's runs on a Ray cluster.

Each run is one Ray task that calls :func:`neural._src.jobs.runs.run_one` with the same
config, the same directory and the same float64 setting of JAX as the command's own
process would, so its numbers are those of ``--jobs 1`` (on the same kind of machine).
The contract is :func:`neural._src.jobs.workers.run_in_workers`'s: rows per task in the
order of the tasks, the first failed run's error raised under its class with the run's
name in front, the other runs stopped (cancelled) first.

- Resources: a task asks for one CPU, and ``1 / AUTO_JOBS_GPU`` of a GPU where the cluster
  has GPUs (three runs share a GPU, as ``--jobs auto`` has them on one machine); Ray
  decides how many run at a time from what the nodes offer.
- Shared storage: every node must see the workdir at the same path. The command writes a
  marker file with a token of its own into the common directory of the runs before it
  submits them; a task that does not find it there fails at once, naming its node. The
  marker is removed at the end.
- Retries: a task whose worker process or node dies is run again (``MAX_RETRIES`` times)
  on a node that lives; it resumes its run from the last checkpoint, as ``neural run``
  resumes a killed run. Started again, the command reads the finished runs back and
  resumes the others.
- The environment: the tasks get the command's ``JAX_ENABLE_X64`` (its JAX's setting),
  ``XLA_FLAGS`` (``--deterministic``) and ``XLA_PYTHON_CLIENT_PREALLOCATE`` (``false``
  unless set), and, when the project runs from a source tree rather than an installed
  package, that tree on ``PYTHONPATH`` (at the same path on every node).

Ray is an optional extra (``pip install "fedkrr[ray]"``), imported only here, when asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import contextlib
import logging
import os
from pathlib import Path
import socket
import sys
import threading
from typing import Any
from typing import cast
import uuid
import warnings

from fedkrr.io import atomic_write
from fedkrr.io import before_exit
from neural._src.jobs.workers import AUTO_JOBS_GPU
from neural._src.jobs.workers import Task
from neural._src.jobs.workers import answer
from neural._src.jobs.workers import is_run
from neural._src.jobs.workers import run_error
from neural._src.jobs.workers import task_message
from neural._src.jobs.workers import task_weight
from neural._src.runtime.config import ConfigError
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import show_warning

EXECUTORS = ("local", "ray")
INSTALL = 'pip install "fedkrr[ray]"'
MAX_RETRIES = 3          # times a task runs again after its worker process or node died
CONNECT_SECONDS = 5.0    # how long --address HOST:PORT may take to answer
SHUTDOWN_SECONDS = 10.0  # the longest a signal waits for Ray to stop what the command started
# Seconds between the command's looks at its tasks: its main thread returns from Ray that
# often, so that a signal is handled there (ray.wait does not return for one by itself).
_POLL = 0.1
MARKER_PREFIX = ".ray-workdir-"
_OPTIONS = ("num_cpus", "num_gpus", "memory")   # resources taken as Ray's own options
# Ray's errors of a task whose worker process or node died (after its retries).
_DIED = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")


def import_ray() -> Any:
  """The ``ray`` module.

  Raises:
    ConfigError: Ray is not installed (one line naming the extra).
  """
  try:
    import ray  # deferred: an optional extra
  except ImportError:
    raise ConfigError(f"--executor ray needs Ray, an optional extra: {INSTALL}") from None
  return ray


# ---------------------------------------------------------------------------
# The task


def _check_marker(marker: str, token: str) -> None:
  """Raises the one-line error unless this node sees the command's marker file."""
  try:
    seen = Path(marker).read_text() == token
  except OSError:
    seen = False
  if not seen:
    raise ExperimentError(f"node {socket.gethostname()} cannot see the workdir "
                          f"{Path(marker).parent}: put it on storage every node mounts at "
                          f"the same path (NFS, a cluster file system)")


def _run_task(task: dict[str, Any], marker: str, token: str) -> dict[str, Any]:
  """One Ray task: runs (or resumes) one run, or a batch of runs, and replies as a worker
  process does (:func:`neural._src.jobs.workers.answer`: ``task`` is its JSON task)."""
  try:
    _check_marker(marker, token)
  except ExperimentError as e:
    return {"error": type(e).__name__, "message": str(e)}
  with warnings.catch_warnings():
    warnings.showwarning = show_warning
    return answer(task)


# ---------------------------------------------------------------------------
# The command's side


def _task_env() -> dict[str, str]:
  """The variables the tasks get (``workers._worker_env``'s, for nodes with their own
  environment): the command's float64 setting of JAX and its XLA flags, GPU memory taken
  as needed, and the source tree the project runs from (if not installed)."""
  env = {"XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE",
                                                         "false")}
  if "jax" in sys.modules:
    env["JAX_ENABLE_X64"] = "1" if sys.modules["jax"].config.read("jax_enable_x64") else "0"
  elif "JAX_ENABLE_X64" in os.environ:
    env["JAX_ENABLE_X64"] = os.environ["JAX_ENABLE_X64"]
  if os.environ.get("XLA_FLAGS"):
    env["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
  root = Path(__file__).resolve().parents[3]   # the directory that holds neural/
  if (root / "pyproject.toml").is_file():       # a source tree, not site-packages
    env["PYTHONPATH"] = f"{root}{os.pathsep}${{PYTHONPATH}}"
  return env


def _options(ray: Any, resources: Mapping[str, float] | None) -> dict[str, Any]:
  """The tasks' Ray options: one CPU, and a share of a GPU where the cluster has GPUs,
  unless ``resources`` says otherwise (``num_cpus``, ``num_gpus``, ``memory``; other
  keys are custom resources)."""
  if resources is not None:
    options: dict[str, Any] = {"num_cpus": 1}
    custom = {}
    for key, value in resources.items():
      if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"resources: expected a number >= 0 for {key!r}, got {value!r}")
      if key in _OPTIONS:
        options[key] = value
      else:
        custom[key] = value
    if custom:
      options["resources"] = custom
    return options
  if ray.cluster_resources().get("GPU", 0) > 0:
    return {"num_cpus": 1, "num_gpus": 1 / AUTO_JOBS_GPU}
  return {"num_cpus": 1}


def _host_port(address: str) -> tuple[str, int]:
  host, colon, port = address.rpartition(":")
  if not colon or not host or not port.isdigit():
    raise ConfigError(f"--address: expected HOST:PORT of a Ray head (GCS port, 6379 by "
                      f"default) or auto, got {address!r}")
  return host.strip("[]"), int(port)


def _resolved(ray: Any, address: str) -> str:
  """``auto`` as Ray finds it (``RAY_ADDRESS``, then the cluster last started here)."""
  if address != "auto":
    return address
  try:
    find = ray._private.services.canonicalize_bootstrap_address_or_die
  except AttributeError:   # another Ray: ray.init finds it
    return address
  try:
    return find("auto")
  except Exception as e:   # ConnectionError: no cluster found
    raise ExperimentError(f"--address auto: no Ray cluster found on this machine "
                          f"({' '.join(str(e).split())[:160]}); start one with `ray start "
                          f"--head` or give --address HOST:PORT") from None


def _connect(ray: Any, address: str | None) -> bool:
  """Connects this process to Ray; returns whether it did (then ``ray.shutdown`` ends
  what it started: the local instance, or only the connection to a cluster).

  ``None`` starts a local instance (no dashboard); ``auto`` or ``HOST:PORT`` joins a
  running cluster, first checked to answer within :data:`CONNECT_SECONDS` (Ray itself
  would wait for minutes). A process already connected keeps its connection.
  """
  if ray.is_initialized():
    return False
  quiet = {"logging_level": logging.ERROR, "configure_logging": True}
  if address is None:
    ray.init(address="local", include_dashboard=False, **quiet)
    return True
  target = _resolved(ray, address)
  host, port = _host_port(target)
  try:
    socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
  except OSError as e:
    reason = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
    raise ExperimentError(f"--address {address}: no Ray cluster answers at {target} "
                          f"({reason}); start its head with `ray start --head --port {port}`, "
                          f"or leave --address out to start Ray on this machine") from None
  ray.init(address=target, **quiet)
  return True


def _workdir_of(paths: Sequence[Path]) -> Path:
  """The directory every run lies under (where the marker goes)."""
  return Path(os.path.commonpath([str(p) for p in paths]))


def _cancel(ray: Any, refs: Sequence[Any]) -> None:
  for ref in refs:
    with contextlib.suppress(Exception):   # finished meanwhile
      ray.cancel(ref, force=True)


def _reply(ray: Any, ref: Any) -> dict[str, Any] | None:
  """A finished task's reply, as a worker's; ``None`` when its worker process or node died
  (its retries spent); Ray's own failure (a runtime environment, an import on the node)
  as an ``ExperimentError`` naming it."""
  try:
    return ray.get(ref)
  except ray.exceptions.RayError as e:
    died = tuple(getattr(ray.exceptions, name) for name in _DIED
                 if hasattr(ray.exceptions, name))
    if isinstance(e, died):
      return None
    cause = getattr(e, "cause", None) or e
    return {"error": "ExperimentError",
            "message": f"its Ray task failed: {type(cause).__name__}: "
                       f"{' '.join(str(cause).split())[:300]}"}


def run_in_ray(tasks: Sequence[Task | Sequence[Task]], *,
               address: str | None = None, max_rounds: int | None = None,
               progress: bool = False, label: str = "runs",
               resources: Mapping[str, float] | None = None) -> list[Any]:
  """Runs (or resumes) every ``(name, config, directory)`` of ``tasks`` as a Ray task.

  Args:
    tasks: the runs; ``name`` names the run in the progress bar and in errors. The
      directories must be on storage that every node mounts at the same path. A task
      may be a list of runs instead: a batch, one Ray task that trains them as one
      program (:func:`neural._src.jobs.batched.run_batch`); its result is then the list
      of its runs' rows.
    address: ``None``: start Ray on this machine (no dashboard) and stop it at the end;
      ``"auto"`` or ``"HOST:PORT"`` (the head's GCS port): join that cluster. A process
      already connected to Ray (``ray.init``) uses its connection.
    max_rounds: do at most this many rounds of each run (as ``neural run --max-rounds``).
    progress: a bar over the finished runs (the runs themselves show none).
    label: the bar's description.
    resources: what each task asks of a node: ``num_cpus``, ``num_gpus``, ``memory``
      (bytes) and custom resources (default: 1 CPU, and ``1 / AUTO_JOBS_GPU`` of a GPU
      where the cluster has GPUs).

  Returns:
    Each task's metric rows, in the order of ``tasks``.

  Raises:
    ConfigError: Ray is not installed, a malformed ``address`` or ``resources``.
    ExperimentError: no cluster answers at ``address``; a node cannot see the workdir;
      the first failed run's error (or ``ConfigError``, ``DataError`` where it was one),
      its message starting with the run's name; the other tasks are cancelled first.
  """
  ray = import_ray()
  def absolute(run: Task) -> Task:
    return run[0], run[1], Path(os.path.abspath(run[2]))

  tasks = [absolute(t) if is_run(t) else [absolute(r) for r in t] for t in tasks]
  if not tasks:
    return []
  runs = [[t] if is_run(t) else list(t) for t in tasks]
  names = [t[0] if is_run(t) else f"batch of {', '.join(r[0] for r in t)}"
           for t in tasks]
  if address not in (None, "auto"):
    _host_port(cast(str, address))   # a malformed address: before anything starts
  started = _connect(ray, address)
  # A signal ends the process without the finally below: Ray is stopped before.
  stop = before_exit(lambda signum: _shutdown(ray)) if started else contextlib.nullcontext()
  try:
    with stop:
      remote = ray.remote(max_retries=MAX_RETRIES, runtime_env={"env_vars": _task_env()},
                          **_options(ray, resources))(_run_task)
      with _marker(_workdir_of([path for batch in runs for _, _, path in batch])) as (
          marker, token):
        order = sorted(range(len(tasks)), key=lambda i: -task_weight(tasks[i]))
        refs = {remote.remote(task_message(tasks[i], max_rounds), str(marker), token): i
                for i in order}
        return _gather(ray, refs, names, [len(batch) if not is_run(tasks[i])
                                          else 0 for i, batch in enumerate(runs)],
                       progress, label)
  finally:
    if started:
      ray.shutdown()


def _shutdown(ray: Any) -> None:
  """``ray.shutdown`` before a signal ends the process (else the local instance's agents
  outlive it), waited for at most :data:`SHUTDOWN_SECONDS`."""
  thread = threading.Thread(target=ray.shutdown, name="ray-shutdown", daemon=True)
  thread.start()
  thread.join(SHUTDOWN_SECONDS)


@contextlib.contextmanager
def _marker(where: Path) -> Iterator[tuple[Path, str]]:
  """While inside, ``where`` holds a marker file with a new token: ``(its path, token)``."""
  token = uuid.uuid4().hex
  marker = where / f"{MARKER_PREFIX}{token}"
  where.mkdir(parents=True, exist_ok=True)
  atomic_write(marker, token)
  try:
    with before_exit(lambda signum: marker.unlink(missing_ok=True)):
      yield marker, token
  finally:
    marker.unlink(missing_ok=True)


def _gather(ray: Any, refs: dict[Any, int], names: Sequence[str], batched: Sequence[int],
            progress: bool, label: str) -> list[Any]:
  """The replies of the tasks ``refs`` (task index by reference) as they finish, under a
  progress bar over the runs (``batched``: each task's runs if it is a batch, else 0); the
  first failed run's error raised after the others are cancelled."""
  from tqdm.auto import tqdm

  results: list[Any] = [None] * len(names)
  pending = list(refs)
  bar = tqdm(total=sum(max(1, b) for b in batched), desc=label, unit="run",
             disable=not progress, dynamic_ncols=True)
  with before_exit(lambda signum: _cancel(ray, pending)):
    try:
      while pending:
        ready, pending[:] = ray.wait(pending, num_returns=1, timeout=_POLL)
        for ref in ready:
          i = refs[ref]
          reply = _reply(ray, ref)
          if reply is None or "error" in reply:
            raise run_error(names[i], reply, named=batched[i] > 0)
          results[i] = reply["rows"]
          bar.update(max(1, batched[i]))
          bar.set_postfix_str(names[i], refresh=True)
    except BaseException:
      _cancel(ray, pending)
      raise
    finally:
      bar.close()
  return results   # every task replied (else raised)
