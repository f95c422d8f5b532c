"""neural's data: datasets, partitions over agents, the agents' data of a run, graphs.

The embedded and downloaded datasets (:func:`neural.load_dataset` is at the top), the
partitioners (iid, the paper's label split, Dirichlet, shards; :func:`neural.partition`
at the top), a run's agents' data (:class:`RunData`) and the communication graphs of the
decentralised methods (:func:`make_graph`, mixing matrices).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from neural._src.datasets.data import DataError
  from neural._src.datasets.data import Dataset
  from neural._src.datasets.data import one_hot
  from neural._src.datasets.graphs import ALL_GRAPHS
  from neural._src.datasets.graphs import GRAPHS
  from neural._src.datasets.graphs import Graph
  from neural._src.datasets.graphs import GraphError
  from neural._src.datasets.graphs import TimeVaryingGraph
  from neural._src.datasets.graphs import check_mixing_matrix
  from neural._src.datasets.graphs import complete
  from neural._src.datasets.graphs import directed_ring
  from neural._src.datasets.graphs import edge_schedule
  from neural._src.datasets.graphs import from_adjacency
  from neural._src.datasets.graphs import hop_distances
  from neural._src.datasets.graphs import is_strongly_connected
  from neural._src.datasets.graphs import islands
  from neural._src.datasets.graphs import make_graph
  from neural._src.datasets.graphs import metropolis_weights
  from neural._src.datasets.graphs import mix
  from neural._src.datasets.graphs import mixing_matrix
  from neural._src.datasets.graphs import mixing_rate
  from neural._src.datasets.graphs import random_bounded_degree
  from neural._src.datasets.graphs import ring
  from neural._src.datasets.graphs import spectral_gap
  from neural._src.datasets.graphs import time_varying
  from neural._src.datasets.graphs import uniform_regular_weights
  from neural._src.datasets.graphs import union
  from neural._src.datasets.partitions import PartitionError
  from neural._src.datasets.partitions import SkewedSplit
  from neural._src.datasets.partitions import assignment_probabilities
  from neural._src.datasets.partitions import dirichlet_classes
  from neural._src.datasets.partitions import dirichlet_clients
  from neural._src.datasets.partitions import iid
  from neural._src.datasets.partitions import label_counts
  from neural._src.datasets.partitions import label_groups
  from neural._src.datasets.partitions import label_split
  from neural._src.datasets.partitions import primary_labels
  from neural._src.datasets.partitions import shards
  from neural._src.datasets.partitions import skewed_label_split
  from neural._src.datasets.run_data import RunData
  from neural._src.datasets.run_data import load_train_test
  from neural._src.datasets.run_data import split_agents
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
