"""Large N and many devices: the matrix-free learners, the sharded paths, agent meshes.

What :func:`fedkrr.run` chooses between when the kernel matrices do not fit
(:func:`choose_method`, from :func:`exact_bytes` and :func:`matfree_bytes`): the
matrix-free learners (kernel products in tiles, conjugate gradients with a Nyström
preconditioner), the sharded closed form with one agent per device
(:func:`sharded_trajectory`), the meshes that place the stacked agents
(:func:`agent_mesh`, :func:`shard_agents`) and a cluster's start-up
(:func:`initialize_distributed`). The guides: ``docs/scale.md`` and ``docs/devices.md``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.platform.devices import AGENT_AXIS
  from fedkrr._src.platform.devices import DeviceError
  from fedkrr._src.platform.devices import agent_devices
  from fedkrr._src.platform.devices import agent_mesh
  from fedkrr._src.platform.devices import check_mesh
  from fedkrr._src.platform.devices import host_arrays
  from fedkrr._src.platform.devices import shard_agents
  from fedkrr._src.platform.devices import spans_processes
  from fedkrr._src.platform.distributed import distributed_settings
  from fedkrr._src.platform.distributed import initialize_distributed
  from fedkrr._src.platform.memory import TILE_ELEMENTS
  from fedkrr._src.platform.memory import exact_bytes
  from fedkrr._src.platform.memory import matfree_bytes
  from fedkrr._src.platform.memory import memory_limit
  from fedkrr._src.runner import choose_method
  from fedkrr._src.scale.matfree import ConvergenceError
  from fedkrr._src.scale.matfree import MatfreeKRRLearner
  from fedkrr._src.scale.matfree import RidgeSolution
  from fedkrr._src.scale.matfree import kernel_matvec
  from fedkrr._src.scale.matfree import matfree_learners
  from fedkrr._src.scale.matfree import matfree_trajectory
  from fedkrr._src.scale.matfree import nystrom_preconditioner
  from fedkrr._src.scale.matfree import ridge_solve
  from fedkrr._src.scale.matfree import symmetric_matvec
  from fedkrr._src.scale.sharded import SHARDED_PROTOCOLS
  from fedkrr._src.scale.sharded import AgentBlocks
  from fedkrr._src.scale.sharded import shard_blocks
  from fedkrr._src.scale.sharded import sharded_trajectory
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
