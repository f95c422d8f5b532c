"""Federated kernel ridge regression with each agent on its own device.

The closed forms of :mod:`fedkrr._src.closed_form` hold the whole N x N system on
one device. Here the agents are spread over a 1-D mesh (:func:`fedkrr.scale.agent_mesh`)
and the protocol runs as in the federated setting itself: agent j's device holds
its own Gram blocks and the factor of ``c I + K^j_jj`` (:class:`AgentBlocks`),
fits its targets, and sends only *predictions* to the other agents' devices --
its model's values on their inputs (the points the protocols exchange) and on
the evaluation points. Labels, factors and coefficients never leave their device.

Per round (agents a = 0..M-1; ``S_a = (c I + K^a_aa)^+``, ``K^a_ia = k_a(X_i, X_a) / N``):

* AvgKD, PKD, pkd-mean, Jacobi backfitting: every agent fits ``alpha_a = S_a tau_a``
  and predicts on every agent's inputs, ``K^a_ia alpha_a``; one all-to-all hands
  agent i the M predictions on its inputs, from which it forms its next targets
  (``(y_i + sum_{j != i} ...) / M`` and so on, as in :func:`fedkrr.protocols.avgkd`).
* EKD and AKD: every agent fits the run that is at it and predicts on the next
  agent's inputs only; one collective permute passes the predictions on. EKD runs
  all M starts at once; AKD is the run from ``start`` (the other agents fit zeros).

The predictions at the evaluation points stay on their agents' devices for the
per-agent protocols (the result is sharded over its agent axis) and are gathered
and summed for the others. Gauss-Seidel backfitting is sequential within a sweep
(agent i fits after agent i - 1 in the same sweep), so it has nothing to run side
by side and is refused.

Sums over agents run in agent order, and every per-agent operation is the same
whichever device runs it, so the numbers do not depend on the number of devices;
they equal :func:`fedkrr.trajectory`'s up to rounding (that function multiplies
precomputed transfer blocks ``S_i K^j_ij``; here each round solves with the factor).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any
from typing import NamedTuple

import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

from fedkrr._src import linalg
from fedkrr._src import protocols
from fedkrr._src.names import PROTOCOL_TABLE
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import check_params
from fedkrr._src.names import make_params
from fedkrr._src.names import protocol_info
from fedkrr._src.platform.devices import AGENT_AXIS
from fedkrr._src.platform.devices import DeviceError
from fedkrr._src.platform.devices import agent_mesh
from fedkrr._src.platform.devices import check_mesh
from fedkrr._src.platform.devices import shard_agents
from fedkrr._src.platform.devices import spans_processes
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import check_eval_points
from fedkrr._src.pytree import pytree_dataclass

Array = jax.Array
ArrayLike = jax.typing.ArrayLike

SHARDED_PROTOCOLS = tuple(row.name for row in PROTOCOL_TABLE if row.sharded)


@pytree_dataclass
class AgentBlocks:
  """Each agent's own blocks, stacked on a leading agent axis sharded over a mesh.

  Agents with fewer than ``n = max_a N_a`` points are padded with zeros (rows and
  columns of the Gram blocks, labels); the padded Cholesky factor carries the
  identity on the padding, so a padded solve leaves the padding at zero.

  Attributes:
    cross: (M, M, n, n): ``cross[j, i] = k_j(X_i, X_j) / N``, which turns agent
      j's coefficients into its predictions on agent i's inputs; on agent j's device.
    cholesky: (M, n, n): each agent's ``RidgeFactor.cholesky`` (c > 0), padded.
    pinv_root: (M, n, n): each agent's ``RidgeFactor.pinv_root`` (c = 0), padded.
    labels: (M, n) or (M, n, C): each agent's labels, padded.
    ridge: the ridge c, on every device.
    mesh: the agent mesh (static).
    sizes: each agent's number of points N_a (static).
    rtol: the pseudo-inverse cut-off the factors were made with (static).
  """

  cross: Array
  cholesky: Array
  pinv_root: Array
  labels: Array
  ridge: Array
  mesh: Mesh = dataclasses.field(metadata=dict(static=True))
  sizes: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
  rtol: float | None = dataclasses.field(default=None, metadata=dict(static=True))

  @property
  def num_agents(self) -> int:
    """The number of agents M."""
    return len(self.sizes)


def _pad_square(a: Array, n: int, fill_diagonal: bool = False) -> Array:
  pad = n - a.shape[0]
  out = jnp.pad(a, ((0, pad), (0, n - a.shape[1])))
  if fill_diagonal and pad:
    out = out + jnp.diag(jnp.arange(n) >= a.shape[0]).astype(a.dtype)
  return out


def _on_own_device(one_agent, operands, mesh: Mesh, num_agents: int):
  """``one_agent(a, *operands)`` for every agent a, computed on agent a's device, stacked.

  One program for the mesh: on each device a ``lax.switch`` on the agent index
  picks that agent's branch (agents may have kernels of different kinds).
  """
  local = num_agents // mesh.size
  branches = [functools.partial(one_agent, a) for a in range(num_agents)]

  def body(*operands):
    first = lax.axis_index(AGENT_AXIS) * local
    outs = [lax.switch(first + k, branches, *operands) for k in range(local)]
    return jax.tree.map(lambda *parts: jnp.stack(parts), *outs)

  return jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec(),
                       out_specs=PartitionSpec(AGENT_AXIS))(*operands)


@functools.partial(jax.jit, static_argnames=("sizes", "rtol", "mesh"))
def _blocks_on_mesh(kernels, pooled_x, ridge, *, sizes, rtol, mesh):
  """(cross, cholesky, pinv_root), each agent's formed and factorised on its own device."""
  n, num_points = max(sizes), sum(sizes)
  offsets = [sum(sizes[:a]) for a in range(len(sizes))]

  def one_agent(a, kernels, pooled_x, ridge):
    gram = lambda x1, x2: (kernels[a](x1, x2) / num_points).astype(ridge.dtype)
    x_own = pooled_x[offsets[a]:offsets[a] + sizes[a]]
    factor = linalg.ridge_factor(gram(x_own, x_own), ridge, rtol)
    rows = gram(pooled_x, x_own)   # (N, N_a): agent a's predictions on everybody's inputs
    cross = jnp.stack([_pad_square(rows[o:o + size], n) for o, size in zip(offsets, sizes)])
    return (cross, _pad_square(factor.cholesky, n, fill_diagonal=True),
            _pad_square(factor.pinv_root, n))

  return _on_own_device(one_agent, (kernels, pooled_x, ridge), mesh, len(sizes))


