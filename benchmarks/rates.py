"""Degradation rate rho on a (c, heterogeneity) grid, and sweeps with two different kernels.

    python benchmarks/rates.py                       # the reference setting: 64 x 64, N = 500
    python benchmarks/rates.py --grid 8 --points 100 # a quick look
    python benchmarks/rates.py --grid 16 --c-min 1e-8 --points 100   # small ridges
    python benchmarks/rates.py --sweeps              # sweep_ridge etc., RBF 0.2 / 0.5, N = 400

The data are :class:`fedkrr.rates.TwoClusters` (two agents, ``--points`` each, shared
RBF kernel); the grid is c in [``--c-min``, 1] (log; default 1e-4) times the mixing
fraction in [0, 1] (0 = disjoint clusters, 1 = iid). Side by side in one run, float64,
on the CPU (JAX_PLATFORMS=cpu is the default here):

* grid: ``fedkrr.rates.rate_grid(..., batch_size=B)``, the whole grid in one jitted call:
  per mixing fraction one eigen-decomposition of each agent's Gram matrix, reused
  for every c, and along c a block Krylov method restarted from the previous c's
  Ritz vectors (``docs/theory.md``, "How rates are computed"), B mixing fractions
  vmapped at a time under ``jax.lax.map``; the time and the call's temporary
  buffers are printed;
* loop: today's route, a Python loop of the jitted single instance
  ``fedkrr.rates.degradation_rate(clusters.problem(p, c), method="dense")`` (the dense
  cycle operator and ``jnp.linalg.eigvals``), timed on ``--sample`` instances
  spread over the grid and extrapolated to the whole grid (printed as such);
  its values on the sample are the reference.

Both are compiled ahead of time (``.lower(...).compile()``) and the compile times
are printed apart. Prints both times, their ratio, the largest absolute difference
on the sample, how many entries each route of the grid computed (the block Krylov
method; ``eigvalsh`` of the same explicit ``B B^T`` where it did not converge, from that
c down its column; ``fedkrr.rates.GRID_ROUTES``), how many entries the Krylov route alone
leaves unconverged (NaN) on this grid (a second call with ``eigh_fallback=False``,
timed apart), and the number of NaN entries left, which are recomputed on the dense route
(as ``fedkrr.rates.rate_grid`` does outside ``jit``; their time is added to the grid's); it
exits non-zero if any rate is still NaN or a difference exceeds 1e-10. On the sampled
instances it also runs ``fedkrr.rates.degradation_rate`` with ``method="symmetric"`` and
``"krylov"`` and prints how many of their Krylov estimates did not converge (those rates
come from the blocks' dense eigen-solver instead) and their largest difference from the
dense route.

``--sweeps`` instead times, on one :class:`fedkrr.rates.TwoClusters` draw (``--points`` per
agent, mixing 0.3) with two different kernels (RBF gamma 0.2 and 0.5), side by side:
``fedkrr.rates.sweep_ridge`` over ``--ridges`` values of c in [``--c-min``, 1] (each agent's
eigen-decomposition reused, warm-started Arnoldi along c) against a loop of the jitted
single instance ``fedkrr.rates.degradation_rate`` (its Krylov route, sampled and extrapolated)
and against ``fedkrr.rates.sweep`` (the vmapped single instance); then
``fedkrr.paper.sweep_kernel_mismatch`` over ``--ratios`` bandwidth ratios in [0.1, 10]
(warm-started Krylov along the ratios) against the same two. Every call is compiled
first (compile times apart); it prints times, ratios and the largest differences from
the loop and from the dense route on the sample, and exits non-zero above 1e-10.

The script switches off XLA's
concurrency-optimized CPU scheduler and multi-threaded Eigen (see
:func:`fedkrr.avoid_cpu_eigh_deadlock`) unless ``XLA_FLAGS`` names them, and runs
OpenBLAS (the LAPACK behind JAX's CPU Cholesky, triangular solves and ``eigvals``) on
one thread unless ``OPENBLAS_NUM_THREADS`` is set: on a shared 2-core machine its
threads made the dense single instance about 25x slower (about 1.3 s instead of
50 ms at N = 500), which inflates any ratio against the loop.
"""

from __future__ import annotations

import argparse
import dataclasses
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


def _timed(fn, *args):
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t0


