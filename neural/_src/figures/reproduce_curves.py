"""A reproduced figure's curves: runs' metric rows in the paper's units, and the paper's
statements about the figure checked on them (``neural reproduce``,
:func:`neural.evidence.check_claims`).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import re
from typing import Any

import numpy as np

from neural._src.datasets.data import load_dataset
from neural._src.evidence.claims import Check
from neural._src.evidence.claims import evaluate
from neural._src.evidence.claims import figure_claims
from neural._src.evidence.curves import Curve
from neural._src.evidence.curves import curves_from_mapping
from neural._src.evidence.paper_units import BEST
from neural._src.evidence.paper_units import default_accuracy
from neural._src.evidence.paper_units import paper_round_count
from neural._src.evidence.paper_units import paper_rounds
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import RunConfig
from neural._src.runtime.outcomes import RowKey
from neural._src.runtime.outcomes import unpack

# Test-set sizes of the datasets read from files (the embedded ones are split here).
_TEST_SIZES = {"mnist": 10_000, "cifar10": 10_000, "cinic10": 90_000}


# ---------------------------------------------------------------------------
# Which figure


def figure_label(figure: int | str) -> str:
  """"Fig. N" for ``N``, ``"N"`` or ``"Fig. N"``.

  Raises:
    ConfigError: not a figure number.
  """
  match = re.fullmatch(r"\s*(?:fig(?:ure)?\.?\s*)?(\d+)\s*", str(figure), re.IGNORECASE)
  if not match:
    raise ConfigError(f"figure: expected a figure number such as 4, got {figure!r}")
  return f"Fig. {int(match.group(1))}"


# ---------------------------------------------------------------------------
# Curves in the paper's units


def test_points(config: RunConfig) -> int:
  """How many test points a run of ``config`` evaluates on (the binomial error's n)."""
  size = _TEST_SIZES.get(config.dataset)
  if size is None:
    size = len(load_dataset(config.dataset, config.data_dir, seed=config.data_seed).y_test)
  return size if config.test_subset is None else min(size, config.test_subset)


def test_key(config: RunConfig) -> str:
  """Which test images a run of ``config`` is scored on: ``"mnist:all"`` for a fixed test
  split scored whole (every seed the same images), ``"mnist-subset:seed=2"`` where the
  split or the test subset is drawn from the run's data seed (each seed its own)."""
  if config.dataset in _TEST_SIZES and config.test_subset is None:
    return f"{config.dataset}:all"
  subset = "" if config.test_subset is None else f":subset={config.test_subset}"
  return f"{config.dataset}:seed={config.data_seed}{subset}"


# A run's outcome lines by (round, agent) (``neural._src.runtime.outcomes.read_outcomes``).
Lines = Mapping[RowKey, Mapping[str, Any]]


def _outcomes(groups: Sequence[Sequence[Mapping[str, Any]]], key: str, lines: Lines
              ) -> tuple[np.ndarray, ...]:
  """``(array,)`` of a curve whose paper round r averages the logged rows ``groups[r]``'s
  ``key`` accuracy: row r is, per test image, the share of those rows' models right on it
  (``key`` "test_accuracy": the lines' ``right`` bits; ``BEST``: their ``best``). ``()``
  where some row has no line, or its bits do not give its accuracy (never inconsistent)."""
  kind = "best" if key == BEST else "right"
  shares = []
  for group in groups:
    bits = []
    for row in group:
      line = lines.get((int(row["round"]), row["agent"]))
      if line is None or kind not in line or key not in row:
        return ()
      try:
        right = unpack(line[kind], int(line["count"]))
      except ValueError:
        return ()
      if abs(float(np.mean(right)) - float(row[key])) > 1e-9:
        return ()
      bits.append(right)
    if not bits or len({len(b) for b in bits} | {len(s) for s in shares}) != 1:
      return ()   # a round of no rows, or of lines on other test sets
    shares.append(np.mean(bits, axis=0))
  return (np.stack(shares),) if shares else ()


def _agent_outcomes(paper: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                    key: str, lines: Lines) -> tuple[np.ndarray, ...]:
  """``(array,)`` of each agent's per-image outcomes, (agents, paper rounds, test points),
  matching the paper rounds' ``agent_accuracies`` one by one; ``()`` where they do not."""
  members = _members(paper, rows)
  counts = {len(p["agent_accuracies"]) for p in paper} | {len(m) for m in members}
  if len(counts) != 1:
    return ()
  per_agent = []
  for i in range(counts.pop()):
    got = _outcomes([[m[i]] for m in members], key, lines)
    if not got or any(abs(float(got[0][r].mean()) - float(p["agent_accuracies"][i])) > 1e-9
                      for r, p in enumerate(paper)):
      return ()
    per_agent.append(got[0])
  return (np.stack(per_agent),) if per_agent else ()


def _members(paper: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
             ensemble: bool = False) -> list[list[Mapping[str, Any]]]:
  """Per paper round, the logged rows it averages (its ``steps``): the single models'
  rows, or with ``ensemble`` the combined predictor's (EKD's even sums)."""
  by_step: dict[int, list[Mapping[str, Any]]] = {}
  for r in rows:
    if r["agent"] == "ensemble" if ensemble else isinstance(r["agent"], int):
      by_step.setdefault(int(r["round"]), []).append(r)
  return [sorted((m for s in p["steps"] for m in by_step.get(int(s), [])),
                 key=lambda m: m["agent"]) for p in paper]


def _curve(name: str, rows: Sequence[Mapping[str, Any]], accuracy: str,
           steps: int | None, points: int, dataset: str, lines: Lines) -> Curve:
  protocol = str(rows[0]["protocol"])
  paper = paper_rounds(rows, accuracy)
  agent_rows = [r for r in rows if isinstance(r["agent"], int)]
  agents = max(r["agent"] for r in agent_rows) + 1
  models = {int(r["agent"]): str(r.get("model", "?")) for r in agent_rows}
  per_agent = tuple(tuple(float(v) for v in vs)
                    for vs in zip(*[r["agent_accuracies"] for r in paper]))
  key = BEST if accuracy == "best" else "test_accuracy"
  return Curve(name, protocol, (tuple(float(r["test_accuracy"]) for r in paper),),
               (per_agent,), (tuple(v[0] for v in per_agent),),
               len(paper) if steps is None else paper_round_count(protocol, steps, agents),
               accuracy, tuple(models[a] for a in sorted(models)), points, dataset,
               outcomes=_outcomes(_members(paper, rows), key, lines) if lines else (),
               agent_outcomes=_agent_outcomes(paper, rows, key, lines) if lines else ())


def _server_curve(name: str, rows: Sequence[Mapping[str, Any]], steps: int | None,
                  points: int, dataset: str, lines: Lines) -> list[Curve]:
  """FedAvg's averaged model after each round (its ``server`` rows), as ``<name>:server``:
  the paper scored FedAvg by its clients after local training (the run's own curve)."""
  server = sorted((r for r in rows if r["agent"] == "server"), key=lambda r: r["round"])
  if not server:
    return []
  return [Curve(f"{name}:server", "fedavg", (tuple(float(r["test_accuracy"]) for r in server),),
                rounds=len(server) if steps is None else steps, accuracy="last",
                models=(str(server[0].get("model", "?")),), test_points=points,
                dataset=dataset,
                outcomes=_outcomes([[r] for r in server], "test_accuracy", lines)
                if lines else ())]


def _run_curves(name: str, rows: Sequence[Mapping[str, Any]],
                config: RunConfig | None, lines: Lines) -> list[Curve]:
  steps = config.total_rounds if isinstance(config, ExperimentConfig) else None
  points = test_points(config) if config is not None else 0
  dataset = config.dataset if config is not None else ""
  if not rows:
    protocol = getattr(config, "protocol", "?")
    agents = config.agents if config is not None else 1
    return [Curve(name, protocol, ((),), rounds=paper_round_count(protocol, steps or 1, agents),
                  test_points=points, dataset=dataset)]
  accuracy = default_accuracy(rows)
  if rows[0].get("protocol") == "fedavg":
    return [_curve(name, rows, accuracy, steps, points, dataset, lines),
            *_server_curve(name, rows, steps, points, dataset, lines)]
  if rows[0].get("protocol") != "ekd":
    return [_curve(name, rows, accuracy, steps, points, dataset, lines)]
  key = BEST if accuracy == "best" else "test_accuracy"
  local_rows = sorted((r for r in rows if r["round"] == 0 and isinstance(r["agent"], int)),
                      key=lambda r: r["agent"])
  paper = paper_rounds(rows, accuracy)   # the ensemble's even sums (of last-epoch models)
  curves = [Curve(name, "ekd", (tuple(float(r["test_accuracy"]) for r in paper),), (),
                  (tuple(float(r.get(key, r["test_accuracy"])) for r in local_rows),),
                  len(paper) if steps is None else paper_round_count("ekd", steps, 1), accuracy,
                  tuple(str(r.get("model", "?")) for r in local_rows), points, dataset,
                  outcomes=_outcomes(_members(paper, rows, ensemble=True), "test_accuracy",
                                     lines) if lines else ())]
  for start in sorted({int(r["start"]) for r in rows if "start" in r}):
    akd = [{**r, "protocol": "akd"} for r in rows if r.get("start") == start]
    curves.append(_curve(f"{name}:akd-from-agent{start + 1}", akd, accuracy, steps, points,
                         dataset, lines))
  return curves


def paper_curves(results: Mapping[str, Sequence[Mapping[str, Any]]],
                 configs: Mapping[str, RunConfig] | None = None,
                 outcomes: Mapping[str, Lines] | None = None) -> dict[str, Curve]:
  """The runs' test accuracy in the paper's units, by run name (one seed each).

  Args:
    results: metric rows by run name (as :func:`neural.run_configs` returns them;
      names ``setting__variant``).
    configs: each run's config, to tell an unfinished run from a finished one and
      to know the test set's size (without it, every run counts as finished and
      the test set's size is unknown).
    outcomes: each run's outcome lines by (round, agent), as :func:`neural.read_outcomes`
      reads them from a run that recorded them (``record_outcomes``): they fill each
      curve's ``outcomes``, the per-image scores of the very rows its values average
      (the best local epoch's where the values are; EKD's even sums; FedAvg's server).
      A curve some of whose rows have no line keeps ``()``.

  Returns:
    A :class:`neural.evidence.Curve` per run with one seed: the agents' mean per paper round
    (EKD: its even partial sums) and each agent's values, from the best local epoch
    where the run logs it, else the end of local training. An EKD run adds the AKD
    run from each agent that it holds (``<name>:akd-from-agent<s>``), a FedAvg run its
    averaged model after each round (``<name>:server``; its own curve is the clients
    after local training, as the paper scored FedAvg).
  """
  curves: dict[str, Curve] = {}
  for name, rows in results.items():
    config = (configs or {}).get(name)
    for curve in _run_curves(name, list(rows), config, (outcomes or {}).get(name) or {}):
      curves[curve.name] = curve if config is None else curve._replace(
          test_sets=(test_key(config),))
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
                                local=m.local + c.local, test_sets=m.test_sets + c.test_sets,
                                outcomes=m.outcomes + c.outcomes
                                if m.outcomes and c.outcomes else (),
                                agent_outcomes=m.agent_outcomes + c.agent_outcomes
                                if m.agent_outcomes and c.agent_outcomes else ())
  return merged