@functools.partial(jax.jit, static_argnames=("sizes", "mesh"))
def _readouts_on_mesh(kernels, pooled_x, x_eval, *, sizes, mesh):
  """(M, n_eval, n): ``k_a(x_eval, X_a) / N`` on agent a's device (padded columns)."""
  n, num_points = max(sizes), sum(sizes)
  offsets = [sum(sizes[:a]) for a in range(len(sizes))]

  def one_agent(a, kernels, pooled_x, x_eval):
    x_own = pooled_x[offsets[a]:offsets[a] + sizes[a]]
    e = (kernels[a](x_eval, x_own) / num_points).astype(x_eval.dtype)
    return jnp.pad(e, ((0, 0), (0, n - sizes[a])))

  return _on_own_device(one_agent, (kernels, pooled_x, x_eval), mesh, len(sizes))


def shard_blocks(problem: FederatedProblem, mesh: Mesh | None = None,
                 rtol: float | None = None) -> AgentBlocks:
  """Each agent's Gram blocks and factor, computed and kept on its own device.

  Agent j's device receives the inputs of all agents (the points at which the
  protocols exchange predictions) and only agent j's labels; it forms
  ``k_j(X_i, X_j) / N`` for every i and factorises ``c I + K^j_jj``
  (:func:`fedkrr.ridge_factor`) there. Devices work on their agents at once.

  Args:
    problem: a validated :class:`FederatedProblem`.
    mesh: an agent mesh (:func:`fedkrr.scale.agent_mesh`); ``None``: ``agent_mesh(M)``.
    rtol: pseudo-inverse cut-off when c = 0 (see :func:`fedkrr.ridge_factor`).

  Returns:
    :class:`AgentBlocks` sharded over ``mesh``.

  Raises:
    DeviceError: the mesh is no agent mesh or its size does not divide M.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> blocks = fedkrr.scale.shard_blocks(problem)
    >>> blocks.cross.shape, blocks.sizes   # cross[j, i] = k_j(X_i, X_j) / N
    ((2, 2, 4, 4), (4, 4))
  """
  m = problem.num_agents
  mesh = agent_mesh(m) if mesh is None else check_mesh(mesh, m)
  n = max(problem.sizes)
  cross, chol, root = _blocks_on_mesh(problem.kernels, problem.pooled_x(), problem.ridge,
                                      sizes=problem.sizes, rtol=rtol, mesh=mesh)
  ys = [np.asarray(y) for y in problem.ys]
  labels = np.zeros((m, n) + ys[0].shape[1:], dtype=np.result_type(*ys))   # zero padding
  for a, y in enumerate(ys):
    labels[a, :y.shape[0]] = y
  labels = shard_agents(labels, mesh)   # each device receives its own agents' labels only
  return AgentBlocks(cross, chol, root, labels, problem.ridge, mesh, problem.sizes, rtol)


