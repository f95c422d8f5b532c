"""Resumable neural experiments: ``train_and_evaluate(config, workdir)``.

A run loads the data, partitions it among the agents (targets: one-hot labels),
builds one learner per agent (Flax network or random forest) and runs the
protocol through ``fedkrr.protocols.iterate`` one round at a time (the protocols are
written once, in ``fedkrr``). Round t's learner of agent a gets the key
``fold_in(fold_in(PRNGKey(init_seed), t), a)``, so a resumed run draws the same keys
as an uninterrupted one. After every round the predictors are evaluated on the
test set and the metrics appended to ``metrics.jsonl``; then the protocol state
is checkpointed atomically. The round loop (resume, ``max_rounds``, the bar over
rounds, the writes and the figure) is the one every run shares,
``neural._src.runtime.rounds.run_rounds``; this module gives it the KD round. The run
directory (see ``neural._src.runtime.rundir``) holds::

  config.json      the ExperimentConfig (a different config there is an error)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  outcomes.jsonl   with ``record_outcomes``: per row, which test images were right
                   (``neural._src.runtime.outcomes``), appended with its rows
  checkpoint.npz   protocol state after the last finished round (arrays and plain data:
                   reading it never runs code)
  accuracy.png     test accuracy per round per agent (written at the end)

Metric rows (accuracy of the model at the end of local training, the one passed on):
``round`` (0-based; round 0 is local training on the labels, the paper's
"round 1"), ``agent`` (0-based int, ``"ensemble"`` for a combined predictor:
EKD's running sum, backfitting's sum; ``"server"`` for FedAvg's averaged
model), ``protocol``, ``model``, ``test_accuracy``, ``test_loss`` (the configured
loss of the predicted probabilities vs the one-hot test labels: "mse" averages
``(p_c - y_c)^2`` over classes and points, "ce" is ``-sum_c y_c log p_c`` averaged
over points with p clipped to [1e-7, 1]), and for single models ``train_accuracy``
(on the agent's own training points) and ``num_train``. EKD's per-model rows
carry ``start``: the agent its AKD run started from. With ``epoch_eval`` the rows of
networks also carry ``epoch_test_accuracy`` (the test accuracy after each local
epoch) and ``best_epoch_test_accuracy`` (its maximum: the number the paper's authors
plot); the model passed on is still the last epoch's.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import os
from typing import Any
from typing import NamedTuple
from typing import cast

import jax
from jax.sharding import Mesh
import numpy as np
from tqdm.auto import tqdm

import fedkrr
from fedkrr.learners import BatchLearner
from fedkrr.learners import has_capability
from fedkrr.protocols import Protocol
from fedkrr.protocols import RoundOutput
from neural._src.capabilities import EpochScoredModel
from neural._src.capabilities import LearnerWrapper
from neural._src.capabilities import ParameterModel
from neural._src.capabilities import ReseedableLearner
from neural._src.datasets.data import one_hot
from neural._src.datasets.run_data import RunData
from neural._src.datasets.run_data import load_run_data
from neural._src.evidence.paper_units import UNITS
from neural._src.learners.fedavg import fedavg
from neural._src.learners.fedavg import starting_variables
from neural._src.learners.forest import ForestLearner
from neural._src.learners.learners import FlaxLearner
from neural._src.models.models import get_model
from neural._src.runtime.checkpoint import ModelSlot
from neural._src.runtime.config import FOREST
from neural._src.runtime.config import KD_PROTOCOLS
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.outcomes import outcome_line
from neural._src.runtime.rounds import RoundResult
from neural._src.runtime.rounds import Step
from neural._src.runtime.rounds import run_rounds
from neural._src.training.augment import Augment
from neural._src.training.soft_targets import Teacher
from neural._src.training.soft_targets import concrete
from neural._src.training.training import TrainConfig
from neural._src.training.training import init_variables
from neural._src.training.training import right
from neural._src.training.training import scores


def build_learners(config: ExperimentConfig, input_shape: tuple[int, ...],
                   num_classes: int, eval_data: tuple[Any, Any] | None = None,
                   black: Any = None) -> list[Any]:
  """One learner per agent (Flax network or random forest), keyed by ``config.init_seed``.

  ``eval_data`` ``(x, labels)``: the networks score it after every local epoch.
  ``black``: the input value of a black pixel per channel, which ``config.augment``
  pads with (default 0).
  """
  augment = None
  if config.augment == "crop-flip":
    augment = Augment(pad=4, fill=tuple(np.atleast_1d(0.0 if black is None else black)))
  train_config = TrainConfig(**config.training_settings(), loss=config.loss,
                             warm_start=config.warm_start or config.protocol == "fedavg",
                             step_loop=config.step_loop, agent_batching=config.agent_batching,
                             augment=augment)
  key = jax.random.PRNGKey(config.init_seed)
  meshes = _architecture_meshes(config.agent_models) if config.devices == "all" else {}
  learners = []
  for name, width in zip(config.agent_models, config.agent_widths):
    if name == FOREST:
      learners.append(ForestLearner(n_estimators=config.forest_trees,
                                    max_depth=config.forest_max_depth, seed=config.init_seed))
    else:
      model = get_model(name, num_classes, width=width, tiny=config.tiny,
                        norm=config.norm)
      learners.append(FlaxLearner(model=model, input_shape=tuple(input_shape),
                                  config=train_config, key=key, eval_data=eval_data,
                                  mesh=meshes.get(name),
                                  eval_outcomes=config.record_outcomes))
  return learners


def _architecture_meshes(models: Sequence[str]) -> dict[str, Mesh]:
  """``config.devices == "all"``: per network architecture, the agent mesh of its agents.

  The protocols fit each agent at most once per ``fedkrr.learners.fit_all`` call, so the agents
  of one architecture form one batch of that size, and ``fedkrr.scale.agent_mesh`` of it
  divides it. A mesh of one device is left out (the unsharded program is the same).
  Across P processes (``jax.distributed``) an architecture whose number of agents
  is no multiple of P gets no mesh either: every process trains those agents on its
  own first device (the numbers of one device).
  """
  meshes = {}
  for name, count in collections.Counter(m for m in models if m != FOREST).items():
    if count % jax.process_count():
      continue
    mesh = fedkrr.scale.agent_mesh(count)
    if mesh.size > 1:
      meshes[name] = mesh
  return meshes


def round_key(seed: int, t: int, a: int) -> jax.Array:
  """The key of agent ``a``'s learner in round ``t``: ``fold_in(fold_in(PRNGKey(seed), t), a)``."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), t), a)