def curves_to_mapping(curves: Mapping[str, Curve]) -> dict[str, dict[str, Any]]:
  """The plain format of :func:`neural.evidence.check_claims` (``{setting: {variant: {...}}}``)."""
  out: dict[str, dict[str, Any]] = {}
  for c in curves.values():
    entry: dict[str, Any] = {"mean": [list(v) for v in c.values], "rounds": c.rounds,
                             "test_points": c.test_points}
    if c.agents:
      entry["agents"] = [[list(a) for a in seed] for seed in c.agents]
    if c.local:
      entry["local"] = [list(x) for x in c.local]
    if c.test_sets:
      entry["test_sets"] = list(c.test_sets)
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
    One :class:`neural.evidence.Check` per statement and setting.

  Raises:
    ConfigError: not a figure number. ValueError: malformed curves.

  Example:
    >>> curves = {"alpha=0.0": {"pkd": [[0.50, 0.90, 0.80, 0.70, 0.60]]}}
    >>> checks = neural.evidence.check_claims(6, curves, test_points=10000)
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
    One :class:`neural.evidence.Check` per statement and setting (:data:`neural.CLAIMS`).

  Example:
    >>> rows = [{"round": t, "agent": t % 2, "protocol": "akd", "model": "cnn",
    ...          "test_accuracy": 0.9 - 0.05 * t, "test_loss": 0.0} for t in range(6)]
    >>> checks = neural.evidence.check_statements(4, {"same__from-agent1": rows})
    >>> check = next(c for c in checks if c.setting == "same")
    >>> check.statement, check.verdict
    ('AKD degrades with rounds', 'reproduced')
  """
  return evaluate(figure_claims(figure_label(figure)), paper_curves(results, configs))
