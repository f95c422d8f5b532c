"""FedDKC: feature-driven federated distillation with knowledge refinement (Wu et al., 2023).

"Exploring the Distributed Knowledge Congruence in Proxy-data-free Federated
Distillation" (Wu, Sun, Liu, Zhang, Wang, Liu). Each client k holds a model
split into a feature extractor (the same architecture on every client) and a
predictor (different per client). A round (Algorithm 1):

1. local distillation (Eq. 1): client k trains its whole model on
   ``CE(p^k, y^k) + beta KL(p^S || p^k)``, where ``p^S = softmax(z^S)`` is the
   server's knowledge about the client's points from the last round (zeros,
   i.e. uniform, in the first round);
2. the client uploads its features ``H^k``, logits ``z^k`` and labels ``y^k``
   of all its points;
3. global distillation (Eq. 8), client by client: the server refines the
   client's knowledge, ``c^k = phi(z^k)``, trains its model (a
   predictor on features) on ``CE(p^S, y^k) + beta KL(c^k || p^S)`` and sends
   back its logits ``z^S = f(W^S; H^k)``.

The refinement ``phi`` is KKR (:func:`kkr`, peak probability set to T, Sec.
3.2, Eq. 14 and its rectification), SKR (:func:`skr_logits` on the logits, or
:func:`skr` on probabilities: the temperature found by bisection so that the
entropy is E within eps/2, Sec. 3.3, Eq. 17-20), or none:
FedGKT (He et al., 2020), the paper's baseline.

One method ``"feddkc"`` is registered; its ``refinement`` field ("kkr", "skr",
"none" = FedGKT) picks the variant, so the three are one grid axis of a sweep.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any
from typing import NamedTuple
from typing import cast

import flax.linen as nn
import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from neural._src.datasets.run_data import RunData
from neural._src.datasets.run_data import load_run_data
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import test_scores
from neural._src.models.models import NORMS
from neural._src.models.models import SPLIT_RESNETS
from neural._src.models.models import get_head
from neural._src.models.models import get_model
from neural._src.settings import MAX_EPOCHS
from neural._src.settings import OptimizerChoice
from neural._src.training.optimizers import OptimizerConfig
from neural._src.training.optimizers import make_optimizer
from neural._src.training.optimizers import optimizer_config
from neural._src.training.train_loop import Loop
from neural._src.training.train_loop import Schedule
from neural._src.training.train_loop import train_loop
from neural._src.training.train_loop import weighted_mean
from neural._src.training.training import init_variables

Array = jax.Array

REFINEMENTS = ("kkr", "skr", "none")


class FedDKCError(ValueError):
  """A bad argument of the refinements or of a FedDKC run."""


# ---------------------------------------------------------------------------
# Knowledge refinement (Sec. 3.2, 3.3)


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def _check_probs(probs, name: str = "probs") -> Array:
  """``probs`` as a float array (B, C), C >= 2; values checked when not traced."""
  probs = jnp.asarray(probs)
  if not jnp.issubdtype(probs.dtype, jnp.floating):
    probs = probs.astype(jnp.float32)
  if probs.ndim != 2 or probs.shape[1] < 2:
    raise FedDKCError(f"{name}: expected a batch of probability vectors of shape (B, C) "
                      f"with C >= 2, got shape {probs.shape}")
  if _is_concrete(probs) and probs.size:
    p = np.asarray(probs, dtype=np.float64)
    tol = max(100 * probs.shape[1] * float(jnp.finfo(probs.dtype).eps), 1e-5)
    if not np.all(np.isfinite(p)) or p.min() < -tol or p.max() > 1 + tol:
      raise FedDKCError(f"{name}: expected probabilities in [0, 1], got values in "
                        f"[{p.min():.3g}, {p.max():.3g}]")
    worst = float(np.max(np.abs(p.sum(axis=1) - 1)))
    if worst > tol:
      raise FedDKCError(f"{name}: expected rows summing to 1 (probability vectors), a row "
                        f"is off by {worst:.3g}; pass softmax(logits), not logits")
  return probs


def _check_peak(T, c: int) -> None:
  if _is_concrete(T):
    if np.ndim(T) != 0:
      raise FedDKCError(f"T: expected a scalar, got shape {np.shape(T)}")
    value = float(np.asarray(T))
    if not 1.0 / c < value < 1.0:
      raise FedDKCError(f"T: expected a peak probability in (1/C, 1) = ({1 / c:.4g}, 1) "
                        f"for C = {c}, got {value}")


def _check_entropy(E, eps, c: int) -> None:
  if _is_concrete(E):
    if np.ndim(E) != 0:
      raise FedDKCError(f"E: expected a scalar, got shape {np.shape(E)}")
    value = float(np.asarray(E))
    if not 0.0 < value < math.log2(c):
      raise FedDKCError(f"E: expected a target entropy in bits in (0, log2 C) = "
                        f"(0, {math.log2(c):.4g}) for C = {c}, got {value}")
  if _is_concrete(eps) and not (np.ndim(eps) == 0 and float(np.asarray(eps)) > 0):
    raise FedDKCError(f"eps: expected a scalar tolerance > 0, got {eps!r}")


def kkr(probs, T) -> Array:
  """Kernel-based knowledge refinement (KKR): every row's peak probability becomes T.

  With ``v = probs[b]``, ``m = argmax v`` and C classes, Eq. 14 maps

      phi(v)_i = ((C T - 1) v_i + v_m - T) / (C v_m - 1),

  the linear kernel ``sigma(x) = k x + b`` of Eq. 9-13 with its scale t solved
  from ``phi_m = T`` (k and b cancel). It is an increasing affine map of v, so
  the class order is kept, ``phi_m = T`` and ``sum phi = 1``. When v_m < T it
  sharpens and an entry can become negative (Theorem 1); the paper then
  rectifies the whole row to ``T`` at m and ``(1 - T) / (C - 1)`` elsewhere
  (Sec. 3.2), which keeps the order weakly. A uniform row (``C v_m = 1``,
  where Eq. 14 divides by zero) is rectified too. Ties for the maximum go to
  the first index (the paper assumes an "empirically unique" maximum).

  Args:
    probs: (B, C) probability vectors ``softmax(z^k)`` (rows in the simplex).
    T: the target peak probability, ``1/C < T < 1`` (a float or a traced scalar).

  Returns:
    (B, C) refined probability vectors with ``max = T`` in every row.

  Raises:
    FedDKCError: ``probs`` not of shape (B, C) or not probability vectors (checked
      when concrete), or T outside (1/C, 1) (checked when concrete).

  Example:
    >>> kkr(jnp.array([[0.7, 0.2, 0.1]]), 0.5).round(4).tolist()   # the rest keeps its 2 : 1
    [[0.5, 0.2727, 0.2273]]
  """
  probs = _check_probs(probs)
  _check_peak(T, probs.shape[1])
  return _kkr_core(probs, T)


@jax.jit
def _kkr_core(probs: Array, T) -> Array:
  c = probs.shape[1]
  T = jnp.asarray(T, dtype=probs.dtype)
  v_max = jnp.max(probs, axis=1, keepdims=True)
  denom = c * v_max - 1.0
  safe = jnp.where(denom > 0, denom, 1.0)
  affine = ((c * T - 1.0) * probs + (v_max - T)) / safe                        # Eq. 14
  one_hot = jax.nn.one_hot(jnp.argmax(probs, axis=1), c, dtype=probs.dtype)
  rectified = one_hot * T + (1.0 - one_hot) * ((1.0 - T) / (c - 1))
  bad = jnp.logical_or(jnp.any(affine < 0, axis=1, keepdims=True), denom <= 0)
  return jnp.where(bad, rectified, affine)


def entropy_bits(probs) -> Array:
  """Shannon entropy in bits of each row of ``probs`` (B, C) -> (B,), with 0 log 0 = 0."""
  probs = jnp.asarray(probs)
  logs = jnp.log2(jnp.where(probs > 0, probs, 1.0))
  return -jnp.sum(jnp.where(probs > 0, probs * logs, 0.0), axis=-1)


def _log_tempered(z: Array, log_theta: Array) -> Array:
  """``log psi(theta; z) = log_softmax(z / theta)`` (Eq. 18); entries of z may be -inf."""
  return jax.nn.log_softmax(z * jnp.exp(-log_theta))


def _entropy_bits_of_log(log_q: Array) -> Array:
  """Entropy in bits of ``exp(log_q)`` from its logarithm (no log of an underflowed 0)."""
  q = jnp.exp(log_q)
  finite = jnp.isfinite(log_q)
  terms = jnp.where(finite, q * jnp.where(finite, log_q, 0.0), 0.0)
  return -jnp.sum(terms, axis=-1) / math.log(2)


def _skr_one(z, E, eps, lo, hi, max_iter):
  """Bisection on log(theta) for one row of scores z: H(psi) is non-decreasing in theta."""

  def gap(log_theta):
    return _entropy_bits_of_log(_log_tempered(z, log_theta)) - E

  def cond(carry):
    i, a, b, mid, g = carry
    return jnp.logical_and(i < max_iter, jnp.abs(g) >= eps / 2)

  def body(carry):
    i, a, b, mid, g = carry
    a = jnp.where(g < 0, mid, a)       # entropy too low: a higher temperature
    b = jnp.where(g < 0, b, mid)
    mid = 0.5 * (a + b)
    return i + 1, a, b, mid, gap(mid)

  mid = 0.5 * (lo + hi)
  carry = (jnp.asarray(0), lo, hi, mid, gap(mid))
  _, _, _, log_theta, _ = jax.lax.while_loop(cond, body, carry)
  return log_theta


def _check_logits(logits) -> Array:
  """``logits`` as a float array (B, C), C >= 2, finite (checked when not traced)."""
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    logits = logits.astype(jnp.float32)
  if logits.ndim != 2 or logits.shape[1] < 2:
    raise FedDKCError(f"logits: expected a batch of logit vectors of shape (B, C) with "
                      f"C >= 2, got shape {logits.shape}")
  if _is_concrete(logits) and logits.size and not bool(jnp.all(jnp.isfinite(logits))):
    raise FedDKCError("logits: expected finite values, got NaN or infinite entries")
  return logits


def _check_bracket(theta_min, theta_max, max_iter) -> None:
  if not 0 < theta_min < theta_max:
    raise FedDKCError(f"theta_min, theta_max: expected 0 < theta_min < theta_max, got "
                      f"{theta_min}, {theta_max}")
  if int(max_iter) < 1:
    raise FedDKCError(f"max_iter: expected an int >= 1, got {max_iter}")


def _log_probs(probs: Array) -> Array:
  """``log p`` with -inf where p = 0: the logits of ``probs`` up to a constant per row."""
  return jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), -jnp.inf)


def skr_temperature(probs, E, eps, *, theta_min: float = 1e-6, theta_max: float = 1e6,
                    max_iter: int = 100, logits=None) -> Array:
  """The SKR temperature theta* of each row (Eq. 17, 19), by bisection on log(theta).

  Solves ``H(softmax(z / theta)) = E`` (entropy in bits, as in App. A) with
  ``z = log p`` (or the ``logits`` themselves) until ``|H - E| < eps / 2`` or
  ``max_iter`` halvings of ``[log theta_min, log theta_max]``. H is
  non-decreasing in theta, from log2(#maxima) as theta -> 0 to log2(#entries
  with p > 0) as theta -> infinity, so the root is unique when it exists
  (Theorem 2); when E lies outside that range (ties, zeros, a constant row) the
  search ends at the nearest bracket end.

  Args:
    probs: (B, C) probability vectors, or ``None`` when ``logits`` are given.
    E: target entropy in bits, ``0 < E < log2 C``.
    eps: tolerance, > 0: rows end within eps/2 of E (Eq. 17).
    theta_min: the bracket's low end (paper: "close to zero"), ``0 < theta_min < theta_max``.
    theta_max: the bracket's high end (paper: "reasonably big").
    max_iter: most bisection steps.
    logits: (B, C) finite logits z in place of ``probs`` (see :func:`skr_logits`).

  Returns:
    (B,) temperatures theta* > 0.

  Raises:
    FedDKCError: bad ``probs`` (see :func:`skr`) or ``logits``, neither or both given,
      E outside (0, log2 C), eps <= 0 or a bad bracket.
  """
  if (probs is None) == (logits is None):
    raise FedDKCError("probs, logits: expected exactly one of them")
  scores = _check_logits(logits) if probs is None else _log_probs(_check_probs(probs))
  _check_entropy(E, eps, scores.shape[1])
  _check_bracket(theta_min, theta_max, max_iter)
  return _skr_temperature_core(scores, E, eps, theta_min=float(theta_min),
                               theta_max=float(theta_max), max_iter=int(max_iter))


@functools.partial(jax.jit, static_argnames=("theta_min", "theta_max", "max_iter"))
def _skr_temperature_core(scores, E, eps, *, theta_min, theta_max, max_iter):
  dtype = scores.dtype
  E = jnp.asarray(E, dtype)
  eps = jnp.asarray(eps, dtype)
  lo = jnp.asarray(math.log(theta_min), dtype)
  hi = jnp.asarray(math.log(theta_max), dtype)
  one = functools.partial(_skr_one, E=E, eps=eps, lo=lo, hi=hi, max_iter=int(max_iter))
  return jnp.exp(jax.vmap(one)(scores))


def skr(probs, E, eps, *, theta_min: float = 1e-6, theta_max: float = 1e6,
        max_iter: int = 100) -> Array:
  """Searching-based knowledge refinement (SKR): every row's entropy becomes E (within eps/2).

  ``phi(z) = psi(theta*; z) = softmax(z / theta*)`` (Eq. 18, 20) with theta*
  found by bisection (Eq. 17, 19; :func:`skr_temperature`). Here ``z = log p``,
  which differs from the client's logits by a constant per row, so the result
  is the same as :func:`skr_logits` on those logits, as long as no entry of p
  has underflowed to 0 (a logit gap above about 87 in float32): pass the logits
  to :func:`skr_logits` where they exist. A softmax with theta* > 0 keeps the
  class order and lies in the simplex (Theorems 4, 6); two refined rows differ
  in entropy by less than eps (Theorem 8).

  Args:
    probs: (B, C) probability vectors ``softmax(z^k)``.
    E: target Shannon entropy in bits, ``0 < E < log2 C``.
    eps: the tolerance of Eq. 6 / 17 (> 0); rows end with ``|H - E| < eps / 2``
      when E is reachable (see :func:`skr_temperature`).
    theta_min: as in :func:`skr_temperature` (static).
    theta_max: as in :func:`skr_temperature` (static).
    max_iter: as in :func:`skr_temperature` (static).

  Returns:
    (B, C) refined probability vectors.

  Raises:
    FedDKCError: ``probs`` not (B, C) probability vectors (checked when concrete),
      E outside (0, log2 C), eps <= 0, or a bad bracket.

  Example:
    >>> p = skr(jnp.array([[0.7, 0.2, 0.1]]), 1.0, 1e-3)
    >>> abs(float(-(p * jnp.log2(p)).sum()) - 1.0) < 1e-3   # entropy 1 bit, to eps
    True
  """
  theta = skr_temperature(probs, E, eps, theta_min=theta_min, theta_max=theta_max,
                          max_iter=max_iter)
  return _temper(_log_probs(jnp.asarray(probs, dtype=theta.dtype)), theta)


def skr_logits(logits, E, eps, *, theta_min: float = 1e-6, theta_max: float = 1e6,
               max_iter: int = 100) -> Array:
  """SKR from the client's logits: ``softmax(z / theta*)`` with ``H = E`` within eps/2.

  Eq. 18 and 20 as the paper writes them, on the logits z (B, C) rather than on
  ``softmax(z)``: the tempered distribution is a log-softmax of ``z / theta``, so
  no probability is rounded to 0 first and the target entropy is met for any
  finite logits. (From probabilities, a row whose top logit leads by more than
  about 87 is one-hot in float32 and has entropy 0 at every temperature.)

  Args:
    logits: (B, C) finite logits ``z^k``.
    E: target Shannon entropy in bits, ``0 < E < log2 C``.
    eps: tolerance (> 0): rows end with ``|H - E| < eps / 2`` unless ties make E
      unreachable (see :func:`skr_temperature`).
    theta_min: as in :func:`skr_temperature` (static).
    theta_max: as in :func:`skr_temperature` (static).
    max_iter: as in :func:`skr_temperature` (static).

  Returns:
    (B, C) refined probability vectors.

  Raises:
    FedDKCError: ``logits`` not (B, C) or not finite (checked when concrete), E outside
      (0, log2 C), eps <= 0, or a bad bracket.

  Example:
    >>> p = skr_logits(jnp.array([[120.0, 0.0, 0.0, 0.0]]), 1.0, 1e-3)
    >>> abs(float(entropy_bits(p)[0]) - 1.0) < 1e-3   # not one-hot
    True
  """
  theta = skr_temperature(None, E, eps, theta_min=theta_min, theta_max=theta_max,
                          max_iter=max_iter, logits=logits)
  return _temper(jnp.asarray(logits, dtype=theta.dtype), theta)


@jax.jit
def _temper(scores, theta):
  return jnp.exp(jax.vmap(_log_tempered)(scores, jnp.log(theta)))


def kl_to_target(logits: Array, target: Array) -> Array:
  """``KL(target || softmax(logits))`` per row (B,): the L_sim of Eq. 1, 2 and 8.

  ``sum_i t_i (log t_i - log softmax(logits)_i)`` with ``0 log 0 = 0``; the
  target is the teacher (no gradient flows into it when it is data).
  """
  log_q = jax.nn.log_softmax(logits, axis=-1)
  log_t = jnp.log(jnp.where(target > 0, target, 1.0))
  return jnp.sum(jnp.where(target > 0, target * (log_t - log_q), 0.0), axis=-1)


def distillation_loss(logits: Array, labels_onehot: Array, target: Array,
                      weight: float | Array) -> Array:
  """``CE(softmax(logits), y) + weight * KL(target || softmax(logits))`` per row (B,)."""
  ce = -jnp.sum(labels_onehot * jax.nn.log_softmax(logits, axis=-1), axis=-1)
  return ce + weight * kl_to_target(logits, target)


# ---------------------------------------------------------------------------
# The method


@dataclasses.dataclass(frozen=True)
class FedDKCConfig(MethodConfig, OptimizerChoice):
  """A FedDKC / FedGKT run (Wu et al. 2023, Sec. 4.1; defaults: the paper's where given).

  The clients and the server train with the settings of ``neural.training.OptimizerChoice``
  (L2 decay added to the gradient, then SGD with momentum or Adam, PyTorch style).

  Attributes:
    refinement: "kkr" (Sec. 3.2), "skr" (Sec. 3.3) or "none" (FedGKT).
    T: KKR's target peak probability, in (1/C, 1) (not reported in the paper).
    E: SKR's target entropy in bits, in (0, log2 C) (not reported).
    eps: SKR's tolerance: refined rows within eps/2 of E (not reported).
    kd_weight: beta of Eq. 1 and 8 (1.5 in the paper).
    client_kd_round0: whether the clients' KL term of Eq. 1 is on in round 0, towards
      the uniform ``p^S`` of ``z^S = 0`` (Algorithm 1's initialisation read
      literally). Off (the default): round 0's clients train on CE alone, as in
      FedGKT (He et al. 2020), whose clients distil from the server's logits only
      once the server has trained and sent them.
    client_models: split ResNets of the clients, client k gets entry k mod length
      (paper: ResNet2, 4, 6, 10, 12).
    server_model: the split ResNet whose predictor the server trains on the
      features (paper: ResNet20).
    width: channels of the shared extractor (``None``: 16, or 4 if ``tiny``).
    tiny: small widths for tests.
    norm: "group" or "none" (GroupNorm stands in for the paper's BatchNorm).
    client_epochs: the clients' passes over their data per round (not reported).
    server_epochs: the server's passes over the uploaded features per round (not
      reported).
    batch_size: mini-batch size (1024 in the paper).
    optimizer: "sgd" (the paper's, with ``momentum``) or "adam".
    learning_rate: 0.03 in the paper.
    momentum: SGD momentum (not reported).
    weight_decay: 5e-4 in the paper.
  """

  method: str = "feddkc"
  partition: str = "dirichlet-clients"
  beta: float | None = 0.5
  agents: int = 5
  refinement: str = "kkr"
  T: float = 0.8
  E: float = 1.0
  eps: float = 0.01
  kd_weight: float = 1.5
  client_kd_round0: bool = False
  client_models: tuple[str, ...] = ("resnet2", "resnet4", "resnet6", "resnet10", "resnet12")
  server_model: str = "resnet20"
  width: int | None = None
  tiny: bool = False
  norm: str = "group"
  client_epochs: int = 1
  server_epochs: int = 1
  optimizer: str = "sgd"       # OptimizerChoice's fields, with this method's defaults
  learning_rate: float = 0.03
  momentum: float = 0.9
  weight_decay: float = 5e-4

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    names = tuple(SPLIT_RESNETS)
    self.need(self.refinement in REFINEMENTS, "refinement", f"one of {REFINEMENTS}")
    self.need(0 < self.T < 1, "T", "a peak probability in (1/C, 1)")
    self.need(self.E > 0, "E", "a target entropy in bits in (0, log2 C)")
    self.need(self.eps > 0, "eps", "a tolerance > 0")
    self.need(self.kd_weight >= 0, "kd_weight", "a weight >= 0")
    self.need(all(m in names for m in self.client_models), "client_models",
              f"split ResNets, each one of {names}")
    self.need(self.server_model in names, "server_model", f"one of {names}")
    self.need(self.width is None or self.width >= 1, "width", "None or an integer >= 1")
    self.need(self.norm in NORMS, "norm", f"one of {NORMS}")
    self.need(1 <= self.client_epochs <= MAX_EPOCHS, "client_epochs",
              f"an integer in 1..{MAX_EPOCHS}")
    self.need(1 <= self.server_epochs <= MAX_EPOCHS, "server_epochs",
              f"an integer in 1..{MAX_EPOCHS}")

  def client_model_name(self, k: int) -> str:
    """Client ``k``'s model name (the list of client models is cycled through)."""
    return self.client_models[k % len(self.client_models)]


class FedDKCState(NamedTuple):
  """Everything a FedDKC run carries from round to round (NumPy leaves: picklable).

  Attributes:
    clients: per client, its params ``{"extractor": ..., "predictor": ...}``.
    client_opt: per client, its optimiser state.
    server: the server predictor's params.
    server_opt: its optimiser state.
    server_logits: per client, the global knowledge z^S (N_k, C) last sent to it
      (zeros before the first round, Algorithm 1).
  """

  clients: tuple[Any, ...]
  client_opt: tuple[Any, ...]
  server: Any
  server_opt: Any
  server_logits: tuple[np.ndarray, ...]


def _opt(config: FedDKCConfig) -> OptimizerConfig:
  """L2 decay added to the gradient, then SGD (momentum) or Adam (PyTorch style)."""
  return optimizer_config(config)


def _models(config: FedDKCConfig, num_classes: int) -> tuple[list[nn.Module], nn.Module]:
  kw: dict[str, Any] = dict(width=config.width, tiny=config.tiny, norm=config.norm)
  clients = [get_model(config.client_model_name(k), num_classes, **kw)
             for k in range(config.agents)]
  return clients, get_head(config.server_model, num_classes, **kw)


def _bucket(n: int, batch_size: int) -> int:
  """Padded size: batch_size times a power of two (few distinct compiled shapes)."""
  batches = -(-n // batch_size)
  return batch_size * (1 << (batches - 1).bit_length())


def _pad(a: np.ndarray, n: int) -> np.ndarray:
  a = np.asarray(a)
  return np.concatenate([a, np.zeros((n - a.shape[0], *a.shape[1:]), dtype=a.dtype)])


@dataclasses.dataclass(frozen=True)
class _DistillLoss:
  """``CE + kd_weight * KL(target || p)`` over a mini-batch (``batch.shared``: kd_weight).

  Eq. 1 for a client (x: images, target: softmax(z^S)) and Eq. 8 for the server
  (x: features H^k, target: the refined knowledge c^k).
  """

  model: nn.Module

  def __call__(self, params, batch):
    logits = cast(Array, self.model.apply({"params": params}, batch.data["x"], train=True))
    losses = distillation_loss(logits.astype(jnp.float32), batch.data["y"],
                               batch.data["target"], batch.shared)
    return weighted_mean(losses, batch.weights)


def _fit(params, opt_state, x, onehot, target, mask, key, kd_weight, *, model, config, epochs):
  """``epochs`` shuffled passes of :class:`_DistillLoss` through ``neural.training.train_loop``."""
  out = train_loop(_DistillLoss(model), params, {"x": x, "y": onehot, "target": target},
                   optimizer=_opt(config), key=key,
                   schedule=Schedule(config.batch_size, epochs=epochs),
                   mask=mask, shared=kd_weight, opt_state=opt_state,
                   loop=Loop(config.step_loop, config.agent_batching))
  return out.params, out.opt_state


@functools.partial(jax.jit, static_argnames=("model", "method"))
def _apply(params, x, *, model, method):
  if method == "features":
    return model.apply({"params": params}, x, method="features")
  if method == "both":
    logits, h = model.apply({"params": params}, x, return_features=True)
    return logits.astype(jnp.float32), h
  return model.apply({"params": params}, x).astype(jnp.float32)


def _chunked(params, x, *, model, method, size: int | None = None):
  """``_apply`` over row chunks of ``size`` rows (default: up to 1024, a power of two);
  one compiled program per chunk shape."""
  n = x.shape[0]
  if size is None:
    size = min(1024, 1 << max(n - 1, 1).bit_length())
  num = -(-n // size)
  x = _pad(x, num * size)
  outs = [_apply(params, x[i * size:(i + 1) * size], model=model, method=method)
          for i in range(num)]
  outs = jax.tree_util.tree_map(lambda *a: np.concatenate([np.asarray(b) for b in a]), *outs)
  return jax.tree_util.tree_map(lambda a: a[:n], outs)


def refine_logits(logits, config: FedDKCConfig) -> Array:
  """c^k = phi(z^k) for a client's logits (N_k, C) (Algorithm 2).

  KKR maps ``softmax(z^k)`` (Eq. 14); SKR tempers the logits themselves
  (:func:`skr_logits`, Eq. 18); "none" (FedGKT) is ``softmax(z^k)``.
  """
  logits = jnp.asarray(logits, jnp.float32)
  if config.refinement == "skr":   # from the logits: no probability underflows to 0 first
    return skr_logits(logits, config.E, config.eps)
  probs = jax.nn.softmax(logits, axis=-1)
  if config.refinement == "kkr":
    return kkr(probs, config.T)
  return probs


def _init_key(seed: int) -> Array:
  """The key of the initial weights: an "rbg" key (XLA compiles Flax's initialisers with
  threefry keys several times slower on CPU), drawn from ``PRNGKey(seed)``."""
  bits = jax.random.bits(jax.random.fold_in(jax.random.PRNGKey(seed), 1 << 30), (4,),
                         dtype=jnp.uint32)
  return jax.random.wrap_key_data(bits, impl="rbg")


@functools.partial(jax.jit, static_argnames=("model", "opt", "shape"))
def _init_jit(key, *, model, opt, shape):
  params = init_variables(model, key, shape)["params"]
  return params, make_optimizer(opt).init(params)


def load_data(config: FedDKCConfig) -> RunData:
  """The config's split (``neural.load_run_data``): FedDKC's clients train on their own points."""
  return load_run_data(config)


def init(config: FedDKCConfig, data: RunData) -> FedDKCState:
  """Fresh client and server models; global knowledge z^S = 0 (Algorithm 1)."""
  num_classes = data.num_classes
  if config.refinement == "kkr":   # the bounds depend on C: fail before any training
    _check_peak(config.T, num_classes)
  elif config.refinement == "skr":
    _check_entropy(config.E, config.eps, num_classes)
  clients, server = _models(config, num_classes)
  key = _init_key(config.init_seed)
  opt = _opt(config).rule()   # the state's structure only: no program per learning rate
  shape = tuple(data.xs[0].shape[1:])
  client_params, client_opt = zip(*[_init_jit(jax.random.fold_in(key, k), model=m, opt=opt,
                                               shape=shape) for k, m in enumerate(clients)])
  h_shape = jax.eval_shape(lambda p: clients[0].apply({"params": p}, jnp.zeros((1, *shape)),
                                                       method="features"), client_params[0])
  server_params, server_opt = _init_jit(jax.random.fold_in(key, config.agents), model=server,
                                        opt=opt, shape=tuple(h_shape.shape[1:]))
  state = FedDKCState(
      clients=tuple(client_params),
      client_opt=tuple(client_opt),
      server=server_params,
      server_opt=server_opt,
      server_logits=tuple(np.zeros((len(y), num_classes), np.float32) for y in data.labels))
  return jax.device_get(state)


def _top_k_accuracy(probs: np.ndarray, labels: np.ndarray, k: int) -> float:
  top = np.argsort(-probs, axis=1)[:, :k]
  return float(np.mean(np.any(top == labels[:, None], axis=1)))


def communication(num_points: int, feature_shape: tuple[int, ...], num_classes: int
                  ) -> dict[str, int]:
  """Numbers one client exchanges in one round (Algorithm 1, steps 1.3 and 1.7).

  Up: features H^k (N_k x prod(feature_shape)), logits z^k (N_k x C) and labels
  y^k (N_k); down: global knowledge z^S (N_k x C). Refinement adds nothing.
  """
  up = num_points * (int(np.prod(feature_shape)) + num_classes + 1)
  down = num_points * num_classes
  return {"comm_floats": up + down, "comm_up_floats": up, "comm_down_floats": down}


def client_kd_weight(config: FedDKCConfig, t: int) -> float:
  """The weight of the clients' KL term (Eq. 1) in round t: ``kd_weight``, except 0 in
  round 0 unless ``client_kd_round0`` (no server knowledge exists before the server trains)."""
  return 0.0 if t == 0 and not config.client_kd_round0 else float(config.kd_weight)


def step(config: FedDKCConfig, data: RunData, state: FedDKCState, t: int
         ) -> tuple[FedDKCState, list[dict[str, Any]]]:
  """Round t of Algorithm 1: local distillation, upload, refinement, global distillation."""
  num_classes = data.num_classes
  clients, server = _models(config, num_classes)
  bs = config.batch_size
  key = round_rng(config.init_seed, t)
  kd_weight = jnp.float32(config.kd_weight)
  client_kd = jnp.float32(client_kd_weight(config, t))
  client_params, client_opt = list(state.clients), list(state.client_opt)
  uploads = []
  # Local distillation (Eq. 1) and upload of H^k, z^k, y^k (steps 1.1-1.3).
  size = _bucket(max(x.shape[0] for x in data.xs), bs)   # one padded shape for everyone
  chunk = min(size, max(1024, bs))                          # rows per forward pass
  for k, model in enumerate(clients):
    x, y = data.xs[k], np.asarray(data.ys[k], np.float32)
    n = x.shape[0]
    teacher = np.asarray(jax.nn.softmax(jnp.asarray(state.server_logits[k])), np.float32)
    mask = np.arange(size) < n
    client_params[k], client_opt[k] = _fit(
        client_params[k], client_opt[k], _pad(x, size), _pad(y, size), _pad(teacher, size),
        mask, jax.random.fold_in(key, k), client_kd, model=model, config=config,
        epochs=config.client_epochs)
    logits, h = _chunked(client_params[k], x, model=model, method="both", size=chunk)
    uploads.append((h, logits, y))
  # Global distillation (Eq. 8), client by client (steps 1.4-1.7).
  server_params, server_opt = state.server, state.server_opt
  server_logits = []
  for k, (h, logits, y) in enumerate(uploads):
    n = h.shape[0]
    target = np.asarray(refine_logits(logits, config), np.float32)
    server_params, server_opt = _fit(
        server_params, server_opt, _pad(h, size), _pad(y, size), _pad(target, size),
        np.arange(size) < n, jax.random.fold_in(key, config.agents + k), kd_weight,
        model=server, config=config, epochs=config.server_epochs)
    server_logits.append(np.asarray(
        _chunked(server_params, h, model=server, method="logits", size=chunk), np.float32))
  state = jax.device_get(FedDKCState(tuple(client_params), tuple(client_opt), server_params,
                                     server_opt, tuple(server_logits)))
  # Evaluation: each client's model, and the server on each client's test features.
  rows, server_scores = [], []
  top = min(5, num_classes)
  for k, model in enumerate(clients):
    logits, h_test = _chunked(state.clients[k], data.x_test, model=model, method="both")
    probs = np.asarray(jax.nn.softmax(logits), np.float64)
    rows.append({"agent": k, "model": config.client_model_name(k),
                 "refinement": config.refinement, **test_scores(probs, data.y_test),
                 f"test_top{top}_accuracy": _top_k_accuracy(probs, data.y_test, top),
                 "num_train": int(data.xs[k].shape[0]),
                 **communication(int(data.xs[k].shape[0]), uploads[k][0].shape[1:],
                                 num_classes)})
    s_logits = _chunked(state.server, h_test, model=server, method="logits")
    s_probs = np.asarray(jax.nn.softmax(s_logits), np.float64)
    server_scores.append({**test_scores(s_probs, data.y_test),
                          f"test_top{top}_accuracy": _top_k_accuracy(s_probs, data.y_test, top)})
  rows.append({"agent": "server", "model": config.server_model, "refinement": config.refinement,
               **{name: float(np.mean([sc[name] for sc in server_scores]))
                  for name in server_scores[0]}})
  return state, rows


register_method(Method(
    name="feddkc", config_cls=FedDKCConfig, init=init, step=step, load_data=load_data,
    description="FedDKC (Wu et al. 2023): feature-driven distillation with KKR / SKR "
                "refinement, or FedGKT (refinement 'none')"))
