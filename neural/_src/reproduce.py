"""Reproducing a figure of the paper: ``neural reproduce --figure N``.

:func:`reproduce` finds the shipped config(s) of a figure of Afonin & Karimireddy
(Sec. 6, App. H) at a scale ("small": the ``*_small`` config, embedded data, a
CPU; "paper": the full-size config and, for Figs. 9-10, its ``*_text`` variant),
runs (or resumes) every run once per seed with :func:`neural.run_configs`, and
writes into the work directory:

- ``reproduce.png``: the figure as the paper draws it: one panel per setting,
  the paper's rounds and curves (:func:`neural.paper_rounds`: AKD rounds of M
  steps, the mean of the agents, EKD's even partial sums; the best local epoch
  where the run logs it), the mean over the seeds with a band of one standard
  deviation; per agent for the figures the paper draws per agent;
- ``reproduce.md`` and its twin ``reproduce.json``: per run, round 1, the best
  round and the last round (mean ± spread over the seeds); then each statement the
  paper makes about the figure (``neural._src.claims``), decided by its noise-aware
  rule (``neural._src.rules``): "reproduced", "not reproduced", "inconclusive" or
  "not testable here", with the numbers used, and beside it the verdict of the same
  rule on the authors' own logged curves where they exist (Figs. 6, 8, 9, 10: the
  control, ``neural._src.authors``).

Seed k runs every run with ``seed`` = the config's seed + k (data subsets, the
split and every initialisation), into ``workdir/seed=k/<run>/`` (two configs:
``workdir/seed=k/<config>/<run>/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import json
import os
from pathlib import Path
import re
import time
from typing import Any

from matplotlib.figure import Figure
import numpy as np

from fedkrr.io import atomic_savefig
from fedkrr.io import atomic_write
from fedkrr.io import read_json
from neural._src.authors import control_checks
from neural._src.claims import Check
from neural._src.claims import evaluate
from neural._src.claims import figure_claims
from neural._src.config import ConfigError
from neural._src.config import ExperimentConfig
from neural._src.config import RunConfig
from neural._src.curves import Curve
from neural._src.curves import curves_from_mapping
from neural._src.data import load_dataset
from neural._src.experiment import total_rounds
from neural._src.paper_units import BEST
from neural._src.paper_units import default_accuracy
from neural._src.paper_units import paper_round_count
from neural._src.paper_units import paper_rounds
from neural._src.rules import INCONCLUSIVE
from neural._src.rules import NOT_REPRODUCED
from neural._src.rules import NOT_TESTABLE
from neural._src.rules import REPRODUCED
from neural._src.rules import VERDICTS
from neural._src.specs import load_spec
from neural._src.specs import run_configs
from neural._src.specs import run_dirs
from neural._src.specs import shipped_configs
from neural._src.specs import write_sweep
from neural._src.workers import auto_jobs
from neural._src.workers import run_in_workers

SCALES = ("small", "paper")
REPORT_MD = "reproduce.md"
REPORT_JSON = "reproduce.json"
FIGURE_PNG = "reproduce.png"
# The figures the paper draws per agent (agent 1 blue, agent 2 red); the others show
# one curve per protocol (the agents' mean).
PER_AGENT = frozenset({"Fig. 5", "Fig. 12", "Fig. 13", "Fig. 14", "Fig. 15"})
SEEDS = {"small": 3, "paper": 1}   # seeds per run by default, by scale
# Test-set sizes of the datasets read from files (the embedded ones are split here).
_TEST_SIZES = {"mnist": 10_000, "cifar10": 10_000, "cinic10": 90_000}
UNSUPPORTED = "the paper's own runs do not support this at these tolerances"


# ---------------------------------------------------------------------------
# Which configs


def figure_label(figure: int | str) -> str:
  """"Fig. N" for ``N``, ``"N"`` or ``"Fig. N"``.

  Raises:
    ConfigError: not a figure number.
  """
  match = re.fullmatch(r"\s*(?:fig(?:ure)?\.?\s*)?(\d+)\s*", str(figure), re.IGNORECASE)
  if not match:
    raise ConfigError(f"figure: expected a figure number such as 4, got {figure!r}")
  return f"Fig. {int(match.group(1))}"


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
# Curves in the paper's units


def test_points(config: RunConfig) -> int:
  """How many test points a run of ``config`` evaluates on (the binomial error's n)."""
  size = _TEST_SIZES.get(config.dataset)
  if size is None:
    size = len(load_dataset(config.dataset, config.data_dir, seed=config.data_seed).y_test)
  return size if config.test_subset is None else min(size, config.test_subset)


def _curve(name: str, rows: Sequence[Mapping[str, Any]], accuracy: str,
           steps: int | None, points: int, dataset: str) -> Curve:
  protocol = str(rows[0]["protocol"])
  paper = paper_rounds(rows, accuracy)
  agent_rows = [r for r in rows if isinstance(r["agent"], int)]
  agents = max(r["agent"] for r in agent_rows) + 1
  models = {int(r["agent"]): str(r.get("model", "?")) for r in agent_rows}
  per_agent = tuple(tuple(float(v) for v in vs)
                    for vs in zip(*[r["agent_accuracies"] for r in paper]))
  return Curve(name, protocol, (tuple(float(r["test_accuracy"]) for r in paper),),
               (per_agent,), (tuple(v[0] for v in per_agent),),
               len(paper) if steps is None else paper_round_count(protocol, steps, agents),
               accuracy, tuple(models[a] for a in sorted(models)), points, dataset)


def _run_curves(name: str, rows: Sequence[Mapping[str, Any]],
                config: RunConfig | None) -> list[Curve]:
  steps = total_rounds(config) if isinstance(config, ExperimentConfig) else None
  points = test_points(config) if config is not None else 0
  dataset = config.dataset if config is not None else ""
  if not rows:
    protocol = getattr(config, "protocol", "?")
    agents = config.agents if config is not None else 1
    return [Curve(name, protocol, ((),), rounds=paper_round_count(protocol, steps or 1, agents),
                  test_points=points, dataset=dataset)]
  accuracy = default_accuracy(rows)
  if rows[0].get("protocol") != "ekd":
    return [_curve(name, rows, accuracy, steps, points, dataset)]
  key = BEST if accuracy == "best" else "test_accuracy"
  local_rows = sorted((r for r in rows if r["round"] == 0 and isinstance(r["agent"], int)),
                      key=lambda r: r["agent"])
  paper = paper_rounds(rows, accuracy)
  curves = [Curve(name, "ekd", (tuple(float(r["test_accuracy"]) for r in paper),), (),
                  (tuple(float(r.get(key, r["test_accuracy"])) for r in local_rows),),
                  len(paper) if steps is None else paper_round_count("ekd", steps, 1), accuracy,
                  tuple(str(r.get("model", "?")) for r in local_rows), points, dataset)]
  for start in sorted({int(r["start"]) for r in rows if "start" in r}):
    akd = [{**r, "protocol": "akd"} for r in rows if r.get("start") == start]
    curves.append(_curve(f"{name}:akd-from-agent{start + 1}", akd, accuracy, steps, points,
                         dataset))
  return curves


def paper_curves(results: Mapping[str, Sequence[Mapping[str, Any]]],
                 configs: Mapping[str, RunConfig] | None = None) -> dict[str, Curve]:
  """The runs' test accuracy in the paper's units, by run name (one seed each).

  Args:
    results: metric rows by run name (as :func:`neural.run_configs` returns them;
      names ``setting__variant``).
    configs: each run's config, to tell an unfinished run from a finished one and
      to know the test set's size (without it, every run counts as finished and
      the test set's size is unknown).

  Returns:
    A :class:`neural.Curve` per run with one seed: the agents' mean per paper round
    (EKD: its even partial sums) and each agent's values, from the best local epoch
    where the run logs it, else the end of local training. An EKD run adds the AKD
    run from each agent that it holds (``<name>:akd-from-agent<s>``).
  """
  curves: dict[str, Curve] = {}
  for name, rows in results.items():
    for curve in _run_curves(name, list(rows), (configs or {}).get(name)):
      curves[curve.name] = curve
  return curves


def merge_seeds(per_seed: Sequence[Mapping[str, Curve]]) -> dict[str, Curve]:
  """One curve per run name with the seeds of every mapping stacked (in order)."""
  merged: dict[str, Curve] = {}
  for curves in per_seed:
    for name, c in curves.items():
      if name not in merged:
        merged[name] = c
        continue
      m = merged[name]
      merged[name] = m._replace(values=m.values + c.values, agents=m.agents + c.agents,
                                local=m.local + c.local)
  return merged


def curves_to_mapping(curves: Mapping[str, Curve]) -> dict[str, dict[str, Any]]:
  """The plain format of :func:`neural.check_claims` (``{setting: {variant: {...}}}``)."""
  out: dict[str, dict[str, Any]] = {}
  for c in curves.values():
    entry: dict[str, Any] = {"mean": [list(v) for v in c.values], "rounds": c.rounds,
                             "test_points": c.test_points}
    if c.agents:
      entry["agents"] = [[list(a) for a in seed] for seed in c.agents]
    if c.local:
      entry["local"] = [list(x) for x in c.local]
    out.setdefault(c.setting, {})[c.variant] = entry
  return out


def check_claims(figure: int | str, curves: Mapping[str, Mapping[str, Any]], *,
                 test_points: int = 0, dataset: str = "",
                 other: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None
                 ) -> list[Check]:
  """Checks the paper's statements about ``figure`` on curves given as plain numbers.

  The rules of ``neural reproduce``, for anyone's logs: each statement is decided
  against the noise (the seeds' spread and the test set's binomial standard error)
  as "reproduced", "not reproduced", "inconclusive" or "not testable here".

  Args:
    figure: the figure (6, "6" or "Fig. 6").
    curves: ``{setting: {variant: data}}``, named as the figure's configs name their
      runs (settings ``alpha=0.0``, ``same``, ...; variants ``avgkd``, ``pkd``,
      ``pkd-mean``, ``fedavg``, ``central``, ``ekd``, ``ekd:akd-from-agent1``,
      ``from-agent2``, ``akd``; "" for a one-axis sweep). ``data`` is a list of
      per-seed lists of per-round accuracies in the paper's units (round 1 first; the
      agents' mean), or a dict with ``"mean"`` (that list) and optionally ``"agents"``
      (per seed, per agent, per round), ``"local"`` (per seed, per agent: EKD's local
      models), ``"rounds"`` and ``"test_points"``.
    test_points: the test set's size (0: unknown; no binomial error).
    dataset: the data the runs used (statements about other data are not tested).
    other: other figures' curves (``{"Fig. 6": {...}}``) for statements comparing
      with them.

  Returns:
    One :class:`neural.Check` per statement and setting.

  Raises:
    ConfigError: not a figure number. ValueError: malformed curves.

  Example:
    >>> curves = {"alpha=0.0": {"pkd": [[0.50, 0.90, 0.80, 0.70, 0.60]]}}
    >>> checks = neural.check_claims(6, curves, test_points=10000)
    >>> check = next(c for c in checks if c.statement == "PKD degrades with rounds")
    >>> check.verdict
    'reproduced'
  """
  label = figure_label(figure)
  mapping = curves_from_mapping(curves, test_points=test_points, dataset=dataset)
  for name, data in (other or {}).items():
    mapping.update(curves_from_mapping(data, test_points=test_points, dataset=dataset,
                                       prefix=f"{figure_label(name)}/"))
  return evaluate(figure_claims(label), mapping)


def check_statements(figure: int | str, results: Mapping[str, Sequence[Mapping[str, Any]]],
                     configs: Mapping[str, RunConfig] | None = None) -> list[Check]:
  """Checks the paper's statements about ``figure`` against runs' metric rows (one seed).

  Args:
    figure: the figure (4, "4" or "Fig. 4").
    results: metric rows by run name, named as the figure's shipped config names
      its runs (e.g. ``same__from-agent1``, ``alpha=0.1__avgkd``).
    configs: the runs' configs (see :func:`paper_curves`).

  Returns:
    One :class:`neural.Check` per statement and setting (:data:`neural.CLAIMS`).

  Example:
    >>> rows = [{"round": t, "agent": t % 2, "protocol": "akd", "model": "cnn",
    ...          "test_accuracy": 0.9 - 0.05 * t, "test_loss": 0.0} for t in range(6)]
    >>> checks = neural.check_statements(4, {"same__from-agent1": rows})
    >>> check = next(c for c in checks if c.setting == "same")
    >>> check.statement, check.verdict
    ('AKD degrades with rounds', 'reproduced')
  """
  return evaluate(figure_claims(figure_label(figure)), paper_curves(results, configs))


# ---------------------------------------------------------------------------
# The result


@dataclasses.dataclass(frozen=True)
class ConfigReproduction:
  """One shipped config of a reproduced figure.

  Attributes:
    config: the shipped config's name.
    description: its description.
    workdir: where its runs are (``workdir/seed=k/...`` per seed).
    curves: the runs' curves in the paper's units, by run name, one row per seed.
    checks: the paper's statements, checked.
    control: the same statements checked on the authors' curves, by (statement,
      setting); empty where their logs do not cover the figure.
    figure: the path of the drawn figure (PNG).
  """

  config: str
  description: str
  workdir: str
  curves: dict[str, Curve]
  checks: tuple[Check, ...]
  control: dict[tuple[str, str], Check]
  figure: str


@dataclasses.dataclass(frozen=True)
class Reproduction:
  """What :func:`neural.reproduce` ran, drew, checked and wrote.

  Attributes:
    figure: "Fig. N".
    scale: "small" or "paper".
    overrides: the config fields set for every run.
    seeds: the seeds each run ran with.
    configs: one entry per shipped config of the figure at this scale.
    paths: ``{"md": ..., "json": ...}``: the report files.
    seconds: the wall time of the call (resumed runs: only this call's part).
  """

  figure: str
  scale: str
  overrides: dict[str, Any]
  seeds: tuple[int, ...]
  configs: tuple[ConfigReproduction, ...]
  paths: dict[str, str]
  seconds: float = 0.0

  @property
  def checks(self) -> list[Check]:
    """Every check of every config."""
    return [c for config in self.configs for c in config.checks]

  def counts(self) -> dict[str, int]:
    """How many checks got each verdict."""
    return {v: sum(c.verdict == v for c in self.checks) for v in VERDICTS}

  def to_dict(self) -> dict[str, Any]:
    """The content of ``reproduce.json``."""
    return {
        "figure": self.figure, "scale": self.scale, "overrides": self.overrides,
        "seeds": list(self.seeds), "seconds": round(self.seconds, 1), "counts": self.counts(),
        "configs": [{
            "config": c.config, "description": c.description, "workdir": c.workdir,
            "figure_png": c.figure,
            "runs": [_run_summary(curve) for curve in c.curves.values()],
            "curves": curves_to_mapping(c.curves),
            "statements": [check._asdict() | {"runs": list(check.runs)} | _control_fields(
                c.control.get((check.statement, check.setting))) for check in c.checks],
        } for c in self.configs]}


def _control_fields(control: Check | None) -> dict[str, Any]:
  if control is None:
    return {"control": None, "control_numbers": None}
  return {"control": control.verdict, "control_numbers": control.numbers}


def _stats(values: np.ndarray) -> dict[str, Any]:
  """Mean and spread over the seeds of a (seeds,) array, rounded for the report."""
  return {"mean": float(values.mean()),
          "spread": float(values.std(ddof=1)) if len(values) > 1 else 0.0}


def _run_summary(curve: Curve) -> dict[str, Any]:
  v = curve.array()
  if not v.size:
    return {"run": curve.name, "setting": curve.setting, "variant": curve.variant,
            "protocol": curve.protocol, "seeds": curve.seeds, "rounds_done": 0,
            "rounds": curve.rounds, "finished": False}
  mean = v.mean(axis=0)
  best = int(np.argmax(mean))
  return {"run": curve.name, "setting": curve.setting, "variant": curve.variant,
          "protocol": curve.protocol, "accuracy": curve.accuracy, "models": list(curve.models),
          "seeds": curve.seeds, "test_points": curve.test_points,
          "rounds_done": curve.done, "rounds": curve.rounds, "finished": curve.finished,
          "round_1": _stats(v[:, 0]), "best_round": best + 1, "best": _stats(v[:, best]),
          "last_round": curve.done, "last": _stats(v[:, -1]),
          "agents": [{"round_1": _stats(a[:, 0]), "last": _stats(a[:, -1])}
                     for a in np.moveaxis(curve.agent_array(), 1, 0)]}


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


def reproduce(figure: int | str, workdir: str | os.PathLike, scale: str = "small",
              overrides: Mapping[str, Any] | None = None, *, seeds: int | None = None,
              others: Sequence[str | os.PathLike] = (), progress: bool = False,
              max_rounds: int | None = None, jobs: int | str = 1) -> Reproduction:
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
    seeds: how many seeds (``None``: 3 at small scale, 1 at paper scale); seed k
      sets ``seed`` to the config's seed + k.
    others: other reproductions (their directories or ``reproduce.json``) whose
      curves the statements comparing figures use (Fig. 8 with Fig. 6's).
    progress: progress bars and the name of each run.
    max_rounds: do at most this many rounds of each run in this call (a later
      call resumes); the report then marks the unfinished runs.
    jobs: run this many runs at a time, in worker processes (``neural._src.workers``;
      the same numbers as one at a time). On a 2-core CPU 2 does 1.25-1.4x the runs
      per hour of 1; on one H200, 3 ran Fig. 6's 72 small runs in 1.6 minutes. "auto":
      :func:`neural._src.workers.auto_jobs` (3 on a GPU, 2 on a CPU of 2 cores or more).

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
  if jobs == "auto":
    jobs = auto_jobs()
  if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
    raise ConfigError(f"jobs: expected an integer >= 1 or 'auto', got {jobs!r}")
  count = SEEDS[scale] if seeds is None else seeds
  if isinstance(count, bool) or not isinstance(count, int) or count < 1:
    raise ConfigError(f"seeds: expected an integer >= 1, got {seeds!r}")
  other_curves: dict[str, Curve] = {}
  for path in others:
    other_curves.update(_read_other(path)[1])
  workdir = Path(workdir)
  specs = [(name, load_spec(name)) for name in names]
  base = int(overrides.get("seed", 0))
  planned = [(name, spec, [spec.expand({**overrides, "seed": base + k}) for k in range(count)])
             for name, spec in specs]   # validates every run before any starts
  seed_values = tuple(base + k for k in range(count))
  control = {(c.statement, c.setting): c for c in control_checks(label)}

  def seed_dir(name: str, k: int) -> Path:
    return workdir / f"seed={k}" / ("" if len(planned) == 1 else name)

  done = {} if jobs == 1 else _run_in_workers(
      label, [(name, spec, per_seed, [seed_dir(name, k) for k in range(count)])
              for name, spec, per_seed in planned], jobs, max_rounds, progress)
  results = []
  for name, spec, per_seed in planned:
    where = workdir if len(planned) == 1 else workdir / name
    seed_curves = []
    for k, runs in enumerate(per_seed):
      if progress and jobs == 1:
        print(f"{label}: {name}, seed {k + 1} of {count} ({len(runs)} runs) in "
              f"{seed_dir(name, k)}", flush=True)
      rows = run_configs(runs, seed_dir(name, k), progress=progress and jobs == 1,
                         description=spec.description, max_rounds=max_rounds,
                         done=done.get((name, k)))
      seed_curves.append(paper_curves(rows, dict(runs)))
    curves = merge_seeds(seed_curves)
    checks = tuple(evaluate(figure_claims(label), {**curves, **other_curves}))
    where.mkdir(parents=True, exist_ok=True)
    png = where / FIGURE_PNG
    plot_reproduction(label, curves, png, title=f"{label}: {name} ({count} seed"
                      f"{'s' if count > 1 else ''})", per_agent=label in PER_AGENT)
    results.append(ConfigReproduction(name, spec.description, str(where), curves, checks,
                                      control, str(png)))
  result = Reproduction(label, scale, overrides, seed_values, tuple(results),
                        {"md": str(workdir / REPORT_MD), "json": str(workdir / REPORT_JSON)},
                        time.perf_counter() - started)
  atomic_write(workdir / REPORT_JSON, json.dumps(result.to_dict(), indent=2) + "\n")
  atomic_write(workdir / REPORT_MD, markdown(result, workdir))
  return result


def _run_in_workers(label: str, planned: Sequence[tuple[str, Any, Sequence[Any], Sequence[Path]]],
                    jobs: int, max_rounds: int | None, progress: bool
                    ) -> dict[tuple[str, int], dict[str, list[dict[str, Any]]]]:
  """Every run of every config and seed in ``jobs`` worker processes: their rows by
  (config, seed), then by run. Each seed's directory is checked and claimed first."""
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
  if progress:
    print(f"{label}: {len(tasks)} runs, {jobs} at a time in worker processes", flush=True)
  rows = run_in_workers(tasks, jobs, max_rounds=max_rounds, progress=progress, label=label)
  done: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
  for (name, k, run), run_rows in zip(keys, rows, strict=True):
    done.setdefault((name, k), {})[run] = run_rows
  return done


# ---------------------------------------------------------------------------
# The report


def _cell(text: Any) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def _command(result: Reproduction) -> str:
  number = result.figure.split()[-1]
  sets = "".join(f" --set {k}={v if isinstance(v, str) else json.dumps(v)}"
                 for k, v in result.overrides.items())
  return (f"neural reproduce --figure {number} --scale {result.scale} --seeds "
          f"{len(result.seeds)} --workdir DIR{sets}")


def _pm(stats: Mapping[str, float] | None) -> str:
  if not stats:
    return ""
  return f"{stats['mean']:.3f}" + (f" ± {stats['spread']:.3f}" if stats["spread"] else "")


def _duration(seconds: float) -> str:
  return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _stand_in(result: Reproduction) -> list[str]:
  """A warning where the runs use other data than the figure's statements are about."""
  data = {c.dataset for config in result.configs for c in config.curves.values() if c.dataset}
  if result.figure in ("Fig. 9", "Fig. 10") and data and "cifar10" not in data:
    return [f"**An MNIST stand-in.** The paper's {result.figure} is on CIFAR-10 with VGG; "
            f"these runs are on {', '.join(sorted(data))}. They test whether the trends the "
            "paper reports for CIFAR-10 also appear here; the statement that holds for "
            "CIFAR-10 alone (EKD does not improve) is not testable here.", ""]
  return []


def markdown(result: Reproduction, workdir: str | os.PathLike) -> str:
  """``reproduce.md``: the runs' round 1 / best / last, and the statements checked."""
  counts = result.counts()
  seeds = len(result.seeds)
  controlled = [c for c in result.configs if c.control]
  lines = [
      f"# {result.figure} at {result.scale} scale", "",
      f"`{_command(result)}` ran the shipped config"
      f"{'s' if len(result.configs) > 1 else ''} "
      + ", ".join(f"`{c.config}`" for c in result.configs)
      + f" with {seeds} seed{'s' if seeds > 1 else ''} ({', '.join(map(str, result.seeds))}); "
      f"this call took {_duration(result.seconds)}.", "", *_stand_in(result),
      "Values are test accuracy in the paper's units (`neural.paper_rounds`): rounds "
      "numbered from 1, an AKD round is M steps, the mean over the agents, EKD's even "
      "partial sums; from the best local epoch where the run logs it (`epoch_eval`), "
      "else the end of local training (the `accuracy` column); mean ± the seeds' "
      "standard deviation. A run `<ekd run>:akd-from-agent<s>` is the AKD run from agent "
      "s inside an EKD run.", "",
      "**How a statement is decided.** Its rule computes a difference of accuracies on each "
      "seed (a drop from the peak, a gain over round 1, a margin between two runs) and "
      "compares the mean over the seeds with a threshold (0 for a direction, 0.03 for \"no "
      "material change\"), allowing for the noise: the larger of the seeds' standard "
      "deviation and the test set's binomial standard error (numbers shown as effect ± "
      "noise). Clear either way: reproduced / not reproduced; within the noise: "
      "inconclusive. See `neural._src.rules`.", "",
      f"**{len(result.checks)} checks: {counts[REPRODUCED]} reproduced, "
      f"{counts[NOT_REPRODUCED]} not reproduced, {counts[INCONCLUSIVE]} inconclusive, "
      f"{counts[NOT_TESTABLE]} not testable here.** A verdict is about these runs at this "
      f"scale.", ""]
  if controlled:
    control = [c for config in controlled for c in config.control.values()]
    held = sum(c.verdict == REPRODUCED for c in control)
    tally = against_control(result)
    lines += [f"**The control.** The column *authors' runs* is the same rule on the curves "
              f"the authors logged for {result.figure} (their public logs: one seed, 10,000 "
              f"test images, `scripts/authors_curves.py`): {held} of {len(control)} checks "
              f"hold there. A statement their own runs do not support is marked so below.",
              "",
              f"**Beside the control**, of {sum(map(len, tally.values()))} checks: "
              f"{_verb(tally['same'], 'reaches', 'reach')} the control's verdict, "
              f"{_verb(tally['inconclusive'], 'is', 'are')} inconclusive here where the control "
              f"decides, {_verb(tally['undecided'], 'is', 'are')} decided here where the "
              f"control is not, and {_verb(tally['opposite'], 'reaches', 'reach')} the opposite "
              f"verdict (listed, with both sides' numbers, under each config).", ""]
  else:
    lines += [f"The authors' logs do not cover {result.figure} (they cover Figs. 6, 8, 9 and "
              "10), so there is no control column.", ""]
  root = Path(workdir)
  for config in result.configs:
    png = os.path.relpath(config.figure, root)
    lines += [f"## {config.config}", "", config.description, "",
              f"![{result.figure}]({png})", "", "### Runs", "",
              "| setting | run | protocol | accuracy | seeds | rounds | round 1 | best round | "
              "last round | agents: round 1 -> last |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for curve in config.curves.values():
      s = _run_summary(curve)
      if not s["rounds_done"]:
        lines.append(f"| {curve.setting} | {_cell(curve.variant)} | {curve.protocol} | | "
                     f"{curve.seeds} | 0/{curve.rounds} | | | | |")
        continue
      agents = "; ".join(f"{_pm(a['round_1'])} -> {_pm(a['last'])}" for a in s["agents"])
      lines.append(
          f"| {curve.setting} | {_cell(curve.variant or curve.name)} | {curve.protocol} | "
          f"{curve.accuracy} | {curve.seeds} | {s['rounds_done']}/{curve.rounds} | "
          f"{_pm(s['round_1'])} | {s['best_round']}: {_pm(s['best'])} | {s['last_round']}: "
          f"{_pm(s['last'])} | {agents} |")
    lines += ["", "### The paper's statements", "",
              "| # | statement (our words) | paper | setting | rule | numbers | verdict | "
              "authors' runs |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    unsupported, opposite = [], []
    for i, c in enumerate(config.checks, 1):
      ctrl = config.control.get((c.statement, c.setting))
      mark = "" if ctrl is None else ctrl.verdict
      if ctrl is not None and ctrl.verdict != REPRODUCED:
        mark += " (see below)"
        unsupported.append((i, c, ctrl))
      if _side(c, ctrl) == "opposite":
        opposite.append((i, c, ctrl))
      lines.append(f"| {i} | {_cell(c.statement)} | {_cell(c.source)} | {_cell(c.setting)} "
                   f"| {_cell(c.rule)} | {_cell(c.numbers)} | {c.verdict} | {mark} |")
    if unsupported:
      lines += ["", "### Where the authors' own runs do not support the statement", "",
                f"Their logged curves, through the same rules: {UNSUPPORTED}.", ""]
      lines += [f"- #{i} {c.statement}" + (f" [{c.setting}]" if c.setting else "")
                + f": {ctrl.verdict}: {ctrl.numbers}" for i, c, ctrl in unsupported]
    if opposite:
      lines += ["", "### Where these runs and the authors' reach opposite verdicts", ""]
      lines += [f"- #{i} {c.statement}" + (f" [{c.setting}]" if c.setting else "")
                + f": here {c.verdict}: {c.numbers}; the authors' runs {ctrl.verdict}: "
                f"{ctrl.numbers}" for i, c, ctrl in opposite]
    lines.append("")
  return "\n".join(lines)


def _verb(items: Sequence[Any], one: str, many: str) -> str:
  return f"{len(items)} {one if len(items) == 1 else many}"


def _side(check: Check, control: Check | None) -> str | None:
  """How a check's verdict stands beside the control's (None: no control for it)."""
  if control is None:
    return None
  decided = (REPRODUCED, NOT_REPRODUCED)
  if check.verdict == control.verdict:
    return "same"
  if control.verdict not in decided:
    return "undecided" if check.verdict in decided else "same"
  if check.verdict not in decided:
    return "inconclusive"
  return "opposite"


def against_control(result: Reproduction) -> dict[str, list[Check]]:
  """The checks of a reproduction by how their verdicts stand beside the control's.

  Returns:
    ``"same"`` (the control's verdict), ``"inconclusive"`` (here, where the control
    decides), ``"undecided"`` (decided here, the control is not) and ``"opposite"``
    (reproduced where the control says not reproduced, or the reverse); checks with no
    control are left out.
  """
  out: dict[str, list[Check]] = {"same": [], "inconclusive": [], "undecided": [], "opposite": []}
  for config in result.configs:
    for c in config.checks:
      side = _side(c, config.control.get((c.statement, c.setting)))
      if side is not None:
        out[side].append(c)
  return out


# ---------------------------------------------------------------------------
# The figure

_AGENT_COLORS = ("tab:blue", "tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink",
                 "tab:olive", "tab:cyan", "tab:gray", "gold")
# (colour, line style, marker) per run variant; AKD from agent 1 and from agent 2 apart.
_STYLES = {"avgkd": ("tab:blue", "-", "o"), "pkd": ("tab:orange", "-", "s"),
           "pkd-mean": ("tab:olive", "--", "D"), "ekd": ("black", "-", "P"),
           "fedavg": ("tab:purple", "-", "X"), "akd": ("tab:red", "-", "v"),
           "akd-from-agent1": ("tab:red", ":", "v"), "akd-from-agent2": ("tab:brown", "-.", "^"),
           "from-agent1": ("tab:blue", "-", "o"), "from-agent2": ("tab:red", "-", "s")}
_NAMES = {"akd": "AKD", "avgkd": "AvgKD", "pkd": "PKD", "pkd-mean": "PKD (authors' code)",
          "ekd": "EKD", "fedavg": "FedAvg"}


def _baseline(curve: Curve) -> bool:
  return curve.protocol in ("central", "local")


def _panels(curves: Mapping[str, Curve], per_agent: bool) -> list[tuple[str, list[Curve]]]:
  """``(title, curves)`` per panel: one per setting (per agent: per setting and protocol run)."""
  settings: dict[str, list[Curve]] = {}
  for curve in curves.values():
    settings.setdefault(curve.setting, []).append(curve)
  panels = []
  for setting, group in settings.items():
    lines = [c for c in group if not _baseline(c)]
    baselines = [c for c in group if _baseline(c)]
    if per_agent and len(lines) > 1:
      panels += [(f"{setting}: {c.variant}", [c, *baselines]) for c in lines]
    else:
      panels.append((setting, group))
  return panels


def _agent_labels(curve: Curve) -> list[str]:
  return [f"agent {a + 1}" + (f" ({curve.models[a]})" if a < len(curve.models) else "")
          for a in range(len(curve.agents[0]) if curve.agents else 0)]


def _line(curve: Curve) -> tuple[str, str, str, str]:
  """(label, colour, line style, marker) of a run's mean curve."""
  inner = curve.variant.partition(":")[2]
  if inner:   # an AKD run inside an EKD run
    color, style, marker = _STYLES.get(inner, ("tab:red", ":", "v"))
    return f"AKD from agent {inner[-1]} (in EKD)", color, style, marker
  if curve.variant.startswith("from-agent"):
    color, style, marker = _STYLES.get(curve.variant, ("tab:gray", "-", "o"))
    return f"AKD from agent {curve.variant[-1]}", color, style, marker
  color, style, marker = _STYLES.get(curve.variant, _STYLES.get(curve.protocol,
                                                                ("tab:gray", "-", "o")))
  name = _NAMES.get(curve.variant, _NAMES.get(curve.protocol, curve.protocol))
  return name, color, style, marker


def _band(ax: Any, rounds: np.ndarray, values: np.ndarray, color: str, **kwargs: Any) -> None:
  """The mean over the seeds, with a band of one standard deviation when there are several."""
  mean = values.mean(axis=0)
  ax.plot(rounds, mean, color=color, markersize=3, **kwargs)
  if len(values) > 1:
    sd = values.std(axis=0, ddof=1)
    ax.fill_between(rounds, mean - sd, mean + sd, color=color, alpha=0.15, linewidth=0)


def _draw_panel(ax: Any, curves: Sequence[Curve], per_agent: bool) -> None:
  from matplotlib.ticker import MaxNLocator
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  lines = [c for c in curves if not _baseline(c) and c.done]
  last = max((c.done for c in lines), default=1)
  for i, curve in enumerate(lines):
    rounds = np.arange(1, curve.done + 1)
    if per_agent and curve.agents:
      markers = ("o", "s", "^", "v", "D")
      for a, label in enumerate(_agent_labels(curve)):
        _band(ax, rounds, curve.agent_array()[:, a, :], _AGENT_COLORS[a % len(_AGENT_COLORS)],
              marker=markers[i % len(markers)], linewidth=1.2, label=label)
      continue
    label, color, style, marker = _line(curve)
    _band(ax, rounds, curve.array(), color, linestyle=style, marker=marker, linewidth=1.6,
          label=label)
  for curve in curves:
    if _baseline(curve) and curve.done:
      ax.hlines(curve.array()[:, 0].mean(), 1, max(last, 2), linestyles="dashed",
                color="tab:green", linewidth=1.2,
                label="centralised" if curve.protocol == "central" else "local")
  ax.set_xlim(0.8, max(last, 2) + 0.2)


def plot_reproduction(figure: str, curves: Mapping[str, Curve], path: str | os.PathLike,
                      title: str = "", per_agent: bool = False) -> None:
  """Draws a figure's runs like the paper, one panel per setting, into ``path`` (PNG).

  Each line is the mean over the seeds, with a band of one standard deviation when
  there are several; one legend for the figure, below the panels.

  Args:
    figure: "Fig. N" (the y-axis names the accuracy the curves use).
    curves: the runs' curves (:func:`paper_curves`, :func:`merge_seeds`), by run name.
    path: the PNG file (written atomically).
    title: the figure's title.
    per_agent: one line per agent (colour: agent 1 blue, agent 2 red) and a panel
      per setting and protocol run, as the paper's Figs. 5, 12-15; else one line per
      run (the agents' mean; AKD from agent 1 and from agent 2 in their own styles).
  """
  panels = _panels(curves, per_agent)
  settings = len({c.setting for c in curves.values()})
  cols = max(1, min(settings, 4, len(panels)))
  rows = -(-len(panels) // cols)
  fig = Figure(figsize=(4.2 * cols, 3.3 * rows + 1.2), layout="constrained")
  axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False, sharey=True)).ravel()
  accuracy = {c.accuracy for c in curves.values() if c.done}
  legend: dict[str, Any] = {}
  for ax, (name, group) in zip(axes, panels):
    _draw_panel(ax, group, per_agent)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("round (the paper's, from 1)")
    ax.grid(alpha=0.3)
    for handle, label in zip(*ax.get_legend_handles_labels()):
      legend.setdefault(label, handle)
  axes[0].set_ylabel("test accuracy (" + ("best local epoch" if accuracy == {"best"} else
                                          "end of local training" if accuracy == {"last"}
                                          else "best local epoch where logged") + ")")
  for ax in axes[len(panels):]:
    ax.set_visible(False)
  if legend:
    fig.legend(list(legend.values()), list(legend), loc="outside lower center",
               ncols=min(len(legend), 5), fontsize=8)
  fig.suptitle(title or figure, fontsize=10)
  atomic_savefig(fig, path, dpi=110)
