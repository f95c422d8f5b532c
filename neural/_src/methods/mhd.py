"""Multi-headed distillation (MHD; Zhmoginov et al., 2023) over a communication graph.

Each client i trains a model ``M_i`` = backbone ``xi_i(x)`` (the embedding that
feeds the logits layer) + a main head ``h_i`` + a chain of m auxiliary heads
``h_i^{aux,1..m}``, all reading the same embedding (Sec. 3.2, Fig. 2). Its loss
(Eq. 1, 2, 4, 5), with ``h^(0) = h`` and ``h^(k) = h^{aux,k}``:

    L_i = E_{(x,y)~D_i} CE(h_i^(0)(x), y)
        + E_{x~D_*} [ nu_emb sum_{j in e_t(i)} || xi_i/|xi_i| - xi_j/|xi_j| ||^2
                      + nu_aux sum_{k=1..m} -sum_c T^(k)_c(x) log h_i,c^(k)(x) ]
    T^(k)(x) = h_{j*}^(k-1)(x),  j* = argmax_{j in e_t(i) u {i}} max_c h_{j,c}^(k-1)(x)

so the main head alone sees private labels, aux head 1 distils from the main
heads, aux head k from the heads k-1, each time from the single most confident
candidate per public example (the client's own head k-1 included). ``D_*`` is
the public unlabelled set.

As in the paper's experiments (Sec. 4.1, "Algorithm 2"), clients do not query
each other online: client i keeps a rolling pool ``P_i`` of ``N_P`` model
checkpoints; every step it draws Delta of them as its teachers ``e_t(i)`` for one
step on a fresh public batch. The pool holds ``N_P`` checkpoints from the start
(the neighbours' initial models, :func:`initial_pool_owners`), so round 0 already
has teachers and the embedding loss. A round of this module is ``S_P`` local
steps; at its end every client receives the new checkpoint of one random
neighbour in the communication graph (``neural.data.make_graph``), which replaces a
random entry of its pool. So the teachers are previous-round snapshots of
neighbours, lagging by up to a few rounds, and what is sent is one snapshot per
client and round (``comm_floats``); the prediction-exchange cost of the general
formulation (Sec. 3.2, "Communication efficiency") is reported beside it.

The reported accuracy (``test_accuracy``) is that of the last auxiliary head, the
head of Table 1 (its 54.5% at s = 100 is the last aux head of 4 in the Delta
study); the main head's is ``main_accuracy``, every head's ``head_accuracies``.

Baselines (Sec. 4, Table 1): ``"mhd-isolated"`` (each client on its private data
only, "Separate") and ``"mhd-fedavg"`` (the same local training, the parameters of
all clients averaged, weighted by their numbers of points, every ``S_P`` steps).

The data follow Sec. 3.3: a fraction ``gamma_pub`` of the training set becomes the
public set; the rest is dealt to the clients by :func:`skewed_label_split`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from typing import NamedTuple
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from neural._src.datasets.graphs import ALL_GRAPHS
from neural._src.datasets.graphs import Graph
from neural._src.datasets.graphs import hop_distances
from neural._src.datasets.graphs import make_graph
from neural._src.datasets.partitions import SKEWED_ASSIGNMENTS
from neural._src.datasets.partitions import primary_labels
from neural._src.datasets.partitions import skewed_label_split
from neural._src.datasets.run_data import load_train_test
from neural._src.learners.fedavg import average
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import test_scores
from neural._src.models.models import MODELS
from neural._src.models.models import get_model
from neural._src.settings import OptimizerChoice
from neural._src.training.optimizers import OptimizerConfig
from neural._src.training.optimizers import make_optimizer
from neural._src.training.optimizers import optimizer_config
from neural._src.training.train_loop import Loop
from neural._src.training.train_loop import Schedule
from neural._src.training.train_loop import train_loop

Array = jax.Array
ArrayLike = jax.typing.ArrayLike

MHD_METHODS = ("mhd", "mhd-isolated", "mhd-fedavg")
TARGET_CHOICES = ("confident", "random")


class MHDError(ValueError):
  """A bad argument of the multi-headed distillation pieces (named in the message)."""


# ---------------------------------------------------------------------------
# Models


class MultiHeadModel(nn.Module):
  """Backbone + main head + m auxiliary heads, all linear on one embedding (Fig. 2).

  Attributes:
    backbone: a module ``(B, ...) -> (B, D)`` embeddings, e.g. a model of
      ``neural.get_model`` built with ``num_classes=0`` (its features).
    num_classes: C, the size of every head.
    num_aux_heads: m >= 0.

  Returns (``__call__``):
    ``(embedding (B, D), logits (m + 1, B, C))``; ``logits[0]`` is the main head,
    ``logits[k]`` the auxiliary head k.
  """

  backbone: nn.Module
  num_classes: int
  num_aux_heads: int = 1

  @nn.compact
  def __call__(self, x, train: bool = False):
    embedding = self.backbone(x, train=train)
    heads = [nn.Dense(self.num_classes, name="main_head")(embedding)]
    heads += [nn.Dense(self.num_classes, name=f"aux_head_{k}")(embedding)
              for k in range(1, self.num_aux_heads + 1)]
    return embedding, jnp.stack(heads)


def mhd_model(name: str, num_classes: int, num_aux_heads: int, *, width: int | None = None,
              tiny: bool = False) -> MultiHeadModel:
  """A :class:`MultiHeadModel` on the features of ``neural.get_model(name, 0)``.

  The embedding ``xi_i(x)`` is "the embedding preceding the final logits layer"
  (Sec. 4.2.1): the model's features, which it returns when built without its
  last layer (``num_classes=0``).

  Args:
    name: a model of ``neural.MODELS`` ("cnn", "mlp", "vgg", "resnet8", "resnet18").
    num_classes: C.
    num_aux_heads: m >= 0.
    width: as in ``neural.get_model``.
    tiny: as in ``neural.get_model``.

  Raises:
    MHDError: m < 0 or C < 1; ``ModelError`` for a bad name or width.
  """
  if int(num_aux_heads) < 0:
    raise MHDError(f"num_aux_heads: expected an int >= 0, got {num_aux_heads}")
  if int(num_classes) < 1:
    raise MHDError(f"num_classes: expected an int >= 1, got {num_classes}")
  backbone = get_model(name, 0, width=width, tiny=tiny)   # features: no output layer
  return MultiHeadModel(backbone, int(num_classes), int(num_aux_heads))


# ---------------------------------------------------------------------------
# Losses and target choice (Sec. 3.2)


def confidence(probs: Array) -> Array:
  """``Lambda(h) = max_c h_c``: the top probability, shape ``probs.shape[:-1]`` (Eq. 4).

  The paper writes ``arg max_k h_k(x)``; only the maximum value makes the
  comparison of Q meaningful, so that is what is used.
  """
  return jnp.max(probs, axis=-1)


def most_confident_target(candidates: Array, valid: Array | None = None
                          ) -> tuple[Array, Array]:
  """Per example, the prediction of the most confident valid candidate (Eq. 4, Q = indicator).

  ``j*(b) = argmax_{j : valid[j]} max_c candidates[j, b, c]``; ties go to the
  lowest j (the client itself when it is candidate 0).

  Args:
    candidates: (J, B, C) probability vectors of J candidate heads on B examples.
    valid: (J,) booleans (``None``: all valid); at least one must be true.

  Returns:
    ``(targets (B, C), choice (B,) int32)`` with ``targets[b] = candidates[choice[b], b]``.
  """
  candidates = jnp.asarray(candidates)
  if candidates.ndim != 3:
    raise MHDError(f"candidates: expected shape (J, B, C), got {candidates.shape}")
  if valid is None:
    valid = jnp.ones(candidates.shape[:1], dtype=bool)
  conf = jnp.where(valid[:, None], confidence(candidates), -jnp.inf)
  choice = jnp.argmax(conf, axis=0).astype(jnp.int32)
  targets = jnp.take_along_axis(candidates, choice[None, :, None], axis=0)[0]
  return targets, choice


def random_target(candidates: Array, valid: Array | None, key: Array) -> tuple[Array, Array]:
  """The ablation of Sec. 4.2.2: a uniformly random valid candidate per example.

  Same shapes as :func:`most_confident_target`.
  """
  candidates = jnp.asarray(candidates)
  if valid is None:
    valid = jnp.ones(candidates.shape[:1], dtype=bool)
  scores = jax.random.uniform(key, candidates.shape[:2])
  choice = jnp.argmax(jnp.where(valid[:, None], scores, -1.0), axis=0).astype(jnp.int32)
  targets = jnp.take_along_axis(candidates, choice[None, :, None], axis=0)[0]
  return targets, choice


def chain_targets(own_probs: Array, teacher_probs: Array, teacher_valid: Array, *,
                  choice: str = "confident", key: Array | None = None
                  ) -> tuple[Array, Array]:
  """The targets of aux heads 1..m (Eq. 5): head k's from the heads k-1 of self and teachers.

  For k = 1..m the candidates are ``[own_probs[k-1], teacher_probs[0, k-1], ...,
  teacher_probs[D-1, k-1]]`` (candidate 0 = the client itself, always valid),
  and one is chosen per example by :func:`most_confident_target` (or
  :func:`random_target` when ``choice="random"``). Targets carry no gradient.

  Args:
    own_probs: (m + 1, B, C) the client's head probabilities (main head first).
    teacher_probs: (D, m + 1, B, C) of the D teachers on the same examples.
    teacher_valid: (D,) booleans (a teacher drawn from an empty pool slot is invalid).
    choice: "confident" or "random".
    key: PRNG key, needed for ``choice="random"``.

  Returns:
    ``(targets (m, B, C), chosen (m, B))``; ``chosen[k-1, b]`` = 0 for the client
    itself, j + 1 for teacher j.
  """
  if choice not in TARGET_CHOICES:
    raise MHDError(f"choice: expected one of {TARGET_CHOICES}, got {choice!r}")
  if own_probs.ndim != 3 or teacher_probs.ndim != 4 or teacher_probs.shape[1:] != own_probs.shape:
    raise MHDError(f"own_probs, teacher_probs: expected shapes (m+1, B, C) and (D, m+1, B, C), "
                   f"got {own_probs.shape} and {teacher_probs.shape}")
  own_probs = jax.lax.stop_gradient(own_probs)
  teacher_probs = jax.lax.stop_gradient(teacher_probs)
  valid = jnp.concatenate([jnp.ones((1,), dtype=bool), jnp.asarray(teacher_valid, dtype=bool)])
  targets, chosen = [], []
  for k in range(1, own_probs.shape[0]):
    cands = jnp.concatenate([own_probs[k - 1][None], teacher_probs[:, k - 1]])
    if choice == "confident":
      t, c = most_confident_target(cands, valid)
    else:
      if key is None:
        raise MHDError("key: needed for choice='random'")
      t, c = random_target(cands, valid, jax.random.fold_in(key, k))
    targets.append(t)
    chosen.append(c)
  num_classes = own_probs.shape[-1]
  batch = own_probs.shape[1]
  if not targets:
    return (jnp.zeros((0, batch, num_classes), own_probs.dtype),
            jnp.zeros((0, batch), jnp.int32))
  return jnp.stack(targets), jnp.stack(chosen)


def aux_chain_loss(aux_logits: Array, targets: Array) -> Array:
  """``sum_k mean_b -sum_c T^(k)_{b,c} log softmax(aux_logits[k-1])_{b,c}`` (Eq. 4, 5; no nu).

  Args:
    aux_logits: (m, B, C) logits of aux heads 1..m.
    targets: (m, B, C) from :func:`chain_targets`.
  """
  if aux_logits.shape != targets.shape:
    raise MHDError(f"aux_logits, targets: expected equal shapes, got {aux_logits.shape} and "
                   f"{targets.shape}")
  per_example = -jnp.sum(targets * jax.nn.log_softmax(aux_logits, axis=-1), axis=-1)
  return jnp.sum(jnp.mean(per_example, axis=-1))


def embedding_loss(embedding: Array, teacher_embeddings: Array,
                   teacher_valid: Array | None = None, eps: float = 1e-12) -> Array:
  """Normalised embedding distillation (Eq. 2 with ``psi^norm``; no nu_emb).

  ``mean_b sum_{j valid} rho(|| e_b/|e_b| - f_{j,b}/|f_{j,b}| ||)`` with
  ``rho(r) = r^2`` (the paper leaves rho open: any smooth increasing function).

  Args:
    embedding: (B, D) the client's embeddings ``xi_i(x)`` on public examples.
    teacher_embeddings: (J, B, D) the teachers' ``xi_j(x)`` (no gradient flows into them).
    teacher_valid: (J,) booleans, or ``None`` for all.
    eps: added to the norms' squares.
  """
  if embedding.ndim != 2 or teacher_embeddings.ndim != 3 or \
     teacher_embeddings.shape[1:] != embedding.shape:
    raise MHDError(f"embedding, teacher_embeddings: expected shapes (B, D) and (J, B, D), got "
                   f"{embedding.shape} and {teacher_embeddings.shape}")
  if teacher_valid is None:
    teacher_valid = jnp.ones(teacher_embeddings.shape[:1], dtype=bool)
  unit = lambda e: e / jnp.sqrt(jnp.sum(e * e, axis=-1, keepdims=True) + eps)
  teacher = jax.lax.stop_gradient(unit(teacher_embeddings))
  sq = jnp.sum((unit(embedding)[None] - teacher) ** 2, axis=-1)          # (J, B)
  sq = jnp.where(teacher_valid[:, None], sq, 0.0)
  return jnp.mean(jnp.sum(sq, axis=0))


# ---------------------------------------------------------------------------
# Config and data


@dataclasses.dataclass(frozen=True)
class MHDConfig(MethodConfig, OptimizerChoice):
  """Config of ``"mhd"`` and its baselines ``"mhd-isolated"``, ``"mhd-fedavg"``.

  Local training has the settings of ``neural.training.OptimizerChoice`` (SGD with momentum
  by default, the paper's), with a cosine decay over all rounds (``cosine``).

  The shared ``partition`` fields are not used: the split is Sec. 3.3's
  (``public_fraction``, ``skew``, ``label_assignment``, ...). ``agents`` is K.

  Attributes:
    model: the backbone (a ``neural.get_model`` name).
    width: width setting of the backbone (``None``: the model's default).
    tiny: tiny variants of the networks (tests, quick runs).
    aux_heads: m, the number of auxiliary heads (4 in Table 1's best runs).
    public_fraction: gamma_pub, the share of the training set made public (0.1).
    skew: s (0 or 100 in the paper).
    label_assignment: "random" (``labels_per_client`` each) or "even"
      (``clients_per_label`` each).
    labels_per_client: primary labels of each client ("random" assignment).
    clients_per_label: primary clients of each label ("even" assignment).
    graph: communication graph of ``neural.data.make_graph`` ("complete", "ring", "random",
      "directed-ring", "islands"); client i takes checkpoints of the clients that send
      to it.
    graph_degree: the degree bound of the "random" graph.
    num_islands: the number of disconnected groups of the "islands" graph.
    pool_size: N_P (``None``: K, as in the paper).
    teachers_per_step: Delta (1 in most of the paper's runs).
    steps_per_round: S_P, local steps between pool updates (200) or FedAvg averagings (u).
    batch_size: private examples per step.
    public_batch_size: public examples per step.
    cosine: the learning rate decays by a cosine over all rounds.
    nu_emb: weight of the embedding distillation loss (1 in the paper).
    nu_aux: weight of the auxiliary heads' distillation loss (3 in the paper).
    target_choice: "confident" (the method) or "random" (the ablation).
  """

  model: str = "mlp"
  width: int | None = None
  tiny: bool = True
  aux_heads: int = 2
  public_fraction: float = 0.1
  skew: float = 0.0
  label_assignment: str = "random"
  labels_per_client: int | None = None
  clients_per_label: int | None = None
  graph: str = "complete"
  graph_degree: int = 3
  num_islands: int = 2
  pool_size: int | None = None
  teachers_per_step: int = 1
  steps_per_round: int = 200
  public_batch_size: int = 64
  optimizer: str = "sgd"       # OptimizerChoice's fields, with this method's defaults
  learning_rate: float = 0.1
  momentum: float = 0.9
  weight_decay: float = 0.0
  cosine: bool = True
  nu_emb: float = 1.0
  nu_aux: float = 3.0
  target_choice: str = "confident"

  def validate(self) -> None:
    """Raises ``ConfigError`` naming the first field with a bad value and what it expects."""
    super().validate()
    self.need(self.method in MHD_METHODS, "method", f"one of {MHD_METHODS}")
    self.need(self.model in MODELS, "model", f"one of {MODELS}")
    self.need(self.width is None or self.width >= 1, "width", "None or an integer >= 1")
    self.need(self.aux_heads >= 0, "aux_heads", "an integer >= 0")
    self.need(0 < self.public_fraction < 1, "public_fraction", "a fraction in (0, 1)")
    self.need(self.skew >= 0, "skew", "a number >= 0")
    self.need(self.label_assignment in SKEWED_ASSIGNMENTS, "label_assignment",
              f"one of {SKEWED_ASSIGNMENTS}")
    if self.label_assignment == "random":
      self.need(self.labels_per_client is not None and self.labels_per_client >= 0,
                "labels_per_client", "an integer >= 0 (label_assignment 'random')")
    else:
      self.need(self.clients_per_label is not None
                and 0 <= self.clients_per_label <= self.agents, "clients_per_label",
                f"an integer in 0..{self.agents} (label_assignment 'even')")
    self.need(self.graph in ALL_GRAPHS, "graph", f"one of {ALL_GRAPHS}")
    self.need(self.graph_degree >= 1, "graph_degree", "an integer >= 1")
    self.need(1 <= self.num_islands <= self.agents, "num_islands",
              f"an integer in 1..agents ({self.agents})")
    self.need(self.pool_size is None or self.pool_size >= 1, "pool_size",
              "None or an integer >= 1")
    self.need(1 <= self.teachers_per_step <= self.pool, "teachers_per_step",
              f"an integer in 1..pool_size ({self.pool})")
    self.need(self.steps_per_round >= 1, "steps_per_round", "an integer >= 1")
    self.need(self.public_batch_size >= 1, "public_batch_size", "an integer >= 1")
    self.need(self.nu_emb >= 0, "nu_emb", "a number >= 0")
    self.need(self.nu_aux >= 0, "nu_aux", "a number >= 0")
    self.need(self.target_choice in TARGET_CHOICES, "target_choice", f"one of {TARGET_CHOICES}")

  def optimizer_settings(self) -> dict[str, Any]:
    """``neural.training.OptimizerChoice``'s, with the cosine decay over all rounds if
    ``cosine``."""
    cosine = dict(schedule="cosine", decay_steps=self.rounds * self.steps_per_round)
    return {**super().optimizer_settings(), **(cosine if self.cosine else {})}

  @property
  def distills(self) -> bool:
    """Whether the aux heads distil from the teacher pool (``mhd``; not the baselines)."""
    return self.method == "mhd"

  @property
  def pool(self) -> int:
    """The number of teachers kept per client (all agents unless ``pool_size`` is set)."""
    return self.agents if self.pool_size is None else self.pool_size


class MHDData(NamedTuple):
  """Data of an MHD run (all NumPy).

  Attributes:
    xs: (K, n_max, ...) private inputs, padded with zeros to the largest client.
    ys: (K, n_max) int labels (padding 0).
    counts: (K,) numbers of private points.
    x_public: (n_pub, ...) the public unlabelled inputs.
    x_test, y_test: the test set (its label distribution is the shared one).
    num_classes: C.
    primary: (K, C) primary-label matrix.
    label_dist: (K, C) each client's private label distribution (for beta_priv).
  """

  xs: np.ndarray
  ys: np.ndarray
  counts: np.ndarray
  x_public: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  primary: np.ndarray
  label_dist: np.ndarray


def load_data(config: MHDConfig) -> MHDData:
  """Train/test data (config subsets), the public set, and the skewed split (Sec. 3.3).

  Raises:
    MHDError: a client got no private point.
  """
  rng = np.random.default_rng(config.data_seed)
  x_train, y_train, x_test, y_test, num_classes = load_train_test(config, rng)
  order = rng.permutation(len(y_train))
  n_pub = max(1, int(round(config.public_fraction * len(y_train))))
  public, private = np.sort(order[:n_pub]), np.sort(order[n_pub:])
  primary = primary_labels(num_classes, config.agents, rng, assignment=config.label_assignment,
                           labels_per_client=config.labels_per_client,
                           clients_per_label=config.clients_per_label)
  split = skewed_label_split(y_train[private], config.agents, rng, skew=config.skew,
                             primary=primary)
  counts = np.array([len(p) for p in split.parts])
  if counts.min() == 0:
    raise MHDError(f"agents: client {int(np.argmin(counts))} got no private point; use fewer "
                   f"agents, more data or a smaller skew")
  n_max = int(counts.max())
  xs = np.zeros((config.agents, n_max, *x_train.shape[1:]), dtype=np.float32)
  ys = np.zeros((config.agents, n_max), dtype=np.int32)
  label_dist = np.zeros((config.agents, num_classes))
  for i, part in enumerate(split.parts):
    xs[i, :len(part)] = x_train[private[part]]
    ys[i, :len(part)] = y_train[private[part]]
    label_dist[i] = np.bincount(y_train[private[part]], minlength=num_classes) / len(part)
  return MHDData(xs, ys, counts, np.asarray(x_train[public], np.float32),
                 np.asarray(x_test, np.float32), np.asarray(y_test), int(num_classes),
                 primary, label_dist)


# ---------------------------------------------------------------------------
# Training


class MHDState(NamedTuple):
  """State of an MHD run (stacked over the K clients; NumPy between rounds).

  Attributes:
    params: the clients' parameters, leading axis K.
    opt_state: their optimizer states, leading axis K.
    pool_params: (K, N_P, ...) the checkpoint pools P_i (``None`` for the baselines).
    pool_owner: (K, N_P) int, which client each checkpoint is of (-1: empty slot, only
      for a client without neighbours).
    pool_round: (K, N_P) int, the round it was taken at the end of (-1: the initial
      model, or an empty slot).
  """

  params: Any
  opt_state: Any
  pool_params: Any
  pool_owner: np.ndarray
  pool_round: np.ndarray


def _model(config: MHDConfig, num_classes: int) -> MultiHeadModel:
  return mhd_model(config.model, num_classes, config.aux_heads, width=config.width,
                   tiny=config.tiny)


def _optimizer(config: MHDConfig) -> OptimizerConfig:
  """SGD with momentum (the paper's) or Adam, L2 decay, cosine decay over all rounds."""
  return optimizer_config(config)


def _pick_slots(key: Array, valid: Array, num: int) -> tuple[Array, Array]:
  """``num`` distinct random pool slots, valid ones first; and whether each is valid."""
  scores = jax.random.uniform(key, valid.shape) + valid.astype(jnp.float32)
  slots = jnp.argsort(-scores)[:num]
  return slots, valid[slots]


def _client_loss(model, config: MHDConfig, params, xp, yp, xu, teacher_emb, teacher_probs,
                 teacher_valid, key):
  """One client's loss on a private batch (xp, yp) and a public batch xu (Eq. 1)."""
  dropout_key, choice_key = jax.random.split(key)
  num_classes = model.num_classes
  if not config.distills:
    _, logits = model.apply({"params": params}, xp, train=True, rngs={"dropout": dropout_key})
    labels = jax.nn.one_hot(yp, num_classes, dtype=jnp.float32)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits[0]), axis=-1))
  nb = xp.shape[0]
  emb, logits = model.apply({"params": params}, jnp.concatenate([xp, xu]), train=True,
                            rngs={"dropout": dropout_key})
  labels = jax.nn.one_hot(yp, num_classes, dtype=jnp.float32)
  ce = -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits[0, :nb]), axis=-1))
  # The client's own candidates, like its teachers', come from the model in eval mode (no
  # dropout), so the most-confident choice compares like with like; no gradient flows there.
  _, own_logits = model.apply({"params": jax.lax.stop_gradient(params)}, xu, train=False)
  own_probs = jax.nn.softmax(own_logits, axis=-1)
  targets, _ = chain_targets(own_probs, teacher_probs, teacher_valid,
                             choice=config.target_choice, key=choice_key)
  loss = ce + config.nu_aux * aux_chain_loss(logits[1:, nb:], targets)
  return loss + config.nu_emb * embedding_loss(emb[nb:], teacher_emb, teacher_valid)