def sweeps(args) -> None:
  """sweep_ridge and sweep_kernel_mismatch with two different kernels, side by side."""
  clusters = fedkrr.rates.TwoClusters.draw(args.seed, args.points)
  base = clusters.problem(0.3, 1e-2)
  problem = dataclasses.replace(base, kernels=(fedkrr.RBF(jnp.asarray(0.2)),
                                               fedkrr.RBF(jnp.asarray(0.5))))
  n = 2 * args.points
  print(f"sweeps with RBF gamma 0.2 and 0.5, N = {n} ({args.points} per agent), float64, "
        f"{jax.devices()[0].platform}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}", flush=True)
  rng = np.random.default_rng(args.seed)
  worst = 0.0

  def compare(name, values, make, new_fn, count):
    nonlocal worst
    single = jax.jit(lambda v: fedkrr.rates.degradation_rate(make(v)))
    vmapped = jax.jit(lambda vs: fedkrr.rates.sweep(make, vs))
    t0 = time.perf_counter()
    jax.block_until_ready(new_fn(values))
    t_compile_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(vmapped(values))
    jax.block_until_ready(single(values[0]))
    t_compile_old = time.perf_counter() - t0
    swept, t_new = _timed(new_fn, values)
    looped_all, t_vmap = _timed(vmapped, values)
    picks = np.sort(rng.choice(count, size=min(args.sample, count), replace=False))
    t0 = time.perf_counter()
    looped = np.asarray([float(single(values[i])) for i in picks])
    t_loop = (time.perf_counter() - t0) / len(picks) * count
    dense = np.asarray([float(fedkrr.rates.degradation_rate(make(values[i]), method="dense"))
                        for i in picks])
    swept = np.asarray(swept)
    nans = int(np.count_nonzero(np.isnan(swept)))
    d_loop = float(np.max(np.abs(swept[picks] - looped)))
    d_dense = float(np.max(np.abs(swept[picks] - dense)))
    d_vmap = float(np.nanmax(np.abs(swept - np.asarray(looped_all))))
    worst = max(worst, d_loop, d_dense) if nans == 0 else float("inf")
    print(f"{name}, {count} values (compile: {t_compile_new:.1f} s, the others "
          f"{t_compile_old:.1f} s):", flush=True)
    print(f"  new route {t_new:.3f} s; loop of jitted single instances {t_loop:.2f} s "
          f"(extrapolated from {len(picks)}); vmapped single instance (fedkrr.rates.sweep) "
          f"{t_vmap:.2f} s", flush=True)
    print(f"  loop / new = {t_loop / t_new:.1f}x, vmapped / new = {t_vmap / t_new:.1f}x; "
          f"NaN {nans}; max |new - loop| {d_loop:.1e}, |new - dense| {d_dense:.1e} on the "
          f"sample, |new - vmapped| {d_vmap:.1e} on all", flush=True)

  ridges = jnp.logspace(np.log10(args.c_min), 0.0, args.ridges)
  ridge_sweep = jax.jit(fedkrr.rates.sweep_ridge)
  compare("sweep_ridge", ridges, lambda c: dataclasses.replace(problem, ridge=c),
          lambda cs: ridge_sweep(problem, cs), args.ridges)
  ratios = jnp.logspace(-1.0, 1.0, args.ratios)
  mismatch_base = clusters.problem(0.3, 1e-2)
  gamma = mismatch_base.kernels[0].gamma

  def mismatched(r):
    root = jnp.sqrt(r)
    return dataclasses.replace(mismatch_base, kernels=(fedkrr.RBF(gamma / root),
                                                       fedkrr.RBF(gamma * root)))

  compare("sweep_kernel_mismatch (c = 1e-2)", ratios, mismatched,
          lambda rs: fedkrr.paper.sweep_kernel_mismatch(mismatch_base, rs), args.ratios)
  if not worst <= TOLERANCE:
    raise SystemExit(f"failed: NaN rates or a difference of {worst:.3g} (tolerance "
                     f"{TOLERANCE:g})")


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--grid", type=int, default=64, help="points per axis (default 64)")
  parser.add_argument("--points", type=int, default=None,
                      help="points per agent (default 250, N = 500; 200 with --sweeps)")
  parser.add_argument("--batch", type=int, default=None,
                      help="mixing fractions vmapped at a time inside the one call "
                           "(default: rate_grid's, 8)")
  parser.add_argument("--sample", type=int, default=16,
                      help="grid instances the dense loop runs on (default 16)")
  parser.add_argument("--steps", type=int, default=200,
                      help="Krylov products per instance at most (default 200)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--c-min", type=float, default=None,
                      help="smallest c (default 1e-4)")
  parser.add_argument("--sweeps", action="store_true",
                      help="time sweep_ridge and sweep_kernel_mismatch with two kernels "
                           "instead of the grid (--points 200 by default: N = 400)")
  parser.add_argument("--ridges", type=int, default=128, help="values of c for --sweeps")
  parser.add_argument("--ratios", type=int, default=64, help="bandwidth ratios for --sweeps")
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)
  args.c_min = 1e-4 if args.c_min is None else args.c_min
  if args.sweeps:
    args.points = 200 if args.points is None else args.points
    sweeps(args)
    return

  args.points = 250 if args.points is None else args.points
  clusters = fedkrr.rates.TwoClusters.draw(args.seed, args.points)
  ridges = jnp.logspace(np.log10(args.c_min), 0.0, args.grid)
  mixings = jnp.linspace(0.0, 1.0, args.grid)
  n, count = 2 * args.points, args.grid ** 2
  print(f"rho on a {args.grid} x {args.grid} grid of (c, mixing), N = {n} "
        f"({args.points} per agent), float64, {jax.devices()[0].platform}, "
        f"{os.cpu_count()} cores, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}",
        flush=True)

  grid_fn = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(clusters, cs, ps, batch_size=args.batch,
                                                          steps=args.steps, with_routes=True))
  bare_fn = jax.jit(lambda cs, ps: fedkrr.rates.rate_grid(clusters, cs, ps, batch_size=args.batch,
                                                          steps=args.steps, eigh_fallback=False))
  single = jax.jit(lambda p, c: fedkrr.rates.degradation_rate(clusters.problem(p, c),
                                                              method="dense"))

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
  grid, routes = jax.block_until_ready(grid_exe(ridges, mixings))
  t_grid = time.perf_counter() - t0
  grid, routes = np.array(grid), np.asarray(routes)   # writable copy
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

  counts = ", ".join(f"{name} {int(np.count_nonzero(routes == code))}"
                     for code, name in enumerate(fedkrr.rates.GRID_ROUTES))
  print(f"entries by route: {counts} (eigvalsh: of the explicit B B^T, where the Krylov "
        f"route did not converge, from that c down its column)", flush=True)
  bare_exe = bare_fn.lower(ridges, mixings).compile()
  t0 = time.perf_counter()
  bare = np.asarray(jax.block_until_ready(bare_exe(ridges, mixings)))
  t_bare = time.perf_counter() - t0
  bare_nans = int(np.count_nonzero(np.isnan(bare)))
  print(f"the Krylov route alone (eigh_fallback=False, {t_bare:.2f} s): {bare_nans} of {count} "
        f"NaN ({100 * bare_nans / count:.1f}%)", flush=True)

  # Unconverged (NaN) instances get the dense route, as fedkrr.rates.rate_grid does outside jit;
  # its time counts towards the grid's.
  nans = int(np.count_nonzero(np.isnan(grid)))
  t0 = time.perf_counter()
  for i, j in zip(*np.nonzero(np.isnan(grid))):
    grid[i, j] = float(single_exe(mixings[j], ridges[i]))
  t_fallback = time.perf_counter() - t0
  t_grid += t_fallback
  print(f"NaN entries of the grid's route recomputed on the dense route (fell back): {nans} of "
        f"{count} ({100 * nans / count:.1f}%, {t_fallback:.2f} s); grid total {t_grid:.2f} s",
        flush=True)
  # degradation_rate's own Krylov routes on the sampled instances: how many estimates did
  # not converge (rate_estimate), and the rates it returns (the blocks' dense eigen-solver
  # there) against the dense route.
  single_diff = 0.0
  for method in ("symmetric", "krylov"):
    est = jax.jit(lambda p, c, m=method: fedkrr.rates.rate_estimate(clusters.problem(p, c),
                                                                    method=m, steps=args.steps))
    rate = jax.jit(lambda p, c, m=method: fedkrr.rates.degradation_rate(clusters.problem(p, c),
                                                                        method=m, steps=args.steps))
    unconverged = sum(not bool(est(mixings[j], ridges[i]).converged) for i, j in zip(rows, cols))
    got = np.asarray([float(rate(mixings[j], ridges[i])) for i, j in zip(rows, cols)])
    gap = float(np.max(np.abs(got - np.asarray(dense))))
    single_diff = max(single_diff, gap)
    print(f"degradation_rate(method={method!r}) on the {len(picks)} sampled instances: "
          f"{unconverged} Krylov estimates unconverged (computed from the blocks' dense "
          f"eigen-solver instead), {int(np.count_nonzero(np.isnan(got)))} NaN, max |diff| from "
          f"the dense route {gap:.2e}", flush=True)
  diff = max(float(np.max(np.abs(grid[rows, cols] - np.asarray(dense)))), single_diff)
  print(f"loop (extrapolated) / one call = {per_instance * count / t_grid:.1f}x")
  print(f"max |rho_grid - rho_dense| on the {len(picks)} sampled instances = {diff:.2e}; "
        f"rho in [{np.nanmin(grid):.3g}, {np.nanmax(grid):.3g}]")
  left = int(np.count_nonzero(np.isnan(grid)))
  if left or not diff <= TOLERANCE:
    raise SystemExit(f"failed: {left} NaN rates, max abs difference {diff:.3g} "
                     f"(tolerance {TOLERANCE:g})")


if __name__ == "__main__":
  main()
