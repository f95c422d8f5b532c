"""Runs batched into one program: ``run_batch`` trains a sweep's runs that share a
protocol and shapes (their seeds, Alphas, learning rates and weight decays) together,
to fill one accelerator.

One run's kernels are small (a few agents, mini-batches of 64): alone it leaves a GPU
mostly idle. A batch runs each of its R runs in a thread of this process, each through
its own unchanged code (:func:`neural._src.jobs.runs.run_one`: its data, split, keys,
warm starts, ``metrics.jsonl`` and checkpoint), except for one thing: the fits of its
networks go to the batch (``train_and_evaluate``'s ``fit_group``). Once every live run
is waiting in such a fit (or has ended), this process's main thread groups the waiting
fits by learner class and ``batch_key`` (same module, input shape and training settings
but the learning rate and weight decay), and fits each group with ONE ``fit_batch`` over
the agents of all its runs (``neural.FlaxLearner.fit_batch``: one vmapped program;
agents padded to a common size and masked); then each run goes on with its own models.
Each agent keeps its own key and data, so a run's numbers are those of the run alone up
to float32 rounding (a vmapped program sums in another order); each agent scores its own
run's test set after each epoch (``epoch_eval``).

Correctness never rests on the runs being in step: runs at different rounds (a resumed
batch) batch the fits that match and fit the others in groups of their own, a finished
run is read back, a random forest or any learner without a ``batch_key`` fits in its own
thread, and the methods of the other papers (``MethodConfig``) run one after another.

Stopping: an error in one run stops the others at their next fit (a round being
committed is finished first) and is raised, its message starting with the run's name.
Ctrl-C (``KeyboardInterrupt``) stops them the same way; under ``fedkrr.io.signals_exit``
(the command lines) a signal ends the process after the commits in progress, whichever
thread makes them. A stopped batch resumes run by run, as each run alone would.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
from pathlib import Path
import threading
from typing import Any

import numpy as np

from neural._src.jobs.runs import run_one
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import RunConfig
from neural._src.runtime.rundir import ExperimentError

# --batch auto on a GPU: all runs of a group up to this many. Fig. 6's small groups hold
# 4 Alphas x the seeds (12 runs with 3 seeds, 20 with 5); 32 runs of 2 CNN agents are 64
# stacked agents of a few MB each, which one GPU holds many times over, while one thread
# per run stays cheap. Not measured on a GPU yet.
AUTO_BATCH_GPU = 32
# --batch auto on a CPU: measured on 2 cores (Fig. 6 small, rounds=2, epochs=1; see
# docs/devices.md): batches of CNN runs were no faster than runs one by one (XLA:CPU runs a
# batch's convolutions agent after agent), so a CPU runs one at a time.
AUTO_BATCH_CPU = 1
# What may differ between the runs of a batch: their seeds and their Alpha (each run's own
# data, split and keys), their learning rate and weight decay (data of the training step,
# one per agent). Everything else (protocol, agents, models, widths, data set and
# subsets, epochs, batch size, loss, ...) is equal within a group.
FREE_FIELDS = ("seed", "data_seed", "init_seed", "alpha", "learning_rate", "weight_decay")

Item = tuple[str, RunConfig, Path]


def batch_size(batch: int | str, gpu: Callable[[], bool]) -> int:
  """The runs per batch that ``--batch`` asks for: an integer >= 1, or "auto".

  "auto": :data:`AUTO_BATCH_GPU` where ``gpu()`` (e.g. ``neural._src.jobs.workers.on_gpu``;
  called only for "auto") says JAX runs on a GPU, else :data:`AUTO_BATCH_CPU`.

  Raises:
    ConfigError: anything else, named ``batch``.
  """
  if batch == "auto":
    return AUTO_BATCH_GPU if gpu() else AUTO_BATCH_CPU
  if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
    raise ConfigError(f"batch: expected an integer >= 1 or 'auto', got {batch!r}")
  return int(batch)


def group_key(config: RunConfig) -> tuple[Any, ...] | None:
  """What runs of one batch share: the config without :data:`FREE_FIELDS`; ``None`` for a
  config that batches with none (a method of the other papers)."""
  if not isinstance(config, ExperimentConfig):
    return None
  values = config.to_dict()
  return tuple((k, repr(v)) for k, v in sorted(values.items()) if k not in FREE_FIELDS)


def batch_groups(configs: Sequence[RunConfig], size: int) -> list[list[int]]:
  """The indices of ``configs`` in batches: equal :func:`group_key`, at most ``size`` each.

  Configs that differ only in :data:`FREE_FIELDS` (seeds, Alpha, learning rate, weight
  decay) share a group; a method
  of the other papers is a group of its own. Groups keep the order of their first
  config, and their members the order of ``configs``; a group of more than ``size``
  runs is cut into consecutive batches.

  Raises:
    ConfigError: ``size`` is not an integer >= 1.
  """
  if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
    raise ConfigError(f"size: expected an integer >= 1, got {size!r}")
  groups: dict[Any, list[int]] = {}
  for i, config in enumerate(configs):
    key = group_key(config)
    groups.setdefault(("alone", i) if key is None else key, []).append(i)
  return [members[j:j + size] for members in groups.values()
          for j in range(0, len(members), size)]


# ---------------------------------------------------------------------------
# The batch's fits


class _Stopped(BaseException):
  """Raised into a run's thread at its next fit once the batch stops (no ``except
  Exception`` on the way catches it)."""


@dataclasses.dataclass(eq=False)
class _Request:
  """One run's waiting fit: its learners (one class, one ``batch_key``) and their data."""

  learners: Sequence[Any]
  xs: Sequence[Any]
  targets: Sequence[Any]
  models: list[Any] = dataclasses.field(default_factory=list)
  error: BaseException | None = None
  done: bool = False


