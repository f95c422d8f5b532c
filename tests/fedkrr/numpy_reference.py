"""A plain-NumPy reference for the federated kernel ridge protocols.

Written independently of ``fedkrr``'s closed forms, literally from the
conventions: loops over rounds and explicit fits, clarity over speed.

Conventions:
  * agents a = 0..M-1 hold ``(X_a, y_a)``, ``N_a`` points, ``N = sum_a N_a``;
    labels are a vector (N_a,) or a matrix (N_a, C), formulas act column-wise;
  * agent a has its own kernel ``k_a`` and every Gram block is scaled by the
    total N: ``K^a(X, X') = k_a(X, X') / N``; ridge ``c >= 0``;
  * a local fit of agent a on targets t is ``alpha = (c I + K^a(X_a, X_a))^{-1} t``
    (``pinv`` when ``c = 0``) and predicts ``g(x) = k_a(x, X_a) alpha / N``.

Every protocol function returns the predictions at ``x_eval`` of rounds
0..rounds-1 in the layout of ``fedkrr.trajectory``.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses

import numpy as np

KernelFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


# ----------------------------------------------------------------------------- kernels


def _pairwise_differences(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
  """``x1[i] - x2[j]``, shape (n1, n2, d)."""
  return x1[:, None, :] - x2[None, :, :]


def linear_kernel(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
  """``<x, x'>``, shape (n1, n2)."""
  return np.einsum("id,jd->ij", x1, x2)


def polynomial_kernel(x1: np.ndarray, x2: np.ndarray, degree: int = 2, gamma: float = 1.0,
                      coef0: float = 1.0) -> np.ndarray:
  """``(gamma <x, x'> + coef0) ** degree``, shape (n1, n2)."""
  return (gamma * linear_kernel(x1, x2) + coef0) ** degree


def rbf_kernel(x1: np.ndarray, x2: np.ndarray, gamma: float = 1.0) -> np.ndarray:
  """``exp(-gamma ||x - x'||_2^2)``, shape (n1, n2)."""
  sq = np.sum(_pairwise_differences(x1, x2) ** 2, axis=-1)
  return np.exp(-gamma * sq)


def laplace_kernel(x1: np.ndarray, x2: np.ndarray, gamma: float = 1.0) -> np.ndarray:
  """``exp(-gamma ||x - x'||_2)`` (Euclidean norm), shape (n1, n2)."""
  dist = np.sqrt(np.sum(_pairwise_differences(x1, x2) ** 2, axis=-1))
  return np.exp(-gamma * dist)


_KERNELS = {
    "linear": linear_kernel,
    "polynomial": polynomial_kernel,
    "rbf": rbf_kernel,
    "laplace": laplace_kernel,
}


def make_kernel(name: str, **params) -> KernelFn:
  """The kernel ``name`` ("linear", "polynomial", "rbf", "laplace") with ``params``."""
  fn = _KERNELS[name]
  return lambda x1, x2: fn(np.asarray(x1, np.float64), np.asarray(x2, np.float64), **params)


# ----------------------------------------------------------------------------- local fit


def _pinv_hermitian(matrix: np.ndarray, rcond: float) -> np.ndarray:
  """``numpy.linalg.pinv(matrix, hermitian=True)`` with a relative cut-off ``rcond``."""
  if int(np.__version__.split(".")[0]) >= 2:
    return np.linalg.pinv(matrix, rtol=rcond, hermitian=True)
  return np.linalg.pinv(matrix, rcond=rcond, hermitian=True)


def _mp_solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
  """``matrix^{-1} rhs`` for object arrays of mpmath numbers, at mpmath's working precision."""
  import mpmath

  cols = rhs.reshape(rhs.shape[0], -1)
  lu = mpmath.matrix(matrix.tolist())
  out = [list(mpmath.lu_solve(lu, mpmath.matrix(cols[:, k].tolist())))
         for k in range(cols.shape[1])]
  return np.array(out, dtype=object).T.reshape(rhs.shape)


@dataclasses.dataclass
class Model:
  """``g(x) = k(x, X) alpha / N``."""

  kernel: KernelFn
  x_train: np.ndarray
  alpha: np.ndarray
  num_points: int

  def predict(self, x: np.ndarray) -> np.ndarray:
    """Predictions at ``x`` (n, d), shape (n,) or (n, C) like the targets."""
    return (self.kernel(x, self.x_train) / self.num_points) @ self.alpha


def fit(kernel: KernelFn, x: np.ndarray, targets: np.ndarray, ridge: float,
        num_points: int) -> Model:
  """Kernel ridge fit ``alpha = (c I + k(X, X) / N)^{-1} t``; ``pinv`` when ``c = 0``.

  Args:
    kernel: the agent's kernel.
    x: training inputs (n, d).
    targets: (n,) or (n, C).
    ridge: c >= 0.
    num_points: N, the total number of points of the federated problem.

  Returns:
    The fitted model.
  """
  x = np.asarray(x, np.float64)
  n = x.shape[0]
  gram = kernel(x, x) / num_points
  if gram.dtype == object:   # a high-precision kernel (mp_reference.py): solved in mpmath
    return Model(kernel, x, _mp_solve(ridge * np.eye(n) + gram, np.asarray(targets)),
                 num_points)
  targets = np.asarray(targets, np.float64)
  if ridge > 0:
    alpha = np.linalg.solve(ridge * np.eye(n) + gram, targets)
  else:
    alpha = _pinv_hermitian(gram, n * np.finfo(np.float64).eps) @ targets
  return Model(kernel, x, alpha, num_points)


