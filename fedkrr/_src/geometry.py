"""Oblique projections and contractions of two-agent AKD (Prop. III, App. B and C).

Agents 1 and 2 (0 and 1 in code) have Gram matrices ``L = k_1(X, X) / N`` and
``M = k_2(X, X) / N`` on the pooled inputs ``X = (X_1; X_2)``. The paper stacks
them into ``K = diag(L, M)`` (2N x 2N) and writes its eigendecomposition as
``K = V^T D V`` with ``V = (V_1 V_2 V~_1 V~_2)`` split by columns, so that
``L_ij = V_i^T D V_j`` and ``M_ij = V~_i^T D V~_j``. With ``G = c I + D``:

* ``P_1 = V_1 (V_1^T G V_1)^+ V_1^T G`` and ``P~_2 = V~_2 (V~_2^T G V~_2)^+ V~_2^T G``
  are projections onto ``range(V_1)`` and ``range(V~_2)``, oblique in the
  geometry ``<x, y>_G = x^T G y`` (with c = 0 the pseudo-inverse gives App. C's
  ``P^``);
* ``C_1 = V_1 V~_1^T`` and ``C~_2 = V~_2 V_2^T`` are contractions;
* two AKD rounds from agent 1 multiply ``z = V_1 y_1`` by
  ``A = C_1 P~_2^T C~_2 P_1^T`` (eq. 12), whose spectral radius is the
  degradation rate.

With one shared kernel the tildes can be dropped (``M = L``); the geometry here
is the general one, which holds for any choice of the eigenvectors.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses

import jax
import jax.numpy as jnp

from fedkrr._src import linalg
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import ProblemError
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike


def check_two_agents(problem: FederatedProblem, what: str) -> None:
  """Raises ``ProblemError`` unless ``problem`` has exactly two agents."""
  if problem.num_agents != 2:
    raise ProblemError(f"problem: {what} is defined for two agents (App. B), "
                       f"got {problem.num_agents}")


@pytree_dataclass
class Geometry:
  """The objects of App. B for a two-agent problem (see the module docstring).

  Attributes:
    v: the orthogonal matrix ``V`` with ``K = V^T diag(d) V``, (2N, 2N).
    d: the eigenvalues of ``K = diag(L, M)``, (2N,).
    ridge: the regularisation constant c.
    sizes: ``(N_1, N_2)`` (static).
  """

  v: Array
  d: Array
  ridge: Array
  sizes: tuple[int, int] = dataclasses.field(metadata=dict(static=True))

  def _cols(self, block: int) -> Array:
    n1, n2 = self.sizes
    n = n1 + n2
    start = (0, n1, n, n + n1)[block]
    return self.v[:, start:start + (n1, n2, n1, n2)[block]]

  @property
  def v1(self) -> Array:
    """``V_1`` (2N, N_1): kernel 1 on agent 1's points."""
    return self._cols(0)

  @property
  def v2(self) -> Array:
    """``V_2`` (2N, N_2): kernel 1 on agent 2's points."""
    return self._cols(1)

  @property
  def v1_tilde(self) -> Array:
    """``V~_1`` (2N, N_1): kernel 2 on agent 1's points."""
    return self._cols(2)

  @property
  def v2_tilde(self) -> Array:
    """``V~_2`` (2N, N_2): kernel 2 on agent 2's points."""
    return self._cols(3)

  @property
  def metric(self) -> Array:
    """The diagonal of ``G = c I + D``, (2N,)."""
    return self.ridge + self.d

  def projection(self, basis: Array) -> Array:
    """``B (B^T G B)^+ B^T G``: the G-oblique projection onto ``range(basis)``."""
    inverse = linalg.ridge_factor(basis.T @ (self.d[:, None] * basis), self.ridge).matrix()
    return basis @ inverse @ (basis.T * self.metric[None, :])

  @property
  def p1(self) -> Array:
    """``P_1``: onto ``range(V_1)`` (agent 1, kernel 1)."""
    return self.projection(self.v1)

  @property
  def p2(self) -> Array:
    """``P_2``: onto ``range(V_2)`` (agent 2, kernel 1)."""
    return self.projection(self.v2)

  @property
  def p1_tilde(self) -> Array:
    """``P~_1``: onto ``range(V~_1)`` (agent 1, kernel 2)."""
    return self.projection(self.v1_tilde)

  @property
  def p2_tilde(self) -> Array:
    """``P~_2``: onto ``range(V~_2)`` (agent 2, kernel 2)."""
    return self.projection(self.v2_tilde)

  @property
  def c1(self) -> Array:
    """``C_1 = V_1 V~_1^T``: the contraction from kernel 2's to kernel 1's coordinates."""
    return self.v1 @ self.v1_tilde.T

  @property
  def c2_tilde(self) -> Array:
    """``C~_2 = V~_2 V_2^T``: the contraction from kernel 1's to kernel 2's coordinates."""
    return self.v2_tilde @ self.v2.T

  def two_round_operator(self) -> Array:
    """``A = C_1 P~_2^T C~_2 P_1^T`` (2N, 2N): two AKD rounds from agent 1 (eq. 12)."""
    return self.c1 @ self.p2_tilde.T @ self.c2_tilde @ self.p1.T


