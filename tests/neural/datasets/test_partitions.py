"""Partitions: disjointness, counts, the paper's label split, Dirichlet concentration."""

import numpy as np
import pytest

from neural._src.datasets import partitions as partitions_lib
from neural._src.datasets.partitions import PARTITIONS
from neural._src.datasets.partitions import PartitionError
from neural._src.datasets.partitions import dirichlet_classes
from neural._src.datasets.partitions import dirichlet_clients
from neural._src.datasets.partitions import iid
from neural._src.datasets.partitions import label_counts
from neural._src.datasets.partitions import label_split
from neural._src.datasets.partitions import partition
from neural._src.datasets.partitions import shards

PARAMS = {"iid": {}, "label-split": {"alpha": 0.3}, "dirichlet-clients": {"beta": 0.5},
          "dirichlet-classes": {"beta": 0.5}, "shards": {"shards_per_agent": 2}}


def balanced_labels(num_classes=10, per_class=300, seed=0):
  """Shuffled labels with exactly per_class points of each class."""
  return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def check_disjoint(parts, n):
  assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
  allidx = np.concatenate(parts)
  assert np.unique(allidx).size == allidx.size, "an index is given to two agents"
  assert allidx.size == 0 or (allidx.min() >= 0 and allidx.max() < n)
  return allidx


def test_partitions_listed():
  assert PARTITIONS == ("iid", "label-split", "dirichlet-clients", "dirichlet-classes", "shards")


@pytest.mark.parametrize("name", PARTITIONS)
@pytest.mark.parametrize("num_agents", [2, 5])
def test_disjoint_use_every_point_and_seeded(name, num_agents):
  labels = balanced_labels(per_class=101)
  parts = partition(name, labels, num_agents, np.random.default_rng(3), **PARAMS[name])
  assert len(parts) == num_agents
  allidx = check_disjoint(parts, labels.size)
  # Every method uses every point by default (dirichlet-classes: budgets share out n).
  assert allidx.size == labels.size
  again = partition(name, labels, num_agents, np.random.default_rng(3), **PARAMS[name])
  assert all(np.array_equal(p, q) for p, q in zip(parts, again))
  other = partition(name, labels, num_agents, np.random.default_rng(4), **PARAMS[name])
  assert not all(np.array_equal(p, q) for p, q in zip(parts, other))


# ------------------------------------------------------------------------------ iid


def test_iid_sizes_and_class_proportions_within_sampling_tolerance():
  labels = balanced_labels(per_class=1000)
  parts = iid(labels, [0.7, 0.3], np.random.default_rng(0))
  assert [p.size for p in parts] == [7000, 3000]
  counts = label_counts(labels, parts, 10)
  share = counts[0] / counts.sum(axis=0)
  # Hypergeometric share of each class: sd <= sqrt(0.7 * 0.3 / 1000) = 0.0145; 4 sd.
  assert np.all(np.abs(share - 0.7) < 4 * np.sqrt(0.21 / 1000)), share
  # Random, not the first 70%.
  assert not np.array_equal(parts[0], np.arange(7000))


@pytest.mark.parametrize("proportions", [[0.2, 0.3, 0.5], [0.25] * 4])
def test_iid_sizes_round_the_proportions(proportions):
  labels = balanced_labels(num_classes=3, per_class=333)
  parts = partition("iid", labels, len(proportions), np.random.default_rng(1),
                    proportions=proportions)
  for p, share in zip(parts, proportions):
    assert abs(p.size - share * labels.size) <= 1


def test_iid_defaults_to_equal_shares():
  parts = partition("iid", balanced_labels(), 3, np.random.default_rng(0))
  assert sorted(p.size for p in parts) == [1000, 1000, 1000]


@pytest.mark.parametrize("proportions", [[0.7, 0.4], [1.2, -0.2], [0.0, 1.0], [np.nan, 1.0]])
def test_iid_rejects_bad_proportions(proportions):
  with pytest.raises(PartitionError, match="proportions"):
    iid(balanced_labels(), proportions, np.random.default_rng(0))