class _Problem:
  """Validated arrays, one fit per agent and N."""

  def __init__(self, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray],
               kernels: Sequence[KernelFn], ridge: float):
    self.xs = [np.asarray(x, np.float64) for x in xs]
    self.ys = [np.asarray(y, np.float64) for y in ys]
    self.kernels = list(kernels)
    self.ridge = float(ridge)
    self.m = len(self.xs)
    self.n = sum(x.shape[0] for x in self.xs)
    assert len(self.ys) == self.m and len(self.kernels) == self.m

  def fit(self, agent: int, targets: np.ndarray) -> Model:
    """Agent ``agent`` fitted on its own inputs with ``targets``."""
    return fit(self.kernels[agent], self.xs[agent], targets, self.ridge, self.n)


# ----------------------------------------------------------------------------- protocols


def akd(xs, ys, kernels, ridge, rounds, x_eval, start=0) -> np.ndarray:
  """Alternating KD from agent ``start``: (rounds, n_eval[, C]), row t = round-t model."""
  p = _Problem(xs, ys, kernels, ridge)
  out = []
  owner = start % p.m
  model = p.fit(owner, p.ys[owner])
  out.append(model.predict(x_eval))
  for t in range(1, rounds):
    owner = (start + t) % p.m
    model = p.fit(owner, model.predict(p.xs[owner]))
    out.append(model.predict(x_eval))
  return np.stack(out)


def _averaged_kd(p: _Problem, rounds: int, x_eval: np.ndarray, parallel: bool,
                 own_model: bool = False) -> np.ndarray:
  """AvgKD (``parallel=False``), PKD (``parallel=True``) or, with ``own_model``, the mean
  of all M models' predictions, agent i's own included (the authors' code's PKD)."""
  targets = [y.copy() for y in p.ys]
  out = []
  for _ in range(rounds):
    models = [p.fit(i, targets[i]) for i in range(p.m)]
    out.append(np.stack([g.predict(x_eval) for g in models]))
    new_targets = []
    for i in range(p.m):
      if own_model:
        total = sum(models[j].predict(p.xs[i]) for j in range(p.m))
      else:
        first = targets[i] if parallel else p.ys[i]
        total = first.copy()
        for j in range(p.m):
          if j != i:
            total = total + models[j].predict(p.xs[i])
      new_targets.append(total / p.m)
    targets = new_targets
  return np.stack(out)


