"""One program over several processes: ``jax.distributed`` started by entry points.

With ``jax.distributed`` every process (one per host, or several on one machine)
runs the same program; ``jax.devices()`` then lists the devices of all processes
and ``jax.local_devices()`` this process's own. The agent meshes of
:func:`fedkrr.scale.agent_mesh` take ``jax.devices()``, so once the processes are
connected the agents spread over all of them, and the collectives of the sharded
paths cross processes (on CPUs through gloo). Every process must hold the same host
data (the same problem, the same data files): inputs are placed from it on each
process's own devices.

:func:`initialize_distributed` connects the processes. It changes JAX's global
state (``jax.distributed.initialize`` and, on CPUs, the cross-process collectives),
so only entry points call it (the command lines' ``--coordinator``,
``--num-processes`` and ``--process-id``, tests), before the first JAX computation;
importing the library never does. The convention, flags or environment variables:

* ``JAX_COORDINATOR_ADDRESS`` (``--coordinator``): HOST:PORT of process 0, which
  listens there; every process names the same address.
* ``JAX_NUM_PROCESSES`` (``--num-processes``): the number of processes.
* ``JAX_PROCESS_ID`` (``--process-id``): this process's index, 0 .. N - 1.

An argument given wins over its variable. Where none of the three is given or set,
nothing happens (one process); to let JAX detect a cluster (SLURM, Open MPI,
Kubernetes) call ``jax.distributed.initialize()`` yourself instead.
"""

from __future__ import annotations

import os
from typing import Any
import warnings

# The environment variables read where an argument is None (the first is JAX's own).
COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES_ENV = "JAX_NUM_PROCESSES"
PROCESS_ID_ENV = "JAX_PROCESS_ID"


def _env_int(value: Any, env: str, name: str) -> int | None:
  if value is None:
    text = os.environ.get(env, "").strip()
    if not text:
      return None
    try:
      value = int(text)
    except ValueError:
      raise ValueError(f"{name}: expected an integer in ${env}, got {text!r}") from None
  if isinstance(value, bool) or not isinstance(value, int):
    raise ValueError(f"{name}: expected an integer, got {value!r}")
  return value


def distributed_settings(coordinator: str | None = None, num_processes: int | None = None,
                         process_id: int | None = None) -> tuple[str, int, int] | None:
  """The checked ``(coordinator, num_processes, process_id)``, arguments before variables.

  Reads nothing but the arguments and the environment (imports no JAX): the
  command lines check their flags with it before they start.

  Returns:
    ``None`` where none of the three is given or set, or the number of processes
    is 1 (one process: nothing to connect); else the three values.

  Raises:
    ValueError: one is missing while another is given, the number of processes is
      below 1, the process id is outside 0 .. N - 1, or the coordinator is no
      HOST:PORT.

  Example:
    >>> fedkrr.scale.distributed_settings("127.0.0.1:1234", 2, 1)
    ('127.0.0.1:1234', 2, 1)
  """
  coordinator = coordinator or os.environ.get(COORDINATOR_ENV, "").strip() or None
  num_processes = _env_int(num_processes, NUM_PROCESSES_ENV, "num_processes")
  process_id = _env_int(process_id, PROCESS_ID_ENV, "process_id")
  given = {"coordinator": coordinator, "num_processes": num_processes,
           "process_id": process_id}
  if all(v is None for v in given.values()):
    return None
  if num_processes is not None and num_processes < 1:
    raise ValueError(f"num_processes: expected an integer >= 1, got {num_processes}")
  if num_processes == 1 and process_id in (None, 0):
    return None
  missing = [name for name, v in given.items() if v is None]
  if missing:
    env = {"coordinator": COORDINATOR_ENV, "num_processes": NUM_PROCESSES_ENV,
           "process_id": PROCESS_ID_ENV}
    raise ValueError(f"{missing[0]}: missing (pass it or set ${env[missing[0]]}); several "
                      f"processes need the coordinator, their number and each one's id")
  assert coordinator is not None and num_processes is not None and process_id is not None
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id: expected 0 .. {num_processes - 1} for {num_processes} "
                      f"processes, got {process_id}")
  host, _, port = coordinator.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"coordinator: expected HOST:PORT (e.g. 10.0.0.1:1234), got "
                      f"{coordinator!r}")
  return coordinator, num_processes, process_id


def initialize_distributed(coordinator: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> bool:
  """Connects this process to the others with ``jax.distributed.initialize``: entry points only.

  Call it in every process, before the first JAX computation, with the same
  ``coordinator`` and ``num_processes`` and each process's own ``process_id``
  (module docstring: the flags and environment variables). On CPUs it also turns
  on JAX's cross-process collectives (``jax_cpu_collectives_implementation``:
  gloo, unless set already), without which a mesh over the processes' CPU devices
  cannot run collectives. Once connected, a process whose platform is the CPU
  also turns JAX's persistent compilation cache off (``jax_enable_compilation_cache``;
  a warning says so where a cache folder was set): with JAX 0.12.1, process 0 of
  such a run hangs in its first collective when it reads back an executable that
  it wrote to the cache in an earlier run (0.12.0.1 and 0.10.2 do not), and on
  CPUs the cache saves seconds of compiling. All of this changes JAX's global
  state, so library code never calls this. Finding the platform starts JAX's
  backend: set ``XLA_FLAGS`` (:func:`fedkrr.avoid_cpu_eigh_deadlock`, host device
  counts) before calling it.

  Args:
    coordinator: HOST:PORT of process 0 (``None``: ``$JAX_COORDINATOR_ADDRESS``).
    num_processes: the number of processes (``None``: ``$JAX_NUM_PROCESSES``).
    process_id: this process's index (``None``: ``$JAX_PROCESS_ID``).

  Returns:
    True if the processes are connected (by this call, or by an earlier one in
    this process: then nothing happens); False where nothing was given or set, or
    for one process (nothing happens then).

  Raises:
    ValueError: the settings are incomplete or invalid
      (:func:`distributed_settings`).
    RuntimeError: from JAX, if a computation ran before.

  Example:
    >>> # in every process, first thing; here process 0 of 2
    >>> fedkrr.scale.initialize_distributed("10.0.0.1:1234", 2, 0)  # doctest: +SKIP
    True
  """
  settings = distributed_settings(coordinator, num_processes, process_id)
  if settings is None:
    return False
  import jax  # deferred: a command line that connects nothing loads no JAX (its --help)

  if jax.distributed.is_initialized():   # connected already (a second command in-process)
    return True
  # a flag with a context manager: read as an attribute (config.read refuses it)
  if jax.config.jax_cpu_collectives_implementation is None:  # pyright: ignore
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  coordinator, num_processes, process_id = settings
  jax.distributed.initialize(coordinator, num_processes, process_id)
  if jax.default_backend() == "cpu":
    _no_compilation_cache(jax)
  return True


def _no_compilation_cache(jax: Any) -> None:
  """Turns JAX's persistent compilation cache off in this process (a CPU one across processes).

  Before the first compilation JAX has not yet decided whether to use the cache,
  so the switch holds for every program of the process.
  """
  if jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache:
    warnings.warn(f"fedkrr: JAX's persistent compilation cache "
                  f"({jax.config.jax_compilation_cache_dir}) is off in this process: on "
                  f"CPUs, processes connected by jax.distributed can hang on an executable "
                  f"read back from it (JAX 0.12.1)", RuntimeWarning, stacklevel=3)
  jax.config.update("jax_enable_compilation_cache", False)
