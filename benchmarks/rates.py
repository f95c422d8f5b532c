"""Degradation rate rho on a (c, heterogeneity) grid: one jitted call vs a loop of dense instances.

    python benchmarks/rates.py                       # the reference setting: 64 x 64, N = 500
    python benchmarks/rates.py --grid 8 --points 100 # a quick look

The data are :class:`fedkrr.TwoClusters` (two agents, ``--points`` each, shared
RBF kernel); the grid is c in [1e-4, 1] (log) times the mixing fraction in
[0, 1] (0 = disjoint clusters, 1 = iid). Side by side in one run, float64, on
the CPU (JAX_PLATFORMS=cpu is the default here):

* grid: ``fedkrr.rate_grid(..., batch_size=B)``, the whole grid in one jitted call:
  per mixing fraction one eigen-decomposition of each agent's Gram matrix, reused
  for every c, and along c a block Krylov method restarted from the previous c's
  Ritz vectors (``docs/theory.md``, "How rates are computed"), B mixing fractions
  vmapped at a time under ``jax.lax.map``; the time and the call's temporary
  buffers are printed;
* loop: today's route, a Python loop of the jitted single instance
  ``fedkrr.degradation_rate(clusters.problem(p, c), method="dense")`` (the dense
  cycle operator and ``jnp.linalg.eigvals``), timed on ``--sample`` instances
  spread over the grid and extrapolated to the whole grid (printed as such);
  its values on the sample are the reference.

Both are compiled ahead of time (``.lower(...).compile()``) and the compile times
are printed apart. Prints both times, their ratio, the largest absolute difference
on the sample and the number of unconverged (NaN) Krylov estimates, which are then
recomputed on the dense route (as ``fedkrr.rate_grid`` does outside ``jit``; their time
is added to the grid's), and exits non-zero if any rate is still NaN or a difference
exceeds 1e-10. The script switches off XLA's
concurrency-optimized CPU scheduler and multi-threaded Eigen (see
:func:`fedkrr.avoid_cpu_eigh_deadlock`) unless ``XLA_FLAGS`` names them, and runs
OpenBLAS (the LAPACK behind JAX's CPU Cholesky, triangular solves and ``eigvals``) on
one thread unless ``OPENBLAS_NUM_THREADS`` is set: on a shared 2-core machine its
threads made the dense single instance about 25x slower (about 1.3 s instead of
50 ms at N = 500), which inflates any ratio against the loop.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy and JAX load OpenBLAS

from fedkrr import avoid_cpu_eigh_deadlock  # noqa: E402

avoid_cpu_eigh_deadlock()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fedkrr  # noqa: E402

TOLERANCE = 1e-10


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--grid", type=int, default=64, help="points per axis (default 64)")
  parser.add_argument("--points", type=int, default=250,
                      help="points per agent (default 250, N = 500)")
  parser.add_argument("--batch", type=int, default=None,
                      help="mixing fractions vmapped at a time inside the one call "
                           "(default: rate_grid's, 8)")
  parser.add_argument("--sample", type=int, default=16,
                      help="grid instances the dense loop runs on (default 16)")
  parser.add_argument("--steps", type=int, default=200,
                      help="Krylov products per instance at most (default 200)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)

  clusters = fedkrr.TwoClusters.draw(args.seed, args.points)
  ridges = jnp.logspace(-4.0, 0.0, args.grid)
  mixings = jnp.linspace(0.0, 1.0, args.grid)
  n, count = 2 * args.points, args.grid ** 2
  print(f"rho on a {args.grid} x {args.grid} grid of (c, mixing), N = {n} "
        f"({args.points} per agent), float64, {jax.devices()[0].platform}, "
        f"{os.cpu_count()} cores, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}",
        flush=True)

  grid_fn = jax.jit(lambda cs, ps: fedkrr.rate_grid(clusters, cs, ps, batch_size=args.batch,
                                                    steps=args.steps))
  single = jax.jit(lambda p, c: fedkrr.degradation_rate(clusters.problem(p, c), method="dense"))

  t0 = time.perf_counter()
  grid_exe = grid_fn.lower(ridges, mixings).compile()
  t_compile_g = time.perf_counter() - t0
  t0 = time.perf_counter()
  single_exe = single.lower(mixings[0], ridges[0]).compile()
  t_compile_s = time.perf_counter() - t0
  print(f"compile (warm-up): grid {t_compile_g:.2f} s, dense single instance "
        f"{t_compile_s:.2f} s", flush=True)
  memory = grid_exe.memory_analysis()
  if memory is not None:
    print(f"grid call's temporary buffers: {memory.temp_size_in_bytes / 2 ** 30:.3f} GiB",
          flush=True)

  t0 = time.perf_counter()
  grid = np.array(jax.block_until_ready(grid_exe(ridges, mixings)))   # writable copy
  t_grid = time.perf_counter() - t0
  batch = "rate_grid's default number of" if args.batch is None else args.batch
  print(f"one call, {count} instances, {batch} mixing fractions vmapped at a time: "
        f"{t_grid:.2f} s "
        f"({1e3 * t_grid / count:.2f} ms per instance)", flush=True)

  rng = np.random.default_rng(args.seed)
  picks = rng.choice(count, size=min(args.sample, count), replace=False)
  rows, cols = np.unravel_index(picks, grid.shape)
  t0 = time.perf_counter()
  dense = [float(single_exe(mixings[j], ridges[i])) for i, j in zip(rows, cols)]
  t_loop = time.perf_counter() - t0
  per_instance = t_loop / len(picks)
  print(f"loop of jitted dense single instances: {len(picks)} instances in {t_loop:.2f} s "
        f"({1e3 * per_instance:.1f} ms each); extrapolated to {count}: "
        f"{per_instance * count:.1f} s", flush=True)

  # Unconverged (NaN) instances get the dense route, as fedkrr.rate_grid does outside jit;
  # its time counts towards the grid's.
  nans = int(np.count_nonzero(np.isnan(grid)))
  t0 = time.perf_counter()
  for i, j in zip(*np.nonzero(np.isnan(grid))):
    grid[i, j] = float(single_exe(mixings[j], ridges[i]))
  t_fallback = time.perf_counter() - t0
  t_grid += t_fallback
  print(f"unconverged Krylov estimates recomputed on the dense route: {nans} "
        f"({t_fallback:.2f} s); grid total {t_grid:.2f} s", flush=True)
  diff = float(np.max(np.abs(grid[rows, cols] - np.asarray(dense))))
  print(f"loop (extrapolated) / one call = {per_instance * count / t_grid:.1f}x")
  print(f"max |rho_grid - rho_dense| on the {len(picks)} sampled instances = {diff:.2e}; "
        f"rho in [{np.nanmin(grid):.3g}, {np.nanmax(grid):.3g}]")
  left = int(np.count_nonzero(np.isnan(grid)))
  if left or not diff <= TOLERANCE:
    raise SystemExit(f"failed: {left} NaN rates, max abs difference {diff:.3g} "
                     f"(tolerance {TOLERANCE:g})")


if __name__ == "__main__":
  main()
