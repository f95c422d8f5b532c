"""Closed forms vs the literal per-round runner vs one eigh, measured side by side.

    python benchmarks/closed_form.py                 # the reference setting: N = 2000, T = 500
    python benchmarks/closed_form.py --n 400 --rounds 50   # a quick look

Two agents with RBF kernels of different bandwidths, float64, on the CPU
(JAX_PLATFORMS=cpu is the default here). For AKD, AvgKD and EKD it times

* the closed form (``fedkrr.trajectory``: every round's predictions at the
  evaluation points), warm (compiled) and cold (including compilation);
* the literal runner (``fedkrr.simulate`` with kernel ridge learners: one fit and
  the predictions per agent and round, as a user of the fit/predict API would);
* one ``eigh`` of the N x N Gram matrix (warm),

and prints the ratios: runner / closed form (target >= 50) and closed form /
eigh (target <= 3). Timings take the best of ``--repeats`` warm runs.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from timing import best_time  # noqa: E402

import fedkrr  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=2000, help="total number of points N")
  parser.add_argument("--rounds", type=int, default=500, help="rounds T")
  parser.add_argument("--n-eval", type=int, default=200, help="evaluation points")
  parser.add_argument("--repeats", type=int, default=3, help="warm repeats (best is kept)")
  parser.add_argument("--protocols", default="akd,avgkd,ekd")
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)

  half = args.n // 2
  data = fedkrr.synthetic_regression(0, sizes=(half, args.n - half), dim=5,
                                     heterogeneity=1.0, n_test=args.n_eval)
  problem = fedkrr.make_problem(data.xs, data.ys, [fedkrr.RBF(0.1), fedkrr.RBF(0.2)], 1e-3)
  x_eval = jnp.asarray(data.x_test)
  learners = fedkrr.krr_learners(problem)
  print(f"N = {problem.num_points} ({problem.sizes}), T = {args.rounds}, "
        f"{args.n_eval} evaluation points, float64, {jax.devices()[0].platform}, "
        f"{os.cpu_count()} cores")

  pooled = problem.gram(0, problem.pooled_x(), problem.pooled_x())
  eigh = jax.jit(jnp.linalg.eigh)
  jax.block_until_ready(eigh(pooled))
  t_eigh = best_time(lambda: eigh(pooled), args.repeats)
  print(f"one eigh of the {problem.num_points} x {problem.num_points} Gram matrix: "
        f"{t_eigh:.3f} s")

  header = (f"{'protocol':9s} {'closed form':>12s} {'(cold)':>9s} {'runner':>9s} "
            f"{'runner/closed':>14s} {'closed/eigh':>12s}  agree")
  print(header)
  print("-" * len(header))
  for name in args.protocols.split(","):
    t0 = time.perf_counter()
    exact = jax.block_until_ready(fedkrr.trajectory(problem, name, args.rounds, x_eval))
    t_cold = time.perf_counter() - t0
    t_closed = best_time(lambda name=name: fedkrr.trajectory(problem, name, args.rounds, x_eval),
                     args.repeats)
    # The literal runner: one pass (it is the slow side); the first fit compiles the learner,
    # so warm it up on one round first.
    jax.block_until_ready(fedkrr.simulate(name, learners, problem.xs, problem.ys, 1, x_eval))
    t0 = time.perf_counter()
    literal = jax.block_until_ready(
        fedkrr.simulate(name, learners, problem.xs, problem.ys, args.rounds, x_eval))
    t_runner = time.perf_counter() - t0
    gap = float(jnp.max(jnp.abs(exact - literal)) / jnp.max(jnp.abs(literal)))
    print(f"{name:9s} {t_closed:10.3f} s {t_cold:7.2f} s {t_runner:7.2f} s "
          f"{t_runner / t_closed:13.1f}x {t_closed / t_eigh:11.2f}x  {gap:.1e}", flush=True)
  print("targets: runner/closed >= 50x, closed/eigh <= 3x (warm timings)")


if __name__ == "__main__":
  np.set_printoptions(precision=3)
  main()
