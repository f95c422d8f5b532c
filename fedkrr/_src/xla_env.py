"""An entry-point setting for XLA on CPU (never applied by importing the library).

On small CPUs (2 cores), batched ``eigh`` under ``vmap`` can deadlock in jaxlib
0.10: both workers of XLA's CPU thread pool wait inside the batched kernel for
sub-tasks queued on the same pool. Vmapping over the ridge c reaches it, since
the c = 0 branch of :func:`fedkrr.ridge_factor` runs ``eigh`` under ``vmap``.
Entry points (the command lines, the test suite, the notebooks) call
:func:`avoid_cpu_eigh_deadlock` before the first computation.
"""

from __future__ import annotations

import os

FLAG = "--xla_cpu_multi_thread_eigen=false"


def avoid_cpu_eigh_deadlock() -> None:
  """Adds ``--xla_cpu_multi_thread_eigen=false`` to ``XLA_FLAGS`` (if not already there).

  XLA reads the flags when its backend starts, so call this before the first
  JAX computation of the process.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_cpu_multi_thread_eigen" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