@dataclasses.dataclass(frozen=True)
class _MHDLoss:
  """One client's loss at one step, as ``neural.training.train_loop`` calls it.

  ``batch.data``: the private mini-batch ``{"x", "y"}``; ``batch.context``: the
  client's checkpoint pool ``(params (N_P, ...), valid (N_P,))``; ``batch.shared``:
  the public inputs. The step's public batch and its Delta teachers are drawn from
  ``batch.key``.
  """

  model: MultiHeadModel
  config: MHDConfig

  def __call__(self, params, batch):
    config = self.config
    pub_key, pool_key, loss_key = jax.random.split(batch.key, 3)
    xu = teacher_emb = teacher_probs = teacher_valid = None
    if config.distills:
      pool_params, pool_valid = batch.context
      x_public = batch.shared
      xu = x_public[jax.random.randint(pub_key, (config.public_batch_size,), 0,
                                       x_public.shape[0])]
      slots, teacher_valid = _pick_slots(pool_key, pool_valid, config.teachers_per_step)

      def teach(slot):
        e, lg = cast(tuple[Array, Array],
                     self.model.apply({"params": jax.tree.map(lambda a: a[slot], pool_params)},
                                      xu, train=False))
        return e, jax.nn.softmax(lg, axis=-1)

      teacher_emb, teacher_probs = jax.lax.stop_gradient(jax.vmap(teach)(slots))
    return _client_loss(self.model, config, params, batch.data["x"], batch.data["y"], xu,
                        teacher_emb, teacher_probs, teacher_valid, loss_key)