def _with_key(learner: Any, key: jax.Array) -> Any:
  if has_capability(learner, ReseedableLearner):
    return learner.with_key(key)
  seed = int(jax.random.randint(key, (), 0, 2**31 - 1))   # learners seeded by an int
  return dataclasses.replace(learner, seed=seed)


class BaselineState(NamedTuple):
  round: int


def _baseline(name: str) -> Protocol:
  """"central": each agent's learner on the pooled data; "local": each on its own data."""

  def init(ys):
    return BaselineState(0)

  def step(state, learners, xs, ys):
    m = len(xs)
    if name == "central":
      x_all, y_all = np.concatenate(xs), np.concatenate(ys)
      models = fedkrr.learners.fit_all(learners, [x_all] * m, [y_all] * m)
    else:
      models = fedkrr.learners.fit_all(learners, xs, ys)
    return BaselineState(state.round + 1), RoundOutput(models, tuple(range(m)), None)

  return Protocol(name, init, step)


def make_protocol(config: ExperimentConfig, learners: Sequence[Any]) -> Protocol:
  """The protocol of ``config``: fedkrr's KD protocols, FedAvg, or a baseline."""
  if config.protocol in KD_PROTOCOLS:
    return fedkrr.protocols.get_protocol(config.protocol, params=config.protocol_params)
  if config.protocol == "fedavg":
    key = jax.random.split(jax.random.PRNGKey(config.init_seed))[1]
    return fedavg(starting_variables(learners, key, config.fedavg_init), config.fedavg_weights)
  return _baseline(config.protocol)