def test_partition_iid_needs_one_proportion_per_agent():
  with pytest.raises(PartitionError, match="proportions"):
    partition("iid", balanced_labels(), 3, np.random.default_rng(0), proportions=[0.7, 0.3])


# ---------------------------------------------------------------------- label split


def label_sets(labels, parts):
  return [set(np.unique(labels[p]).tolist()) for p in parts]


def test_label_split_alpha0_two_agents_halves():
  """App. A: agent 1 has '0' to '4', agent 2 has '5' to '9'."""
  labels = balanced_labels()
  parts = label_split(labels, 2, 0.0, np.random.default_rng(0))
  assert label_sets(labels, parts) == [{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}]
  assert [p.size for p in parts] == [1500, 1500]


def test_label_split_alpha0_five_agents_pairs():
  """App. H.5: agent i (from 0) gets labels 2i and 2i + 1."""
  labels = balanced_labels()
  parts = label_split(labels, 5, 0.0, np.random.default_rng(0))
  assert label_sets(labels, parts) == [{2 * i, 2 * i + 1} for i in range(5)]
  check_disjoint(parts, labels.size)


def test_label_split_alpha0_uneven_groups():
  """3 agents, 10 classes: consecutive groups of 4, 3, 3 classes."""
  labels = balanced_labels()
  parts = label_split(labels, 3, 0.0, np.random.default_rng(0))
  assert label_sets(labels, parts) == [{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}]


def test_label_split_alpha1_is_iid():
  labels = balanced_labels(per_class=500)
  parts = label_split(labels, 2, 1.0, np.random.default_rng(0))
  assert label_sets(labels, parts) == [set(range(10))] * 2
  counts = label_counts(labels, parts, 10)
  # Every point pooled and dealt back at random: each agent holds about half of every
  # class (hypergeometric sd = sqrt(500 / 4) ~ 11.2; 5 sd).
  assert np.all(np.abs(counts - 250) < 56), counts


def test_label_split_alpha_mixes_the_expected_fraction():
  """Agent a keeps (1 - alpha) N_a own points and gets about half of the pool back."""
  labels = balanced_labels(per_class=1000)
  alpha = 0.2
  parts = label_split(labels, 2, alpha, np.random.default_rng(0))
  assert [p.size for p in parts] == [5000, 5000]  # sizes are those of the label halves
  foreign = [np.sum(labels[parts[0]] >= 5), np.sum(labels[parts[1]] < 5)]
  # Pool of 2000 (1000 from each); 1000 dealt back to each agent: foreign ~ 500, sd ~ 11.
  for f in foreign:
    assert abs(f - alpha * 5000 / 2) < 60, foreign


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "x"])
def test_label_split_rejects_bad_alpha(alpha):
  with pytest.raises(PartitionError, match="alpha"):
    label_split(balanced_labels(), 2, alpha, np.random.default_rng(0))


def test_label_split_needs_a_class_per_agent():
  with pytest.raises(PartitionError, match="num_agents"):
    label_split(balanced_labels(num_classes=3), 4, 0.0, np.random.default_rng(0))


# ------------------------------------------------------------------------ Dirichlet


def test_dirichlet_clients_concentration():
  labels = balanced_labels(per_class=1000)
  num_agents = 4
  flat = label_counts(labels, dirichlet_clients(labels, num_agents, 1e4,
                                                np.random.default_rng(0)), 10)
  # Each class spread evenly over the agents: Dir(1e4) shares have sd ~ 0.004.
  assert np.all(np.abs(flat / 1000 - 1 / num_agents) < 0.03), flat
  peaked = label_counts(labels, dirichlet_clients(labels, num_agents, 0.01,
                                                  np.random.default_rng(0)), 10)
  # Each class mostly held by one agent.
  assert np.mean(peaked.max(axis=0) / 1000) > 0.85, peaked
  assert np.all(flat.sum(axis=0) == 1000) and np.all(peaked.sum(axis=0) == 1000)


def test_dirichlet_clients_min_size():
  labels = balanced_labels(per_class=100)
  parts = dirichlet_clients(labels, 5, 0.3, np.random.default_rng(0), min_size=50)
  assert min(p.size for p in parts) >= 50
  check_disjoint(parts, labels.size)
  with pytest.raises(PartitionError, match="min_size"):
    dirichlet_clients(labels, 5, 0.3, np.random.default_rng(0), min_size=300)