def _readouts(problem: FederatedProblem, blocks: AgentBlocks, x_eval: Array) -> Array:
  return _readouts_on_mesh(problem.kernels, problem.pooled_x(), x_eval, sizes=blocks.sizes,
                           mesh=blocks.mesh)


def _ordered_sum(terms: Array, keep: Array | None = None) -> Array:
  """``sum_j terms[j]`` in index order (``keep[j]`` masks terms), the same on any mesh."""
  total = jnp.zeros_like(terms[0])
  for j in range(terms.shape[0]):
    term = terms[j] if keep is None else jnp.where(
        keep[j].reshape(keep[j].shape + (1,) * (terms[j].ndim - keep[j].ndim)), terms[j], 0)
    total = total + term
  return total


class _Targets(NamedTuple):
  """A parallel protocol's next targets: ``(labels_w y_i + own_w tau_i + sign R_i) / divisor``,
  with R_i the sum of the received predictions on agent i's inputs (its own model's too
  if ``with_own``). Traced, so that one compiled program runs all four protocols."""

  labels_w: Array
  own_w: Array
  sign: Array
  divisor: Array
  with_own: Array


TARGET_RULES: dict[str, Callable[[int], tuple[float, float, float, float, bool]]] = {
    "avgkd": lambda m: (1, 0, 1, m, False),         # (y_i + sum_{j != i} g_j(X_i)) / M
    "pkd": lambda m: (0, 1, 1, m, False),           # (tau_i + sum_{j != i} g_j(X_i)) / M
    "pkd-mean": lambda m: (0, 0, 1, m, True),       # sum_j g_j(X_i) / M
    "backfit-jacobi": lambda m: (1, 0, -1, 1, False),   # y_i - sum_{j != i} h_j(X_i)
}
"""A parallel protocol's :class:`_Targets` by name, ``M -> (labels_w, own_w, sign, divisor,
with_own)``: this layer's one mapping from the protocol to its behaviour (AKD and EKD
relay instead; ``fedkrr.protocols.register_protocol`` adds to it)."""


def _targets_rule(protocol: str, m: int, dtype) -> _Targets:
  labels_w, own_w, sign, divisor, with_own = TARGET_RULES[protocol](m)
  as_array = lambda v: jnp.asarray(v, dtype)
  return _Targets(as_array(labels_w), as_array(own_w), as_array(sign), as_array(divisor),
                  jnp.asarray(with_own))


def _local_pieces(cross, chol, root, ridge):
  local = cross.shape[0]
  me = lax.axis_index(AGENT_AXIS) * local + jnp.arange(local)   # global agent indices
  solve = jax.vmap(lambda c, r, t: linalg.RidgeFactor(ridge, c, r).solve(t))
  return me, solve


def _broadcast(mask: Array, like: Array) -> Array:
  return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def _parallel_body(cross, chol, root, labels, evals, ridge, rule, *, rounds, num_agents):
  """Every agent fits, predicts on every agent's inputs; an all-to-all delivers them."""
  me, solve = _local_pieces(cross, chol, root, ridge)
  others = jnp.logical_or(rule.with_own, jnp.arange(num_agents)[:, None] != me[None, :])

  def round_(tau, _):
    alpha = solve(chol, root, tau)
    preds = jax.vmap(lambda k, a: k @ a)(cross, alpha)   # (local senders, M, n, ...)
    got = lax.all_to_all(preds, AGENT_AXIS, 1, 0, tiled=True)   # (M senders, local, n, ...)
    received = _ordered_sum(got, others)
    new = (rule.labels_w * labels + rule.own_w * tau + rule.sign * received) / rule.divisor
    return new, jax.vmap(lambda e, a: e @ a)(evals, alpha)

  return lax.scan(round_, labels, None, length=rounds)[1]   # (T, local, n_eval, ...)


