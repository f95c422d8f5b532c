"""High-precision kernels for ``numpy_reference``: the same literal rounds in mpmath.

A kernel made here returns an object array of ``mpmath.mpf``; ``numpy_reference.fit``
then solves in mpmath at the working precision (``mpmath.workdps``), and every
protocol of ``numpy_reference`` runs unchanged, its rounds exact to that precision
for the inputs as given (each float64 input taken exactly).
"""

from __future__ import annotations

import mpmath
import numpy as np


def _entries(fn, x1, x2):
  x1 = [[mpmath.mpf(float(t)) for t in row] for row in np.asarray(x1, np.float64)]
  x2 = [[mpmath.mpf(float(t)) for t in row] for row in np.asarray(x2, np.float64)]
  return np.array([[fn(a, b) for b in x2] for a in x1], dtype=object)


def make_kernel(name: str, gamma: float = 1.0):
  """"linear", "rbf" or "laplace" (the parametrisations of numpy_reference.make_kernel)."""
  g = mpmath.mpf(gamma)
  sq = lambda a, b: mpmath.fsum((s - t) ** 2 for s, t in zip(a, b))  # noqa: E731
  fns = {
      "linear": lambda a, b: mpmath.fsum(s * t for s, t in zip(a, b)),
      "rbf": lambda a, b: mpmath.exp(-g * sq(a, b)),
      "laplace": lambda a, b: mpmath.exp(-g * mpmath.sqrt(sq(a, b))),
  }
  fn = fns[name]
  return lambda x1, x2: _entries(fn, x1, x2)


def to_float(array) -> np.ndarray:
  """An object array of mpmath numbers as float64."""
  return np.vectorize(float, otypes=[np.float64])(np.asarray(array, dtype=object))


def _mp_matrix(array) -> mpmath.matrix:
  return mpmath.matrix(np.asarray(array, dtype=object).tolist())


def fixed_point(protocol: str, xs, ys, kernels, ridge: float, x_eval) -> np.ndarray:
  """The limit of AvgKD (per agent, (M, n_eval)) or of backfitting ((n_eval,)) from the
  formulas of docs/closed_forms.md, in mpmath: ``x = (I - S O / M)^{-1} a0 / M`` and the
  block system ``(c I + K) alpha = y``."""
  m = len(xs)
  n = sum(len(x) for x in xs)
  offsets = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).tolist()
  ys = [[mpmath.mpf(float(v)) for v in y] for y in ys]
  if protocol == "avgkd":
    system = mpmath.eye(n)
    rhs = mpmath.matrix(n, 1)
    for i in range(m):
      s_i = mpmath.inverse(ridge * mpmath.eye(len(xs[i])) + _mp_matrix(kernels[i](xs[i], xs[i]))
                           / n)
      a0 = s_i * mpmath.matrix(ys[i])
      for r in range(len(xs[i])):
        rhs[offsets[i] + r] = a0[r] / m
      for j in range(m):
        if j != i:
          block = s_i * _mp_matrix(kernels[j](xs[i], xs[j])) / n / m
          for r in range(len(xs[i])):
            for q in range(len(xs[j])):
              system[offsets[i] + r, offsets[j] + q] = -block[r, q]
  elif protocol.startswith("backfit"):
    system = mpmath.matrix(n, n)
    rhs = mpmath.matrix([v for y in ys for v in y])
    for i in range(m):
      for j in range(m):
        block = _mp_matrix(kernels[j](xs[i], xs[j])) / n
        for r in range(len(xs[i])):
          for q in range(len(xs[j])):
            system[offsets[i] + r, offsets[j] + q] = block[r, q] + (ridge if i == j and r == q
                                                                   else 0)
  else:
    raise ValueError(f"protocol: expected avgkd or backfit-*, got {protocol!r}")
  alpha = mpmath.lu_solve(system, rhs)
  preds = [np.array([mpmath.fsum(row[q] * alpha[offsets[a] + q] for q in range(len(xs[a])))
                     for row in (np.asarray(kernels[a](x_eval, xs[a]), dtype=object) / n)],
                    dtype=object) for a in range(m)]
  return np.stack(preds) if protocol == "avgkd" else sum(preds)
