"""Agents across devices: a one-dimensional mesh whose axis is the agent axis.

In both halves of the project the agents are a stacked leading axis (vmapped
kernel ridge blocks, stacked network parameters), so placing agents on devices
is sharding that axis with ``jax.sharding`` (DESIGN.md, "Beyond one machine").
:func:`agent_mesh` builds the mesh (axis :data:`AGENT_AXIS`), and
:func:`shard_agents` places a stacked per-agent PyTree on it: with M agents on
D devices, device d holds agents ``d * M / D .. (d + 1) * M / D - 1``. Nothing
here changes JAX's configuration; to try several devices on one CPU, start the
process with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``.

Across processes (``jax.distributed``, :func:`fedkrr.scale.initialize_distributed`)
``jax.devices()`` lists every process's devices, so the same mesh spans them;
:func:`shard_agents` places host data that every process holds alike, and
:func:`host_arrays` brings arrays sharded over other processes' devices to each
host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

AGENT_AXIS = "agents"


class DeviceError(ValueError):
  """Agents that cannot be placed on the given devices (the message names the argument)."""


def _check_count(num_agents: Any, name: str = "num_agents") -> int:
  if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
    raise DeviceError(f"{name}: expected an integer >= 1, got {num_agents!r}")
  return num_agents


def agent_mesh(num_agents: int, devices: Sequence[Any] | None = None) -> Mesh:
  """A 1-D mesh with axis ``"agents"`` on which ``num_agents`` agents spread evenly.

  Args:
    num_agents: the number of agents M.
    devices: the devices to use, all of them (each then holds M / D agents, so D
      must divide M). ``None``: the largest number D of ``jax.devices()`` that
      divides M, taken in order (6 agents on 4 devices use 3 of them). Across P
      processes (``jax.distributed``) D is also a multiple of P, with D / P of each
      process's devices, so that every process holds agents.

  Returns:
    A ``jax.sharding.Mesh`` of shape ``{"agents": D}``.

  Raises:
    DeviceError: ``num_agents`` is not an integer >= 1, ``devices`` is empty or
      repeats a device, or its length does not divide ``num_agents``; across
      processes, ``devices=None`` and M is no multiple of the number of processes.

  Example:
    >>> mesh = fedkrr.scale.agent_mesh(4)
    >>> mesh.axis_names, 4 % mesh.size
    (('agents',), 0)
  """
  m = _check_count(num_agents)
  if devices is None and jax.process_count() > 1:
    devices = _across_processes(m)
  elif devices is None:
    available = jax.devices()
    count = max(d for d in range(1, len(available) + 1) if m % d == 0)
    devices = available[:count]
  devices = list(devices)
  if not devices:
    raise DeviceError("devices: expected at least one device, got none")
  if len(set(devices)) != len(devices):
    raise DeviceError(f"devices: expected distinct devices, got {devices}")
  if m % len(devices):
    raise DeviceError(f"devices: {m} agents cannot spread evenly over {len(devices)} devices; "
                      f"pass a number of devices that divides num_agents ({m})")
  return Mesh(devices, (AGENT_AXIS,))


def _across_processes(m: int) -> list[Any]:
  """The default devices of ``agent_mesh(m)`` over several processes: k of each process's
  local devices (the most that lets P k divide m), process by process."""
  processes = jax.process_count()
  local = [[d for d in jax.devices() if d.process_index == p] for p in range(processes)]
  per = [k for k in range(1, min(map(len, local)) + 1) if m % (processes * k) == 0]
  if not per:
    raise DeviceError(f"num_agents: {m} agents cannot spread evenly over {processes} processes "
                      f"(each holds as many); use a multiple of {processes} agents, or pass "
                      f"devices")
  return [d for devices in local for d in devices[:max(per)]]


def check_mesh(mesh: Any, num_agents: int, name: str = "mesh") -> Mesh:
  """``mesh`` if it is a 1-D agent mesh whose size divides ``num_agents``, else DeviceError.

  Across processes the mesh must hold this process's devices alone, or devices of
  every process (a mesh on some other processes' devices only is refused).
  """
  m = _check_count(num_agents)
  if not isinstance(mesh, Mesh):
    raise DeviceError(f"{name}: expected a jax.sharding.Mesh (see fedkrr.scale.agent_mesh), got "
                      f"{type(mesh).__name__}")
  if tuple(mesh.axis_names) != (AGENT_AXIS,):
    raise DeviceError(f"{name}: expected one axis named {AGENT_AXIS!r}, got axes "
                      f"{tuple(mesh.axis_names)}")
  if m % mesh.size:
    raise DeviceError(f"{name}: {m} agents cannot spread evenly over its {mesh.size} devices "
                      f"(the number of devices must divide the number of agents)")
  owners = {d.process_index for d in mesh.devices.flat}
  if owners != {jax.process_index()} and len(owners) < jax.process_count():
    raise DeviceError(f"{name}: holds devices of processes {sorted(owners)} only; a mesh "
                      f"holds either this process's devices alone or devices of all "
                      f"{jax.process_count()} processes (fedkrr.scale.agent_mesh picks these)")
  return mesh


def agent_devices(mesh: Mesh, num_agents: int) -> tuple[Any, ...]:
  """The device that holds each agent: agent a lives on ``mesh.devices[a // (M / D)]``.

  Example:
    >>> mesh = fedkrr.scale.agent_mesh(2, jax.devices()[:1])
    >>> fedkrr.scale.agent_devices(mesh, 2) == (jax.devices()[0],) * 2
    True
  """
  check_mesh(mesh, num_agents)
  per_device = num_agents // mesh.size
  devices = list(mesh.devices.flat)
  return tuple(devices[a // per_device] for a in range(num_agents))


def agent_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
  """Sharding of an array with ``ndim`` dimensions whose leading axis is the agent axis."""
  if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
    raise DeviceError(f"ndim: expected an integer >= 1 (the agent axis comes first), got "
                      f"{ndim!r}")
  return NamedSharding(mesh, PartitionSpec(AGENT_AXIS, *([None] * (ndim - 1))))


def shard_agents(tree: Any, mesh: Mesh) -> Any:
  """Places a stacked per-agent PyTree on ``mesh``: every leaf's axis 0 is the agent axis.

  Each device receives only its agents' slices. Leaves must share the length M
  of their leading axis, which the mesh's size must divide. On a mesh over
  several processes (:func:`spans_processes`) every process must pass the same
  values: each places its own devices' slices of its copy.

  Raises:
    DeviceError: a leaf is a scalar, the leaves' leading lengths differ, or the
      mesh does not fit M.

  Example:
    >>> mesh = fedkrr.scale.agent_mesh(2)
    >>> stacked = fedkrr.scale.shard_agents({"w": jnp.zeros((2, 3))}, mesh)
    >>> stacked["w"].sharding.spec == jax.sharding.PartitionSpec("agents", None)
    True
  """
  leaves = jax.tree.leaves(tree)
  lengths = {int(leaf.shape[0]) if getattr(leaf, "ndim", 0) else -1 for leaf in leaves}
  if -1 in lengths or len(lengths) > 1:
    raise DeviceError(f"tree: expected every leaf to have the same leading agent axis, got "
                      f"leading lengths {sorted(lengths)} (-1: a scalar)")
  if lengths:
    check_mesh(mesh, lengths.pop())
  if spans_processes(mesh):   # each process places its own devices' slices of its host copy
    return jax.tree.map(lambda leaf: _global_array(leaf, mesh), tree)
  return jax.tree.map(lambda leaf: jax.device_put(leaf, agent_sharding(mesh, leaf.ndim)), tree)


def _global_array(leaf: Any, mesh: Mesh) -> jax.Array:
  """``leaf`` (the same on every process) sharded over a mesh that spans processes."""
  if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    data = _global_array(jax.random.key_data(leaf), mesh)   # typed keys: place their data
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
  host = host_arrays(leaf)   # a global array already: gathered (JAX reshards across
  return jax.make_array_from_callback(   # processes only onto the same devices)
      host.shape, agent_sharding(mesh, host.ndim), lambda index: host[index], dtype=host.dtype)


def spans_processes(mesh: Mesh) -> bool:
  """Whether ``mesh`` holds devices of other processes (``jax.distributed``): then arrays
  sharded over it are not whole on any one process.

  Example:
    >>> fedkrr.scale.spans_processes(fedkrr.scale.agent_mesh(2))   # one process
    False
  """
  return any(d.process_index != jax.process_index() for d in mesh.devices.flat)


def host_arrays(tree: Any) -> Any:
  """Every leaf of ``tree`` whole on this process's host, as a NumPy array.

  A leaf held whole by this process's devices (one process, or replicated) is
  read as it is; a leaf sharded over devices of other processes
  (:func:`spans_processes`) is gathered from all of them with
  ``jax.experimental.multihost_utils.process_allgather``, a collective: then every
  process must call this with the same tree, in the same order.

  Example:
    >>> fedkrr.scale.host_arrays({"w": jnp.arange(3)})["w"].tolist()
    [0, 1, 2]
  """
  def one(leaf):
    if isinstance(leaf, jax.Array) and not (leaf.is_fully_addressable
                                            or leaf.is_fully_replicated):
      return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.asarray(leaf)

  return jax.tree.map(one, tree)