def _relay_body(cross, chol, root, labels, evals, ridge, keep, *, rounds, num_agents, devices):
  """Every agent fits the run that is at it and passes its predictions to the next agent."""
  me, solve = _local_pieces(cross, chol, root, ridge)
  shift = [(d, (d + 1) % devices) for d in range(devices)]

  def round_(tau, _):
    alpha = solve(chol, root, tau)
    nxt = (me + 1) % num_agents
    preds = jax.vmap(lambda k, i, a: k[i] @ a)(cross, nxt, alpha)   # on the next inputs
    last = preds[-1:] if devices == 1 else lax.ppermute(preds[-1:], AGENT_AXIS, shift)
    return jnp.concatenate([last, preds[:-1]], axis=0), jax.vmap(lambda e, a: e @ a)(evals, alpha)

  init = jnp.where(_broadcast(keep[me], labels), labels, 0)
  return lax.scan(round_, init, None, length=rounds)[1]   # (T, local, n_eval, ...)


@functools.partial(jax.jit, static_argnames=("relay", "rounds", "mesh", "num_agents"))
def _rounds(cross, chol, root, labels, evals, ridge, rule, *, relay, rounds, mesh, num_agents):
  """The rounds' predictions at the evaluation points, (T, M, n_eval, ...) sharded on agents."""
  agents = PartitionSpec(AGENT_AXIS)
  if relay:
    body = functools.partial(_relay_body, rounds=rounds, num_agents=num_agents,
                             devices=mesh.size)
  else:
    body = functools.partial(_parallel_body, rounds=rounds, num_agents=num_agents)
  fn = jax.shard_map(body, mesh=mesh, in_specs=(agents,) * 5 + (PartitionSpec(),) * 2,
                     out_specs=PartitionSpec(None, AGENT_AXIS))
  return fn(cross, chol, root, labels, evals, ridge, rule)


@functools.partial(jax.jit, static_argnames=("alternate",))
def _sum_agents(per_agent: Array, *, alternate: bool) -> Array:
  """The predictor of each round: the sum over agents (in agent order); EKD's signed partial
  sums over rounds if ``alternate``."""
  total = _ordered_sum(jnp.moveaxis(per_agent, 1, 0))
  if not alternate:
    return total
  signs = jnp.where(jnp.arange(total.shape[0]) % 2 == 1, -1.0, 1.0).astype(total.dtype)
  return jnp.cumsum(_broadcast(signs, total) * total, axis=0)


def check_sharded_protocol(protocol: str) -> None:
  """Raises ``ValueError`` unless ``protocol`` is one of ``SHARDED_PROTOCOLS``."""
  if not protocol_info(protocol).sharded:
    raise ValueError(f"protocol: {protocol} is sequential (in a sweep each agent fits after the "
                     f"previous one), so its agents cannot work at once on their own devices; "
                     f"sharded protocols are {', '.join(SHARDED_PROTOCOLS)} (fedkrr.trajectory "
                     f"runs {protocol} on one device)")