def avgkd(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """Averaged KD: (rounds, M, n_eval[, C]), entry [t, i] = agent i's round-t model."""
  return _averaged_kd(_Problem(xs, ys, kernels, ridge), rounds, x_eval, parallel=False)


def weighted_avgkd(xs, ys, kernels, ridge, rounds, x_eval, weights=None) -> np.ndarray:
  """Weighted AvgKD: targets ``w_i y_i + sum_{j != i} w_j g_j(X_i)``; (rounds, M, n_eval[, C]).

  ``weights=None`` is equal weights, which is AvgKD by definition.
  """
  p = _Problem(xs, ys, kernels, ridge)
  if weights is None:
    return _averaged_kd(p, rounds, x_eval, parallel=False)
  targets = [y.copy() for y in p.ys]
  out = []
  for _ in range(rounds):
    models = [p.fit(i, targets[i]) for i in range(p.m)]
    out.append(np.stack([g.predict(x_eval) for g in models]))
    targets = [weights[i] * p.ys[i] + sum(weights[j] * models[j].predict(p.xs[i])
                                          for j in range(p.m) if j != i)
               for i in range(p.m)]
  return np.stack(out)


def pkd(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """Parallel KD: (rounds, M, n_eval[, C]), entry [t, i] = agent i's round-t model."""
  return _averaged_kd(_Problem(xs, ys, kernels, ridge), rounds, x_eval, parallel=True)


def pkd_mean(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """PKD of the authors' code: (rounds, M, n_eval[, C]); targets = mean of all M models."""
  return _averaged_kd(_Problem(xs, ys, kernels, ridge), rounds, x_eval, parallel=True,
                      own_model=True)


def ekd(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """Ensembled KD: row t = ``sum_{tau <= t} (-1)^tau sum_s g^s_tau(x_eval)``."""
  m = len(xs)
  runs = [akd(xs, ys, kernels, ridge, rounds, x_eval, start=s) for s in range(m)]
  out = []
  partial = np.zeros_like(runs[0][0])
  for t in range(rounds):
    term = sum(run[t] for run in runs)
    partial = partial + (-1) ** t * term
    out.append(partial.copy())
  return np.stack(out)


def _backfit(p: _Problem, rounds: int, x_eval: np.ndarray, gauss_seidel: bool) -> np.ndarray:
  """Backfitting from all-zero models; row t = sum of the models after sweep t + 1."""
  models: list[Model | None] = [None] * p.m

  def predict(model: Model | None, x: np.ndarray, like: np.ndarray) -> np.ndarray:
    if model is None:
      return np.zeros((x.shape[0],) + like.shape[1:])
    return model.predict(x)

  out = []
  for _ in range(rounds):
    previous = list(models)
    for i in range(p.m):
      current = models if gauss_seidel else previous
      residual = p.ys[i].copy()
      for j in range(p.m):
        if j != i:
          residual = residual - predict(current[j], p.xs[i], p.ys[i])
      models[i] = p.fit(i, residual)
    out.append(sum(g.predict(x_eval) for g in models))
  return np.stack(out)


def backfit_gs(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """Gauss-Seidel backfitting (agents in index order, latest models)."""
  return _backfit(_Problem(xs, ys, kernels, ridge), rounds, x_eval, gauss_seidel=True)


def backfit_jacobi(xs, ys, kernels, ridge, rounds, x_eval) -> np.ndarray:
  """Jacobi backfitting (all agents at once from the previous sweep)."""
  return _backfit(_Problem(xs, ys, kernels, ridge), rounds, x_eval, gauss_seidel=False)


def run(protocol: str, xs, ys, kernels, ridge, rounds, x_eval, start=0) -> np.ndarray:
  """Dispatches on ``fedkrr``'s protocol names; ``start`` applies to AKD only."""
  if protocol == "akd":
    return akd(xs, ys, kernels, ridge, rounds, x_eval, start=start)
  fns = {
      "avgkd": avgkd,
      "weighted-avgkd": weighted_avgkd,
      "pkd": pkd,
      "pkd-mean": pkd_mean,
      "ekd": ekd,
      "backfit-gs": backfit_gs,
      "backfit-jacobi": backfit_jacobi,
  }
  return fns[protocol](xs, ys, kernels, ridge, rounds, x_eval)


# ----------------------------------------------------------------------------- baselines


def central(xs, ys, kernels, ridge, x_eval) -> np.ndarray:
  """Each agent's kernel fitted on the pooled data (scaled by N): (M, n_eval[, C])."""
  p = _Problem(xs, ys, kernels, ridge)
  x_all = np.concatenate(p.xs, axis=0)
  y_all = np.concatenate(p.ys, axis=0)
  return np.stack([fit(k, x_all, y_all, p.ridge, p.n).predict(x_eval) for k in p.kernels])


def local(xs, ys, kernels, ridge, x_eval) -> np.ndarray:
  """Each agent fitted on its own data only: (M, n_eval[, C])."""
  p = _Problem(xs, ys, kernels, ridge)
  return np.stack([p.fit(a, p.ys[a]).predict(x_eval) for a in range(p.m)])


# ----------------------------------------------------------------------------- public distillation


def public_distillation(xs, ys, kernels, ridge, reference, weight, rounds, x_eval,
                        mixing=None) -> np.ndarray:
  """Distillation through public inputs Z: (rounds, M, n_eval[, C]), [t, a] = agent a at t.

  Round 0: local fits. Round t + 1: agent a minimises over ``g = k_a(., S) alpha / N`` on
  ``S = [X_a; Z]``
  ``(1/N) sum_{X_a} (g - y_a)^2 + (weight/N) sum_Z (g - m_a)^2 + c ||g||^2`` with
  ``m_a = sum_b W[b, a] g_b^t(Z)`` (W = 11^T / M by default). Setting the gradient to
  zero gives ``(D K + c I) alpha = D t`` with ``K = k_a(S, S) / N`` and
  ``D = diag(1, .., 1, weight, .., weight)``, solved here as it stands (c > 0 only).
  """
  p = _Problem(xs, ys, kernels, ridge)
  assert p.ridge > 0, "the reference solves the unsymmetric normal equations: c > 0"
  z = np.asarray(reference, np.float64)
  w = np.full((p.m, p.m), 1.0 / p.m) if mixing is None else np.asarray(mixing, np.float64)
  models = [p.fit(a, p.ys[a]) for a in range(p.m)]
  out = [np.stack([g.predict(x_eval) for g in models])]
  for _ in range(1, rounds):
    on_z = [g.predict(z) for g in models]
    new = []
    for a in range(p.m):
      target_z = sum(w[b, a] * on_z[b] for b in range(p.m))
      s = np.concatenate([p.xs[a], z], axis=0)
      t = np.concatenate([p.ys[a], target_z], axis=0)
      d = np.concatenate([np.ones(len(p.xs[a])), np.full(len(z), float(weight))])
      gram = p.kernels[a](s, s) / p.n
      alpha = np.linalg.solve(d[:, None] * gram + p.ridge * np.eye(len(s)),
                              d.reshape((-1,) + (1,) * (t.ndim - 1)) * t)
      new.append(Model(p.kernels[a], s, alpha, p.n))
    models = new
    out.append(np.stack([g.predict(x_eval) for g in models]))
  return np.stack(out)