def _local_steps(config: MHDConfig, model, state: MHDState, data: MHDData, keys):
  """S_P local steps of every client (private batches drawn with replacement)."""
  # The baselines train alike: one compiled program serves both.
  local = config if config.distills else config.replace(method="mhd-isolated")
  context = (state.pool_params, jnp.asarray(state.pool_owner >= 0)) if config.distills else None
  mask = np.arange(data.xs.shape[1])[None, :] < np.asarray(data.counts)[:, None]
  out = train_loop(_MHDLoss(model, local), state.params, {"x": data.xs, "y": data.ys},
                   optimizer=_optimizer(config), key=keys,
                   schedule=Schedule(config.batch_size, steps=config.steps_per_round),
                   mask=mask, context=context,
                   shared=jnp.asarray(data.x_public), opt_state=state.opt_state, stacked=True,
                   loop=Loop(config.step_loop, config.agent_batching))
  return out.params, out.opt_state


@functools.partial(jax.jit, static_argnames=("model",))
def _heads_jit(params, x, *, model):
  def one(p):
    return jax.nn.softmax(model.apply({"params": p}, x, train=False)[1], axis=-1)
  return jax.vmap(one)(params)


def head_probabilities(model: MultiHeadModel, params: Any, x: ArrayLike,
                       batch_size: int = 512) -> np.ndarray:
  """Softmax of every head of every client, shape (K, m + 1, n, C), in chunks of x."""
  x = np.asarray(x, dtype=np.float32)
  n = x.shape[0]
  out = []
  for start in range(0, n, batch_size):
    chunk = x[start:start + batch_size]
    pad = batch_size - chunk.shape[0] if n > batch_size else 0
    chunk = np.concatenate([chunk, np.zeros((pad, *x.shape[1:]), np.float32)])
    out.append(np.asarray(_heads_jit(params, chunk, model=model))[:, :, :chunk.shape[0] - pad])
  return np.concatenate(out, axis=2)


