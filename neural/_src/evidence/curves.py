"""Curves in the paper's units, one row per seed, and how to build them from plain numbers.

A :class:`Curve` is one run's test accuracy per paper round (``neural.evidence.paper_rounds``:
rounds from 1, the mean over the agents, EKD's even partial sums) with each agent's
values beside it, for each seed that ran it. :func:`curves_from_mapping` builds them
from the documented plain format ``{setting: {variant: per-seed numbers}}``, so the
paper's statements can be checked on anyone's logs (``neural.evidence.check_claims``).
"""

from __future__ import annotations

from collections.abc import Mapping
import math
from typing import Any
from typing import NamedTuple

import numpy as np


class Curve(NamedTuple):
  """One run's test accuracy in the paper's units, one row per seed.

  Attributes:
    name: the run's name (``setting__variant``; ``<ekd run>:akd-from-agent<s>`` for
      an AKD run inside an EKD run; ``Fig. N/...`` for a run of another figure).
    protocol: akd, avgkd, pkd, pkd-mean, ekd, fedavg, central, ...
    values: per seed, per paper round (round 1 first): the mean over the agents
      (EKD: the even partial sums of the ensemble).
    agents: per seed, per agent, per paper round (``agents[k][a][r]``); empty for
      EKD's ensemble.
    local: per seed, each agent's model trained on its own labels (round 1).
    rounds: the paper rounds of the finished run (0: as many as ``values`` has).
    accuracy: "best" (best local epoch, where logged) or "last" (end of training).
    models: each agent's model name.
    test_points: the size of the test set (0: unknown; no binomial term).
    dataset: the data the run used ("" where unknown).
    test_sets: per seed, which test images it was scored on (a key such as
      ``"mnist:all"`` or ``"mnist-subset:seed=2"``); () where unknown. Seeds with
      different keys each drew their own test images, so the seeds' spread already
      holds the test set's noise (:attr:`shares_test`).
    outcomes: per seed, a (paper rounds, test points) array of per-image scores whose
      mean over the images is ``values[seed][round]`` (for the agents' mean: the share
      of agents right on the image); () where the run did not record them. Seeds
      scored on the same images give a paired test-set term from them.
    agent_outcomes: per seed, an (agents, paper rounds, test points) array of each
      agent's per-image right answers (their means are ``agents[seed]``); () where not
      recorded.
  """

  name: str
  protocol: str
  values: tuple[tuple[float, ...], ...]
  agents: tuple[tuple[tuple[float, ...], ...], ...] = ()
  local: tuple[tuple[float, ...], ...] = ()
  rounds: int = 0
  accuracy: str = "last"
  models: tuple[str, ...] = ()
  test_points: int = 0
  dataset: str = ""
  test_sets: tuple[str, ...] = ()
  outcomes: tuple[Any, ...] = ()
  agent_outcomes: tuple[Any, ...] = ()

  @property
  def shares_test(self) -> bool:
    """Whether every seed was scored on the same test images (also where unknown, the
    cautious reading: the seeds' spread then need not hold the test set's noise)."""
    return len(set(self.test_sets)) <= 1

  @property
  def seeds(self) -> int:
    """How many seeds the curve has."""
    return len(self.values)

  @property
  def done(self) -> int:
    """The paper rounds every seed has."""
    return min((len(v) for v in self.values), default=0)

  @property
  def finished(self) -> bool:
    """Whether every seed has all its rounds."""
    return self.seeds > 0 and self.done >= max(self.rounds, 1)

  @property
  def setting(self) -> str:
    """The first part of the name (the figure's setting, e.g. ``alpha=0.1``)."""
    return self.name.rpartition("/")[2].partition("__")[0]

  @property
  def variant(self) -> str:
    """The rest of the name (e.g. ``avgkd``, ``from-agent1``); "" for a one-axis sweep."""
    return self.name.rpartition("/")[2].partition("__")[2]

  def cut(self, rounds: int) -> Curve:
    """The curve over its first ``rounds`` paper rounds (a run of that horizon)."""
    return self._replace(
        values=tuple(v[:rounds] for v in self.values),
        agents=tuple(tuple(a[:rounds] for a in seed) for seed in self.agents),
        outcomes=tuple(o[:rounds] for o in self.outcomes),
        agent_outcomes=tuple(o[:, :rounds] for o in self.agent_outcomes),
        rounds=min(self.rounds or self.done, rounds))

  def array(self) -> np.ndarray:
    """``values`` as a (seeds, rounds) array over the rounds every seed has."""
    return np.array([v[:self.done] for v in self.values], dtype=float).reshape(
        self.seeds, self.done)

  def agent_array(self) -> np.ndarray:
    """``agents`` as a (seeds, agents, rounds) array over the rounds every seed has."""
    if not self.agents:
      return np.zeros((self.seeds, 0, self.done))
    return np.array([[a[:self.done] for a in seed] for seed in self.agents], dtype=float)

  @property
  def mean(self) -> np.ndarray:
    """The mean over the seeds, per paper round."""
    return self.array().mean(axis=0)

  def outcome_array(self) -> np.ndarray | None:
    """``outcomes`` as a (seeds, rounds, test points) array over the rounds every seed
    has, or None where some seed has none."""
    if not self.outcomes or len(self.outcomes) != self.seeds:
      return None
    return np.stack([np.asarray(o, dtype=float)[:self.done] for o in self.outcomes])

  def agent_outcome_array(self) -> np.ndarray | None:
    """``agent_outcomes`` as a (seeds, agents, rounds, test points) array over the rounds
    every seed has, or None where some seed has none."""
    if not self.agent_outcomes or len(self.agent_outcomes) != self.seeds:
      return None
    return np.stack([np.asarray(o, dtype=float)[:, :self.done] for o in self.agent_outcomes])

  @property
  def spread(self) -> np.ndarray:
    """The seeds' sample standard deviation per paper round (zeros for one seed)."""
    a = self.array()
    return a.std(axis=0, ddof=1) if len(a) > 1 else np.zeros(a.shape[1])


