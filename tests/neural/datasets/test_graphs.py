"""Tests of communication graphs and mixing matrices (neural/_src/datasets/graphs.py)."""

import numpy as np
import pytest

from neural._src.datasets import graphs
from neural._src.datasets.graphs import GraphError


def _undirected_cases():
  rng = np.random.default_rng(0)
  return [graphs.ring(2), graphs.ring(7), graphs.complete(5),
          graphs.random_bounded_degree(16, 3, rng), graphs.random_bounded_degree(9, 2, rng),
          graphs.random_bounded_degree(10, 4, rng)]


@pytest.mark.parametrize("graph", _undirected_cases(), ids=lambda g: f"{g.name}-{g.num_nodes}")
def test_undirected_graphs_are_symmetric_connected_without_self_loops(graph):
  a = graph.adjacency
  assert a.dtype == bool and not a.flags.writeable
  np.testing.assert_array_equal(a, a.T)
  assert not np.any(np.diag(a))
  assert graph.is_strongly_connected


@pytest.mark.parametrize("n,d", [(16, 3), (9, 2), (11, 3), (12, 5)])
def test_random_graph_degrees_bounded_and_seeded(n, d):
  g1 = graphs.random_bounded_degree(n, d, np.random.default_rng(3))
  g2 = graphs.random_bounded_degree(n, d, np.random.default_rng(3))
  assert g1.degrees.max() <= d and g1.degrees.min() >= 1
  np.testing.assert_array_equal(g1.adjacency, g2.adjacency)
  # maximal: no two non-adjacent nodes both have spare degree
  spare = np.flatnonzero(g1.degrees < d)
  sub = g1.adjacency[np.ix_(spare, spare)] | np.eye(spare.size, dtype=bool)
  assert sub.all()


def test_random_graphs_differ_across_seeds():
  draws = {graphs.random_bounded_degree(16, 3, np.random.default_rng(s)).adjacency.tobytes()
           for s in range(4)}
  assert len(draws) > 1


def test_ring_and_complete_degrees():
  assert np.all(graphs.ring(6).degrees == 2)
  assert np.all(graphs.complete(6).degrees == 5)
  g = graphs.directed_ring(5)
  assert g.directed and np.all(g.in_degrees == 1) and np.all(g.out_degrees == 1)
  assert g.is_strongly_connected
  assert g.out_neighbors(4).tolist() == [0] and g.in_neighbors(0).tolist() == [4]


def test_connectivity_detection():
  a = np.zeros((4, 4), dtype=bool)
  a[0, 1] = a[1, 0] = a[2, 3] = a[3, 2] = True
  assert not graphs.is_strongly_connected(a)
  path = np.zeros((3, 3), dtype=bool)
  path[0, 1] = path[1, 2] = True              # 0 -> 1 -> 2: weakly, not strongly connected
  assert not graphs.is_strongly_connected(path)
  path[2, 0] = True
  assert graphs.is_strongly_connected(path)
  with pytest.raises(GraphError, match="strongly connected"):
    graphs.from_adjacency(a)
  assert graphs.from_adjacency(path).directed


@pytest.mark.parametrize("n,k", [(4, 2), (7, 3), (5, 1), (6, 6)])
def test_islands_are_disjoint_complete_blocks(n, k):
  g = graphs.make_graph("islands", n, num_islands=k)
  a = g.adjacency
  np.testing.assert_array_equal(a, a.T)
  assert not np.any(np.diag(a)) and not g.directed
  # the components: connected blocks of near-equal size, complete inside, nothing across
  reach = np.array([graphs._reach(a, i) for i in range(n)])
  blocks = {tuple(np.flatnonzero(r)) for r in reach}
  assert len(blocks) == k
  assert sorted(len(b) for b in blocks)[-1] - sorted(len(b) for b in blocks)[0] <= 1
  for b in blocks:
    inside = a[np.ix_(b, b)] | np.eye(len(b), dtype=bool)
    assert inside.all()
  assert g.num_edges == sum(len(b) * (len(b) - 1) for b in blocks)
  assert g.is_strongly_connected == (k == 1)
  with pytest.raises(GraphError, match="num_islands"):
    graphs.islands(n, n + 1)