class _Gather:
  """The fits of a batch's runs: each run's thread waits in :meth:`__call__`; the main
  thread (:meth:`serve`) fits every group once every live run waits (or has ended)."""

  def __init__(self, runs: int):
    self._cond = threading.Condition()
    self._live = runs
    self._waiting: list[_Request] = []
    self._stopped = False
    self.errors: list[tuple[int, BaseException]] = []

  def __call__(self, learners: Sequence[Any], xs: Sequence[Any],
               targets: Sequence[Any]) -> list[Any]:
    request = _Request(learners, xs, targets)
    with self._cond:
      if self._stopped:
        raise _Stopped
      self._waiting.append(request)
      self._cond.notify_all()
      self._cond.wait_for(lambda: request.done or self._stopped)
      if not request.done:
        raise _Stopped
    if request.error is not None:
      raise request.error
    return request.models

  def ended(self, index: int, error: BaseException | None) -> None:
    """Run ``index``'s thread ends (with its error, or ``None``)."""
    with self._cond:
      self._live -= 1
      if error is not None:
        self.errors.append((index, error))
      self._cond.notify_all()

  def stop(self) -> None:
    """Every run stops at its next fit (the waiting ones at once)."""
    with self._cond:
      self._stopped = True
      self._cond.notify_all()

  def serve(self) -> None:
    """Fits the waiting groups until every run has ended or one failed."""
    while True:
      with self._cond:
        self._cond.wait_for(lambda: self._live == 0 or bool(self.errors) or (
            bool(self._waiting) and len(self._waiting) >= self._live))
        if self._live == 0 or self.errors:
          return
        requests, self._waiting = self._waiting, []
      self._fit(requests)
      with self._cond:
        for request in requests:
          request.done = True
        self._cond.notify_all()

  def _fit(self, requests: Sequence[_Request]) -> None:
    """Fits every group of the requests' learners as one ``fit_batch`` (a group of one
    learner by its ``fit``, as a run alone does); a group's error goes to its requests."""
    groups: dict[Any, list[tuple[_Request, int]]] = {}
    for request in requests:
      request.models = [None] * len(request.learners)
      for j, learner in enumerate(request.learners):
        groups.setdefault((type(learner), learner.batch_key), []).append((request, j))
    for (cls, _), members in groups.items():
      learners = [r.learners[j] for r, j in members]
      xs = [r.xs[j] for r, j in members]
      targets = [r.targets[j] for r, j in members]
      try:
        models = ([learners[0].fit(xs[0], targets[0])] if len(learners) == 1
                  else list(cls.fit_batch(learners, xs, targets)))
      except Exception as e:   # raised in each run of the group
        for request, _ in members:
          request.error = e
        continue
      for (request, j), model in zip(members, models, strict=True):
        request.models[j] = model


def _named(name: str, error: BaseException) -> BaseException:
  """``error`` with the run's name in front of its message (same type where it can be)."""
  if not name or not isinstance(error, Exception):
    return error
  message = f"{name}: {error}"
  if isinstance(error, ValueError):
    try:
      return type(error)(message)
    except Exception:   # a constructor of other arguments: named as the workers do
      pass
  return ExperimentError(f"{message} ({type(error).__name__})")


# ---------------------------------------------------------------------------
# The batch


def run_batch(items: Sequence[Item], *, max_rounds: int | None = None,
              units: str = "paper") -> list[list[dict[str, Any]]]:
  """Runs (or resumes) the ``(name, config, directory)`` items as one batch.

  The KD runs train together (see the module docstring): each in its own directory as
  :func:`neural._src.jobs.runs.run_one` would, with the same numbers up to float32
  rounding; their networks' fits that match are one vmapped program. A batch of one
  item is :func:`run_one` itself (the same numbers bit for bit). Runs of methods of the
  other papers run one after another first. No progress bars.

  Args:
    items: the runs; ``name`` names a run in errors.
    max_rounds: do at most this many rounds of each run (a later call resumes).
    units: the rounds of each run's ``accuracy.png`` (as ``run_one``).

  Returns:
    Each item's metric rows, in the order of ``items``.

  Raises:
    ExperimentError: the first failed run's error (``ConfigError``, ``DataError``,
      ``DivergenceError`` keep their type), its message starting with the run's name;
      the other runs are stopped first, each after the round it is committing.
  """
  results: list[list[dict[str, Any]] | None] = [None] * len(items)
  if len(items) == 1:
    _, config, path = items[0]
    return [run_one(config, path, units, progress=False, max_rounds=max_rounds)]
  kd = [i for i, (_, config, _) in enumerate(items) if isinstance(config, ExperimentConfig)]
  for i, (name, config, path) in enumerate(items):
    if i not in kd:
      try:
        results[i] = run_one(config, path, units, progress=False, max_rounds=max_rounds)
      except Exception as e:
        raise _named(name, e) from e
  gather = _Gather(len(kd))

  def work(i: int) -> None:
    _, config, path = items[i]
    error = None
    try:
      results[i] = run_one(config, path, units, progress=False, max_rounds=max_rounds,
                           fit_group=gather)
    except _Stopped:
      pass
    except BaseException as e:   # to the main thread, which stops the others
      error = e
    gather.ended(i, error)

  threads = [threading.Thread(target=work, args=(i,), name=f"run {items[i][0]}", daemon=True)
             for i in kd]
  try:
    for thread in threads:
      thread.start()
    gather.serve()
  finally:   # an error, Ctrl-C: the others stop at their next fit, after their commits
    gather.stop()
    for thread in threads:
      thread.join()
  if gather.errors:
    i, error = gather.errors[0]
    raise _named(items[i][0], error) from error
  return [rows if rows is not None else [] for rows in results]   # every run returned