# ---------------------------------------------------------------------------
# Metrics


class _Evaluator:
  """Turns a round's output into metric rows (and, with ``record_outcomes``, their outcome
  lines: ``neural._src.runtime.outcomes``); keeps EKD's running test predictions."""

  def __init__(self, config: ExperimentConfig, data: RunData, running: np.ndarray | None):
    self.config = config
    self.data = data
    self.test_targets = one_hot(data.y_test, data.num_classes)
    self.running = running
    self.outcomes: list[dict[str, Any]] = []

  def _row(self, t, agent, probs, model_name, best=b"", **extra):
    acc, loss = scores(probs, self.data.y_test, self.test_targets, self.config.loss)
    if self.config.record_outcomes:
      self.outcomes.append(outcome_line(t, agent, right(probs, self.data.y_test), best))
    return {"round": t, "agent": agent, "protocol": self.config.protocol, "model": model_name,
            "test_accuracy": acc, "test_loss": loss, **extra}

  def _model_row(self, t, agent, model, probs, **extra):
    train = np.asarray(model.predict(self.data.xs[agent]))
    train_acc = float(np.mean(np.argmax(train, axis=1) == self.data.labels[agent]))
    epochs = tuple(model.epoch_accuracy) if has_capability(model, EpochScoredModel) else ()
    if epochs:
      extra.update(best_epoch_test_accuracy=max(epochs), epoch_test_accuracy=list(epochs))
    return self._row(t, agent, probs, self.config.agent_models[agent],
                     best=model.best_epoch_right if epochs else b"",
                     train_accuracy=train_acc, num_train=int(len(self.data.labels[agent])),
                     **extra)

  def take_outcomes(self) -> list[dict[str, Any]]:
    """The outcome lines of the rows made since the last call."""
    lines, self.outcomes = self.outcomes, []
    return lines

  def rows(self, t: int, state: Any, out: RoundOutput) -> list[dict[str, Any]]:
    x_test = self.data.x_test
    models = [concrete(m) for m in out.models]   # a Teacher's network predicts arrays
    preds = [np.asarray(m.predict(x_test), dtype=np.float32) for m in models]
    rows = []
    if out.weights is None or (len(models) == 1 and not out.cumulative):
      for model, agent, probs in zip(models, out.agents, preds):
        rows.append(self._model_row(t, int(agent), model, probs))
    else:
      combined = sum(np.float32(w) * p for w, p in zip(out.weights, preds))
      if out.cumulative:
        self.running = combined if self.running is None else self.running + combined
        combined = self.running
      rows.append(self._row(t, "ensemble", combined, "+".join(sorted(set(
          self.config.agent_models)))))
      if out.cumulative:   # EKD: each run's model too, with the agent it started from
        m = self.config.agents
        for model, agent, probs in zip(models, out.agents, preds):
          rows.append(self._model_row(t, int(agent), model, probs, start=(agent - t) % m))
    if self.config.protocol == "fedavg":
      probs = np.asarray(state.model.predict(x_test), dtype=np.float32)
      rows.append(self._row(t, "server", probs, self.config.agent_models[0]))
    return rows


# fit_group(learners, xs, targets) -> models: fits learners[k] on (xs[k], targets[k]) (one
# class, one batch_key), as their fit_batch does, perhaps together with other runs' fits.
FitGroup = Callable[[Sequence[Any], Sequence[Any], Sequence[Any]], Sequence[Any]]


# ---------------------------------------------------------------------------
# Progress: counts the fits of a round without changing how they are grouped