class Group(NamedTuple):
  """The curves one pattern of a claim matched."""

  pattern: str
  curves: tuple[Curve, ...]


_PROTOCOLS = {"from-agent": "akd", "ekd:akd-from-agent": "akd"}


def protocol_of(variant: str, default: str = "") -> str:
  """The protocol a run variant names: ``from-agent2`` and ``ekd:akd-from-agent1`` are AKD,
  ``avgkd``, ``pkd-mean``, ``central``, ... name themselves; "" gives ``default``."""
  for prefix, protocol in _PROTOCOLS.items():
    if variant.startswith(prefix):
      return protocol
  return variant or default


def _seeds(value: Any, where: str, depth: int) -> tuple:
  """A nested list of numbers ``depth`` deep (seeds first), as tuples; a clear error else."""
  if depth == 0:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
        value):
      raise ValueError(f"{where}: expected a finite accuracy, got {value!r}")
    return float(value)   # type: ignore[return-value]
  if not isinstance(value, (list, tuple)) or not value:
    raise ValueError(f"{where}: expected a non-empty list ({depth} levels: seeds first), "
                     f"got {type(value).__name__}")
  return tuple(_seeds(v, f"{where}[{i}]", depth - 1) for i, v in enumerate(value))


def _test_sets(value: Any, seeds: int, where: str) -> tuple[str, ...]:
  """Per seed, a key of the test images it was scored on (see :func:`curves_from_mapping`)."""
  if value == "shared":
    return ()
  if value == "own":
    return tuple(f"seed {k}" for k in range(seeds))
  if (isinstance(value, (list, tuple)) and len(value) == seeds
      and all(isinstance(v, str) for v in value)):
    return tuple(value)
  raise ValueError(f"{where}: expected 'own', 'shared' or one string per seed ({seeds}), "
                   f"got {value!r}")


def curves_from_mapping(curves: Mapping[str, Mapping[str, Any]], *, test_points: int = 0,
                        dataset: str = "", accuracy: str = "best", prefix: str = "",
                        protocol: str = "") -> dict[str, Curve]:
  """:class:`Curve` objects from plain numbers: ``{setting: {variant: data}}``.

  ``data`` is either a list of per-seed lists of per-round accuracies (the agents'
  mean in the paper's rounds), or a dict with ``"mean"`` (that list), and optionally
  ``"agents"`` (per seed, per agent, per round), ``"local"`` (per seed, per agent: EKD's
  local models), ``"rounds"`` (the rounds of a finished run), ``"test_points"`` and
  ``"test_sets"``: "own" (each seed scored on its own test images: the intervals are the
  seeds' own), "shared" (every seed on the same images; the default) or a list of keys,
  one per seed, naming each seed's test images.
  A variant "" names a one-axis sweep's run (``setting`` alone). Run names are
  ``prefix + setting + "__" + variant``.

  Raises:
    ValueError: a malformed entry (the message names it).
  """
  if not isinstance(curves, Mapping):
    raise ValueError(f"curves: expected {{setting: {{variant: data}}}}, got "
                     f"{type(curves).__name__}")
  out: dict[str, Curve] = {}
  for setting, runs in curves.items():
    if not isinstance(runs, Mapping):
      raise ValueError(f"curves[{setting!r}]: expected {{variant: data}}, got "
                       f"{type(runs).__name__}")
    for variant, data in runs.items():
      where = f"curves[{setting!r}][{variant!r}]"
      spec = data if isinstance(data, Mapping) else {"mean": data}
      unknown = set(spec) - {"mean", "agents", "local", "rounds", "test_points", "source",
                             "test_sets"}
      if unknown or "mean" not in spec:
        raise ValueError(f"{where}: expected a list of seeds or a dict with 'mean' (and "
                         f"'agents', 'local', 'rounds', 'test_points', 'test_sets'), got keys "
                         f"{sorted(spec)}")
      values = _seeds(spec["mean"], f"{where}['mean']", 2)
      agents = _seeds(spec["agents"], f"{where}['agents']", 3) if "agents" in spec else ()
      local = _seeds(spec["local"], f"{where}['local']", 2) if "local" in spec else ()
      if agents and len(agents) != len(values):
        raise ValueError(f"{where}: 'agents' has {len(agents)} seeds, 'mean' {len(values)}")
      if not local and agents:
        local = tuple(tuple(a[0] for a in seed) for seed in agents)
      name = prefix + (f"{setting}__{variant}" if variant else str(setting))
      out[name] = Curve(name, protocol_of(str(variant), protocol), values, agents, local,
                        int(spec.get("rounds", 0)), accuracy,
                        test_points=int(spec.get("test_points", test_points)), dataset=dataset,
                        test_sets=_test_sets(spec.get("test_sets", "shared"), len(values),
                                             f"{where}['test_sets']"))
  return out
