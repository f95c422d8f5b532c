"""Accuracy of the closed forms against a 50-digit reference, as a function of conditioning.

    python benchmarks/closed_form_accuracy.py            # the table of docs/closed_forms.md
    python benchmarks/closed_form_accuracy.py --ridges 1e-6 --protocols avgkd

Two agents (14 and 12 points in 2 dimensions, ``fedkrr.synthetic_regression``), each
pair of kernels below, each ridge c: ``fedkrr.run`` in closed form (10 rounds at 8 test
points), ``fedkrr.run`` by literal refits of kernel ridge learners (``"simulate"``) and the
NumPy reference of the tests (``tests/fedkrr/numpy_reference.py``, literal refits
written from the conventions), each against the same rounds run in 50-digit mpmath
(``tests/fedkrr/mp_reference.py``: the NumPy reference's loops with mpmath kernels and
solves, every float64 input taken exactly). Errors are max |diff| / max |reference|;
``cond`` is the largest condition number of an agent's ``c I + K^a_aa``. The last
columns are the closed form's error over fedkrr.simulate's (the target: <= 10 up to
condition 1e6) and over ``eps cond``. The linear kernel has rank d = 2, so with a small
c its coefficients are of size ``|y| / c``: the case where explicit transfer blocks
``S_i K^j_ij`` lost digits (``docs/closed_forms.md``, "Accuracy").
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import mpmath  # noqa: E402
import numpy as np  # noqa: E402

import fedkrr  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "fedkrr"))
import mp_reference  # noqa: E402
import numpy_reference  # noqa: E402

PAIRS = {
    "linear+rbf": (("linear", {}), ("rbf", {"gamma": 0.1})),
    "rbf+rbf": (("rbf", {"gamma": 0.1}), ("rbf", {"gamma": 0.3})),
    "rbf+laplace": (("rbf", {"gamma": 0.1}), ("laplace", {"gamma": 0.2})),
}
FEDKRR = {"linear": lambda **p: fedkrr.Linear(), "rbf": fedkrr.RBF, "laplace": fedkrr.Laplace}


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--ridges", default="1e-2,1e-4,2.9e-6,1e-7,1e-8")
  parser.add_argument("--pairs", default=",".join(PAIRS))
  parser.add_argument("--protocols", default=",".join(fedkrr.PROTOCOLS))
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  jax.config.update("jax_enable_x64", True)
  eps = float(np.finfo(np.float64).eps)
  data = fedkrr.synthetic_regression(args.seed, sizes=(14, 12), dim=2, n_test=8)
  xs, ys, x_eval = data.xs, data.ys, data.x_test
  print(f"{'kernels':12s} {'c':>7s} {'cond':>8s} {'protocol':15s} {'closed':>8s} "
        f"{'simulate':>8s} {'numpy':>8s} {'closed/lit':>10s} {'closed/(eps cond)':>17s}")
  worst_ratio = worst_scaled = 0.0
  for pair in args.pairs.split(","):
    specs = PAIRS[pair]
    kernels = [FEDKRR[name](**params) for name, params in specs]
    numpy_kernels = [numpy_reference.make_kernel(name, **params) for name, params in specs]
    mp_kernels = [mp_reference.make_kernel(name, **params) for name, params in specs]
    for ridge in (float(r) for r in args.ridges.split(",")):
      problem = fedkrr.make_problem(xs, ys, kernels, ridge)
      cond = 0.0
      for a, x in enumerate(problem.xs):
        w = np.linalg.eigvalsh(ridge * np.eye(x.shape[0]) + np.asarray(problem.gram(a, x, x)))
        cond = max(cond, w[-1] / w[0])
      for protocol in args.protocols.split(","):
        with mpmath.workdps(50):
          truth = mp_reference.to_float(
              numpy_reference.run(protocol, xs, ys, mp_kernels, ridge, args.rounds, x_eval))
        error = lambda got, truth=truth: float(  # noqa: E731
            np.max(np.abs(np.asarray(got) - truth)) / np.max(np.abs(truth)))
        closed = error(fedkrr.run(problem, protocol, args.rounds, x_eval,
                                  method="closed-form").predictions)
        literal = error(fedkrr.run(problem, protocol, args.rounds, x_eval,
                                   method="simulate").predictions)
        plain = error(numpy_reference.run(protocol, xs, ys, numpy_kernels, ridge, args.rounds,
                                          x_eval))
        ratio = closed / literal
        if cond <= 1e6:
          worst_ratio = max(worst_ratio, ratio)
        worst_scaled = max(worst_scaled, closed / (eps * cond))
        print(f"{pair:12s} {ridge:7.1e} {cond:8.1e} {protocol:15s} {closed:8.1e} {literal:8.1e} "
              f"{plain:8.1e} {ratio:10.2f} {closed / (eps * cond):17.2g}", flush=True)
  print(f"worst closed / literal up to condition 1e6: {worst_ratio:.2f} (target <= 10); "
        f"worst closed / (eps cond): {worst_scaled:.2g}")


if __name__ == "__main__":
  main()
