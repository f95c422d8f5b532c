"""The spectral radius in ``fedkrr.limit``: Arnoldi against the general eigen-solver.

    python benchmarks/limit.py                  # N = 2000, every protocol
    python benchmarks/limit.py --n 4000 --protocols avgkd   # the NTK twin's size
    python benchmarks/limit.py --agents 3 --protocols akd,ekd  # Arnoldi on the cube

M agents (``--agents``, default 2) with RBF kernels of different bandwidths (0.1, 0.2,
0.3, ...), ridge 1e-3,
float64, on the CPU. For each protocol it times the whole ``fedkrr.limit`` call
(factorisations, recurrence matrix, spectral radius and the fixed point's solve),
warm, with ``method="dense"`` (``jnp.linalg.eigvals`` of the N x N recurrence
matrix, what ``limit`` did before) and ``method="auto"`` (restarted Arnoldi on
products with that matrix, the dense route only where Arnoldi did not converge),
side by side, and prints the ratio, the two radii's difference, whether Arnoldi
converged on its own (``method="krylov"`` is not NaN), and whether the fixed points
are identical. The eigen-solver's time depends strongly on the matrix (AKD's
has zero blocks), so compare within one row. Timings on a shared CPU are noisy.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from timing import best_time  # noqa: E402

import fedkrr  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--n", type=int, default=2000, help="total number of points N")
  parser.add_argument("--agents", type=int, default=2, help="number of agents M")
  parser.add_argument("--n-eval", type=int, default=200, help="evaluation points")
  parser.add_argument("--repeats", type=int, default=2, help="warm repeats (best is kept)")
  parser.add_argument("--protocols", default=",".join(fedkrr.PROTOCOLS))
  args = parser.parse_args()
  fedkrr.avoid_cpu_eigh_deadlock()
  jax.config.update("jax_enable_x64", True)

  if args.agents < 2 or args.n < 2 * args.agents:
    parser.error(f"--agents: expected 2 <= M <= N / 2, got {args.agents} for N = {args.n}")
  sizes = tuple(len(part) for part in np.array_split(np.arange(args.n), args.agents))
  data = fedkrr.synthetic_regression(0, sizes=sizes, dim=5, heterogeneity=1.0,
                                     n_test=args.n_eval)
  kernels = [fedkrr.RBF(0.1 * (a + 1)) for a in range(args.agents)]
  problem = fedkrr.make_problem(data.xs, data.ys, kernels, 1e-3)
  x_eval = jnp.asarray(data.x_test)
  print(f"N = {problem.num_points} ({problem.sizes}), {args.n_eval} evaluation points, "
        f"float64, {jax.devices()[0].platform}, {os.cpu_count()} cores, best of "
        f"{args.repeats} warm calls")
  header = (f"{'protocol':15s} {'dense s':>9s} {'auto s':>9s} {'ratio':>8s} {'radius':>18s} "
            f"{'|diff|':>9s} {'arnoldi':>8s}  same limit")
  print(header)
  print("-" * len(header))
  ratios = []
  for name in args.protocols.split(","):
    def run(method, name=name):
      return fedkrr.limit(problem, name, x_eval, method=method)
    dense, auto = jax.block_until_ready(run("dense")), jax.block_until_ready(run("auto"))
    alone = bool(np.isfinite(float(run("krylov").spectral_radius)))
    t_dense, t_auto = best_time(lambda: run("dense"), args.repeats), best_time(
        lambda: run("auto"), args.repeats)
    ratios.append(t_dense / t_auto)
    diff = abs(float(dense.spectral_radius) - float(auto.spectral_radius))
    same = bool(np.array_equal(np.asarray(dense.predictions), np.asarray(auto.predictions)))
    print(f"{name:15s} {t_dense:9.3f} {t_auto:9.3f} {t_dense / t_auto:7.1f}x "
          f"{float(auto.spectral_radius):18.15f} {diff:9.1e} {'yes' if alone else 'no':>8s}  "
          f"{same}", flush=True)
  print(f"ratio dense / auto: geometric mean {np.exp(np.mean(np.log(ratios))):.1f}x, "
        f"smallest {min(ratios):.1f}x")


if __name__ == "__main__":
  main()
