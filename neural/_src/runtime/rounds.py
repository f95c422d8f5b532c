"""The one round loop of every run: ``run_rounds``.

``neural.train_and_evaluate`` (the KD protocols, FedAvg, the baselines) and
``neural.methods.run_method`` (the other papers' methods) both run through
:func:`run_rounds`. It opens the run directory (:func:`neural._src.runtime.rundir.open_run`:
lock, checks, resume), asks its caller for the round step of the data and the
restored checkpoint, runs the rounds still to do (at most ``max_rounds`` in one
call) under a tqdm bar over rounds, writes each round through ``Run.finish_round``
(metrics, then the checkpoint), then, with the config's ``tensorboard``, the round's
TensorBoard scalars (``neural._src.runtime.tensorboard``: derived from the committed
rows, so a kill between the two loses nothing), and draws ``accuracy.png`` once the run
is complete.
The caller says only what differs: its config, how to read one back, its data, the
checkpoint it expects and what a round does.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import os
from typing import Any
from typing import NamedTuple

from tqdm.auto import tqdm

from neural._src.runtime.plots import plot_run
from neural._src.runtime.rundir import PLOT_FILE
from neural._src.runtime.rundir import open_run
from neural._src.runtime.tensorboard import require_tensorboard
from neural._src.runtime.tensorboard import write_events


class RoundResult(NamedTuple):
  """What one round gives the loop.

  Attributes:
    rows: the round's metric rows.
    state: what it checkpoints besides its round, rows and config.
    outcomes: the outcome lines of its rows (``neural._src.runtime.outcomes``; empty
      unless the run records them).
  """

  rows: list[dict[str, Any]]
  state: dict[str, Any]
  outcomes: Sequence[dict[str, Any]] = ()


# step(t) -> round t's RoundResult
Step = Callable[[int], RoundResult]


def run_rounds(config: Any, workdir: str | os.PathLike, *,
               from_dict: Callable[[dict[str, Any]], Any], rounds: int,
               load_data: Callable[[], Any], expected: Callable[[Any, int], dict[str, Any]],
               begin: Callable[[Any, dict[str, Any] | None], Step], desc: str,
               title: str, units: str = "steps", progress: bool = False,
               max_rounds: int | None = None,
               on_round_end: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
  """Runs (or resumes) the rounds of ``config`` in ``workdir``; returns every metric row.

  Args:
    config: the run's typed config (``to_json``, ``to_dict``, ``==``).
    workdir: the run directory (see :func:`neural._src.runtime.rundir.open_run`).
    from_dict: reads a saved config.
    rounds: the rounds the run has in all.
    load_data: loads the run's data (not called when the run is complete).
    expected: ``expected(data, done)``: the checkpoint's target after ``done`` rounds.
    begin: ``begin(data, checkpoint) -> step``, called once when rounds remain, with
      the restored checkpoint (``None`` before the first round); ``step(t)`` runs round
      t and returns its :class:`RoundResult` (the config is added to its state).
    desc: the label of the bar over rounds.
    title: the title of ``accuracy.png``.
    units: the rounds of ``accuracy.png`` (see ``neural._src.runtime.plots.plot_run``).
    progress: show the bar over rounds.
    max_rounds: do at most this many rounds in this call (a later call resumes).
    on_round_end: called with t after round t's metrics are written and before its
      checkpoint.

  Returns:
    All metric rows of the run so far (as in ``metrics.jsonl``).

  Raises:
    ConfigError: ``config.tensorboard`` without tensorboardX (before anything
      is written).
  """
  tensorboard = bool(getattr(config, "tensorboard", False))
  if tensorboard:
    require_tensorboard()
  with open_run(workdir, config, from_dict=from_dict, rounds=rounds, load_data=load_data,
                expected=expected) as run:
    if run.done < rounds:
      step = begin(run.data, run.checkpoint)
      stop = rounds if max_rounds is None else min(rounds, run.done + max_rounds)
      bar = tqdm(total=rounds, initial=run.done, desc=desc, unit="round",
                 disable=not progress)
      try:
        for t in range(run.done, stop):
          rows, state, outcomes = step(t)
          run.finish_round(t, rows, {**state, "config": config.to_dict()}, on_round_end,
                           outcomes)
          if tensorboard:
            write_events(run.workdir, run.rows)
          bar.update(1)
      finally:
        bar.close()
    if tensorboard and run.rows:   # also a run finished before it was asked for
      write_events(run.workdir, run.rows)
    if run.done >= rounds:
      plot_run(run.rows, run.workdir / PLOT_FILE, title=title, units=units)
    return list(run.rows)
