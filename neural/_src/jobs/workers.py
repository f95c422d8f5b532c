"""Runs in worker processes: ``neural reproduce --jobs J`` runs J of a figure's runs at a time.

One process keeps about 1.5 of 2 CPU cores busy when it trains the small configs
(XLA:CPU's threads wait on each other between small kernels), so two processes side
by side do more runs per hour. Each worker (``python -m neural._src.jobs.workers``) lives
for the whole call and runs one run after another (the runs of a figure share their
shapes, so a worker compiles its programs once). A run in a worker is the same call as
in the command's own process (:func:`neural._src.jobs.runs.run_one`, the same config, the
same directory, the same float64 setting of JAX), so its numbers are the same.

On a machine with several GPUs the workers take the GPUs in turn (``CUDA_VISIBLE_DEVICES``
of one GPU each): ``--jobs auto`` is :data:`AUTO_JOBS_GPU` workers per GPU. With
``NEURAL_WORKER_CORES=own`` each worker keeps to its own share of the CPU cores
(:func:`fedkrr.io.core_shares`), so that XLA's threads in one worker do not wait on cores
the other workers keep busy; not by default, since XLA:CPU compiles a convolution for the
cores its process has, and its numbers then differ from the runs in the command's own
process (:func:`worker_cores`).

The command and its workers speak JSON lines: a task (the run's config, its directory,
``max_rounds``) on the worker's stdin, the run's metric rows (or its error) on its
stdout. A task of a batch (``--batch``, :func:`neural._src.jobs.batched.run_batch`) holds
``runs``, a list of ``{"name", "config", "workdir"}``, and its reply's ``rows`` one list
of rows per run. A worker prints everything else to stderr.

Stopping: a signal to the command (Ctrl-C, ``kill``) stops the workers first, each
after the round it is committing, and the command exits after them (exit status
130 or 143, as without workers); a worker whose command is gone (killed outright)
stops by itself within a second or two. A run that fails in a worker stops the
others and raises its error, named by the run. Started again, every run resumes
where it stopped, as without workers.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import json
import os
from pathlib import Path
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import IO
from typing import Any
import warnings

from typing_extensions import TypeIs

from fedkrr.io import allowed_cores
from fedkrr.io import before_exit
from fedkrr.io import core_shares
from fedkrr.io import end_process
from fedkrr.io import signals_exit
from fedkrr.io import use_cores
from neural._src.datasets.data import DataError
from neural._src.jobs.batched import batch_groups
from neural._src.jobs.batched import run_batch
from neural._src.jobs.runs import run_one
from neural._src.jobs.specs import config_from_dict
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import RunConfig
from neural._src.runtime.rundir import DivergenceError
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import show_warning

# --jobs auto: worker processes per GPU (3 on one H200 ran Fig. 6's 72 small runs in 1.6
# minutes, each worker's small kernels leaving the GPU idle most of the time) and on a CPU
# (2 on 2 cores did 1.25-1.4x the runs per hour of 1; larger CPUs were not measured).
AUTO_JOBS_GPU = 3
AUTO_JOBS_CPU = 2
STOP_SECONDS = 60.0   # the longest the command waits for a stopped worker's last commit
_PARENT_POLL = 1.0    # seconds between a worker's looks at its parent
Task = tuple[str, RunConfig, Path]   # a run: its name, config and directory (a batch: a list)


def is_run(task: Task | Sequence[Task]) -> TypeIs[Task]:
  """Whether a task of :func:`run_in_workers` is one run (else a batch: a list of runs)."""
  return isinstance(task, tuple) and len(task) == 3 and isinstance(task[0], str)


# The errors a worker sends back by name (the others arrive as ExperimentError).
_ERRORS: dict[str, type[ValueError]] = {e.__name__: e for e in (
    ConfigError, DataError, ExperimentError, DivergenceError)}


# ---------------------------------------------------------------------------
# The worker


def _watch_parent(parent: int) -> None:
  """A worker's thread: ends the worker (cleanly) once the command that started it is gone."""
  while True:
    time.sleep(_PARENT_POLL)
    if os.getppid() != parent:
      end_process(signal.SIGTERM)


def answer(task: dict[str, Any]) -> dict[str, Any]:
  """Runs (or resumes) one JSON task (:func:`task_message`: a run, or a batch of runs) and
  gives its reply: ``{"rows": ...}`` (a batch's: a list per run), or ``{"error": class name,
  "message": ...}`` (:func:`run_error` raises it in the command; a batch's names its run)."""
  try:
    if "runs" in task:   # a batch: its errors name their run
      rows: Any = run_batch([(run["name"], config_from_dict(run["config"]), Path(run["workdir"]))
                             for run in task["runs"]], max_rounds=task["max_rounds"])
    else:
      rows = run_one(config_from_dict(task["config"]), task["workdir"], "paper",
                     progress=False, max_rounds=task["max_rounds"])
    return {"rows": rows}
  except Exception as e:   # sent back: the command stops the others and raises it
    return {"error": type(e).__name__, "message": str(e)}