def test_dirichlet_classes_concentration():
  labels = balanced_labels(per_class=1000)
  num_agents = 5
  budget = 200  # small against a class (1000), so classes rarely run out
  parts = dirichlet_classes(labels, num_agents, 1e4, np.random.default_rng(0),
                            samples_per_agent=budget)
  assert [p.size for p in parts] == [budget] * num_agents
  shares = label_counts(labels, parts, 10) / budget
  # Near-uniform class shares: multinomial sd sqrt(0.1 * 0.9 / 200) ~ 0.021; 5 sd.
  assert np.all(np.abs(shares - 0.1) < 0.106), shares
  assert np.mean(shares.max(axis=1)) < 0.2, shares
  parts = dirichlet_classes(labels, num_agents, 0.01, np.random.default_rng(0),
                            samples_per_agent=budget)
  shares = label_counts(labels, parts, 10) / budget
  # Each agent concentrated on few classes.
  assert np.mean(shares.max(axis=1)) > 0.8, shares
  check_disjoint(parts, labels.size)


def test_dirichlet_classes_running_out_of_a_class():
  """Budgets larger than any class: agents that want the same class share it out and
  fill up from the classes left; every point is used with the default budgets."""
  labels = balanced_labels(num_classes=4, per_class=50)
  parts = dirichlet_classes(labels, 2, 0.01, np.random.default_rng(1))
  assert [p.size for p in parts] == [100, 100]
  assert check_disjoint(parts, labels.size).size == labels.size
  parts = dirichlet_classes(labels, 3, 0.05, np.random.default_rng(2),
                            samples_per_agent=[120, 40, 30])
  assert [p.size for p in parts] == [120, 40, 30]
  check_disjoint(parts, labels.size)


def test_dirichlet_classes_rejects_budget_beyond_n():
  with pytest.raises(PartitionError, match="samples_per_agent"):
    dirichlet_classes(balanced_labels(), 2, 1.0, np.random.default_rng(0),
                      samples_per_agent=2000)


@pytest.mark.parametrize("beta", [0.0, -1.0, np.inf, "a"])
def test_dirichlet_rejects_bad_beta(beta):
  for fn in (dirichlet_clients, dirichlet_classes):
    with pytest.raises(PartitionError, match="beta"):
      fn(balanced_labels(), 2, beta, np.random.default_rng(0))


# --------------------------------------------------------------------------- shards


def test_shards_give_each_agent_its_shards():
  labels = balanced_labels(num_classes=10, per_class=60)
  parts = shards(labels, 10, 2, np.random.default_rng(0))
  assert [p.size for p in parts] == [60] * 10  # 20 shards of 30 points
  # Shards of 30 never straddle a class of 60 points: at most 2 labels per agent.
  assert all(len(s) <= 2 for s in label_sets(labels, parts))
  # Each class is cut into exactly two shards of 30.
  counts = label_counts(labels, parts, 10)
  assert set(np.unique(counts).tolist()) <= {0, 30, 60}
  assert np.all(counts.sum(axis=0) == 60)


def test_shards_rejects_bad_counts():
  with pytest.raises(PartitionError, match="shards_per_agent"):
    shards(balanced_labels(), 2, 0, np.random.default_rng(0))
  with pytest.raises(PartitionError, match="shards_per_agent"):
    shards(np.arange(10), 3, 4, np.random.default_rng(0))


# ------------------------------------------------------------------------- dispatch


def test_partition_rejects_unknown_name_and_params():
  labels, rng = balanced_labels(), np.random.default_rng(0)
  with pytest.raises(PartitionError, match="dirichlet-classes"):
    partition("dirichlet", labels, 2, rng)
  with pytest.raises(PartitionError, match="beta"):
    partition("label-split", labels, 2, rng, alpha=0.1, beta=0.5)
  with pytest.raises(PartitionError, match="alpha"):
    partition("label-split", labels, 2, rng)
  with pytest.raises(PartitionError, match="beta"):
    partition("dirichlet-clients", labels, 2, rng)