def stacked_gram(problem: FederatedProblem) -> Array:
  """``K = diag(L, M)`` (2N, 2N), each block the agent's kernel on the pooled inputs / N."""
  check_two_agents(problem, "the stacked Gram matrix")
  x = problem.pooled_x()
  blocks = [problem.gram(a, x, x) for a in range(2)]
  zeros = jnp.zeros_like(blocks[0])
  return jnp.block([[blocks[0], zeros], [zeros, blocks[1]]])


def geometry(problem: FederatedProblem) -> Geometry:
  """The projections and contractions of App. B for a two-agent problem.

  Args:
    problem: a two-agent :class:`FederatedProblem` (any kernels, c >= 0).

  Returns:
    A :class:`Geometry`; its properties are ``V_1, V_2, V~_1, V~_2``, the
    projections ``P_1, P_2, P~_1, P~_2`` and the contractions ``C_1, C~_2``.

  Raises:
    ProblemError: if the problem does not have two agents.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> a = fedkrr.rates.geometry(problem).two_round_operator()   # (N, N)
    >>> bool(jnp.isclose(fedkrr.rates.spectral_radius(a), fedkrr.rates.degradation_rate(problem)))
    True
  """
  check_two_agents(problem, "the geometry of App. B")
  k = stacked_gram(problem)
  d, q = jnp.linalg.eigh(0.5 * (k + k.T))
  d = jnp.maximum(d, 0.0)   # K is PSD: negative eigenvalues are rounding
  n1, n2 = problem.sizes   # two agents: checked above
  return Geometry(q.T, d, problem.ridge, (n1, n2))


def prepare(problem: FederatedProblem, x_eval: ArrayLike, geo: Geometry | None,
            what: str) -> tuple[Geometry, list[Callable[[Array], Array]]]:
  """The common set-up of the closed forms built on the geometry (two agents only).

  Returns:
    The problem's :class:`Geometry` (``geo`` if given) and, per agent a, the
    function ``targets -> g(x_eval)`` of agent a's fit on its own inputs
    (``k_a(x_eval, X_a) / N (c I + K^a_aa)^+ targets``).
  """
  check_two_agents(problem, what)
  geo = geometry(problem) if geo is None else geo
  x_eval = jnp.asarray(x_eval, problem.ridge.dtype)
  fits = []
  for a, x in enumerate(problem.xs):
    readout = problem.gram(a, x_eval, x)
    factor = linalg.ridge_factor(problem.gram(a, x, x), problem.ridge)
    fits.append(lambda targets, readout=readout, factor=factor: readout @ factor.solve(targets))
  return geo, fits


def akd_by_projections(problem: FederatedProblem, rounds: int, x_eval: ArrayLike,
                       geo: Geometry | None = None) -> Array:
  """AKD from agent 1, reconstructed from projections and contractions (Prop. III, eq. 12).

  Round 2t's model is agent 1's fit on ``V_1^T A^t z_1`` and round 2t+1's is
  agent 2's fit on ``V_2^T P_1^T A^t z_1``, with ``z_1 = V_1 y_1``.

  Args:
    problem: a two-agent problem.
    rounds: the number of rounds T >= 1.
    x_eval: evaluation points (n_eval, d).
    geo: the problem's :class:`Geometry` (computed if omitted).

  Returns:
    (T, n_eval[, C]) predictions, equal to ``fedkrr.trajectory(problem, "akd", T, x_eval)``.
  """
  geo, fits = prepare(problem, x_eval, geo, "Prop. III")
  a_op, p1t = geo.two_round_operator(), geo.p1.T
  z = geo.v1 @ problem.ys[0]
  preds = []
  for t in range(rounds):
    if t % 2 == 0:
      preds.append(fits[0](geo.v1.T @ z))
    else:
      preds.append(fits[1](geo.v2.T @ (p1t @ z)))
      z = a_op @ z
  return jnp.stack(preds)


def principal_cosines(problem: FederatedProblem, kernel_of: int = 0) -> Array:
  """Cosines of the principal angles between the agents' subspaces in the G geometry.

  The subspaces are ``range(V_1)`` and ``range(V_2)`` of kernel ``kernel_of``
  (App. B, "Speed of degradation"). With G-orthonormal bases
  ``V_a (c I + K_aa)^{-1/2}`` the cosines are the singular values of
  ``W = (c I + K_11)^{-1/2} K_12 (c I + K_22)^{-1/2}``, in decreasing order;
  the first is ``cos(phi)`` of the smallest angle.

  Returns:
    (min(N_1, N_2),) cosines in [0, 1].
  """
  check_two_agents(problem, "the principal angles")
  x1, x2 = problem.xs
  roots = []
  for x in (x1, x2):
    gram = problem.gram(kernel_of, x, x)
    w, u = jnp.linalg.eigh(0.5 * (gram + gram.T) + problem.ridge * jnp.eye(x.shape[0],
                                                                               dtype=gram.dtype))
    keep = w > linalg.default_rtol(x.shape[0], w.dtype) * jnp.max(w)
    roots.append(u * jnp.where(keep, jax.lax.rsqrt(jnp.where(keep, w, 1.0)), 0.0)[None, :])
  cross = problem.gram(kernel_of, x1, x2)
  return jnp.linalg.svd(roots[0].T @ cross @ roots[1], compute_uv=False)