def _serve(tasks: IO[str], replies: IO[str]) -> None:
  """Runs each task line of ``tasks`` and writes its reply line to ``replies``."""
  for line in tasks:
    replies.write(json.dumps(answer(json.loads(line))) + "\n")
    replies.flush()


def main() -> int:
  """A worker process: signals end it as they end a command (quietly), so does its
  command's end, and a GPU's memory is taken as needed, not all at once per process.

  Arguments: the command's process id, then the worker's CPU cores (``0,1``; empty: all),
  which it keeps to before JAX starts (:func:`fedkrr.io.use_cores`)."""
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  if len(sys.argv) > 2 and sys.argv[2]:
    use_cores(int(core) for core in sys.argv[2].split(","))
  replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
  sys.stdout = sys.stderr   # the runs' own prints must not reach the reply stream
  with signals_exit("neural", quiet=True):
    threading.Thread(target=_watch_parent, args=(int(sys.argv[1]),), name="watch-parent",
                     daemon=True).start()
    with warnings.catch_warnings():
      warnings.showwarning = show_warning
      _serve(sys.stdin, replies)
  return 0


# ---------------------------------------------------------------------------
# The command's side


def rounds_of(config: RunConfig) -> int:
  """A run's rounds (AKD's and EKD's count twice): the longest runs start first, so that
  no long run is left to run alone at the end."""
  return int(getattr(config, "total_rounds", getattr(config, "rounds", 1)))


def gpu_ids() -> list[str]:
  """The GPUs the workers spread over: the entries of ``CUDA_VISIBLE_DEVICES`` where it is
  set, else one per GPU that JAX sees; none where JAX's default backend is no GPU (this
  starts JAX's backend, see :func:`on_gpu`)."""
  if not on_gpu():
    return []
  import jax  # deferred: the backend starts only when asked for

  visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
  if visible:
    return [d.strip() for d in visible.split(",") if d.strip()]
  return [str(d.id) for d in jax.local_devices()]


def on_gpu() -> bool:
  """Whether JAX's default backend is a GPU (starting it, without preallocating its
  memory unless ``XLA_PYTHON_CLIENT_PREALLOCATE`` says otherwise)."""
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  import jax  # deferred: the backend starts only when asked for

  return jax.default_backend() in ("gpu", "cuda", "rocm")


def auto_jobs() -> int:
  """``--jobs auto``: :data:`AUTO_JOBS_GPU` workers per GPU where JAX's default backend is
  a GPU (every GPU of the machine, :func:`gpu_ids`), else :data:`AUTO_JOBS_CPU` (at most one
  per CPU core this process may use).

  Asks JAX for its backend, which starts it in this process; on a GPU without memory
  preallocation (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set), so that the
  workers find the memory free.
  """
  gpus = gpu_ids()
  if gpus:
    return AUTO_JOBS_GPU * len(gpus)
  return max(1, min(AUTO_JOBS_CPU, len(allowed_cores())))


WORKER_CORES = ("all", "own")


def worker_cores(count: int) -> list[list[int]]:
  """The CPU cores of each of ``count`` workers (``[]``: every core), as the environment
  variable ``NEURAL_WORKER_CORES`` says.

  ``all`` (the default): every worker may use every core, and its numbers are those of the
  same run in the command's own process, byte for byte. ``own``: each worker its own share
  (:func:`fedkrr.io.core_shares`). XLA:CPU then gives each worker a thread pool of its own
  cores, which holds up where the workers outnumber the cores' spare capacity (on 2 cores
  a small program beside two busy processes: 0.71 s with every core, 0.12 s on one core,
  ``benchmarks/busy_cores.py``), but XLA compiles convolutions for the cores a process
  has, so a convolutional network's numbers then differ from the run in the command's own
  process (Fig. 6's CNN on one core and on two: test accuracies up to 0.02 apart after 10
  epochs; the MLP's agreed).

  Raises:
    ExperimentError: ``NEURAL_WORKER_CORES`` is set to something else.
  """
  setting = os.environ.get("NEURAL_WORKER_CORES", "all") or "all"
  if setting not in WORKER_CORES:
    raise ExperimentError(f"NEURAL_WORKER_CORES: expected all or own, got {setting!r}")
  return core_shares(count) if setting == "own" else [[] for _ in range(count)]