def private_accuracy(probs: np.ndarray, y_test: np.ndarray, label_dist: np.ndarray) -> float:
  """beta_priv: per-class test accuracy weighted by a client's label distribution (Sec. 4.2.1).

  ``sum_c p_i(c) acc_c`` = the accuracy on the test set re-sampled to the
  client's private label distribution (classes absent from the test set count 0).
  """
  correct = np.argmax(probs, axis=-1) == y_test
  num_classes = label_dist.shape[0]
  hits = np.bincount(y_test, weights=correct, minlength=num_classes)
  totals = np.bincount(y_test, minlength=num_classes)
  per_class = np.where(totals > 0, hits / np.maximum(totals, 1), 0.0)
  return float(np.sum(label_dist * per_class))


def _num_floats(tree: Any) -> int:
  return int(sum(np.size(leaf) for leaf in jax.tree.leaves(tree)))


def _to_numpy(tree: Any) -> Any:
  return jax.tree.map(np.asarray, jax.device_get(tree))


def teacher_adjacency(config: MHDConfig) -> np.ndarray:
  """(K, K) booleans: ``T[i, j]`` iff client i may take checkpoints of client j (e_t(i)).

  The graph comes from ``neural.data.make_graph`` (``config.graph``, the random one
  seeded by ``config.data_seed``). There ``A[j, i]`` means j sends to i, so ``T = A^T``.
  """
  return np.array(_graph(config).adjacency, dtype=bool).T


