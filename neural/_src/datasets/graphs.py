"""Communication graphs and doubly stochastic mixing matrices for decentralised methods.

Conventions (those of Bistritz, Mann & Bambos, 2020, Definition 2):

- A :class:`Graph` on nodes ``0..n-1`` holds a boolean adjacency ``A`` of shape
  (n, n) with ``A[i, j]`` True iff node i can **send** to node j (edge i -> j).
  Undirected graphs have a symmetric ``A``. The diagonal is always False: a node's
  weight on its own value belongs to the mixing matrix, not to the graph.
- A mixing matrix ``W`` (n, n) is nonnegative, doubly stochastic (rows and columns
  sum to 1), has a positive diagonal and ``W[i, j] > 0`` only where ``A[i, j]`` or
  ``i == j``. Node j's mixed value is ``sum_i W[i, j] v_i`` (eq. 6 of the paper, the
  weight on the message from i to j); see :func:`mix`. For symmetric ``W`` (all the
  undirected constructions here) this equals ``sum_i W[j, i] v_i``.
- Strong connectivity (every node reaches every other along directed edges) is what
  the consensus of decentralised SGD and D-Distillation needs; for a time-varying
  graph, the union of the graphs over every window of ``window`` consecutive rounds
  must be strongly connected (B-connectivity).

Constructors: :func:`ring`, :func:`complete`, :func:`random_bounded_degree`,
:func:`directed_ring`, :func:`islands` (disconnected groups, for topology studies),
:func:`from_adjacency`, :func:`make_graph` (by name), and :func:`time_varying` for a
cyclic sequence of graphs or a callable ``t -> Graph``. :func:`hop_distances` gives
the number of directed edges between every pair of nodes.
Mixing: :func:`metropolis_weights` (undirected), :func:`uniform_regular_weights`
(regular digraphs), :func:`mixing_matrix` (either, or a checked user matrix),
:func:`check_mixing_matrix`, :func:`mixing_rate` and :func:`spectral_gap`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
from typing import cast

import numpy as np

GRAPHS = ("ring", "complete", "random", "directed-ring")
# GRAPHS are strongly connected (what consensus needs); ALL_GRAPHS adds the disconnected
# "islands" of topology studies, for methods that do not need connectivity.
ALL_GRAPHS = (*GRAPHS, "islands")


class GraphError(ValueError):
  """Invalid graph or mixing matrix; the message names the argument and what was expected."""


def _reach(adjacency: np.ndarray, start: int) -> np.ndarray:
  """Booleans (n,): the nodes reachable from ``start`` along edges i -> j."""
  seen = np.zeros(adjacency.shape[0], dtype=bool)
  seen[start] = True
  frontier = [start]
  while frontier:
    nxt = np.flatnonzero(adjacency[frontier].any(axis=0) & ~seen)
    seen[nxt] = True
    frontier = list(nxt)
  return seen


def is_strongly_connected(adjacency) -> bool:
  """Whether every node reaches every other along the edges ``A[i, j]`` (i -> j).

  For a symmetric adjacency this is ordinary connectivity. Node 0 must reach all
  nodes in ``A`` and in its transpose (a breadth-first search each way).
  """
  adjacency = np.asarray(adjacency, dtype=bool)
  if adjacency.shape[0] <= 1:
    return True
  return bool(_reach(adjacency, 0).all() and _reach(adjacency.T, 0).all())


@dataclasses.dataclass(frozen=True)
class Graph:
  """A communication graph: ``adjacency[i, j]`` iff node i sends to node j.

  Attributes:
    adjacency: (n, n) read-only booleans, False on the diagonal; symmetric unless
      ``directed``.
    directed: whether edges are one-way (an undirected graph has a symmetric adjacency).
    name: a label for listings ("ring", "random(d=3)", ...).

  Raises:
    GraphError: not a square boolean-like matrix, a self-loop (True on the
      diagonal), an asymmetric adjacency with ``directed=False``, or fewer than 2 nodes.
  """

  adjacency: np.ndarray
  directed: bool = False
  name: str = ""

  def __post_init__(self):
    a = np.asarray(self.adjacency)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
      raise GraphError(f"adjacency: expected a square (n, n) matrix, got shape {a.shape}")
    if a.shape[0] < 2:
      raise GraphError(f"adjacency: expected at least 2 nodes, got {a.shape[0]}")
    if a.dtype != bool:
      if not np.all((a == 0) | (a == 1)):
        raise GraphError("adjacency: expected booleans or 0/1 entries")
      a = a.astype(bool)
    if np.any(np.diag(a)):
      raise GraphError(f"adjacency: expected no self-loops (False on the diagonal; a node's own "
                       f"weight belongs to the mixing matrix), got True at nodes "
                       f"{np.flatnonzero(np.diag(a)).tolist()}")
    if not self.directed and not np.array_equal(a, a.T):
      raise GraphError("adjacency: expected a symmetric matrix for an undirected graph "
                       "(pass directed=True for one-way edges)")
    a = a.copy()
    a.flags.writeable = False
    object.__setattr__(self, "adjacency", a)

  @property
  def num_nodes(self) -> int:
    """The number of nodes (agents)."""
    return int(self.adjacency.shape[0])

  @property
  def out_degrees(self) -> np.ndarray:
    """(n,) ints: the number of nodes each node sends to."""
    return self.adjacency.sum(axis=1)

  @property
  def in_degrees(self) -> np.ndarray:
    """(n,) ints: the number of nodes each node receives from."""
    return self.adjacency.sum(axis=0)

  @property
  def degrees(self) -> np.ndarray:
    """(n,) ints: out-degrees (equal to the degrees of an undirected graph)."""
    return self.out_degrees

  def out_neighbors(self, node: int) -> np.ndarray:
    """The nodes that ``node`` sends to (row ``node`` of the adjacency matrix)."""
    return np.flatnonzero(self.adjacency[node])

  def in_neighbors(self, node: int) -> np.ndarray:
    """The nodes that ``node`` receives from (column ``node`` of the adjacency matrix)."""
    return np.flatnonzero(self.adjacency[:, node])

  @property
  def num_edges(self) -> int:
    """Directed edges (each undirected edge counts twice: one message each way)."""
    return int(self.adjacency.sum())

  @property
  def is_strongly_connected(self) -> bool:
    """Whether every node reaches every other along directed edges."""
    return is_strongly_connected(self.adjacency)


def _check_nodes(num_nodes, minimum: int = 2) -> int:
  if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) \
     or num_nodes < minimum:
    raise GraphError(f"num_nodes: expected an integer >= {minimum}, got {num_nodes!r}")
  return int(num_nodes)


def from_adjacency(adjacency, *, directed: bool | None = None, name: str = "custom",
                   require_connected: bool = True) -> Graph:
  """A :class:`Graph` from a user adjacency (``A[i, j]``: i sends to j).

  Args:
    adjacency: (n, n) booleans or 0/1, False on the diagonal.
    directed: None infers it (directed iff ``A`` is not symmetric).
    name: a label.
    require_connected: raise unless strongly connected.

  Raises:
    GraphError: see :class:`Graph`; or not strongly connected.
  """
  a = np.asarray(adjacency)
  if directed is None:
    directed = a.ndim == 2 and a.shape[0] == a.shape[-1] and not np.array_equal(a, a.T)
  graph = Graph(a, directed=bool(directed), name=name)
  if require_connected and not graph.is_strongly_connected:
    raise GraphError(f"adjacency: expected a strongly connected graph ({name})")
  return graph


def ring(num_nodes: int) -> Graph:
  """The undirected ring: i <-> i+1 (mod n); degree 2 (1 for n = 2)."""
  n = _check_nodes(num_nodes)
  a = np.zeros((n, n), dtype=bool)
  idx = np.arange(n)
  a[idx, (idx + 1) % n] = True
  a[(idx + 1) % n, idx] = True
  return Graph(a, directed=False, name="ring")


def directed_ring(num_nodes: int) -> Graph:
  """The directed ring: i -> i+1 (mod n); in- and out-degree 1, strongly connected."""
  n = _check_nodes(num_nodes)
  a = np.zeros((n, n), dtype=bool)
  idx = np.arange(n)
  a[idx, (idx + 1) % n] = True
  return Graph(a, directed=True, name="directed-ring")


def complete(num_nodes: int) -> Graph:
  """The complete undirected graph: every pair linked; degree n - 1."""
  n = _check_nodes(num_nodes)
  return Graph(~np.eye(n, dtype=bool), directed=False, name="complete")


def islands(num_nodes: int, num_islands: int) -> Graph:
  """``num_islands`` disconnected complete graphs on consecutive blocks of nodes.

  Nodes are dealt into contiguous blocks whose sizes differ by at most one (the
  first ``n mod num_islands`` blocks one larger); every pair inside a block is
  linked both ways, no edge crosses blocks. Zhmoginov et al. (2023), Sec. 4.4,
  compare such "islands" with a directed cycle to test transitive distillation;
  with 4 nodes and 2 islands every node has one neighbour, as on the cycle. The
  paper's Fig. 5, which draws the islands, is not in its text; this is our reading.

  Args:
    num_nodes: n >= 2.
    num_islands: in [1, n]; 1 gives the complete graph (named "islands(1)").

  Raises:
    GraphError: bad n or number of islands.

  Example:
    >>> neural.data.islands(4, 2).adjacency.astype(int)
    array([[0, 1, 0, 0],
           [1, 0, 0, 0],
           [0, 0, 0, 1],
           [0, 0, 1, 0]])
  """
  n = _check_nodes(num_nodes)
  if isinstance(num_islands, bool) or not isinstance(num_islands, (int, np.integer)) \
     or not 1 <= num_islands <= n:
    raise GraphError(f"num_islands: expected an integer in [1, {n}], got {num_islands!r}")
  block = np.repeat(np.arange(num_islands), [len(b) for b in np.array_split(np.arange(n),
                                                                             num_islands)])
  a = (block[:, None] == block[None, :]) & ~np.eye(n, dtype=bool)
  return Graph(a, directed=False, name=f"islands({int(num_islands)})")


def hop_distances(graph: Graph) -> np.ndarray:
  """(n, n) ints: ``D[i, j]`` = the fewest directed edges on a path from i to j.

  ``D[i, i] = 0``, and -1 where j cannot be reached from i (another island). On the
  directed ring i -> i+1, ``D[i, j] = (j - i) mod n``: in a distillation graph where
  j learns from i, a teacher's teacher is 2 hops away (Zhmoginov et al., 2023,
  Sec. 4.4, "Cycle-2"). One breadth-first search per node.
  """
  a = graph.adjacency
  n = a.shape[0]
  dist = -np.ones((n, n), dtype=np.int64)
  for start in range(n):
    dist[start, start] = 0
    frontier, hops = [start], 0
    while frontier:
      hops += 1
      nxt = np.flatnonzero(a[frontier].any(axis=0) & (dist[start] < 0))
      dist[start, nxt] = hops
      frontier = list(nxt)
  return dist


def random_bounded_degree(num_nodes: int, degree: int, rng: np.random.Generator, *,
                          max_tries: int = 1000) -> Graph:
  """A random connected undirected graph with every degree <= ``degree``.

  The n(n-1)/2 node pairs are visited in a uniformly random order and a pair is
  linked when both ends still have degree < ``degree``; this gives a random
  maximal graph of maximum degree ``degree`` (d-regular in most draws when n*d is
  even). Disconnected draws are redrawn, up to ``max_tries`` times. This is our
  reading of the "random communication graph instance of maximum degree 3" of
  Bistritz et al. (2020), Sec. 6 (Fig. 2); the paper gives no construction.

  Args:
    num_nodes: n >= 2.
    degree: the bound d; d = 1 only with n = 2 (else no connected graph exists);
      d >= n - 1 gives the complete graph.
    rng: the NumPy Generator of the draw.
    max_tries: redraws before giving up.

  Raises:
    GraphError: bad n or d, or no connected draw in ``max_tries``.
  """
  n = _check_nodes(num_nodes)
  if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
    raise GraphError(f"degree: expected an integer >= 1, got {degree!r}")
  if degree == 1 and n > 2:
    raise GraphError(f"degree: expected >= 2 for a connected graph on {n} nodes, got 1")
  if not isinstance(rng, np.random.Generator):
    raise GraphError(f"rng: expected a numpy Generator, got {type(rng).__name__}")
  if degree >= n - 1:
    return dataclasses.replace(complete(n), name=f"random(d={degree})")
  rows, cols = np.triu_indices(n, k=1)
  for _ in range(max_tries):
    a = np.zeros((n, n), dtype=bool)
    deg = np.zeros(n, dtype=np.int64)
    for k in rng.permutation(rows.size):
      i, j = rows[k], cols[k]
      if deg[i] < degree and deg[j] < degree:
        a[i, j] = a[j, i] = True
        deg[i] += 1
        deg[j] += 1
    if is_strongly_connected(a):
      return Graph(a, directed=False, name=f"random(d={degree})")
  raise GraphError(f"degree: no connected random graph with max degree {degree} on {n} nodes "
                   f"in {max_tries} draws; raise degree or max_tries")


def make_graph(name: str, num_nodes: int, *, degree: int = 3,
               rng: np.random.Generator | None = None, num_islands: int = 2) -> Graph:
  """The graph called ``name`` (one of ``ALL_GRAPHS``) on ``num_nodes`` nodes.

  ``"random"`` needs ``rng`` and uses ``degree`` (:func:`random_bounded_degree`);
  ``"islands"`` uses ``num_islands`` (:func:`islands`; not connected, so not in
  ``GRAPHS``); the others ignore all three.

  Raises:
    GraphError: an unknown name, or a bad argument of the constructor.
  """
  if name == "ring":
    return ring(num_nodes)
  if name == "complete":
    return complete(num_nodes)
  if name == "directed-ring":
    return directed_ring(num_nodes)
  if name == "random":
    if rng is None:
      raise GraphError("rng: expected a numpy Generator for the 'random' graph, got None")
    return random_bounded_degree(num_nodes, degree, rng)
  if name == "islands":
    return islands(num_nodes, num_islands)
  raise GraphError(f"name: expected one of {', '.join(ALL_GRAPHS)}, got {name!r}")


# ---------------------------------------------------------------------------
# Mixing matrices


def metropolis_weights(graph: Graph) -> np.ndarray:
  """Metropolis-Hastings weights of an undirected graph (Xiao & Boyd, 2004).

  ``W[i, j] = 1 / (1 + max(d_i, d_j))`` on edges, ``W[i, i] = 1 - sum_{j != i} W[i, j]``,
  0 elsewhere. W is symmetric, hence doubly stochastic, and ``W[i, i] >= 1 / (1 + d_i) > 0``.

  Returns:
    (n, n) float64.

  Raises:
    GraphError: a directed graph (use :func:`uniform_regular_weights` or a user matrix).
  """
  if graph.directed:
    raise GraphError("graph: Metropolis weights need an undirected graph; for a directed "
                     "graph use uniform_regular_weights (regular digraphs) or pass a doubly "
                     "stochastic matrix")
  d = graph.degrees.astype(np.float64)
  w = np.where(graph.adjacency, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
  np.fill_diagonal(w, 1.0 - w.sum(axis=1))
  return w


def uniform_regular_weights(graph: Graph) -> np.ndarray:
  """Uniform weights 1/(d+1) on each in-neighbour and on itself, for a d-regular graph.

  When every node has in-degree and out-degree d, ``W = (I + A) / (d + 1)`` has
  unit row sums (out-degrees) and unit column sums (in-degrees): doubly stochastic.
  For a directed graph that is not regular no such simple rule exists; supply a
  doubly stochastic matrix to :func:`mixing_matrix` instead.

  Raises:
    GraphError: in- or out-degrees not all equal.
  """
  d_out, d_in = graph.out_degrees, graph.in_degrees
  if not (np.all(d_out == d_out[0]) and np.all(d_in == d_out[0])):
    raise GraphError(f"graph: uniform weights need equal in- and out-degrees at every node "
                     f"(a regular graph), got out-degrees {d_out.tolist()} and in-degrees "
                     f"{d_in.tolist()}; pass a doubly stochastic matrix instead")
  n = graph.num_nodes
  return (np.eye(n) + graph.adjacency) / (1.0 + d_out[0])


def check_mixing_matrix(weights, graph: Graph | None = None, *, atol: float = 1e-8,
                        connected: bool = True) -> np.ndarray:
  """Checks a mixing matrix and returns it as float64 (n, n).

  Requires: square, finite, nonnegative, rows and columns summing to 1 (within
  ``atol``), positive diagonal, and, given ``graph``, ``W[i, j] > 0`` only on edges
  i -> j or the diagonal, with the graph strongly connected (Bistritz et al.,
  Definition 2) unless ``connected`` is false (one round of a time-varying graph,
  whose windows are checked by :func:`time_varying`).

  Raises:
    GraphError: naming the first violated property.
  """
  w = np.asarray(weights, dtype=np.float64)
  if w.ndim != 2 or w.shape[0] != w.shape[1]:
    raise GraphError(f"weights: expected a square (n, n) matrix, got shape {w.shape}")
  if not np.all(np.isfinite(w)):
    raise GraphError("weights: expected finite entries")
  if np.any(w < -atol):
    raise GraphError(f"weights: expected nonnegative entries, got minimum {w.min():.3g}")
  rows, cols = w.sum(axis=1), w.sum(axis=0)
  if not np.allclose(rows, 1.0, atol=atol, rtol=0):
    raise GraphError(f"weights: expected rows summing to 1 (doubly stochastic), got row sums "
                     f"in [{rows.min():.6g}, {rows.max():.6g}]")
  if not np.allclose(cols, 1.0, atol=atol, rtol=0):
    raise GraphError(f"weights: expected columns summing to 1 (doubly stochastic), got column "
                     f"sums in [{cols.min():.6g}, {cols.max():.6g}]")
  if np.any(np.diag(w) <= 0):
    raise GraphError(f"weights: expected a positive diagonal (w_nn > 0), got zero at nodes "
                     f"{np.flatnonzero(np.diag(w) <= 0).tolist()}")
  if graph is not None:
    if graph.num_nodes != w.shape[0]:
      raise GraphError(f"weights: expected shape ({graph.num_nodes}, {graph.num_nodes}) for "
                       f"the graph, got {w.shape}")
    off = (w > atol) & ~graph.adjacency & ~np.eye(w.shape[0], dtype=bool)
    if np.any(off):
      i, j = np.argwhere(off)[0]
      raise GraphError(f"weights: expected zero where the graph has no edge, got "
                       f"W[{i}, {j}] = {w[i, j]:.3g} without edge {i} -> {j}")
    if connected and not graph.is_strongly_connected:
      raise GraphError(f"graph: expected a strongly connected graph ({graph.name})")
  return w


def mixing_matrix(graph: Graph, weights=None, *, connected: bool = True) -> np.ndarray:
  """The checked doubly stochastic mixing matrix of ``graph``.

  Args:
    graph: a strongly connected graph (any graph with ``connected=False``).
    weights: None for the default rule (Metropolis for undirected graphs, uniform
      1/(d+1) for regular directed graphs), or a user (n, n) matrix to check.
    connected: require ``graph`` to be strongly connected.

  Returns:
    (n, n) float64 ``W`` with ``W[i, j]`` the weight node j puts on node i's value.

  Raises:
    GraphError: a directed non-regular graph without ``weights``, or a matrix or
      graph failing :func:`check_mixing_matrix`.
  """
  if weights is None:
    weights = uniform_regular_weights(graph) if graph.directed else metropolis_weights(graph)
  return check_mixing_matrix(weights, graph, connected=connected)


def mix(weights, values):
  """Node j's mixed value ``sum_i W[i, j] values[i]`` (Bistritz et al., eq. 6).

  Args:
    weights: (n, n) mixing matrix.
    values: (n, ...) one value per node (NumPy or JAX).

  Returns:
    (n, ...) the mixed values.
  """
  n = values.shape[0]
  flat = values.reshape(n, -1)
  return (weights.T @ flat).reshape(values.shape)


def mixing_rate(weights) -> float:
  """The consensus contraction ``sigma_max(W - 11^T / n)`` in [0, 1].

  For doubly stochastic W the disagreement ``v - mean(v)`` shrinks by at least this
  factor per mixing step. It is < 1 when the graph of W is strongly connected and W
  has a positive diagonal, and 1 for a disconnected graph.
  """
  w = np.asarray(weights, dtype=np.float64)
  n = w.shape[0]
  return float(np.linalg.norm(w - np.full((n, n), 1.0 / n), ord=2))


def spectral_gap(weights) -> float:
  """``1 - mixing_rate(W)``: > 0 exactly when repeated mixing reaches consensus."""
  return 1.0 - mixing_rate(weights)


# ---------------------------------------------------------------------------
# Time-varying graphs


def union(graphs: Sequence[Graph]) -> Graph:
  """The graph whose edges are those of any of ``graphs`` (same node count)."""
  if not graphs:
    raise GraphError("graphs: expected at least one graph")
  n = graphs[0].num_nodes
  if any(g.num_nodes != n for g in graphs):
    raise GraphError(f"graphs: expected the same number of nodes, got "
                     f"{[g.num_nodes for g in graphs]}")
  a = np.logical_or.reduce([g.adjacency for g in graphs])
  return Graph(a, directed=any(g.directed for g in graphs) or not np.array_equal(a, a.T),
               name="union")


@dataclasses.dataclass(frozen=True)
class TimeVaryingGraph:
  """A graph per round: ``graphs[t % len(graphs)]``, or ``fn(t)``.

  Attributes:
    graphs: the cyclic sequence (None when ``fn`` is given).
    fn: a callable ``t -> Graph`` (None when ``graphs`` is given).
    window: B such that the union over rounds [kB, (k+1)B) is strongly connected.
    num_nodes: n, the same in every round.
  """

  graphs: tuple[Graph, ...] | None
  fn: Callable[[int], Graph] | None
  window: int
  num_nodes: int

  def at(self, t: int) -> Graph:
    """The graph of round t (checked to have ``num_nodes`` nodes)."""
    fn = cast(Callable[[int], Graph], self.fn)   # given when graphs is None
    g = self.graphs[t % len(self.graphs)] if self.graphs is not None else fn(t)
    if not isinstance(g, Graph) or g.num_nodes != self.num_nodes:
      raise GraphError(f"fn: expected a Graph on {self.num_nodes} nodes at round {t}, got {g!r}")
    return g

  def mixing_matrix(self, t: int) -> np.ndarray:
    """The checked default mixing matrix (:func:`mixing_matrix`) of round t's graph.

    Round t's graph need not be connected; the windows' unions are (checked by
    :func:`time_varying`), which is what consensus over time needs.
    """
    return mixing_matrix(self.at(t), connected=False)


def time_varying(graphs: Sequence[Graph] | Callable[[int], Graph], *, window: int | None = None,
                 check_rounds: int | None = None) -> TimeVaryingGraph:
  """A time-varying graph whose union over every ``window`` rounds is strongly connected.

  Args:
    graphs: a non-empty sequence used cyclically (round t uses ``graphs[t % len]``),
      or a callable ``t -> Graph``.
    window: B (default: the sequence length; required for a callable). Every cyclic
      run of B consecutive graphs of a sequence is checked; the individual graphs
      need not be connected.
    check_rounds: for a callable, the horizon checked (default ``10 * window``):
      the windows [kB, (k+1)B) inside it must have strongly connected unions. A
      callable can only be checked over a finite horizon.

  Raises:
    GraphError: empty sequence, bad window, node counts that differ, or a window
      whose union is not strongly connected.
  """
  if callable(graphs) and not isinstance(graphs, (list, tuple)):
    if window is None or window < 1:
      raise GraphError(f"window: expected an integer >= 1 for a callable, got {window!r}")
    first = graphs(0)
    if not isinstance(first, Graph):
      raise GraphError(f"graphs: expected the callable to return a Graph, got {first!r}")
    tv = TimeVaryingGraph(None, graphs, int(window), first.num_nodes)
    horizon = 10 * window if check_rounds is None else int(check_rounds)
    starts = range(0, max(horizon - window + 1, 1), window)
    windows = [[tv.at(s + k) for k in range(window)] for s in starts]
  else:
    seq = tuple(graphs)
    if not seq or not all(isinstance(g, Graph) for g in seq):
      raise GraphError("graphs: expected a non-empty sequence of Graph or a callable")
    window = len(seq) if window is None else window
    if window < 1:
      raise GraphError(f"window: expected an integer >= 1, got {window!r}")
    n = seq[0].num_nodes
    if any(g.num_nodes != n for g in seq):
      raise GraphError(f"graphs: expected the same number of nodes, got "
                       f"{[g.num_nodes for g in seq]}")
    tv = TimeVaryingGraph(seq, None, int(window), n)
    windows = [[seq[(s + k) % len(seq)] for k in range(window)] for s in range(len(seq))]
  for w in windows:
    if not union(w).is_strongly_connected:
      raise GraphError(f"window: the union of {window} consecutive graphs is not strongly "
                       f"connected; raise window or add edges")
  return tv


def edge_schedule(graph: Graph, window: int, rng: np.random.Generator) -> TimeVaryingGraph:
  """A time-varying graph that uses one of ``window`` disjoint parts of ``graph``'s edges a round.

  The undirected edges of ``graph`` are shuffled by ``rng`` and dealt round-robin into
  ``window`` parts; round t uses part ``t % window``. The union over any ``window``
  consecutive rounds is ``graph`` itself, so it is strongly connected although the
  graph of one round usually is not (the time-varying setting: links that come and
  go, as in gossip with intermittent connectivity). ``window = 1`` is ``graph`` in
  every round.

  Raises:
    GraphError: a directed graph (splitting a regular digraph's edges breaks the
      uniform weights), a disconnected graph, or ``window`` not in
      [1, number of undirected edges].
  """
  if graph.directed:
    raise GraphError(f"graph: expected an undirected graph to split into rounds, got "
                     f"{graph.name or 'a directed graph'}")
  if not graph.is_strongly_connected:
    raise GraphError(f"graph: expected a connected graph ({graph.name})")
  edges = np.argwhere(np.triu(graph.adjacency))
  if isinstance(window, bool) or not isinstance(window, (int, np.integer)) \
     or not 1 <= window <= len(edges):
    raise GraphError(f"window: expected an integer in [1, {len(edges)}] (the number of edges "
                     f"of {graph.name or 'the graph'}), got {window!r}")
  edges = edges[rng.permutation(len(edges))]
  parts = []
  for k in range(int(window)):
    a = np.zeros_like(graph.adjacency)
    i, j = edges[k::window].T
    a[i, j] = a[j, i] = True
    parts.append(Graph(a, name=f"{graph.name}[part {k + 1}/{window}]"))
  return time_varying(parts, window=int(window))