def _worker_env(gpu: str | None = None) -> dict[str, str]:
  """This process's environment, with its JAX float64 setting: a caller that turned on
  ``jax_enable_x64`` gets workers that compute as it would. On a GPU the workers share
  its memory: each allocates as it goes (``XLA_PYTHON_CLIENT_PREALLOCATE=false``, unless
  the variable is set) instead of the first reserving three quarters of it. ``gpu``: the
  one GPU the worker sees (``CUDA_VISIBLE_DEVICES``)."""
  env = dict(os.environ)
  if gpu is not None:
    env["CUDA_VISIBLE_DEVICES"] = gpu
  env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  if "jax" in sys.modules:
    env["JAX_ENABLE_X64"] = "1" if sys.modules["jax"].config.read("jax_enable_x64") else "0"
  return env


def stop_workers(workers: Sequence[subprocess.Popen], timeout: float = STOP_SECONDS) -> None:
  """Sends SIGTERM to the workers and waits (at most ``timeout`` seconds in all) until they
  have ended, each after the commit it is inside."""
  for worker in workers:
    if worker.poll() is None:
      worker.send_signal(signal.SIGTERM)
  deadline = time.monotonic() + timeout
  for worker in workers:
    try:
      worker.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      worker.kill()


def task_weight(task: Task | Sequence[Task]) -> int:
  """The rounds of a task (a batch's: its longest run's), for the order of the queue."""
  return rounds_of(task[1]) if is_run(task) else max(rounds_of(t[1]) for t in task)


def task_message(task: Task | Sequence[Task], max_rounds: int | None) -> dict[str, Any]:
  """The JSON task of a run, or of a batch of runs (``runs``)."""
  if is_run(task):
    return {"config": task[1].to_dict(), "workdir": str(task[2]), "max_rounds": max_rounds}
  return {"runs": [{"name": name, "config": config.to_dict(), "workdir": str(path)}
                   for name, config, path in task], "max_rounds": max_rounds}


def run_error(name: str, reply: dict[str, Any] | None, named: bool = False) -> ValueError:
  """The run's error as the command raises it, the run's name in front (``reply``: the
  worker's, ``{"error": class name, "message": ...}``; ``None``: the worker ended first;
  ``named``: a batch's error, whose message starts with its run's name already)."""
  if reply is not None and named:
    return _ERRORS.get(reply["error"], ExperimentError)(
        reply["message"] + ("" if reply["error"] in _ERRORS else f" ({reply['error']})"))
  if reply is None:
    return ExperimentError(f"{name}: a worker process ended before finishing the run "
                           "(killed, or out of memory?); run the same command again to resume")
  return _ERRORS.get(reply["error"], ExperimentError)(
      f"{name}: {reply['message']}" + ("" if reply["error"] in _ERRORS
                                       else f" ({reply['error']})"))


