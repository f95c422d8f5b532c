"""Collaborative learning by sharing per-class mean representations (Berdoz, 2022).

"Scalable Collaborative Learning via Representation Sharing" (F. Berdoz, MIT
master thesis, 2022). Client u holds a model ``f_u = tau_u o phi_u``: a feature
extractor ``phi_u: x -> s in R^{d'}`` and a linear head ``tau_u(s) = W_u s + b_u``
(:class:`FeatureClassifier`). A server that only relays and averages connects
the clients. Round r of GLOBALUPDATE (Algorithm 1), for every client u:

1. download the global class representations ``tbar^c`` and ``M_down``
   observations ``{t_m^c}`` (per-class means over ``n_avg`` samples of another
   client), all produced by the relay at the end of round r - 1 (a random
   initialisation in the first round): they are one round stale;
2. LOCALUPDATE (Algorithm 2): one epoch of Adam on (Eq. 6, 7)
   ``L = L_CE + lambda_KD L_KD + lambda_disc L_disc`` with
   ``L_KD = mean_i ||s_i - tbar^{y_i}||^2`` (:func:`feature_matching_loss`) and
   ``L_disc = mean_i sum_c -[c = y_i] log h_ic - [c != y_i] log(1 - h_ic)``,
   ``h_ic = <softmax(tau_u(s_i)), softmax(tau_u(t_m^c))>`` (Eq. 5;
   :func:`contrastive_loss`): one positive and C - 1 negatives per sample;
3. upload the :class:`Payload`: per-class means of the features of all local
   points with their counts, and ``M_up`` observations (per-class means over
   ``n_avg`` random local points) with theirs (:func:`client_payload`);
4. the relay (:func:`relay`, a pure function of the payloads only) averages the
   class means into ``tbar^c`` (weighted by the counts: the paper defines
   ``tbar^c = E_{(X, U) | Y = c}[phi_U(X)]``) and hands every client the
   observations of another client chosen at random (a :class:`Download`).

Baselines (Sec. 4) share the same model, data, training loop and rows:
federated distillation (FD, Jeong et al. 2018: per-class mean *logits*, averaged
by the server over the other clients and used as soft targets; or, as the
thesis's code does, over all clients, own included, with a squared error on the
logits: ``fd_include_self``, ``fd_loss="mse"``), FedAvg (weights averaged by the
numbers of points) and independent learning (cross-entropy only).

Registered methods (one config class, :class:`RepShareConfig`, so the method is a
grid axis of a sweep):

* ``"repshare"``: the paper's method;
* ``"repshare-fd"``: federated distillation;
* ``"repshare-fedavg"``: FedAvg;
* ``"repshare-independent"``: independent learning (with ``agents = 1``, the
  thesis's centralised learning, CL).

Every metric row holds ``comm_floats`` (numbers the client uploaded in that
round) and ``comm_down_floats`` (numbers it downloaded), both derived from the
shapes of what is exchanged (:func:`tree_size`). Rows of "repshare" also hold
``class_mean_spread`` and ``class_mean_norm`` of the global class means the relay
has just made (:func:`class_mean_spread`): a spread falling towards 0 round after
round is the collapse of the representations (docs/representation_sharing.md).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from typing import ClassVar
from typing import NamedTuple
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from neural._src.datasets.run_data import load_run_data
from neural._src.learners.fedavg import average
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import test_scores
from neural._src.models.repshare_models import BACKBONES
from neural._src.models.repshare_models import FeatureClassifier
from neural._src.models.repshare_models import RepShareError
from neural._src.models.repshare_models import make_client_model
from neural._src.settings import EpochSettings
from neural._src.training.optimizers import make_optimizer
from neural._src.training.train_loop import Loop
from neural._src.training.train_loop import Schedule
from neural._src.training.train_loop import train_loop

Array = jax.Array
ArrayLike = jax.typing.ArrayLike

METHODS = ("repshare", "repshare-fd", "repshare-fedavg", "repshare-independent")
REDUCTIONS = ("sum", "mean")
FD_LOSSES = ("ce", "mse")
INITIAL_TARGETS = ("random", "models")


# ---------------------------------------------------------------------------
# Loss terms (Eq. 5, 7) and class means


def _check_logits(student_logits, teacher_logits, labels):
  student_logits = jnp.asarray(student_logits)
  teacher_logits = jnp.asarray(teacher_logits)
  labels = jnp.asarray(labels)
  if student_logits.ndim != 2:
    raise RepShareError(f"student_logits: expected shape (B, C), got {student_logits.shape}")
  b, c = student_logits.shape
  if teacher_logits.shape == (c, c):
    teacher_logits = jnp.broadcast_to(teacher_logits[None], (b, c, c))
  if teacher_logits.shape != (b, c, c):
    raise RepShareError(f"teacher_logits: expected shape ({c}, {c}) or ({b}, {c}, {c}) "
                        f"(row k: tau_u of the teacher's class-k mean), got "
                        f"{teacher_logits.shape}")
  if labels.shape != (b,):
    raise RepShareError(f"labels: expected shape ({b},), got {labels.shape}")
  return student_logits, teacher_logits, labels


def discriminator_scores(student_logits: ArrayLike, teacher_logits: ArrayLike) -> Array:
  """``h_ik = <softmax(z_i), softmax(tau_u(t^k))>``, the Bernoulli parameter of Eq. 5.

  Args:
    student_logits: ``z_i = tau_u(s_i)``, shape (B, C).
    teacher_logits: ``tau_u(t^k)`` for the teacher's class-k mean t^k, shape (C, C)
      (shared by the batch) or (B, C, C) (one teacher set per sample, Algorithm 2).

  Returns:
    (B, C) scores in [0, 1]: the estimated probability that s_i and t^k share a class.
  """
  student_logits, teacher_logits, _ = _check_logits(
      student_logits, teacher_logits, jnp.zeros(jnp.shape(student_logits)[:1], jnp.int32))
  p_s = jax.nn.softmax(student_logits, axis=-1)
  p_t = jax.nn.softmax(teacher_logits, axis=-1)
  return jnp.einsum("bj,bkj->bk", p_s, p_t)


def contrastive_loss(student_logits: ArrayLike, teacher_logits: ArrayLike, labels: ArrayLike,
                     valid: ArrayLike | None = None, eps: float = 1e-6) -> Array:
  """Per-sample discriminator loss ``l_disc`` with one positive and C - 1 negatives.

  ``l_i = -log h_{i y_i} - sum_{k != y_i} log(1 - h_ik)`` (Eq. 7 summed as in
  Algorithm 2, K = C - 1), ``h`` from :func:`discriminator_scores`, clipped to
  ``[eps, 1 - eps]`` (the text does not say how log 0 is avoided).

  Args:
    student_logits: (B, C).
    teacher_logits: (C, C) or (B, C, C), see :func:`discriminator_scores`.
    labels: (B,) int labels y_i.
    valid: optional (B, C) booleans; terms with a missing teacher observation
      are dropped.
    eps: clipping of h.

  Returns:
    (B,) losses (sums over the C classes, not means).
  """
  student_logits, teacher_logits, labels = _check_logits(student_logits, teacher_logits,
                                                         labels)
  h = jnp.clip(discriminator_scores(student_logits, teacher_logits), eps, 1.0 - eps)
  positive = jax.nn.one_hot(labels, h.shape[1], dtype=h.dtype)
  terms = -(positive * jnp.log(h) + (1.0 - positive) * jnp.log1p(-h))
  if valid is not None:
    terms = jnp.where(jnp.asarray(valid, bool), terms, 0.0)
  return jnp.sum(terms, axis=1)


def feature_matching_loss(features: ArrayLike, labels: ArrayLike, class_means: ArrayLike,
                          reduction: str = "sum") -> Array:
  """Per-sample feature-based KD term ``l_KD(s_i, tbar^{y_i}) = ||s_i - tbar^{y_i}||^2`` (Eq. 7).

  Args:
    features: s_i, shape (B, d').
    labels: (B,) int labels.
    class_means: the global class representations tbar, shape (C, d').
    reduction: "sum" over the d' coordinates (the paper's squared L2 norm) or
      "mean" (PyTorch's ``MSELoss``, which the thesis's code uses).

  Returns:
    (B,) losses.
  """
  features, class_means = jnp.asarray(features), jnp.asarray(class_means)
  if features.ndim != 2 or class_means.ndim != 2 or features.shape[1] != class_means.shape[1]:
    raise RepShareError(f"features, class_means: expected shapes (B, d') and (C, d'), got "
                        f"{features.shape} and {class_means.shape}")
  if reduction not in REDUCTIONS:
    raise RepShareError(f"reduction: expected one of {REDUCTIONS}, got {reduction!r}")
  sq = (features - class_means[jnp.asarray(labels)]) ** 2
  return jnp.sum(sq, axis=1) if reduction == "sum" else jnp.mean(sq, axis=1)


def distillation_loss(student_logits: ArrayLike, teacher_logits: ArrayLike, kind: str = "ce"
                      ) -> Array:
  """FD's per-sample term against the teacher logits of the sample's class, shape (B,).

  ``"ce"``: ``-sum_k softmax(t)_k log softmax(z)_k`` (Jeong et al.'s soft targets);
  ``"mse"``: ``mean_k (z_k - t_k)^2`` on logits (the thesis's code).
  """
  student_logits, teacher_logits = jnp.asarray(student_logits), jnp.asarray(teacher_logits)
  if kind == "ce":
    return -jnp.sum(jax.nn.softmax(teacher_logits, -1) * jax.nn.log_softmax(student_logits, -1),
                    axis=-1)
  if kind == "mse":
    return jnp.mean((student_logits - teacher_logits) ** 2, axis=-1)
  raise RepShareError(f"kind: expected one of {FD_LOSSES}, got {kind!r}")


def class_means(values: Array, labels: Array, mask: Array, num_classes: int
                ) -> tuple[Array, Array]:
  """Per-class means of ``values`` (n, D) over the masked-in points and their counts.

  Returns:
    ``(means (C, D), counts (C,))``; a class without points has mean 0 and count 0.
  """
  onehot = jax.nn.one_hot(labels, num_classes, dtype=values.dtype)
  onehot = onehot * jnp.asarray(mask, values.dtype)[:, None]
  counts = jnp.sum(onehot, axis=0)
  sums = onehot.T @ values
  return sums / jnp.maximum(counts, 1.0)[:, None], counts


def class_mean_spread(means: ArrayLike, valid: ArrayLike | None = None) -> tuple[float, float]:
  """How far apart the class representations are: ``(spread, norm)`` of ``tbar`` (C, d').

  ``spread = mean_c ||tbar^c - m||`` with ``m`` the mean of the C class
  representations, and ``norm = mean_c ||tbar^c||``, over the valid classes. The
  spread is 0 exactly when every class has the same representation (features
  that no longer tell the classes apart: what L_KD pulls them to when it outweighs
  L_CE).
  """
  means = np.asarray(means, np.float64)
  if means.ndim != 2:
    raise RepShareError(f"means: expected shape (C, d'), got {means.shape}")
  keep = np.ones(len(means), bool) if valid is None else np.asarray(valid, bool)
  if keep.shape != (len(means),):
    raise RepShareError(f"valid: expected shape ({len(means)},), got {keep.shape}")
  means = means[keep]
  if len(means) == 0:
    return 0.0, 0.0
  spread = np.linalg.norm(means - means.mean(axis=0), axis=1).mean()
  return float(spread), float(np.linalg.norm(means, axis=1).mean())


# ---------------------------------------------------------------------------
# What is exchanged, and the relay


class Payload(NamedTuple):
  """What one client uploads in a round (the only input of :func:`relay`).

  Attributes:
    means: (C, D) per-class means over all local points (D = d' features, or C
      logits for FD).
    counts: (C,) points behind each mean.
    observations: (M_up, C, D) per-class means over ``n_avg`` random local points.
    observation_counts: (M_up, C) points behind each observation (0: class absent).
  """

  means: Array | np.ndarray
  counts: Array | np.ndarray
  observations: Array | np.ndarray
  observation_counts: Array | np.ndarray


class Download(NamedTuple):
  """What one client receives at the start of a round.

  Attributes:
    means: (C, D) global class means ``tbar^c`` (FD: the other clients' mean logits).
    valid: (C,) whether ``means[c]`` carries information (some client had class c).
    observations: (M_down, C, D) teacher observations ``t_m^c`` of other clients.
    observation_valid: (M_down, C).
  """

  means: Array | np.ndarray
  valid: Array | np.ndarray
  observations: Array | np.ndarray
  observation_valid: Array | np.ndarray


def tree_size(tree: Any) -> int:
  """Numbers in a PyTree (floats, counts and flags alike), from the leaves' shapes."""
  return int(sum(np.prod(np.shape(leaf), dtype=np.int64)
                 for leaf in jax.tree_util.tree_leaves(tree)))


def relay(payloads: Payload, key: Array, *, num_download: int = 1,
          exclude_self: bool = False) -> Download:
  """The server: averages the class means and forwards other clients' observations.

  Global class means (count-weighted; ``tbar^c = E_{(X,U)|Y=c} phi_U(X)``, Sec. 3):
  ``tbar^c = sum_v n_vc m_vc / sum_v n_vc``, over all clients v, or over v != u
  with ``exclude_self`` (FD, Jeong et al.). Each client u gets ``num_download``
  observation sets drawn without replacement from the sets uploaded by the
  *other* clients (Sec. 4, "another user chosen at random"); a class that the
  chosen set lacks is replaced by ``tbar^c``.

  Args:
    payloads: a :class:`Payload` stacked over the N clients: means (N, C, D),
      counts (N, C), observations (N, M_up, C, D), observation_counts (N, M_up, C).
    key: PRNG key of the random assignment.
    num_download: M_down <= (N - 1) M_up (0 allowed).
    exclude_self: leave each client's own means out of its global means.

  Returns:
    A :class:`Download` stacked over the N clients.

  Raises:
    TypeError: ``payloads`` is not a :class:`Payload`.
    RepShareError: inconsistent shapes or too many downloads.
  """
  if not isinstance(payloads, Payload):
    raise TypeError(f"payloads: expected a Payload (per-class means and counts), got "
                    f"{type(payloads).__name__}")
  means, counts = jnp.asarray(payloads.means), jnp.asarray(payloads.counts)
  obs, obs_counts = jnp.asarray(payloads.observations), jnp.asarray(payloads.observation_counts)
  if means.ndim != 3 or counts.shape != means.shape[:2]:
    raise RepShareError(f"payloads: expected means (N, C, D) and counts (N, C), got "
                        f"{means.shape} and {counts.shape}")
  n, c, d = means.shape
  if obs.ndim != 4 or obs.shape[0] != n or obs.shape[2:] != (c, d) \
     or obs_counts.shape != obs.shape[:3]:
    raise RepShareError(f"payloads: expected observations (N, M_up, C, D) = ({n}, M, {c}, {d}) "
                        f"and observation_counts (N, M_up, C), got {obs.shape} and "
                        f"{obs_counts.shape}")
  m_up = obs.shape[1]
  if not 0 <= num_download <= (n - 1) * m_up:
    raise RepShareError(f"num_download: expected 0..(N - 1) M_up = {(n - 1) * m_up}, got "
                        f"{num_download}")
  return _relay_core(means, counts.astype(means.dtype), obs, obs_counts, key,
                     num_download=int(num_download), exclude_self=bool(exclude_self))


@functools.partial(jax.jit, static_argnames=("num_download", "exclude_self"))
def _relay_core(means, counts, obs, obs_counts, key, *, num_download, exclude_self):
  n, c, d = means.shape
  m_up = obs.shape[1]
  weighted = counts[:, :, None] * means
  total, total_count = jnp.sum(weighted, axis=0), jnp.sum(counts, axis=0)
  if exclude_self:
    sums, tot = total[None] - weighted, total_count[None] - counts
  else:
    sums = jnp.broadcast_to(total[None], (n, c, d))
    tot = jnp.broadcast_to(total_count[None], (n, c))
  global_means = sums / jnp.maximum(tot, 1.0)[:, :, None]
  valid = tot > 0
  pool = obs.reshape(n * m_up, c, d)
  pool_valid = obs_counts.reshape(n * m_up, c) > 0
  owner = jnp.repeat(jnp.arange(n), m_up)

  def pick(u, k):
    scores = jnp.where(owner == u, jnp.inf, jax.random.uniform(k, (n * m_up,)))
    chosen = jnp.argsort(scores)[:num_download]
    got, ok = pool[chosen], pool_valid[chosen]                     # (M_down, C, D), (M_down, C)
    got = jnp.where(ok[:, :, None], got, global_means[u][None])
    return got, jnp.logical_or(ok, valid[u][None])

  observations, obs_valid = jax.vmap(pick)(jnp.arange(n), jax.random.split(key, n))
  return Download(global_means, valid, observations, obs_valid)


def initial_download(rng: np.random.Generator, num_clients: int, num_classes: int, dim: int,
                     num_download: int, scale: float = 1.0, valid: bool = True) -> Download:
  """The relay's random initialisation (Algorithm 1), used in the first round.

  Entries are ``scale * Uniform[0, 1)`` (non-negative, like ReLU features; the
  distribution is not in the text), one ``tbar`` shared by all clients and one
  observation set per client. ``valid=False`` marks them as carrying no
  information (FD's first round has no teacher). Drawn with NumPy from ``rng``
  (no compiled program for a one-off draw).
  """
  means = scale * rng.random((1, num_classes, dim))
  obs = scale * rng.random((num_clients, num_download, num_classes, dim))
  return Download(np.repeat(means, num_clients, axis=0).astype(np.float32),
                  np.full((num_clients, num_classes), valid),
                  obs.astype(np.float32),
                  np.full((num_clients, num_download, num_classes), valid))


def _observations(values, labels, mask, key, num_classes: int, n_avg: int, num: int):
  """``num`` sets of per-class means, each over <= n_avg distinct random points."""
  n = values.shape[0]
  k = min(n_avg, n)

  def one(kk, c):
    member = jnp.logical_and(mask, labels == c)
    scores = jnp.where(member, jax.random.uniform(kk, (n,)), 2.0)
    _, idx = jax.lax.top_k(-scores, k)
    take = member[idx].astype(values.dtype)
    count = jnp.sum(take)
    return jnp.sum(take[:, None] * values[idx], axis=0) / jnp.maximum(count, 1.0), count

  keys = jax.random.split(key, num * num_classes).reshape(num, num_classes, -1)
  classes = jnp.arange(num_classes)
  return jax.vmap(lambda ks: jax.vmap(one)(ks, classes))(keys)


def client_payload(values: Array, labels: Array, mask: Array, key: Array, *,
                   num_classes: int, n_avg: int = 10, num_upload: int = 1) -> Payload:
  """A client's upload from its per-point features (or logits) after the local update.

  Args:
    values: (n, D) features ``phi_u(x_i)`` (or logits for FD) of the local points.
    labels: (n,) int labels; mask: (n,) booleans (padding is False).
    key: PRNG key of the ``n_avg`` draws.
    num_classes: C.
    n_avg: points per observation (10 in the paper), drawn without replacement
      (fewer when the client has fewer points of a class).
    num_upload: M_up (0 for FD).

  Returns:
    The :class:`Payload`: only per-class means and counts leave the client.
  """
  values = jnp.asarray(values)
  means, counts = class_means(values, labels, mask, num_classes)
  if num_upload == 0:
    d = values.shape[1]
    return Payload(means, counts, jnp.zeros((0, num_classes, d), values.dtype),
                   jnp.zeros((0, num_classes), values.dtype))
  obs, obs_counts = _observations(values, labels, mask, key, num_classes, n_avg, num_upload)
  return Payload(means, counts, obs, obs_counts)


# ---------------------------------------------------------------------------
# The config


@dataclasses.dataclass(frozen=True)
class RepShareConfig(MethodConfig, EpochSettings):
  """Representation sharing and its baselines (one config for the four methods).

  Local training is Adam with the settings of ``neural.training.EpochSettings``.

  Attributes:
    method: "repshare", "repshare-fd", "repshare-fedavg" or "repshare-independent".
    backbone: the client model's backbone (``make_client_model``).
    width: width setting of the backbone (``None``: its default).
    feature_dim: d', the dimension of the shared representations.
    epochs: local epochs per round (1 in the paper).
    batch_size: local mini-batch (32, from the thesis's code; not in the text).
    weight_decay: L2 coefficient added to the gradient (none in the paper).
    lambda_kd: lambda_KD, the weight of L_KD, the distance of the features to the
      global class representations (10, Sec. 4).
    lambda_disc: lambda_disc, the weight of L_disc, the contrastive loss against the
      downloaded observations (1, Sec. 4).
    kd_reduction: "sum" (the paper's squared norm, Eq. 7) or "mean" over the d'
      coordinates in L_KD (PyTorch's ``MSELoss`` in the thesis's code).
    disc_reduction: "sum" over the C classes in L_disc (Algorithm 2) or "mean"
      (``BCELoss`` over all (sample, class) pairs in the thesis's code).
    n_avg: points per observation (10).
    num_upload: M_up, the observation sets (per-class means over ``n_avg`` random
      local points) each client uploads per round (1).
    num_download: M_down, the observation sets of other clients each client
      downloads per round, at most (N - 1) M_up (1).
    init_scale: scale of the relay's random first-round representations.
    initial_targets: what round 0 trains against: "random" (Algorithm 1: the
      relay's random initialisation; FD: no teacher) or "models" (the thesis's
      code: the class means of the untrained models' features, or logits for FD,
      relayed as after a round).
    lambda_fd: FD's distillation weight.
    fd_loss: FD's distillation loss: "ce" (cross-entropy to the softmax of the
      teacher logits, Jeong et al.) or "mse" (squared error on the logits, mean over
      the C classes: the thesis's code, with its lambda_KD).
    fd_include_self: FD's teacher of a class is the mean over all clients' points,
      the client's own included (the thesis's code), instead of over the other
      clients only (Jeong et al.).
    eps: clipping of the discriminator scores.
  """

  method: str = "repshare"
  backbone: str = "lenet5"
  width: int | None = None
  feature_dim: int = 84
  epochs: int = 1             # EpochSettings' fields, with this method's defaults
  batch_size: int = 32
  weight_decay: float = 0.0
  lambda_kd: float = 10.0
  lambda_disc: float = 1.0
  kd_reduction: str = "sum"
  disc_reduction: str = "sum"
  n_avg: int = 10
  num_upload: int = 1
  num_download: int = 1
  init_scale: float = 1.0
  initial_targets: str = "random"
  lambda_fd: float = 1.0
  fd_loss: str = "ce"
  fd_include_self: bool = False
  eps: float = 1e-6
  # One client holding all the data is the thesis's centralised baseline (CL).
  min_agents: ClassVar[int] = 1

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    self.need(self.method in METHODS, "method", f"one of {', '.join(METHODS)}")
    self.need(self.backbone in BACKBONES, "backbone", f"one of {', '.join(BACKBONES)}")
    self.need(self.width is None or self.width >= 1, "width", "None or an integer >= 1")
    self.need(self.feature_dim >= 1, "feature_dim", "an integer >= 1")
    self.need(self.lambda_kd >= 0, "lambda_kd", "a number >= 0")
    self.need(self.lambda_disc >= 0, "lambda_disc", "a number >= 0")
    self.need(self.kd_reduction in REDUCTIONS, "kd_reduction", f"one of {REDUCTIONS}")
    self.need(self.disc_reduction in REDUCTIONS, "disc_reduction", f"one of {REDUCTIONS}")
    self.need(self.n_avg >= 1, "n_avg", "an integer >= 1")
    self.need(self.num_upload >= 1, "num_upload", "an integer >= 1")
    if self.method == "repshare":   # the baselines download nothing (independent: any agents)
      self.need(self.agents >= 2, "agents",
                "an integer >= 2 for 'repshare' (a client learns from another's observations; "
                "the centralised baseline is 'repshare-independent' with agents = 1)")
      self.need(1 <= self.num_download <= (self.agents - 1) * self.num_upload, "num_download",
                f"an integer in 1..(agents - 1) num_upload = "
                f"{(self.agents - 1) * self.num_upload}")
    self.need(self.init_scale >= 0, "init_scale", "a number >= 0")
    self.need(self.initial_targets in INITIAL_TARGETS, "initial_targets",
              f"one of {INITIAL_TARGETS}")
    self.need(self.lambda_fd >= 0, "lambda_fd", "a number >= 0")
    self.need(self.fd_loss in FD_LOSSES, "fd_loss", f"one of {FD_LOSSES}")
    self.need(0 < self.eps < 0.5, "eps", "a number in (0, 0.5)")


@dataclasses.dataclass(frozen=True)
class _Loss:
  """The static local objective: which terms and their weights."""

  kind: str                # "repshare" or "fd"
  lambda_kd: float = 0.0
  lambda_disc: float = 0.0
  kd_reduction: str = "sum"
  disc_reduction: str = "sum"
  lambda_fd: float = 0.0
  fd_loss: str = "ce"
  eps: float = 1e-6


def _loss_of(config: RepShareConfig) -> _Loss:
  if config.method == "repshare":
    return _Loss("repshare", config.lambda_kd, config.lambda_disc, config.kd_reduction,
                 config.disc_reduction, eps=config.eps)
  # FD, and FedAvg / IL as FD without a teacher (every download flagged invalid, so
  # the loss is cross-entropy alone): one compiled program serves the three.
  return _Loss("fd", lambda_fd=config.lambda_fd, fd_loss=config.fd_loss)


def local_loss(model: FeatureClassifier, loss: _Loss, params: Any, x: Array, labels: Array,
               weights: Array, download: Download, key: Array) -> Array:
  """The mini-batch objective of LOCALUPDATE (Eq. 6; Algorithm 2), a scalar.

  ``sum_i w_i [l_CE + lambda_KD l_KD + lambda_disc l_disc] / sum_i w_i`` for
  "repshare" (one of the M_down teacher sets drawn per sample), ``l_CE +
  lambda_FD l_FD`` for "fd". Terms whose teacher is missing (``download.valid``
  False) are dropped, so FD without any teacher (FedAvg, IL) is ``l_CE`` alone.
  """
  s, z = cast(tuple[Array, Array],
              model.apply({"params": params}, x, method=FeatureClassifier.features_logits))
  z = z.astype(jnp.float32)
  total = -jnp.take_along_axis(jax.nn.log_softmax(z, -1), labels[:, None], axis=1)[:, 0]
  if loss.kind == "repshare":
    kd = feature_matching_loss(s, labels, download.means, loss.kd_reduction)
    total = total + loss.lambda_kd * jnp.where(download.valid[labels], kd, 0.0)
    t_logits = cast(Array, model.apply({"params": params}, download.observations,
                                       method=FeatureClassifier.classify))  # (M_down, C, C)
    m = jax.random.randint(key, labels.shape, 0, t_logits.shape[0])
    disc = contrastive_loss(z, t_logits[m], labels, download.observation_valid[m], loss.eps)
    if loss.disc_reduction == "mean":
      disc = disc / z.shape[1]
    total = total + loss.lambda_disc * disc
  elif loss.kind == "fd":
    fd = distillation_loss(z, download.means[labels], loss.fd_loss)
    total = total + loss.lambda_fd * jnp.where(download.valid[labels], fd, 0.0)
  return jnp.sum(weights * total) / jnp.maximum(jnp.sum(weights), 1.0)


@dataclasses.dataclass(frozen=True)
class _LocalLoss:
  """:func:`local_loss` as ``neural.training.train_loop`` calls it (``batch.context``: the
  download)."""

  model: FeatureClassifier
  loss: _Loss

  def __call__(self, params, batch):
    return local_loss(self.model, self.loss, params, batch.data["x"], batch.data["y"],
                      batch.weights, batch.context, batch.key)


def _update_all(params, opt_state, x, labels, mask, downloads, keys, *, model, loss,
                config: RepShareConfig):
  """LOCALUPDATE of every client: ``epochs`` shuffled passes of mini-batch Adam."""
  out = train_loop(_LocalLoss(model, loss), params, {"x": x, "y": labels},
                   optimizer=config, key=keys,
                   schedule=Schedule(config.batch_size, epochs=config.epochs), mask=mask,
                   context=downloads, opt_state=opt_state, stacked=True,
                   loop=Loop(config.step_loop, config.agent_batching))
  return out.params, out.opt_state


def _chunked(fn, x, chunk: int):
  """``fn`` over the leading axis of ``x`` in chunks (``x.shape[0]`` divisible by chunk)."""
  n = x.shape[0]
  out = jax.lax.map(fn, x.reshape(n // chunk, chunk, *x.shape[1:]))
  return jax.tree_util.tree_map(lambda a: a.reshape(n, *a.shape[2:]), out)


@functools.partial(jax.jit, static_argnames=("model", "chunk", "num_classes", "n_avg",
                                             "num_upload", "share"))
def _payload_all(params, x, labels, mask, keys, *, model, chunk, num_classes, n_avg, num_upload,
                 share):
  def one(p, xa, la, ma, k):
    s, z = _chunked(lambda xb: model.apply({"params": p}, xb,
                                           method=FeatureClassifier.features_logits), xa, chunk)
    values = (s if share == "features" else z).astype(jnp.float32)
    return client_payload(values, la, ma, k, num_classes=num_classes, n_avg=n_avg,
                          num_upload=num_upload)
  return jax.vmap(one)(params, x, labels, mask, keys)


@functools.partial(jax.jit, static_argnames=("model",))
def _proba_all(params, x, *, model):
  return jax.vmap(lambda p: jax.nn.softmax(model.apply({"params": p}, x).astype(jnp.float32)))(
      params)


def predict_all(model: FeatureClassifier, params: Any, x: np.ndarray, chunk: int = 512
                ) -> np.ndarray:
  """Class probabilities of every client on ``x``: (N, n, C), in padded chunks."""
  x = np.asarray(x, np.float32)
  n = x.shape[0]
  size = min(chunk, max(16, 1 << (n - 1).bit_length()))
  pad = -(-n // size) * size - n
  x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), np.float32)])
  parts = [np.asarray(_proba_all(params, x[i:i + size], model=model))
           for i in range(0, x.shape[0], size)]
  return np.concatenate(parts, axis=1)[:, :n]


# ---------------------------------------------------------------------------
# The method plug-in


class RepShareData(NamedTuple):
  """Padded, stacked client data: x (N, n, H, W, C), labels (N, n), mask (N, n)."""

  x: np.ndarray
  labels: np.ndarray
  mask: np.ndarray
  sizes: tuple[int, ...]
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int


class RepShareState(NamedTuple):
  """State between rounds.

  Attributes:
    params: the clients' parameters, stacked (N, ...).
    opt_state: their Adam states, stacked (kept across rounds, as the thesis's code).
    downloads: the :class:`Download` each client uses next round (stacked), or
      ``None`` for FedAvg and independent learning.
  """

  params: Any
  opt_state: Any
  downloads: Any


def _eval_chunk(n: int, batch_size: int) -> int:
  nb = n // batch_size
  return batch_size * max(k for k in range(1, 9) if nb % k == 0)


def load_data(config: RepShareConfig) -> RepShareData:
  """The config's split (``neural.load_run_data``) padded to one shape per client."""
  data = load_run_data(config)
  sizes = tuple(len(lab) for lab in data.labels)
  n = -(-max(sizes) // config.batch_size) * config.batch_size
  x = np.stack([np.concatenate([xa, np.zeros((n - len(xa), *xa.shape[1:]), np.float32)])
                for xa in data.xs])
  labels = np.stack([np.concatenate([la, np.zeros(n - len(la), la.dtype)])
                     for la in data.labels]).astype(np.int32)
  mask = np.arange(n)[None, :] < np.asarray(sizes)[:, None]
  return RepShareData(x, labels, mask, sizes, data.x_test, data.y_test, data.num_classes)


def _model_of(config: RepShareConfig, num_classes: int) -> FeatureClassifier:
  return make_client_model(config.backbone, num_classes, config.feature_dim, config.width)


def init(config: RepShareConfig, data: RepShareData) -> RepShareState:
  """Round-0 state: each client's initial weights and optimiser state, and the first class means."""
  model = _model_of(config, data.num_classes)
  key = jax.random.PRNGKey(config.init_seed)
  k_model = jax.random.fold_in(key, 10**6)
  rng = np.random.default_rng([config.init_seed, 10**6])
  n = len(data.sizes)
  x0 = jnp.zeros((1, *data.x.shape[2:]), jnp.float32)
  keys = jax.random.split(k_model, n)
  if config.method == "repshare-fedavg":     # one initial global model
    keys = jnp.stack([k_model] * n)
  params, opt_state = _init_all(keys, x0, model=model, settings=config)
  downloads = None
  if config.method in ("repshare", "repshare-fd") and config.initial_targets == "models":
    k_up, k_relay = jax.random.split(jax.random.fold_in(key, 10**6 + 1))
    _, downloads = _share(config, data, model, params, k_up, k_relay)
  elif config.method == "repshare":
    downloads = initial_download(rng, n, data.num_classes, config.feature_dim,
                                 config.num_download, config.init_scale)
  elif config.method == "repshare-fd":
    downloads = initial_download(rng, n, data.num_classes, data.num_classes, 0,
                                 0.0, valid=False)
  return RepShareState(params, opt_state, downloads)


@functools.partial(jax.jit, static_argnames=("model",))
def _init_one(key, x0, *, model):
  return model.init(key, x0)["params"]


def _init_all(keys, x0, *, model, settings):
  """Stacked parameters and Adam states (one compiled init, whatever the number of clients)."""
  params = [_init_one(k, x0, model=model) for k in keys]
  params = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *params)
  return params, jax.jit(jax.vmap(make_optimizer(settings).init))(params)


def _no_teacher(n: int, c: int) -> Download:
  """FD-shaped downloads flagged invalid: FedAvg's and IL's local loss is CE alone."""
  return Download(np.zeros((n, c, c), np.float32), np.zeros((n, c), bool),
                  np.zeros((n, 0, c, c), np.float32), np.zeros((n, 0, c), bool))


def _share(config: RepShareConfig, data: RepShareData, model: FeatureClassifier, params,
           k_up: Array, k_relay: Array) -> tuple[Payload, Download]:
  """Every client's upload from ``params`` and the relay's answer (the representation methods)."""
  n = len(data.sizes)
  fd = config.method == "repshare-fd"
  payloads = _payload_all(params, data.x, data.labels, data.mask, jax.random.split(k_up, n),
                          model=model, chunk=_eval_chunk(data.x.shape[1], config.batch_size),
                          num_classes=data.num_classes, n_avg=config.n_avg,
                          num_upload=0 if fd else config.num_upload,
                          share="logits" if fd else "features")
  downloads = relay(payloads, k_relay, num_download=0 if fd else config.num_download,
                    exclude_self=fd and not config.fd_include_self)
  return payloads, downloads


def step(config: RepShareConfig, data: RepShareData, state: RepShareState, t: int):
  """Round t (Algorithm 1): local updates, uploads, relay (or averaging), evaluation."""
  model = _model_of(config, data.num_classes)
  n, c = len(data.sizes), data.num_classes
  k_train, k_up, k_relay = jax.random.split(round_rng(config.init_seed, t), 3)
  downloads = state.downloads if state.downloads is not None else _no_teacher(n, c)
  params, opt_state = _update_all(state.params, state.opt_state, data.x, data.labels,
                                  data.mask, downloads, jax.random.split(k_train, n),
                                  model=model, loss=_loss_of(config), config=config)
  up = down = 0
  new_downloads = None
  if config.method in ("repshare", "repshare-fd"):
    payloads, new_downloads = _share(config, data, model, params, k_up, k_relay)
    # initial_targets "models": round 0 also counts the upload of the untrained models' means
    first = t == 0 and config.initial_targets == "models"
    up = tree_size(payloads) // n * (2 if first else 1)
    no_teacher = config.method == "repshare-fd" and t == 0 and not first
    down = 0 if no_teacher else tree_size(state.downloads) // n
  elif config.method == "repshare-fedavg":
    mean = average(params, np.asarray(data.sizes) / sum(data.sizes))
    params = jax.tree.map(lambda m, p: jnp.broadcast_to(m[None], p.shape),
                          mean, params)   # handed back to every client
    up = down = tree_size(params) // n
  probs = predict_all(model, params, data.x_test)
  rows = [{"agent": a, "model": config.backbone, **test_scores(probs[a], data.y_test),
           "comm_floats": int(up), "comm_down_floats": int(down)} for a in range(n)]
  if config.method == "repshare" and new_downloads is not None:   # one tbar for all clients
    spread, norm = class_mean_spread(new_downloads.means[0], new_downloads.valid[0])
    for row in rows:
      row.update(class_mean_spread=spread, class_mean_norm=norm)
  return RepShareState(params, opt_state, new_downloads), rows


_DESCRIPTIONS = {
    "repshare": "Berdoz 2022: per-class mean features via a relay, CE + L_KD + L_disc",
    "repshare-fd": "federated distillation (Jeong et al.): per-class mean logits as soft targets",
    "repshare-fedavg": "FedAvg baseline of Berdoz 2022 (same client models)",
    "repshare-independent": "independent learning baseline of Berdoz 2022 (CE only)",
}

for _name in METHODS:
  register_method(Method(_name, RepShareConfig, init, step, load_data,
                         _DESCRIPTIONS[_name]))