def _graph(config: MHDConfig) -> Graph:
  rng = np.random.default_rng([config.data_seed, 2])
  return make_graph(config.graph, config.agents, degree=config.graph_degree, rng=rng,
                    num_islands=config.num_islands)


def teacher_hops(config: MHDConfig) -> np.ndarray:
  """(K, K) ints: ``H[i, j]`` = hops from client j to client i along teacher edges.

  1 for a direct teacher, 2 for a teacher's teacher (the paper's "Cycle-2"), 0 on
  the diagonal, -1 where j's knowledge cannot reach i (another island). It is
  ``neural.data.hop_distances`` of the graph, transposed like :func:`teacher_adjacency`.
  """
  return hop_distances(_graph(config)).T


def initial_pool_owners(teachers: np.ndarray, pool_size: int) -> np.ndarray:
  """(K, N_P) ints: whose initial model fills each slot of each pool before round 0.

  Slot s of client i holds its s-th neighbour, cycling: ``neighbours_i[s mod d_i]``
  with ``neighbours_i = {j != i : teachers[i, j]}`` in increasing order, so every
  neighbour is in the pool when ``N_P >= d_i`` (N_P = K > d_i in the paper's runs).
  The paper's pool holds N_P checkpoints at every step, a new one "replacing another
  random checkpoint" (Sec. 4.1); the first contents are not in its text, and the
  neighbours' initial models are the checkpoints a client has before any training.
  A client without neighbours gets -1 (empty) slots: it never has a teacher.

  Args:
    teachers: (K, K) booleans from :func:`teacher_adjacency`.
    pool_size: N_P >= 1.
  """
  teachers = np.asarray(teachers, dtype=bool)
  num_clients = teachers.shape[0]
  owners = -np.ones((num_clients, int(pool_size)), dtype=np.int64)
  for i in range(num_clients):
    neighbours = np.flatnonzero(teachers[i] & (np.arange(num_clients) != i))
    if neighbours.size:
      owners[i] = neighbours[np.arange(pool_size) % neighbours.size]
  return owners