@dataclasses.dataclass(frozen=True)
class _Counted(LearnerWrapper):
  learner: Any
  bar: Any
  defer: bool = False   # return Teachers: targets evaluated on each (augmented) batch
  fit_group: FitGroup | None = None   # a batch of runs' shared fits (see train_and_evaluate)

  def _out(self, model):
    return Teacher(model) if self.defer else model

  def fitted_model(self, model):
    return concrete(model)

  @property
  def batch_key(self):
    key = self.learner.batch_key if has_capability(self.learner, BatchLearner) else None
    return None if key is None else (type(self.learner), key)

  def fit(self, x, targets):
    if self.fit_group is not None and self.batch_key is not None:
      model, = self.fit_group([self.learner], [x], [targets])
    else:
      model = self.learner.fit(x, targets)
    self.bar.update(1)
    return self._out(model)

  @classmethod
  def fit_batch(cls, wrapped, xs, targets):
    fit = wrapped[0].fit_group or type(wrapped[0].learner).fit_batch
    models = fit([w.learner for w in wrapped], xs, targets)
    wrapped[0].bar.update(len(wrapped))
    return tuple(wrapped[0]._out(m) for m in models)


# ---------------------------------------------------------------------------
# The run


def train_and_evaluate(config: ExperimentConfig, workdir: str | os.PathLike, *,
                       progress: bool = False, max_rounds: int | None = None,
                       on_round_end: Callable[[int], None] | None = None,
                       units: str = "paper",
                       fit_group: FitGroup | None = None) -> list[dict[str, Any]]:
  """Runs (or resumes) the experiment ``config`` in ``workdir``.

  Args:
    config: the experiment.
    workdir: the run directory (created). If it holds a run of the same config,
      the run resumes after its last checkpointed round (metric rows of later
      rounds are dropped first); a different config there is an error.
    progress: show tqdm bars over rounds and over the fits of each round.
    max_rounds: do at most this many rounds in this call (then return; a later
      call resumes).
    on_round_end: called with t after round t's metrics are written and before
      its checkpoint (tests use it to interrupt a run at the worst moment).
    units: the rounds of ``accuracy.png``: "paper" (the paper's figures: AKD rounds
      of M steps, means over agents, EKD's even sums; ``neural.evidence.paper_rounds``) or
      "steps" (every logged step and agent). The metrics are the same either way.
    fit_group: ``fit_group(learners, xs, targets) -> models`` fits every group of
      networks that one round fits together (and every single fit of a network) in
      place of their own ``fit_batch`` / ``fit``: a batch of runs
      (``neural._src.jobs.batched``) fits the groups of all its runs as one program.
      ``None``: each run fits its own.

  Returns:
    All metric rows of the run so far (as in ``metrics.jsonl``).

  Raises:
    ExperimentError: a different config in ``workdir``, or data the protocol
      cannot use. ``ConfigError``, ``DataError``, ``PartitionError``: bad settings.
  """
  if units not in UNITS:
    raise ValueError(f"units: expected one of {', '.join(UNITS)}, got {units!r}")
  return run_rounds(config, workdir, from_dict=ExperimentConfig.from_dict,
                    rounds=config.total_rounds, load_data=lambda: load_run_data(config),
                    expected=lambda data, done: expected_state(config, data, done),
                    begin=lambda data, checkpoint: _begin(config, data, checkpoint, progress,
                                                          fit_group),
                    desc=f"{config.protocol} rounds", title=_title(config), units=units,
                    progress=progress, max_rounds=max_rounds, on_round_end=on_round_end)


@dataclasses.dataclass(frozen=True)
class _StandIn(LearnerWrapper):
  """An agent's learner in a replay: a fit gives its :class:`ModelSlot` (no training)."""

  learner: Any
  slot: ModelSlot
  defer: bool
  batch_key = None   # fitted one by one

  def fit(self, x, targets):
    del x, targets
    return Teacher(self.slot) if self.defer else self.slot

  def rewrapped(self, method, argument):
    del method, argument   # the slot stands for every model the learner would fit
    return self


def _slot(learner: Any, num_classes: int) -> ModelSlot:
  """The :class:`ModelSlot` of a learner's models: its module and variables' shapes."""
  if isinstance(learner, ForestLearner):
    return ModelSlot(None, None, num_classes)
  shapes = jax.eval_shape(lambda key: init_variables(learner.model, key, learner.input_shape),
                          jax.random.PRNGKey(0))
  variables = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
  return ModelSlot(learner.model, variables, num_classes)