@pytest.mark.parametrize("name", PARTITIONS)
def test_partition_rejects_bad_common_arguments(name):
  labels = balanced_labels()
  with pytest.raises(PartitionError, match="num_agents"):
    partition(name, labels, 0, np.random.default_rng(0), **PARAMS[name])
  with pytest.raises(PartitionError, match="rng"):
    partition(name, labels, 2, 0, **PARAMS[name])
  with pytest.raises(PartitionError, match="labels"):
    partition(name, labels.astype(np.float32), 2, np.random.default_rng(0), **PARAMS[name])


def test_label_counts():
  labels = np.array([0, 1, 1, 2, 2, 2])
  counts = label_counts(labels, [np.array([0, 3]), np.array([1, 2, 4, 5])])
  np.testing.assert_array_equal(counts, [[1, 0, 1], [0, 2, 2]])
  assert counts.dtype == np.int64


def test_tiny_dirichlet_draw_is_a_distribution():
  rng = np.random.default_rng(0)
  for _ in range(20):
    q = partitions_lib._dirichlet(rng, 1e-8, 6)
    assert np.all(np.isfinite(q)) and abs(q.sum() - 1) < 1e-9


def test_public_names():
  import neural
  from neural import data

  for name in ["DATASETS", "DataError", "Dataset", "load_dataset", "one_hot", "PARTITIONS",
               "PartitionError", "partition", "iid", "label_split", "label_groups",
               "dirichlet_clients", "dirichlet_classes", "shards", "label_counts"]:
    assert (name in dir(neural)) != (name in dir(data)), name   # in one namespace of the two


# The skewed-label split of multi-headed distillation (Zhmoginov et al. 2023, Sec. 3.3)


def test_primary_labels_random_and_even():
  rng = np.random.default_rng(4)
  primary = partitions_lib.primary_labels(20, 8, rng, assignment="random", labels_per_client=5)
  np.testing.assert_array_equal(primary.sum(1), 5)
  primary = partitions_lib.primary_labels(20, 8, rng, assignment="even", clients_per_label=3)
  np.testing.assert_array_equal(primary.sum(0), 3)
  assert primary.sum(1).max() - primary.sum(1).min() <= 1
  with pytest.raises(PartitionError, match="labels_per_client"):
    partitions_lib.primary_labels(20, 8, rng, assignment="random", labels_per_client=21)


def test_skewed_label_split_counts():
  rng = np.random.default_rng(5)
  labels = np.repeat(np.arange(6), 4000)
  primary = np.zeros((4, 6), bool)
  primary[0, [0, 1]] = primary[1, [1, 2]] = primary[2, 3] = primary[3, 4] = True   # 5: none
  s = 3.0
  split = partitions_lib.skewed_label_split(labels, 4, rng, skew=s, primary=primary)
  everything = np.sort(np.concatenate(split.parts))
  np.testing.assert_array_equal(everything, np.arange(labels.size))   # disjoint cover
  counts = np.stack([np.bincount(labels[p], minlength=6) for p in split.parts])   # (K, C)
  for label in range(6):
    n_l = primary[:, label].sum()
    expected = (1 + s * primary[:, label]) / (4 + s * n_l)
    np.testing.assert_allclose(counts[:, label] / 4000, expected,
                               atol=5 * np.sqrt(0.25 / 4000))
  # s -> infinity: only primary clients (uniform over all when a label has none)
  split = partitions_lib.skewed_label_split(labels, 4, rng, skew=1e12, primary=primary)
  counts = np.stack([np.bincount(labels[p], minlength=6) for p in split.parts])
  assert np.all(counts[:, :5][~primary[:, :5]] == 0)
  assert np.all(counts[:, 5] > 800)
  # s = 0: iid
  split = partitions_lib.skewed_label_split(labels, 4, rng, skew=0.0, primary=primary)
  counts = np.stack([np.bincount(labels[p], minlength=6) for p in split.parts])
  np.testing.assert_allclose(counts / 4000, 0.25, atol=5 * np.sqrt(0.25 / 4000))