@functools.partial(jax.jit, static_argnames=("model",))
def _init_jit(key, x0, *, model):
  return model.init({"params": key}, x0, train=False)["params"]


def init(config: MHDConfig, data: MHDData) -> MHDState:
  """Fresh clients (each its own init key); pools of the neighbours' initial models.

  The pools are filled by :func:`initial_pool_owners`, so round 0 distils from
  (untrained) neighbours and has the embedding term, like every later round.
  """
  model = _model(config, data.num_classes)
  keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(config.init_seed), 10**6),
                          config.agents)
  x0 = jnp.zeros((1, *data.xs.shape[2:]), jnp.float32)
  if config.method == "mhd-fedavg":   # one initialisation for all, as FedAvg starts
    keys = jnp.broadcast_to(keys[:1], keys.shape)
  # One client at a time through one compiled init (a vmapped init compiles slowly).
  params = [_init_jit(k, x0, model=model) for k in keys]
  params = jax.tree.map(lambda *leaves: jnp.stack(leaves), *params)
  opt_one = make_optimizer(_optimizer(config)).init(jax.tree.map(lambda a: a[0], params))
  opt_state = jax.tree.map(lambda a: jnp.broadcast_to(a, (config.agents, *jnp.shape(a))),
                           opt_one)
  pool = None
  owners = -np.ones((config.agents, config.pool), dtype=np.int64)
  if config.distills:
    owners = initial_pool_owners(teacher_adjacency(config), config.pool)
    take = np.maximum(owners, 0)    # an empty slot (-1) holds a copy it never uses
    pool = jax.tree.map(lambda a: np.asarray(a)[take], params)
  return MHDState(_to_numpy(params), _to_numpy(opt_state), _to_numpy(pool), owners,
                  -np.ones_like(owners))