def sharded_trajectory(problem: FederatedProblem, protocol: str, rounds: int,
                       x_eval: ArrayLike, mesh: Mesh | None = None, start: int | None = None,
                       rtol: float | None = None, blocks: AgentBlocks | None = None,
                       params: ProtocolParams | None = None) -> Array:
  """:func:`fedkrr.trajectory` with each agent on its own device; only predictions cross.

  The rounds run as one ``shard_map`` program over ``mesh`` (module docstring):
  each device fits its own agents with their own factors, and devices exchange
  the agents' predictions on each other's inputs.

  Args:
    problem: a validated :class:`FederatedProblem`.
    protocol: one of ``SHARDED_PROTOCOLS`` (all but backfit-gs).
    rounds: the number of rounds T >= 1.
    x_eval: evaluation points, shape (n_eval, d).
    mesh: an agent mesh (:func:`fedkrr.scale.agent_mesh`); ``None``: that of ``blocks``,
      else ``agent_mesh(M)`` (as many devices as divide M).
    start: deprecated: ``params=ProtocolParams(start=...)`` (AKD's starting agent).
    rtol: pseudo-inverse cut-off when c = 0 (see :func:`fedkrr.ridge_factor`).
    blocks: :func:`shard_blocks` of ``problem`` to reuse (factorised once); its
      mesh and rtol then stand, and ``mesh`` and ``rtol`` must be ``None`` or equal.
    params: the protocol's parameters (:class:`fedkrr.ProtocolParams`: AKD's ``start``).

  Returns:
    The layout of :func:`fedkrr.trajectory`: ``(rounds, M, n_eval[, C])`` for
    AvgKD, PKD and pkd-mean, sharded over its agent axis (agent a's predictions
    on agent a's device), else ``(rounds, n_eval[, C])``, the agents' predictions
    gathered and summed. ``np.asarray`` (or ``jax.device_get``) brings it to the host.
    On a mesh over several processes (``jax.distributed``; every process calls this
    with the same problem) the per-agent predictions are gathered to every device,
    so that each process holds all of them and the numbers of one process.

  Raises:
    ValueError: an unknown or sequential protocol, bad ``rounds`` or ``start``.
    DeviceError: the mesh does not fit the agents, or ``blocks`` does not fit.

  Example:
    >>> x = jnp.linspace(-1.0, 1.0, 8)[:, None]
    >>> y = jnp.sin(3.0 * x[:, 0])
    >>> problem = fedkrr.make_problem([x[:4], x[4:]], [y[:4], y[4:]], fedkrr.RBF(gamma=2.0),
    ...                               ridge=1e-2)
    >>> preds = fedkrr.scale.sharded_trajectory(problem, "avgkd", 5, x)
    >>> bool(np.allclose(preds, fedkrr.trajectory(problem, "avgkd", 5, x), rtol=0, atol=1e-12))
    True
  """
  check_sharded_protocol(protocol)
  params = make_params(params, start)
  check_params(protocol, params, problem.num_agents)
  start = params.start
  protocols.check_rounds(rounds)
  x_eval = check_eval_points(problem, x_eval)
  if blocks is None:
    blocks = shard_blocks(problem, mesh, rtol)
  else:
    _check_blocks(blocks, problem, mesh, rtol)
  evals = _readouts(problem, blocks, x_eval)
  m, dtype = blocks.num_agents, blocks.labels.dtype
  row = protocol_info(protocol)
  relay = row.cycles
  if relay:   # EKD: a run from every agent; AKD: the run from start (the others fit zeros)
    rule = jnp.arange(m) == start if row.one_fit_per_round else jnp.ones((m,), bool)
  else:
    rule = _targets_rule(protocol, m, dtype)
  per_agent = _rounds(blocks.cross, blocks.cholesky, blocks.pinv_root, blocks.labels, evals,
                      blocks.ridge, rule, relay=relay, rounds=rounds, mesh=blocks.mesh,
                      num_agents=m)
  if row.per_agent:
    if spans_processes(blocks.mesh):
      return _whole_on_every_process(per_agent, blocks.mesh)
    return per_agent
  return _sum_agents(per_agent, alternate=row.combine == "alternating-sum")


def _whole_on_every_process(per_agent: Array, mesh: Mesh) -> Array:
  """``per_agent`` replicated over ``mesh``: every process then holds all of it."""
  return jax.jit(_identity, out_shardings=NamedSharding(mesh, PartitionSpec()))(per_agent)


def _identity(x: Array) -> Array:
  return x


def _check_blocks(blocks: Any, problem: FederatedProblem, mesh: Mesh | None,
                  rtol: float | None) -> None:
  if not isinstance(blocks, AgentBlocks):
    raise DeviceError(f"blocks: expected fedkrr.scale.AgentBlocks (from "
                      f"fedkrr.scale.shard_blocks), got {type(blocks).__name__}")
  if blocks.sizes != problem.sizes or blocks.labels.shape[2:] != problem.ys[0].shape[1:]:
    raise DeviceError(f"blocks: made for agents of sizes {blocks.sizes}, not for this problem's "
                      f"{problem.sizes} (or another label shape)")
  if mesh is not None and mesh != blocks.mesh:
    raise DeviceError("mesh: differs from the mesh of blocks (pass one of them)")
  if rtol is not None and rtol != blocks.rtol:
    raise DeviceError(f"rtol: {rtol} differs from the rtol of blocks ({blocks.rtol})")
