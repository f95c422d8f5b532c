"""Degradation rate rho on a (c, heterogeneity) grid: one vmapped jitted call vs a Python loop.

    python benchmarks/rates.py                       # the issue's setting: 64 x 64, N = 500
    python benchmarks/rates.py --grid 8 --points 100 # a quick look

The data are :class:`fedkrr.TwoClusters` (two agents, ``--points`` each, shared
RBF kernel); the grid is c in [1e-4, 1] (log) times the mixing fraction in
[0, 1] (0 = disjoint clusters, 1 = iid). Side by side in one run, float64, on
the CPU (JAX_PLATFORMS=cpu is the default here):

* vmapped: ``fedkrr.rate_grid`` (one ``jit(vmap(...))`` over the whole grid),
  wrapped in one outer ``jax.jit`` so that it is compiled once; with
  ``--batch B`` the same function runs under ``jax.lax.map(..., batch_size=B)``
  in one jitted call instead, to bound the memory (B instances at a time);
* loop: a Python loop over the grid calling the jitted single-instance function
  ``jax.jit(lambda p, c: fedkrr.degradation_rate(clusters.problem(p, c)))``.

Both are compiled ahead of time (``.lower(...).compile()``, the warm-up) and the
compile times are printed apart. Prints both times, their ratio and the largest
absolute difference between the two grids (they must agree).

The full default vmaps 4096 instances at once and needs about 17 GiB of temporary
buffers on the CPU; ``--batch 256`` needs about 0.6 GiB, but on the 2-core machine it was
written on the batched run stalled (no result in 10 minutes, where 64 x 64 instances take
about 2.5 minutes at the per-instance speed measured on 32 x 32). The script switches off
XLA's concurrency-optimized CPU scheduler (see below) unless ``XLA_FLAGS`` names it.
"""

from __future__ import annotations

import argparse
import os
import time

# XLA's concurrency-optimized CPU scheduler stalled this program (jaxlib 0.10.2, 2 cores):
# the vmapped call sat at 0% CPU for minutes, sometimes for ever, and when it finished its
# time varied 5x between identical calls. The entry-point helper switches it off (and
# multi-threaded Eigen) unless XLA_FLAGS names them.
from fedkrr import avoid_cpu_eigh_deadlock

avoid_cpu_eigh_deadlock()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fedkrr  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--grid", type=int, default=64, help="points per axis (default 64)")
  parser.add_argument("--points", type=int, default=250,
                      help="points per agent (default 250, N = 500)")
  parser.add_argument("--batch", type=int, default=0,
                      help="instances per vmapped batch under lax.map (default 0: all at once)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)

  clusters = fedkrr.TwoClusters.draw(args.seed, args.points)
  ridges = jnp.logspace(-4.0, 0.0, args.grid)
  mixings = jnp.linspace(0.0, 1.0, args.grid)
  n = 2 * args.points
  print(f"rho on a {args.grid} x {args.grid} grid of (c, mixing), N = {n} "
        f"({args.points} per agent), float64, {jax.devices()[0].platform}, "
        f"{os.cpu_count()} cores", flush=True)

  single = jax.jit(lambda p, c: fedkrr.degradation_rate(clusters.problem(p, c)))
  if args.batch:
    def grid_fn(cs, ps):
      grid_c, grid_p = jnp.meshgrid(cs, ps, indexing="ij")
      flat = jax.lax.map(lambda v: fedkrr.degradation_rate(clusters.problem(v[1], v[0])),
                         jnp.stack([grid_c.ravel(), grid_p.ravel()], axis=1),
                         batch_size=args.batch)
      return flat.reshape(grid_c.shape)
    how = f"lax.map over batches of {args.batch} vmapped instances"
  else:
    grid_fn = lambda cs, ps: fedkrr.rate_grid(clusters, cs, ps)  # noqa: E731
    how = "fedkrr.rate_grid, all instances in one vmap"
  vmapped = jax.jit(grid_fn)

  t0 = time.perf_counter()
  vmapped_exe = vmapped.lower(ridges, mixings).compile()
  t_compile_v = time.perf_counter() - t0
  t0 = time.perf_counter()
  single_exe = single.lower(mixings[0], ridges[0]).compile()
  t_compile_s = time.perf_counter() - t0
  print(f"compile (warm-up): vmapped {t_compile_v:.2f} s, single instance {t_compile_s:.2f} s",
        flush=True)
  memory = vmapped_exe.memory_analysis()
  if memory is not None:
    print(f"vmapped call's temporary buffers: {memory.temp_size_in_bytes / 2 ** 30:.2f} GiB",
          flush=True)

  t0 = time.perf_counter()
  grid_v = jax.block_until_ready(vmapped_exe(ridges, mixings))
  t_vmapped = time.perf_counter() - t0
  print(f"vmapped ({how}): {t_vmapped:.2f} s", flush=True)

  t0 = time.perf_counter()
  rows = [[single_exe(p, c) for p in np.asarray(mixings)] for c in np.asarray(ridges)]
  grid_l = jax.block_until_ready(jnp.stack([jnp.stack(row) for row in rows]))
  t_loop = time.perf_counter() - t0
  print(f"Python loop over {args.grid ** 2} jitted single-instance calls: {t_loop:.2f} s",
        flush=True)

  diff = float(jnp.max(jnp.abs(grid_v - grid_l)))
  count = args.grid ** 2
  print(f"per instance: vmapped {1e3 * t_vmapped / count:.1f} ms, "
        f"loop {1e3 * t_loop / count:.1f} ms")
  print(f"loop / vmapped = {t_loop / t_vmapped:.2f}x")
  print(f"max |rho_vmapped - rho_loop| = {diff:.2e}  "
        f"(rho in [{float(jnp.min(grid_v)):.3g}, {float(jnp.max(grid_v)):.3g}])")
  if not diff <= 1e-8:
    raise SystemExit(f"the two grids disagree: max abs difference {diff:.3g} > 1e-8")


if __name__ == "__main__":
  np.set_printoptions(precision=3)
  main()