def update_pools(pool_params: Any, pool_owner: np.ndarray, pool_round: np.ndarray, params: Any,
                 adjacency: np.ndarray, t: int, rng: np.random.Generator):
  """End of round t: each client gets the snapshot of one random neighbour (Sec. 4.1).

  Client i draws j uniformly from ``{j : adjacency[i, j], j != i}`` and puts
  ``params[j]`` into an empty slot of ``P_i`` if there is one, else over a
  uniformly random slot (the pools of :func:`init` are full: always the latter).
  Clients without neighbours get nothing.

  Returns:
    ``(pool_params, pool_owner, pool_round, sources)`` (new arrays; ``sources[i]``
    = j, or -1).
  """
  pool_params = jax.tree.map(np.array, pool_params)
  pool_owner, pool_round = pool_owner.copy(), pool_round.copy()
  num_clients = pool_owner.shape[0]
  sources = -np.ones(num_clients, dtype=np.int64)
  for i in range(num_clients):
    neighbours = np.flatnonzero(adjacency[i] & (np.arange(num_clients) != i))
    if neighbours.size == 0:
      continue
    j = int(rng.choice(neighbours))
    empty = np.flatnonzero(pool_owner[i] < 0)
    slot = int(empty[0]) if empty.size else int(rng.integers(pool_owner.shape[1]))
    for dst, src in zip(jax.tree.leaves(pool_params), jax.tree.leaves(params)):
      dst[i, slot] = src[j]
    pool_owner[i, slot], pool_round[i, slot] = j, t
    sources[i] = j
  return pool_params, pool_owner, pool_round, sources


