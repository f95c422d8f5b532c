"""neural: Flax/Optax replays of the distillation protocols (skeleton).

The protocols themselves live in ``fedkrr`` and are written against the
``fit``/``predict`` learner interface; this package will provide neural and
random-forest learners for them, data, partitions and experiments.
"""

# isort: split
# data, partitions (helper "data")
from neural._src.data import DATASETS
from neural._src.data import DataError
from neural._src.data import Dataset
from neural._src.data import load_dataset
from neural._src.data import one_hot
from neural._src.partitions import PARTITIONS
from neural._src.partitions import PartitionError
from neural._src.partitions import dirichlet_classes
from neural._src.partitions import dirichlet_clients
from neural._src.partitions import iid
from neural._src.partitions import label_counts
from neural._src.partitions import label_groups
from neural._src.partitions import label_split
from neural._src.partitions import partition
from neural._src.partitions import shards

__version__ = "0.1.0"