def expected_state(config: ExperimentConfig, data: RunData, done: int) -> dict[str, Any]:
  """What a run of ``config`` checkpoints after ``done`` rounds, built from the config.

  The protocol's own ``init`` and ``step`` replayed for ``done`` rounds with
  stand-in learners whose fits return a :class:`neural._src.runtime.checkpoint.ModelSlot`
  (each agent's module, variables of the right shapes, zero predictions): the
  state, the warm starts (``inits``) and EKD's running test predictions have the
  structure, types, shapes and dtypes of the real run's, without any training.
  A checkpoint is restored into it.
  """
  learners = build_learners(config, data.xs[0].shape[1:], data.num_classes, None, data.black)
  defer = config.augment != "none" and config.protocol in KD_PROTOCOLS
  protocol = make_protocol(config, learners)
  stand_ins = [_StandIn(learner, _slot(learner, data.num_classes), defer)
               for learner in learners]
  state, inits, running = None, [None] * config.agents, None
  if done > 0:
    replay = fedkrr.protocols.iterate(protocol, cast(Any, stand_ins), cast(Any, data.xs),
                                      cast(Any, data.ys), rounds=done)
    for state_t, out in replay:
      state = state_t
      for model, agent in zip(out.models, out.agents):
        if has_capability(model, ParameterModel):
          inits[agent] = model.variables
      if out.cumulative:
        running = np.zeros((len(data.y_test), data.num_classes), np.float32)
  return {"state": state, "inits": inits, "running": running}


def _begin(config: ExperimentConfig, data: RunData, checkpoint: dict[str, Any] | None,
           progress: bool, fit_group: FitGroup | None = None) -> Step:
  """The round step of a KD run: the learners, protocol and evaluator, resumed from
  ``checkpoint``; ``step(t)`` fits round t under a bar over its fits."""
  learners = build_learners(config, data.xs[0].shape[1:], data.num_classes,
                            (data.x_test, data.y_test) if config.epoch_eval else None,
                            data.black)
  defer = config.augment != "none" and config.protocol in KD_PROTOCOLS
  protocol = make_protocol(config, learners)
  state = None if checkpoint is None else checkpoint["state"]
  inits = [None] * config.agents if checkpoint is None else list(checkpoint["inits"])
  evaluator = _Evaluator(config, data, None if checkpoint is None else checkpoint["running"])
  fits_per_round = (1 if config.protocol in KD_PROTOCOLS
                    and fedkrr.protocol_info(config.protocol).one_fit_per_round
                    else config.agents)

  def step(t: int) -> RoundResult:
    nonlocal state
    fit_bar = tqdm(total=fits_per_round, desc=f"round {t} fits", unit="fit", leave=False,
                   disable=not progress)
    round_learners = []
    for a, learner in enumerate(learners):
      learner = _with_key(learner, round_key(config.init_seed, t, a))
      if config.warm_start and config.protocol != "fedavg" and inits[a] is not None:
        learner = learner.with_init(inits[a])
      round_learners.append(_Counted(learner, fit_bar, defer, fit_group))
    (state, out), = fedkrr.protocols.iterate(protocol, round_learners, cast(Any, data.xs),
                                             cast(Any, data.ys), rounds=t + 1, state=state)
    fit_bar.close()
    for model, agent in zip(out.models, out.agents):
      if has_capability(model, ParameterModel):
        inits[agent] = model.variables
    rows = evaluator.rows(t, state, out)
    return RoundResult(rows, {"state": state, "inits": inits, "running": evaluator.running},
                       evaluator.take_outcomes())

  return step


def _title(config: ExperimentConfig) -> str:
  return (f"{config.protocol} on {config.dataset} ({config.partition}"
          + (f", alpha={config.alpha:g}" if config.partition == "label-split" else "")
          + f"; {','.join(config.agent_models)})")