def step(config: MHDConfig, data: MHDData, state: MHDState, t: int
             ) -> tuple[MHDState, list[dict[str, Any]]]:
  """Round t: S_P local steps per client, then the pool update (or FedAvg), then metrics."""
  model = _model(config, data.num_classes)
  keys = jax.random.split(round_rng(config.init_seed, t), config.agents)
  params, opt_state = _local_steps(config, model, state, data, keys)
  params = _to_numpy(params)
  n_params = _num_floats(jax.tree.map(lambda a: a[0], params))
  comm = np.zeros(config.agents, dtype=np.int64)
  pool_params, pool_owner, pool_round = state.pool_params, state.pool_owner, state.pool_round
  if config.method == "mhd-fedavg":
    w = data.counts / np.sum(data.counts)
    params = jax.tree.map(lambda m, a: np.broadcast_to(np.asarray(m)[None], a.shape).copy(),
                          average(params, w), params)
    comm[:] = 2 * n_params            # upload the local model, download the average
  elif config.distills:
    rng = np.random.default_rng([config.init_seed, 3, t])
    pool_params, pool_owner, pool_round, sources = update_pools(
        pool_params, pool_owner, pool_round, params, teacher_adjacency(config), t, rng)
    for i, j in enumerate(sources):   # j sends its snapshot, i receives it
      if j >= 0:
        comm[i] += n_params
        comm[j] += n_params
  state = MHDState(params, _to_numpy(opt_state), pool_params, pool_owner, pool_round)
  return state, _rows(config, data, model, params, comm)


def prediction_floats(config: MHDConfig, embedding_dim: int, num_classes: int) -> int:
  """Floats a client would receive per round if teachers sent predictions instead (Sec. 3.2).

  Per step and teacher: the heads 0..m-1 on the public batch (m C numbers per
  example), plus the embedding (D) when ``nu_emb > 0``: ``S_P Delta B_pub (m C + D)``.
  """
  if not config.distills:
    return 0
  per_example = config.aux_heads * num_classes + (embedding_dim if config.nu_emb > 0 else 0)
  return config.steps_per_round * config.teachers_per_step * config.public_batch_size * \
      per_example


def reported_head(config: MHDConfig) -> int:
  """The head whose accuracy is a run's ``test_accuracy``: the last aux head of ``mhd``.

  Table 1 reports one head per method; its MHD number at s = 100 (54.5%) is the
  last aux head of 4 in the Delta study (Sec. 4.2.2), and the last head is the one
  that gathers the others' knowledge. The baselines never train their aux heads,
  nor does ``mhd`` with ``nu_aux = 0`` (embedding distillation only): their main
  head (0) is reported, as is a run with no aux head.
  """
  return config.aux_heads if config.distills and config.nu_aux > 0 else 0


def _rows(config, data, model, params, comm) -> list[dict[str, Any]]:
  probs = head_probabilities(model, params, data.x_test)         # (K, m+1, n, C)
  emb_dim = int(jax.eval_shape(lambda p: model.apply({"params": p}, data.x_test[:1])[0],
                               jax.tree.map(lambda a: a[0], params)).shape[-1])
  pred = prediction_floats(config, emb_dim, data.num_classes)
  report = reported_head(config)
  hops = teacher_hops(config) if config.distills else None
  rows = []
  for i in range(config.agents):
    heads = [float(np.mean(np.argmax(p, -1) == data.y_test)) for p in probs[i]]
    peers = [[private_accuracy(p, data.y_test, dist) for dist in data.label_dist]
             for p in probs[i]]
    main = test_scores(probs[i, 0], data.y_test)
    row = {"agent": i, "model": config.model, **test_scores(probs[i, report], data.y_test),
           "reported_head": report,
           "main_accuracy": main["test_accuracy"], "main_loss": main["test_loss"],
           "head_accuracies": heads, "private_accuracies": [p[i] for p in peers],
           "peer_accuracies": peers,
           "peer_hops": None if hops is None else hops[i].tolist(),
           "best_aux_accuracy": max(heads[1:]) if config.distills and len(heads) > 1 else None,
           "comm_floats": int(comm[i]), "prediction_floats": pred}
    rows.append(row)
  return rows


for _name, _text in (
    ("mhd", "multi-headed distillation through checkpoint pools (Zhmoginov et al., 2023)"),
    ("mhd-isolated", "MHD's baseline: each client on its private data only"),
    ("mhd-fedavg", "MHD's baseline: parameter averaging of all clients every S_P steps")):
  register_method(Method(_name, MHDConfig, init, step, load_data, _text))
