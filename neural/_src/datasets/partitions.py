"""Partitions of a labelled training set among M agents (Afonin & Karimireddy, Sec. 6, App. A, H.5).

Each partitioner takes the int labels (n,) of the training set and a NumPy
``Generator`` and returns one int64 index array per agent; the arrays are
disjoint, sorted, and index into the labels. Methods:

- ``"iid"``: a uniformly random split with given proportions (the paper's
  'same data' setting, 0.7 / 0.3; App. A).
- ``"label-split"``: the paper's 'different data' setting with mixing fraction
  Alpha (Sec. 6, App. A; M agents App. H.5).
- ``"dirichlet-clients"``: for each class, its points are split over the agents with
  proportions ~ Dir(beta) (Yurochkin et al., 2019; Hsu et al., 2019; Wang et al., 2020).
- ``"dirichlet-classes"``: each agent draws class proportions ~ Dir(beta) and fills
  a sample budget with them (Hsu et al., 2019, "Measuring the effects of non-identical
  data distribution").
- ``"shards"``: sort by label, cut into ``num_agents * shards_per_agent`` shards and
  deal them out at random (McMahan et al., 2017).

and, for multi-headed distillation (Zhmoginov et al. 2023, Sec. 3.3), the
skewed-label split :func:`skewed_label_split` (primary labels per client, skew s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

PARTITIONS = ("iid", "label-split", "dirichlet-clients", "dirichlet-classes", "shards")

SKEWED_ASSIGNMENTS = ("random", "even")   # primary labels of skewed_label_split


class PartitionError(ValueError):
  """Invalid partition request; the message names the argument and what was expected."""


def _check_labels(labels) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise PartitionError(f"labels must be a 1-D integer array, got dtype {labels.dtype} and "
                         f"shape {labels.shape}")
  if labels.size == 0:
    raise PartitionError("labels must not be empty")
  if labels.min() < 0:
    raise PartitionError(f"labels must be >= 0, got {labels.min()}")
  return labels.astype(np.int64, copy=False)


def _check_agents(num_agents, n: int) -> int:
  if isinstance(num_agents, bool) or int(num_agents) != num_agents or num_agents < 1:
    raise PartitionError(f"num_agents must be an integer >= 1, got {num_agents!r}")
  if num_agents > n:
    raise PartitionError(f"num_agents must be <= the number of points {n}, got {num_agents}")
  return int(num_agents)


def _check_rng(rng) -> np.random.Generator:
  if not isinstance(rng, np.random.Generator):
    raise PartitionError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                         f"got {type(rng).__name__}")
  return rng


def _check_positive(name: str, value) -> float:
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise PartitionError(f"{name} must be a positive number, got {value!r}") from None
  if not (value > 0 and np.isfinite(value)):
    raise PartitionError(f"{name} must be a positive finite number, got {value!r}")
  return value


def _finish(parts) -> list[np.ndarray]:
  return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _cut(indices: np.ndarray, proportions: np.ndarray) -> list[np.ndarray]:
  """Cuts ``indices`` into consecutive pieces of sizes round(cumsum(proportions) * n)."""
  bounds = np.round(np.cumsum(proportions) * indices.shape[0]).astype(np.int64)
  bounds[-1] = indices.shape[0]
  return np.split(indices, bounds[:-1])


def iid(labels: np.ndarray, proportions: Sequence[float] | np.ndarray, rng: np.random.Generator
        ) -> list[np.ndarray]:
  """Uniformly random split with given proportions (App. A: 0.7 / 0.3 for 'same data').

  The points are shuffled and cut into consecutive pieces: agent a gets
  ``round(P_a * n) - round(P_{a-1} * n)`` points, ``P_a = p_0 + ... + p_a``, so every
  point is used and the sizes are within one point of ``p_a * n``.

  Args:
    labels: int labels, shape (n,) (only their number is used).
    proportions: positive proportions p_a, one per agent, summing to 1.
    rng: the random generator.

  Returns:
    One sorted int64 index array per agent; disjoint, covering 0..n-1.

  Raises:
    PartitionError: bad labels, proportions or rng.
  """
  labels, rng = _check_labels(labels), _check_rng(rng)
  p = np.asarray(proportions, dtype=np.float64)
  if p.ndim != 1 or p.size < 1:
    raise PartitionError(f"proportions must be a non-empty 1-D sequence, got {proportions!r}")
  if np.any(~np.isfinite(p)) or np.any(p <= 0) or abs(p.sum() - 1.0) > 1e-6:
    raise PartitionError(f"proportions must be positive and sum to 1, got {proportions!r}")
  _check_agents(p.size, labels.shape[0])
  parts = _cut(rng.permutation(labels.shape[0]), p)
  if any(part.size == 0 for part in parts):
    raise PartitionError(f"proportions {proportions!r} give an agent no points of "
                         f"{labels.shape[0]}")
  return _finish(parts)


def label_groups(classes: np.ndarray, num_agents: int) -> list[np.ndarray]:
  """The classes each agent holds under the label split with Alpha = 0.

  The sorted classes are cut into ``num_agents`` consecutive groups whose sizes
  differ by at most one (larger groups first). For 2 agents and 10 classes this is
  the paper's {0..4} / {5..9} (App. A); for 5 agents and 10 classes agent i gets
  {2i, 2i+1} (App. H.5, counting agents from 0).
  """
  return np.array_split(np.asarray(classes), num_agents)


def label_split(labels: np.ndarray, num_agents: int, alpha: float, rng: np.random.Generator
                ) -> list[np.ndarray]:
  """The paper's label split with mixing fraction Alpha (Sec. 6, App. A, App. H.5).

  1. The classes present are cut into ``num_agents`` consecutive groups
     (:func:`label_groups`); agent a gets every point whose label is in group a
     (two agents: the first and the second half of the classes; 5 agents and 10
     classes: labels 2a and 2a + 1).
  2. From each agent a random subset of ``round(alpha * N_a)`` points is taken,
     the taken points are pooled, shuffled, and dealt back, each agent receiving
     as many as it gave. Sizes ``N_a`` are thus unchanged.

  Alpha = 0 gives disjoint label sets; Alpha = 1 pools everything, which is a
  uniformly random split with the sizes of step 1 (iid).

  Args:
    labels: int labels, shape (n,).
    num_agents: M >= 1; at most the number of distinct labels.
    alpha: mixing fraction in [0, 1].
    rng: the random generator.

  Returns:
    One sorted int64 index array per agent; disjoint, covering 0..n-1.

  Raises:
    PartitionError: bad labels, num_agents, alpha or rng.
  """
  labels, rng = _check_labels(labels), _check_rng(rng)
  num_agents = _check_agents(num_agents, labels.shape[0])
  try:
    alpha = float(alpha)
  except (TypeError, ValueError):
    raise PartitionError(f"alpha must be a number in [0, 1], got {alpha!r}") from None
  if not 0.0 <= alpha <= 1.0:
    raise PartitionError(f"alpha must lie in [0, 1], got {alpha!r}")
  classes = np.unique(labels)
  if classes.size < num_agents:
    raise PartitionError(f"num_agents must be <= the number of distinct labels {classes.size} "
                         f"for label-split, got {num_agents}")
  own = [rng.permutation(np.flatnonzero(np.isin(labels, group)))
         for group in label_groups(classes, num_agents)]
  num_taken = [int(round(alpha * part.size)) for part in own]
  pool = rng.permutation(np.concatenate([part[:k] for part, k in zip(own, num_taken)]))
  returned = np.split(pool, np.cumsum(num_taken)[:-1])
  return _finish(np.concatenate([part[k:], back])
                 for part, k, back in zip(own, num_taken, returned))


def dirichlet_clients(labels: np.ndarray, num_agents: int, beta: float,
                      rng: np.random.Generator, min_size: int = 0) -> list[np.ndarray]:
  """Dirichlet over clients per class (Yurochkin et al., 2019; Wang et al., 2020).

  For each class c, draw ``q_c ~ Dir(beta * 1_M)`` and cut the shuffled points of
  class c into consecutive pieces of sizes ``round(cumsum(q_c) * n_c)`` (agent a gets
  about ``q_{c,a} n_c`` of them). Every point is used. Large beta: each agent gets
  about ``n_c / M`` of every class; small beta: each class goes mostly to one agent.

  Args:
    labels: int labels, shape (n,).
    num_agents: M >= 1.
    beta: Dirichlet concentration > 0.
    rng: the random generator.
    min_size: redraw all the proportions until every agent has at least this many
      points (at most 1,000 tries; 0 = no redraw, agents may then be empty).

  Returns:
    One sorted int64 index array per agent; disjoint, covering 0..n-1.

  Raises:
    PartitionError: bad arguments, or min_size not reached in 1,000 tries.
  """
  labels, rng = _check_labels(labels), _check_rng(rng)
  num_agents = _check_agents(num_agents, labels.shape[0])
  beta = _check_positive("beta", beta)
  min_size = _check_min_size(min_size, labels.shape[0], num_agents)
  classes = np.unique(labels)
  for _ in range(1000):
    parts = [[] for _ in range(num_agents)]
    for c in classes:
      q = _dirichlet(rng, beta, num_agents)
      for a, piece in enumerate(_cut(rng.permutation(np.flatnonzero(labels == c)), q)):
        parts[a].append(piece)
    parts = [np.concatenate(p) for p in parts]
    if min(p.size for p in parts) >= min_size:
      return _finish(parts)
  raise PartitionError(f"min_size={min_size} not reached in 1000 draws with beta={beta}; "
                       f"lower min_size or raise beta")


def dirichlet_classes(labels: np.ndarray, num_agents: int, beta: float,
                      rng: np.random.Generator,
                      samples_per_agent: int | Sequence[int] | None = None
                      ) -> list[np.ndarray]:
  """Dirichlet over classes per client (Hsu et al., 2019).

  Each agent a draws class proportions ``q_a ~ Dir(beta * 1_C)`` and a budget
  ``B_a`` (``samples_per_agent``; by default the n points shared out as evenly as
  possible, so that every point is used). The agents then fill their budgets by
  sampling without replacement: in passes over the agents in a fresh random order,
  each agent draws a chunk of at most ``max(1, ceil(min_a B_a / 100))`` points,
  their classes multinomial with ``q_a``.

  Running out of a class: a class with no points left is dropped from every
  agent's proportions, which are renormalised over the classes still available
  (draws beyond what is left are clipped and redrawn in the next pass); an agent
  whose proportions vanish on every class left (possible only for tiny beta)
  samples in proportion to the points left. Drawing in small interleaved chunks
  in random order keeps any agent from taking a scarce class first. When budgets
  are a small part of n, classes rarely run out and each agent's class shares
  follow ``q_a``; when they take every point, the last chunks are forced.

  Args:
    labels: int labels, shape (n,).
    num_agents: M >= 1.
    beta: Dirichlet concentration > 0. Large beta: near-uniform class shares;
      small beta: each agent concentrated on few classes.
    rng: the random generator.
    samples_per_agent: the budget B_a, an int (the same for all) or one per agent;
      positive, with sum at most n.

  Returns:
    One sorted int64 index array per agent, of size B_a; disjoint.

  Raises:
    PartitionError: bad arguments.
  """
  labels, rng = _check_labels(labels), _check_rng(rng)
  n = labels.shape[0]
  num_agents = _check_agents(num_agents, n)
  beta = _check_positive("beta", beta)
  if samples_per_agent is None:
    budget = np.full(num_agents, n // num_agents, dtype=np.int64)
    budget[:n % num_agents] += 1
  else:
    budget = np.asarray(samples_per_agent)
    if budget.ndim == 0:
      budget = np.full(num_agents, budget)
    if (budget.shape != (num_agents,) or not np.issubdtype(budget.dtype, np.integer)
        or np.any(budget < 1) or budget.sum() > n):
      raise PartitionError(f"samples_per_agent must be a positive integer or one per agent "
                           f"({num_agents}), with sum <= n = {n}, got {samples_per_agent!r}")
    budget = budget.astype(np.int64)
  classes, class_of = np.unique(labels, return_inverse=True)
  pools = [rng.permutation(np.flatnonzero(class_of == k)) for k in range(classes.size)]
  used = np.zeros(classes.size, dtype=np.int64)  # pools[k][:used[k]] are taken
  left = np.array([p.size for p in pools], dtype=np.int64)
  q = np.stack([_dirichlet(rng, beta, classes.size) for _ in range(num_agents)])
  need = budget.copy()
  chunk = max(1, int(np.ceil(budget.min() / 100)))
  parts = [[] for _ in range(num_agents)]
  while need.sum() > 0:  # sum(need) <= sum(left) throughout, and every draw takes >= 1 point
    for a in rng.permutation(num_agents):
      if need[a] == 0:
        continue
      weights = q[a] * (left > 0)
      if weights.sum() <= 0:
        weights = left.astype(np.float64)
      counts = np.minimum(rng.multinomial(min(chunk, need[a]), weights / weights.sum()), left)
      for k in np.flatnonzero(counts):
        parts[a].append(pools[k][used[k]:used[k] + counts[k]])
      used += counts
      left -= counts
      need[a] -= counts.sum()
  return _finish(np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts)


def shards(labels: np.ndarray, num_agents: int, shards_per_agent: int,
           rng: np.random.Generator) -> list[np.ndarray]:
  """Label shards (McMahan et al., 2017: 200 shards of 300 MNIST points, 2 per client).

  The points are sorted by label (ties in random order), cut into
  ``S = num_agents * shards_per_agent`` consecutive shards whose sizes differ by at
  most one, and the shards are dealt out at random, ``shards_per_agent`` to each
  agent. Every point is used; each agent sees at most ``shards_per_agent`` labels
  plus any shard that straddles two labels.

  Args:
    labels: int labels, shape (n,).
    num_agents: M >= 1.
    shards_per_agent: shards per agent, >= 1, with ``M * shards_per_agent <= n``.
    rng: the random generator.

  Returns:
    One sorted int64 index array per agent; disjoint, covering 0..n-1.

  Raises:
    PartitionError: bad arguments.
  """
  labels, rng = _check_labels(labels), _check_rng(rng)
  num_agents = _check_agents(num_agents, labels.shape[0])
  if (isinstance(shards_per_agent, bool) or int(shards_per_agent) != shards_per_agent
      or shards_per_agent < 1):
    raise PartitionError(f"shards_per_agent must be an integer >= 1, got {shards_per_agent!r}")
  num_shards = num_agents * int(shards_per_agent)
  if num_shards > labels.shape[0]:
    raise PartitionError(f"num_agents * shards_per_agent = {num_shards} must be <= the number "
                         f"of points {labels.shape[0]}")
  shuffled = rng.permutation(labels.shape[0])
  by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
  pieces = np.array_split(by_label, num_shards)
  order = rng.permutation(num_shards).reshape(num_agents, int(shards_per_agent))
  return _finish(np.concatenate([pieces[s] for s in row]) for row in order)


def partition(name: str, labels: np.ndarray, num_agents: int, rng: np.random.Generator,
              **params) -> list[np.ndarray]:
  """Partitions the points among agents with the named method.

  Parameters by method (others raise):

  | name | parameters |
  | --- | --- |
  | ``"iid"`` | ``proportions`` (default equal), one per agent |
  | ``"label-split"`` | ``alpha`` in [0, 1] (required) |
  | ``"dirichlet-clients"`` | ``beta`` > 0 (required), ``min_size`` (0) |
  | ``"dirichlet-classes"`` | ``beta`` > 0 (required), ``samples_per_agent`` (all points) |
  | ``"shards"`` | ``shards_per_agent`` (2) |

  Args:
    name: one of :data:`PARTITIONS`.
    labels: int labels, shape (n,).
    num_agents: M >= 1.
    rng: the random generator (``np.random.default_rng(seed)``).
    **params: the method's parameters.

  Returns:
    One sorted int64 index array per agent; disjoint.

  Raises:
    PartitionError: unknown name, unknown or missing parameter, bad value.

  Example:
    >>> labels = np.repeat(np.arange(10), 20)
    >>> parts = neural.partition("label-split", labels, 2, np.random.default_rng(0), alpha=0.0)
    >>> [sorted(set(labels[p].tolist())) for p in parts]   # Alpha = 0: disjoint label sets
    [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
  """
  if name not in PARTITIONS:
    raise PartitionError(f"name must be one of {PARTITIONS}, got {name!r}")
  allowed = {"iid": ("proportions",), "label-split": ("alpha",),
             "dirichlet-clients": ("beta", "min_size"),
             "dirichlet-classes": ("beta", "samples_per_agent"),
             "shards": ("shards_per_agent",)}[name]
  unknown = sorted(set(params) - set(allowed))
  if unknown:
    raise PartitionError(f"partition {name!r} takes parameters {allowed}, got unknown "
                         f"{unknown}")
  required = {"label-split": ("alpha",), "dirichlet-clients": ("beta",),
              "dirichlet-classes": ("beta",)}.get(name, ())
  missing = [p for p in required if params.get(p) is None]
  if missing:
    raise PartitionError(f"partition {name!r} needs the parameter {missing[0]}")
  labels = _check_labels(labels)
  num_agents = _check_agents(num_agents, labels.shape[0])
  if name == "iid":
    proportions = params.get("proportions")
    if proportions is None:
      proportions = np.full(num_agents, 1.0 / num_agents)
    if np.ndim(proportions) != 1 or len(proportions) != num_agents:
      raise PartitionError(f"proportions must have one entry per agent ({num_agents}), got "
                           f"{proportions!r}")
    return iid(labels, proportions, rng)
  if name == "label-split":
    return label_split(labels, num_agents, params["alpha"], rng)
  if name == "dirichlet-clients":
    return dirichlet_clients(labels, num_agents, params["beta"], rng,
                             min_size=params.get("min_size", 0))
  if name == "dirichlet-classes":
    return dirichlet_classes(labels, num_agents, params["beta"], rng,
                             samples_per_agent=params.get("samples_per_agent"))
  shards_per_agent = params.get("shards_per_agent")
  return shards(labels, num_agents, 2 if shards_per_agent is None else shards_per_agent, rng)


def label_counts(labels: np.ndarray, parts: Sequence[np.ndarray], num_classes: int | None = None
                 ) -> np.ndarray:
  """Points of each class held by each agent.

  Returns:
    int64 array (M, C) with ``[a, c] = #{i in parts[a]: labels[i] = c}``.
  """
  labels = _check_labels(labels)
  num_classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
  return np.stack([np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=num_classes)
                   for p in parts]).astype(np.int64)


def _check_min_size(min_size, n: int, num_agents: int) -> int:
  if isinstance(min_size, bool) or int(min_size) != min_size or min_size < 0:
    raise PartitionError(f"min_size must be an integer >= 0, got {min_size!r}")
  if min_size * num_agents > n:
    raise PartitionError(f"min_size * num_agents = {min_size * num_agents} must be <= the "
                         f"number of points {n}")
  return int(min_size)


def _dirichlet(rng: np.random.Generator, beta: float, size: int) -> np.ndarray:
  """One draw of Dir(beta * 1_size); for tiny beta, where NumPy's sampler can return
  NaN (all gamma draws underflow), the mass goes to one uniformly chosen coordinate."""
  q = rng.dirichlet(np.full(size, beta))
  if not np.all(np.isfinite(q)) or q.sum() <= 0:
    q = np.zeros(size)
    q[rng.integers(size)] = 1.0
  return q


# ---------------------------------------------------------------------------
# The skewed-label split of multi-headed distillation (Zhmoginov et al. 2023, Sec. 3.3)


class SkewedSplit(NamedTuple):
  """The result of :func:`skewed_label_split`.

  Attributes:
    parts: one sorted int64 index array per client (disjoint, covering all points).
    primary: (K, C) booleans, ``primary[i, l]`` iff label l is primary for client i.
  """

  parts: list[np.ndarray]
  primary: np.ndarray


def primary_labels(num_classes: int, clients: int, rng: np.random.Generator, *,
                   assignment: str = "random", labels_per_client: int | None = None,
                   clients_per_label: int | None = None) -> np.ndarray:
  """The primary label sets ``l_i`` of Sec. 3.3 as a (K, C) boolean matrix.

  * ``"random"``: each client gets a uniformly random subset of
    ``labels_per_client`` labels (the paper: 250 of ImageNet's 1000).
  * ``"even"``: every label gets exactly ``clients_per_label`` primary clients
    (the paper's m): labels are shuffled and label p gets the clients
    ``(p m + r) mod K``, r < m, so the clients' numbers of primary labels
    differ by at most one.

  Raises:
    PartitionError: a count out of range or an unknown assignment.
  """
  if int(num_classes) < 1 or int(clients) < 1:
    raise PartitionError(f"num_classes, clients: expected ints >= 1, got {num_classes}, {clients}")
  primary = np.zeros((clients, num_classes), dtype=bool)
  if assignment == "random":
    if labels_per_client is None or not 0 <= labels_per_client <= num_classes:
      raise PartitionError(f"labels_per_client: expected an int in 0..{num_classes}, got "
                     f"{labels_per_client!r}")
    for i in range(clients):
      primary[i, rng.choice(num_classes, size=labels_per_client, replace=False)] = True
  elif assignment == "even":
    if clients_per_label is None or not 0 <= clients_per_label <= clients:
      raise PartitionError(f"clients_per_label: expected an int in 0..{clients}, got "
                     f"{clients_per_label!r}")
    for p, label in enumerate(rng.permutation(num_classes)):
      for r in range(clients_per_label):
        primary[(p * clients_per_label + r) % clients, label] = True
  else:
    raise PartitionError(f"assignment: expected one of {SKEWED_ASSIGNMENTS}, got {assignment!r}")
  return primary


def assignment_probabilities(primary: np.ndarray, skew: float) -> np.ndarray:
  """``P[l, i] = (1 + s [l in l_i]) / sum_j (1 + s [l in l_j])``, shape (C, K) (Sec. 3.3)."""
  weights = 1.0 + float(skew) * np.asarray(primary, dtype=np.float64).T
  return weights / np.sum(weights, axis=1, keepdims=True)


def skewed_label_split(labels: np.ndarray, clients: int, rng: np.random.Generator, *,
                       skew: float = 0.0, assignment: str = "random",
                       labels_per_client: int | None = None,
                       clients_per_label: int | None = None,
                       primary: np.ndarray | None = None) -> SkewedSplit:
  """The paper's skewed-label split of the private samples among K clients (Sec. 3.3).

  Each client i gets primary labels ``l_i`` (:func:`primary_labels`, or the
  given ``primary``); then every sample of label l goes, independently, to
  client i with probability ``(1 + s [l in l_i]) / (K + s n_l)``, n_l = number of
  clients with l primary (:func:`assignment_probabilities`). s = 0 is iid; as
  s -> infinity label l goes only to its primary clients (uniformly to all if n_l = 0).

  Args:
    labels: (n,) int labels of the private samples.
    clients: K >= 1.
    rng: NumPy generator (labels' assignment first, then the samples').
    skew: s >= 0.
    assignment: see :func:`primary_labels`.
    labels_per_client: see :func:`primary_labels`.
    clients_per_label: see :func:`primary_labels`.
    primary: a (K, C) boolean matrix to use instead of drawing one.

  Returns:
    A :class:`SkewedSplit`.

  Raises:
    PartitionError: bad labels, skew or primary shape.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.size == 0 \
     or labels.min() < 0:
    raise PartitionError(f"labels: expected a non-empty 1-D array of ints >= 0, got dtype "
                   f"{labels.dtype} and shape {labels.shape}")
  if not isinstance(rng, np.random.Generator):
    raise PartitionError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
  if not (np.isfinite(skew) and skew >= 0):
    raise PartitionError(f"skew: expected a number >= 0, got {skew!r}")
  num_classes = int(labels.max()) + 1
  if primary is None:
    primary = primary_labels(num_classes, clients, rng, assignment=assignment,
                             labels_per_client=labels_per_client,
                             clients_per_label=clients_per_label)
  primary = np.asarray(primary, dtype=bool)
  if primary.ndim != 2 or primary.shape[0] != clients or primary.shape[1] < num_classes:
    raise PartitionError(f"primary: expected shape ({clients}, >= {num_classes}), "
                         f"got {primary.shape}")
  probs = assignment_probabilities(primary, skew)
  owner = np.empty(labels.shape[0], dtype=np.int64)
  for label in range(num_classes):
    idx = np.flatnonzero(labels == label)
    owner[idx] = rng.choice(clients, size=idx.size, p=probs[label])
  parts = [np.flatnonzero(owner == i).astype(np.int64) for i in range(clients)]
  return SkewedSplit(parts, primary)