def _hops_by_powers(a):
  """Fewest edges i -> j from boolean matrix powers (-1: unreachable)."""
  n = a.shape[0]
  dist = np.where(np.eye(n, dtype=bool), 0, -1)
  walk = np.eye(n, dtype=bool)
  for hops in range(1, n):
    walk = (walk.astype(int) @ a.astype(int)) > 0
    dist = np.where((dist < 0) & walk, hops, dist)
  return dist


@pytest.mark.parametrize("graph", [graphs.directed_ring(5), graphs.ring(6), graphs.islands(5, 2),
                                   graphs.random_bounded_degree(9, 2, np.random.default_rng(1)),
                                   graphs.Graph((np.random.default_rng(2).random((7, 7)) < 0.2)
                                                & ~np.eye(7, dtype=bool), directed=True)],
                         ids=lambda g: f"{g.name or 'digraph'}-{g.num_nodes}")
def test_hop_distances_match_matrix_powers(graph):
  np.testing.assert_array_equal(graphs.hop_distances(graph), _hops_by_powers(graph.adjacency))


def test_hop_distances_of_the_directed_ring():
  idx = np.arange(4)
  np.testing.assert_array_equal(graphs.hop_distances(graphs.directed_ring(4)),
                                (idx[None, :] - idx[:, None]) % 4)


@pytest.mark.parametrize("bad,match", [
    (np.zeros((2, 3)), "square"),
    (np.eye(3), "self-loops"),
    (np.array([[0, 1], [0, 0]]), "symmetric"),
    (np.array([[0, 2], [2, 0]]), "0/1"),
    (np.zeros((1, 1)), "at least 2"),
])
def test_graph_validation_errors(bad, match):
  with pytest.raises(GraphError, match=match):
    graphs.Graph(bad, directed=False)


def test_constructor_errors():
  with pytest.raises(GraphError, match="degree"):
    graphs.random_bounded_degree(5, 1, np.random.default_rng(0))
  with pytest.raises(GraphError, match="rng"):
    graphs.make_graph("random", 5)
  with pytest.raises(GraphError, match="name"):
    graphs.make_graph("star", 5)
  with pytest.raises(GraphError, match="num_nodes"):
    graphs.ring(1)
  assert graphs.make_graph("random", 6, degree=9, rng=np.random.default_rng(0)).num_edges == 30


@pytest.mark.parametrize("graph", _undirected_cases(), ids=lambda g: f"{g.name}-{g.num_nodes}")
def test_metropolis_doubly_stochastic_nonnegative_with_gap(graph):
  w = graphs.mixing_matrix(graph)
  np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
  np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
  np.testing.assert_array_equal(w, w.T)
  assert np.all(w >= 0) and np.all(np.diag(w) > 0)
  assert np.all((w > 0) <= (graph.adjacency | np.eye(graph.num_nodes, dtype=bool)))
  rate = graphs.mixing_rate(w)
  assert rate < 1 - 1e-9 and graphs.spectral_gap(w) > 0
  # the disagreement contracts by at least `rate` per mixing step
  v = np.random.default_rng(1).normal(size=(graph.num_nodes, 3))
  dev = v - v.mean(axis=0)
  mixed = graphs.mix(w, v)
  np.testing.assert_allclose(mixed.mean(axis=0), v.mean(axis=0), atol=1e-12)
  assert np.linalg.norm(mixed - mixed.mean(axis=0)) <= rate * np.linalg.norm(dev) + 1e-12


def test_disconnected_graph_has_no_gap():
  a = np.zeros((4, 4), dtype=bool)
  a[0, 1] = a[1, 0] = a[2, 3] = a[3, 2] = True
  w = graphs.metropolis_weights(graphs.Graph(a))
  assert graphs.mixing_rate(w) == pytest.approx(1.0)
  with pytest.raises(GraphError, match="strongly connected"):
    graphs.mixing_matrix(graphs.Graph(a))