def run_in_workers(tasks: Sequence[Task | Sequence[Task]], jobs: int, *,
                   max_rounds: int | None = None, progress: bool = False,
                   label: str = "runs") -> list[Any]:
  """Runs (or resumes) every ``(name, config, directory)`` of ``tasks``, ``jobs`` at a time.

  Args:
    tasks: the runs; ``name`` names the run in the progress bar and in errors. A task
      may be a list of runs instead: a batch, run in one worker by
      :func:`neural._src.jobs.batched.run_batch`; its result is then the list of its
      runs' rows.
    jobs: how many worker processes (at most one per task, and without GPUs at most one
      per CPU core this process may use). On a machine with GPUs each sees one GPU, the
      workers taking the GPUs in turn (worker i the GPU i mod G): every GPU of the machine
      is used. Their CPU cores: :func:`worker_cores`.
    max_rounds: do at most this many rounds of each run (as ``neural run --max-rounds``).
    progress: a bar over the finished runs (the runs themselves show none).
    label: the bar's description.

  Returns:
    Each task's metric rows, in the order of ``tasks``.

  Raises:
    ExperimentError: the first failed run's error (or ``ConfigError``, ``DataError``
      where it was one), its message starting with the run's name; the other workers
      are stopped first.
  """
  from tqdm.auto import tqdm

  results: list[Any] = [None] * len(tasks)
  queue = sorted(range(len(tasks)), key=lambda i: -task_weight(tasks[i]))
  names = [t[0] if is_run(t) else f"batch of {', '.join(r[0] for r in t)}"
           for t in tasks]
  runs = [1 if is_run(t) else len(t) for t in tasks]
  workers: list[subprocess.Popen] = []
  busy: dict[subprocess.Popen, int] = {}
  selector = selectors.DefaultSelector()
  bar = tqdm(total=sum(runs), desc=label, unit="run", disable=not progress, dynamic_ncols=True)

  def give(worker: subprocess.Popen) -> None:
    i = queue.pop(0)
    task = task_message(tasks[i], max_rounds)
    assert worker.stdin is not None
    worker.stdin.write(json.dumps(task) + "\n")
    worker.stdin.flush()
    busy[worker] = i

  with before_exit(lambda signum: stop_workers(workers)):
    try:
      count = max(1, min(jobs, len(tasks)))
      gpus = gpu_ids()
      if not gpus:   # CPU workers: at most one per core (more only queue for the cores)
        count = max(1, min(count, len(allowed_cores())))
      for i, cores in enumerate(worker_cores(count)):
        worker = subprocess.Popen(
            [sys.executable, "-P", "-m", "neural._src.jobs.workers", str(os.getpid()),
             ",".join(map(str, cores))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=_worker_env(gpus[i % len(gpus)] if gpus else None))
        workers.append(worker)
        selector.register(worker.stdout, selectors.EVENT_READ, worker)   # type: ignore[arg-type]
        give(worker)
      while busy:
        for key, _ in selector.select():
          worker = key.data
          line = worker.stdout.readline()
          i = busy.pop(worker)
          reply = json.loads(line) if line else None
          if reply is None or "error" in reply:
            raise run_error(names[i], reply, named=not is_run(tasks[i]))
          results[i] = reply["rows"]
          bar.update(runs[i])
          bar.set_postfix_str(names[i], refresh=True)
          if queue:
            give(worker)
    except BaseException:
      stop_workers(workers)
      raise
    finally:
      for worker in workers:
        if worker.stdin is not None:
          worker.stdin.close()   # end of tasks: an idle worker exits
      for worker in workers:
        worker.wait()
      selector.close()
      bar.close()
  return results   # every task replied (else raised)


def run_in_batches(tasks: Sequence[Task], batch: int, jobs: int = 1, *,
                   max_rounds: int | None = None, progress: bool = False,
                   label: str = "runs", units: str = "paper") -> list[list[dict[str, Any]]]:
  """Runs (or resumes) ``tasks`` in batches of up to ``batch`` runs that share a protocol
  and shapes (:func:`neural._src.jobs.batched.batch_groups`, trained by
  :func:`neural._src.jobs.batched.run_batch`): with ``jobs == 1`` one batch after another
  in this process, else ``jobs`` batches at a time in worker processes
  (:func:`run_in_workers`, whose runs draw in ``units`` "paper").

  Returns:
    Each task's metric rows, in the order of ``tasks``.

  Raises:
    ExperimentError: as :func:`run_in_workers` (``ConfigError`` for a bad ``batch``).
  """
  from tqdm.auto import tqdm

  if jobs > 1:
    return run_grouped(tasks, batch, lambda parts: run_in_workers(
        parts, jobs, max_rounds=max_rounds, progress=progress, label=label))

  def in_process(parts: Sequence[Task | Sequence[Task]]) -> list[Any]:
    replies = []
    with tqdm(total=len(tasks), desc=label, unit="run", disable=not progress,
              dynamic_ncols=True) as bar:
      for part in parts:
        rows = run_batch([part] if is_run(part) else part, max_rounds=max_rounds, units=units)
        replies.append(rows[0] if is_run(part) else rows)
        bar.update(len(rows))
    return replies

  return run_grouped(tasks, batch, in_process)


def run_grouped(tasks: Sequence[Task], batch: int,
                run: Callable[[Sequence[Task | Sequence[Task]]], Sequence[Any]]
                ) -> list[list[dict[str, Any]]]:
  """``tasks`` cut into batches (:func:`neural._src.jobs.batched.batch_groups`, at most
  ``batch`` runs each) and handed to ``run`` as one list: a batch of one as its run, the
  others as lists. ``run`` replies as :func:`run_in_workers` does (a run's rows, a batch's
  list of rows); returned: each task's rows, in the order of ``tasks``."""
  groups = batch_groups([config for _, config, _ in tasks], batch)
  replies = run([tasks[m[0]] if len(m) == 1 else [tasks[i] for i in m] for m in groups])
  results: list[list[dict[str, Any]]] = [[] for _ in tasks]
  for members, reply in zip(groups, replies, strict=True):
    for i, rows in zip(members, [reply] if len(members) == 1 else reply, strict=True):
      results[i] = rows
  return results


if __name__ == "__main__":
  sys.exit(main())
