"""Reproducing a figure of the paper: ``neural reproduce --figure N``.

:func:`reproduce` finds the shipped config(s) of a figure of Afonin & Karimireddy
(Sec. 6, App. H) at a scale ("small": the ``*_small`` config, embedded data, a
CPU; "paper": the full-size config and, for Figs. 9-10, its ``*_text`` variant),
runs (or resumes) every run once per seed with :func:`neural.run_configs`, and
writes into the work directory:

- ``reproduce.png``: the figure as the paper draws it: one panel per setting,
  the paper's rounds and curves (:func:`neural.evidence.paper_rounds`: AKD rounds of M
  steps, the mean of the agents, EKD's even partial sums; the best local epoch
  where the run logs it), the mean over the seeds with a band of one standard
  deviation; per agent for the figures the paper draws per agent;
- ``reproduce.md`` and its twin ``reproduce.json``: per run, round 1, the best
  round and the last round (mean ± spread over the seeds); then each statement the
  paper makes about the figure (``neural._src.evidence.claims``), decided by its noise-aware
  rule (``neural._src.evidence.rules``): "reproduced", "not reproduced", "inconclusive" or
  "not testable here", with the numbers used, and beside it the verdict of the same
  rule on the authors' own logged curves where they exist (Figs. 6, 8, 9, 10: the
  control, ``neural._src.evidence.authors``).

Seed k runs every run with ``seed`` = the config's seed + k (data subsets, the
split and every initialisation), into ``workdir/seed=k/<run>/`` (two configs:
``workdir/seed=k/<config>/<run>/``).

This module runs the figure; its curves and the checks of the statements are
``reproduce_curves``'s, the report ``reproduce_report``'s and the drawing
``reproduce_plot``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import json
import os
from pathlib import Path
import re
import sys
import time
from typing import Any

from fedkrr.io import ReadError
from fedkrr.io import append_file
from fedkrr.io import atomic_write
from fedkrr.io import read_json
from fedkrr.io import read_json_lines
from neural._src.evidence.authors import matched_control
from neural._src.evidence.claims import evaluate
from neural._src.evidence.claims import figure_claims
from neural._src.evidence.curves import Curve
from neural._src.evidence.curves import curves_from_mapping
from neural._src.evidence.paper_units import steps_for_paper_rounds
from neural._src.figures.reproduce_curves import figure_label
from neural._src.figures.reproduce_curves import merge_seeds
from neural._src.figures.reproduce_curves import paper_curves
from neural._src.figures.reproduce_plot import plot_reproduction
from neural._src.figures.reproduce_report import ConfigReproduction
from neural._src.figures.reproduce_report import Reproduction
from neural._src.figures.reproduce_report import markdown
from neural._src.jobs.batched import batch_size
from neural._src.jobs.executors import check_executor
from neural._src.jobs.executors import run_tasks
from neural._src.jobs.runs import run_configs
from neural._src.jobs.runs import run_dirs
from neural._src.jobs.runs import write_sweep
from neural._src.jobs.specs import load_spec
from neural._src.jobs.specs import shipped_configs
from neural._src.jobs.workers import auto_jobs
from neural._src.jobs.workers import on_gpu
from neural._src.runtime.config import ConfigError
from neural._src.runtime.environment import environment
from neural._src.runtime.outcomes import read_outcomes

SCALES = ("small", "paper")
REPORT_MD = "reproduce.md"
CALLS = "calls.jsonl"   # each call's wall time, appended: the figure's total across resumes
REPORT_JSON = "reproduce.json"
FIGURE_PNG = "reproduce.png"
# The figures the paper draws per agent (agent 1 blue, agent 2 red); the others show
# one curve per protocol (the agents' mean).
PER_AGENT = frozenset({"Fig. 5", "Fig. 12", "Fig. 13", "Fig. 14", "Fig. 15"})
SEEDS = {"small": 3, "paper": 1}   # seeds per run by default, by scale
GPU_SEEDS = 10  # small scale with --jobs auto on a GPU: a figure takes minutes there, and
# 10 seeds decide effects of about 0.02 at the seeds' median spread (docs/reproduce.md)


# ---------------------------------------------------------------------------
# Which configs


def shipped_figures() -> dict[str, dict[str, list[str]]]:
  """``{"Fig. N": {"small": [config names], "paper": [...]}}`` of the shipped configs.

  The figures of Afonin & Karimireddy: configs of the KD protocols whose ``figure``
  is "Fig. N" (the other papers' methods have configs of their own). Paper scale
  lists the full-size config first, then its ``_text`` variant.
  """
  figures: dict[str, dict[str, list[str]]] = {}
  for name, path in shipped_configs().items():
    spec = load_spec(path)
    if re.fullmatch(r"Fig\. \d+", spec.figure) and "method" not in spec.base:
      scale = "small" if name.endswith("_small") else "paper"
      figures.setdefault(spec.figure, {"small": [], "paper": []})[scale].append(name)
  for scales in figures.values():
    scales["paper"].sort(key=lambda n: (n.endswith("_text"), n))
  return dict(sorted(figures.items(), key=lambda kv: int(kv[0].split()[-1])))


def figure_configs(figure: int | str, scale: str = "small") -> list[str]:
  """The shipped configs that reproduce ``figure`` at ``scale`` ("small" or "paper").

  Raises:
    ConfigError: an unknown scale, or a figure no shipped config has (the message
      names the figures there are).
  """
  if scale not in SCALES:
    raise ConfigError(f"scale: expected one of {', '.join(SCALES)}, got {scale!r}")
  label = figure_label(figure)
  figures = shipped_figures()
  if label not in figures or not figures[label][scale]:
    numbers = ", ".join(f.split()[-1] for f in figures)
    raise ConfigError(f"figure: no shipped config reproduces {label}; the figures are "
                      f"{numbers}")
  return list(figures[label][scale])


# ---------------------------------------------------------------------------
# Running


def _read_other(path: str | os.PathLike) -> tuple[str, dict[str, Curve]]:
  """(figure, its curves named ``"Fig. N/<run>"``) from another reproduction's JSON."""
  file = Path(path)
  file = file / REPORT_JSON if file.is_dir() else file
  try:
    data = read_json(file, "reproduce.json")   # a regular file, bounded in size and depth
    label = figure_label(data["figure"])
    curves: dict[str, Curve] = {}
    for config in data["configs"]:
      curves.update(curves_from_mapping(config["curves"], prefix=f"{label}/"))
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ConfigError(f"with: {file} is not a readable reproduce.json "
                      f"({' '.join(str(e).split())[:200]})") from None
  return label, curves


def default_seeds(scale: str, auto_jobs: bool) -> int:
  """Seeds per run when none are asked for: 1 at paper scale; at small scale 3, or
  :data:`GPU_SEEDS` with ``--jobs auto`` on a GPU (where a figure takes minutes)."""
  if scale == "small" and auto_jobs and on_gpu():
    return GPU_SEEDS
  return SEEDS[scale]


def with_paper_rounds(runs: list[tuple[str, Any]], paper_rounds: int | None
                      ) -> list[tuple[str, Any]]:
  """``runs`` with ``paper_rounds`` paper rounds each (:func:`reproduce`'s ``paper_rounds``;
  ``None``: as they are)."""
  if paper_rounds is None:
    return runs
  out = []
  for name, config in runs:
    steps = steps_for_paper_rounds(config.protocol, paper_rounds, config.agents)
    try:
      out.append((name, config.replace(rounds=steps)))
    except ConfigError as e:   # the flag the user set, not the field it became
      raise ConfigError(f"paper_rounds (--paper-rounds): {paper_rounds} paper rounds are "
                        f"{steps} logged rounds of {name or 'the run'}, which its config "
                        f"refuses ({e})") from None
  return out


def reproduce(figure: int | str, workdir: str | os.PathLike, scale: str = "small",
              overrides: Mapping[str, Any] | None = None, *, seeds: int | None = None,
              others: Sequence[str | os.PathLike] = (), progress: bool = False,
              max_rounds: int | None = None, jobs: int | str = 1,
              paper_rounds: int | None = None, executor: str = "local",
              address: str | None = None, batch: int | str = 1) -> Reproduction:
  """Runs (or resumes) a figure's shipped config(s), draws it and checks its statements.

  Args:
    figure: the figure (4, "4" or "Fig. 4"); ``neural configs`` lists the configs
      and their figures.
    workdir: the directory; seed k's runs go to ``workdir/seed=k/<run>/`` (two
      configs: ``workdir/seed=k/<config>/<run>/``). Called again, finished runs are
      read and unfinished ones resume, as with ``neural run``.
    scale: "small" (the ``*_small`` config: embedded data, a CPU) or "paper" (the
      full-size config(s): MNIST / CIFAR-10 files in ``data_dir``, a GPU).
    overrides: config fields set in every run (e.g. ``{"data_dir": "~/data"}``,
      or ``{"rounds": 2, "epochs": 1}`` for a quick look).
    seeds: how many seeds (``None``: 3 at small scale, 10 there with ``jobs="auto"``
      on a GPU, 1 at paper scale); seed k sets ``seed`` to the config's seed + k.
    others: other reproductions (their directories or ``reproduce.json``) whose
      curves the statements comparing figures use (Fig. 8 with Fig. 6's).
    progress: progress bars and the name of each run.
    max_rounds: do at most this many rounds of each run in this call (a later
      call resumes); the report then marks the unfinished runs.
    jobs: run this many runs at a time, in worker processes (``neural._src.jobs.workers``;
      the same numbers as one at a time). On a 2-core CPU 2 does 1.25-1.4x the runs
      per hour of 1; on one H200, 3 ran Fig. 6's 72 small runs in 1.6 minutes. "auto":
      :func:`neural._src.jobs.workers.auto_jobs` (3 on a GPU, 2 on a CPU of 2 cores or more).
    paper_rounds: give every run this many paper rounds, each keeping its steps per paper
      round (AKD M, EKD 2, the rest 1): the small configs have 5, and 20 (the paper's)
      decides the statements about the long run that 5 rounds leave beyond the horizon.
      ``None``: the configs' own. Use a new ``workdir`` (a run of other rounds there is
      an error).
    executor: "local" (this machine: ``jobs`` at a time) or "ray": every run a Ray task
      (``neural._src.jobs.ray_executor``; Ray, an optional extra, decides how many run at
      a time from the cluster's resources; the same numbers). ``workdir`` must then be
      on storage every node mounts at the same path.
    address: with "ray": ``None`` starts Ray on this machine; ``"auto"`` or
      ``"HOST:PORT"`` (the head's) joins a running cluster.
    batch: train up to this many runs that share a protocol and shapes (seeds, Alphas,
      learning rates, weight decays) as one program (``neural._src.jobs.batched``; the
      same numbers up to float32 rounding); with ``jobs`` > 1 each worker process takes
      a whole batch, with executor "ray" each Ray task. "auto": 32 on a GPU, 1 on a CPU
      (measured: no faster there). Default 1: one run at a time.

  Returns:
    The :class:`neural.Reproduction`; ``reproduce.md``, ``reproduce.json`` and
    ``reproduce.png`` are written (atomically) into ``workdir`` (the PNG into each
    config's directory).

  Raises:
    ConfigError: an unknown figure or scale, a bad override or seed count, or an
      unreadable ``others``. ``DataError``: the paper-scale data is missing.
      ``ExperimentError``: a workdir holding other runs.
  """
  started = time.perf_counter()
  label = figure_label(figure)
  names = figure_configs(label, scale)
  overrides = dict(overrides or {})
  if max_rounds is not None and max_rounds < 1:
    raise ConfigError(f"max_rounds: expected an integer >= 1, got {max_rounds}")
  if paper_rounds is not None:
    if isinstance(paper_rounds, bool) or not isinstance(paper_rounds, int) or paper_rounds < 1:
      raise ConfigError(f"paper_rounds: expected an integer >= 1, got {paper_rounds!r}")
    if "rounds" in overrides:
      raise ConfigError("paper_rounds: set either paper_rounds (every run's paper rounds) or "
                        "the rounds override (every run's logged rounds), not both")
  check_executor(executor, address, jobs)   # Ray not installed: said before anything is written
  auto = jobs == "auto"
  if auto:
    jobs = auto_jobs()
  if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
    raise ConfigError(f"jobs: expected an integer >= 1 or 'auto', got {jobs!r}")
  batch = batch_size(batch, on_gpu)
  count = default_seeds(scale, auto) if seeds is None else seeds
  if isinstance(count, bool) or not isinstance(count, int) or count < 1:
    raise ConfigError(f"seeds: expected an integer >= 1, got {seeds!r}")
  other_curves: dict[str, Curve] = {}
  for path in others:
    other_curves.update(_read_other(path)[1])
  workdir = Path(workdir)
  specs = [(name, load_spec(name)) for name in names]
  base = overrides.get("seed", 0)
  if isinstance(base, bool) or not isinstance(base, int):   # null, [1], 1.9: never int()ed
    raise ConfigError(f"seed: expected an integer, got {repr(base)[:80]}")
  planned = [(name, spec, [with_paper_rounds(spec.expand({**overrides, "seed": base + k}),
                                             paper_rounds) for k in range(count)])
             for name, spec in specs]   # validates every run before any starts
  seed_values = tuple(base + k for k in range(count))
  try:
    return _reproduce(label, workdir, scale, overrides, planned, seed_values, count,
                      other_curves, progress, max_rounds, jobs, batch, executor, address,
                      started)
  finally:
    _log_call(workdir, started)


def _log_call(workdir: Path, started: float) -> None:
  """Appends this call's wall time to ``workdir/calls.jsonl`` (also when it is stopped
  by an error or Ctrl-C: a figure's total time sums every call that ran it)."""
  if not (workdir / "seed=0").is_dir():   # refused before any run started: nothing to time
    return
  line = json.dumps({"seconds": round(time.perf_counter() - started, 1),
                     "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n"
  try:
    append_file(workdir / CALLS, line)
  except OSError as e:   # a timing is not worth the error it would hide
    print(f"neural reproduce: this call's time is not in {workdir / CALLS}: {e}",
          file=sys.stderr)


def earlier_calls(workdir: Path) -> tuple[int, float]:
  """How many earlier calls ran in ``workdir`` and their wall time in seconds (lines of
  ``calls.jsonl`` that do not parse, e.g. cut by a crash, are skipped)."""
  try:
    lines = read_json_lines(workdir / CALLS, "calls file")
  except ReadError:   # none yet, or unreadable: no earlier call counted
    return 0, 0.0
  seconds = []
  for _, line in lines:
    value = line.get("seconds") if isinstance(line, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
      seconds.append(float(value))
  return len(seconds), sum(seconds)


def _reproduce(label: str, workdir: Path, scale: str, overrides: dict[str, Any],
               planned: list[tuple[str, Any, list[Any]]], seed_values: tuple[int, ...],
               count: int, other_curves: dict[str, Curve], progress: bool, max_rounds: int | None,
               jobs: int, batch: int, executor: str, address: str | None,
               started: float) -> Reproduction:
  calls, before = earlier_calls(workdir)

  def seed_dir(name: str, k: int) -> Path:
    return workdir / f"seed={k}" / ("" if len(planned) == 1 else name)

  alone = jobs == 1 and batch == 1 and executor == "local"   # every run in this process
  done = {} if alone else _run_in_workers(
      label, [(name, spec, per_seed, [seed_dir(name, k) for k in range(count)])
              for name, spec, per_seed in planned], jobs, max_rounds, progress,
      batch=batch, executor=executor, address=address)
  results = []
  for name, spec, per_seed in planned:
    where = workdir if len(planned) == 1 else workdir / name
    seed_curves = []
    for k, runs in enumerate(per_seed):
      if progress and alone:
        print(f"{label}: {name}, seed {k + 1} of {count} ({len(runs)} runs) in "
              f"{seed_dir(name, k)}", flush=True)
      rows = run_configs(runs, seed_dir(name, k), progress=progress and alone,
                         description=spec.description, max_rounds=max_rounds,
                         done=done.get((name, k)))
      lines = {run: read_outcomes(path)   # the runs' per-image outcomes, where recorded
               for (run, _), path in zip(runs, run_dirs(runs, seed_dir(name, k)), strict=True)}
      seed_curves.append(paper_curves(rows, dict(runs), lines))
    curves = merge_seeds(seed_curves)
    checks = tuple(evaluate(figure_claims(label), {**curves, **other_curves}))
    control = matched_control(label, checks, {**curves, **other_curves}, borrowed=False)
    at_our_noise = matched_control(label, checks, {**curves, **other_curves}, borrowed=True)
    where.mkdir(parents=True, exist_ok=True)
    png = where / FIGURE_PNG
    plot_reproduction(label, curves, png, title=f"{label}: {name} ({count} seed"
                      f"{'s' if count > 1 else ''})", per_agent=label in PER_AGENT)
    results.append(ConfigReproduction(name, spec.description, str(where), curves, checks,
                                      control, str(png), at_our_noise))
  seconds = time.perf_counter() - started
  result = Reproduction(label, scale, overrides, seed_values, tuple(results),
                        {"md": str(workdir / REPORT_MD), "json": str(workdir / REPORT_JSON)},
                        seconds, before + seconds, calls + 1, environment())
  atomic_write(workdir / REPORT_JSON, json.dumps(result.to_dict(), indent=2) + "\n")
  atomic_write(workdir / REPORT_MD, markdown(result, workdir))
  return result


def _run_in_workers(label: str, planned: Sequence[tuple[str, Any, Sequence[Any], Sequence[Path]]],
                    jobs: int, max_rounds: int | None, progress: bool, *, batch: int = 1,
                    executor: str = "local", address: str | None = None
                    ) -> dict[tuple[str, int], dict[str, list[dict[str, Any]]]]:
  """Every run of every config and seed by ``executor`` (:func:`neural._src.jobs.executors.
  run_tasks`: ``jobs`` worker processes, batches of up to ``batch`` runs, Ray tasks): their
  rows by (config, seed), then by run. Each seed's directory is checked and claimed first."""
  tasks, keys = [], []
  for name, spec, per_seed, dirs in planned:
    for k, (runs, where) in enumerate(zip(per_seed, dirs, strict=True)):
      paths = run_dirs(runs, where)
      if len(paths) > 1:
        where.mkdir(parents=True, exist_ok=True)
        write_sweep(runs, where, spec.description)
      prefix = f"seed={k}/" + (f"{name}/" if len(planned) > 1 else "")
      for (run, config), path in zip(runs, paths, strict=True):
        tasks.append((prefix + run, config, path))
        keys.append((name, k, run))
  rows = run_tasks(tasks, jobs=jobs, batch=batch, executor=executor, address=address,
                   max_rounds=max_rounds, progress=progress, label=label)
  done: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
  for (name, k, run), run_rows in zip(keys, rows, strict=True):
    done.setdefault((name, k), {})[run] = run_rows
  return done