def test_directed_ring_uniform_weights():
  g = graphs.directed_ring(5)
  w = graphs.mixing_matrix(g)
  np.testing.assert_allclose(w.sum(axis=0), 1.0)
  np.testing.assert_allclose(w.sum(axis=1), 1.0)
  assert graphs.mixing_rate(w) < 1
  # node j mixes its own value with its in-neighbour j-1's
  v = np.arange(5.0)
  np.testing.assert_allclose(graphs.mix(w, v), (v + np.roll(v, 1)) / 2)
  with pytest.raises(GraphError, match="undirected"):
    graphs.metropolis_weights(g)


def test_directed_irregular_needs_user_matrix():
  a = np.zeros((3, 3), dtype=bool)
  a[0, 1] = a[1, 2] = a[2, 0] = a[0, 2] = True
  g = graphs.from_adjacency(a)
  with pytest.raises(GraphError, match="regular"):
    graphs.mixing_matrix(g)


@pytest.mark.parametrize("bad,match", [
    (np.ones((2, 3)) / 3, "square"),
    (np.array([[1.5, -0.5], [-0.5, 1.5]]), "nonnegative"),
    (np.array([[0.5, 0.5], [0.3, 0.3]]), "rows"),
    (np.array([[0.5, 0.5], [0.7, 0.3]]), "columns"),
    (np.array([[0.0, 1.0], [1.0, 0.0]]), "diagonal"),
])
def test_mixing_matrix_errors(bad, match):
  with pytest.raises(GraphError, match=match):
    graphs.check_mixing_matrix(bad)


def test_mixing_matrix_support_must_follow_edges():
  w = np.full((4, 4), 0.25)
  with pytest.raises(GraphError, match="no edge"):
    graphs.mixing_matrix(graphs.ring(4), w)
  np.testing.assert_array_equal(graphs.mixing_matrix(graphs.complete(4), w), w)


def test_time_varying_sequence_and_callable():
  n = 4
  edges = []
  for i in range(n - 1):
    a = np.zeros((n, n), dtype=bool)
    a[i, i + 1] = a[i + 1, i] = True
    edges.append(graphs.Graph(a))
  tv = graphs.time_varying(edges)
  assert tv.window == 3 and tv.at(4) is edges[1]
  with pytest.raises(GraphError, match="union"):
    graphs.time_varying(edges, window=2)
  fn = graphs.time_varying(lambda t: edges[t % 3], window=3, check_rounds=9)
  assert fn.at(5) is edges[2]
  with pytest.raises(GraphError, match="union"):
    graphs.time_varying(lambda t: edges[0], window=3)
  with pytest.raises(GraphError, match="window"):
    graphs.time_varying(lambda t: edges[0])
  with pytest.raises(GraphError, match="same number"):
    graphs.time_varying([graphs.ring(3), graphs.ring(4)])


def test_edge_schedule_mixes_to_consensus_though_no_round_is_connected():
  """Parts of a ring's edges: each round disconnected, the product of B rounds' W contracts."""
  graph = graphs.ring(8)
  schedule = graphs.edge_schedule(graph, 2, np.random.default_rng(0))
  parts = [schedule.at(t) for t in range(2)]
  assert not any(g.is_strongly_connected for g in parts)
  np.testing.assert_array_equal(graphs.union(parts).adjacency, graph.adjacency)
  assert schedule.at(5) is schedule.at(1)
  ws = [schedule.mixing_matrix(t) for t in range(2)]
  assert all(graphs.mixing_rate(w) == pytest.approx(1.0) for w in ws)   # no round alone
  assert graphs.mixing_rate(ws[0] @ ws[1]) < 1.0                          # two rounds do
  with pytest.raises(GraphError, match="strongly connected"):
    graphs.mixing_matrix(parts[0])
  with pytest.raises(GraphError, match="window: expected an integer in"):
    graphs.edge_schedule(graph, 9, np.random.default_rng(0))
  with pytest.raises(GraphError, match="undirected"):
    graphs.edge_schedule(graphs.directed_ring(4), 2, np.random.default_rng(0))
