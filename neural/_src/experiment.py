"""Resumable neural experiments: ``train_and_evaluate(config, workdir)``.

A run loads the data, partitions it among the agents (targets: one-hot labels),
builds one learner per agent (Flax network or random forest) and runs the
protocol through ``fedkrr.iterate`` one round at a time (the protocols are
written once, in ``fedkrr``). Round t's learner of agent a gets the key
``fold_in(fold_in(PRNGKey(seed), t), a)``, so a resumed run draws the same keys
as an uninterrupted one. After every round the predictors are evaluated on the
test set and the metrics appended to ``metrics.jsonl``; then the protocol state
is checkpointed atomically. The run directory (see ``neural._src.rundir``) holds::

  config.json      the ExperimentConfig (a different config there is an error)
  metrics.jsonl    one JSON object per (round, agent), flushed as it goes
  checkpoint.npz   protocol state after the last finished round (arrays and plain data:
                   reading it never runs code)
  accuracy.png     test accuracy per round per agent (written at the end)

Metric rows (accuracy at the end of local training; no best-epoch selection):
``round`` (0-based; round 0 is local training on the labels, the paper's
"round 1"), ``agent`` (0-based int, ``"ensemble"`` for a combined predictor:
EKD's running sum, backfitting's sum; ``"server"`` for FedAvg's averaged
model), ``protocol``, ``model``, ``test_accuracy``, ``test_loss`` (the configured
loss of the predicted probabilities vs the one-hot test labels: "mse" averages
``(p_c - y_c)^2`` over classes and points, "ce" is ``-sum_c y_c log p_c`` averaged
over points with p clipped to [1e-7, 1]), and for single models ``train_accuracy``
(on the agent's own training points) and ``num_train``. EKD's per-model rows
carry ``start``: the agent its AKD run started from.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import json
import os
from pathlib import Path
from typing import Any
from typing import NamedTuple

import jax
import numpy as np

import fedkrr
from fedkrr import Protocol
from fedkrr import RoundOutput
from fedkrr._src.files import atomic_write
from neural._src.config import FOREST
from neural._src.config import KD_PROTOCOLS
from neural._src.config import ExperimentConfig
from neural._src.rundir import PLOT_FILE
from neural._src.rundir import ExperimentError
from neural._src.rundir import Run
from neural._src.rundir import open_run

SWEEP_FILE = "sweep.json"
BASELINE_PROTOCOLS = ("central", "local")


class RunData(NamedTuple):
  """The data of a run: per-agent training sets and the test set.

  Attributes:
    xs: per agent, float32 inputs (N_a, H, W, C).
    ys: per agent, float32 one-hot targets (N_a, C).
    labels: per agent, int labels (N_a,).
    x_test: float32 (n_test, H, W, C).
    y_test: int labels (n_test,).
    num_classes: C.
  """

  xs: tuple[np.ndarray, ...]
  ys: tuple[np.ndarray, ...]
  labels: tuple[np.ndarray, ...]
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int


def load_train_test(config: Any, rng: np.random.Generator | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
  """``(x_train, y_train, x_test, y_test, num_classes)`` with the config's seeded subsets.

  The training subset is drawn from ``rng`` (default ``default_rng(config.seed)``),
  the test subset from ``default_rng([config.seed, 1])``. Works for any config
  with the data fields of ``ExperimentConfig``.
  """
  from neural._src.data import load_dataset
  rng = np.random.default_rng(config.seed) if rng is None else rng
  ds = load_dataset(config.dataset, config.data_dir, seed=config.seed)
  x_train, y_train = ds.x_train, ds.y_train
  if config.train_subset is not None and config.train_subset < len(y_train):
    keep = np.sort(rng.choice(len(y_train), size=config.train_subset, replace=False))
    x_train, y_train = x_train[keep], y_train[keep]
  x_test, y_test = ds.x_test, ds.y_test
  if config.test_subset is not None and config.test_subset < len(y_test):
    keep = np.sort(np.random.default_rng([config.seed, 1]).choice(
        len(y_test), size=config.test_subset, replace=False))
    x_test, y_test = x_test[keep], y_test[keep]
  return (x_train, y_train, np.asarray(x_test, np.float32), np.asarray(y_test),
          ds.num_classes)


def split_agents(config: Any, x_train: np.ndarray, y_train: np.ndarray, num_classes: int,
                 rng: np.random.Generator) -> tuple[tuple[np.ndarray, ...], ...]:
  """``(xs, ys, labels)`` per agent by the config's partition (one-hot float32 ``ys``).

  Raises:
    ExperimentError: an agent got no training point.
  """
  from neural._src.data import one_hot
  from neural._src.partitions import partition
  parts = partition(config.partition, y_train, config.agents, rng, **config.partition_params)
  for a, idx in enumerate(parts):
    if len(idx) == 0:
      raise ExperimentError(f"partition: agent {a} got no training points "
                            f"({config.partition} {config.partition_params}); use more data "
                            f"or another partition")
  xs = tuple(np.asarray(x_train[idx], np.float32) for idx in parts)
  labels = tuple(np.asarray(y_train[idx]) for idx in parts)
  return xs, tuple(one_hot(lab, num_classes) for lab in labels), labels


def load_run_data(config: Any) -> RunData:
  """Loads, subsets and partitions the data of ``config`` (all seeded by ``config.seed``)."""
  rng = np.random.default_rng(config.seed)
  x_train, y_train, x_test, y_test, num_classes = load_train_test(config, rng)
  xs, ys, labels = split_agents(config, x_train, y_train, num_classes, rng)
  return RunData(xs, ys, labels, x_test, y_test, num_classes)


def build_learners(config: ExperimentConfig, input_shape: tuple[int, ...],
                   num_classes: int) -> list[Any]:
  """One learner per agent (Flax network or random forest), keyed by ``config.seed``."""
  from neural._src.forest import ForestLearner
  from neural._src.learners import FlaxLearner
  from neural._src.models import get_model
  from neural._src.training import TrainConfig

  train_config = TrainConfig(epochs=config.epochs, batch_size=config.batch_size,
                             learning_rate=config.learning_rate,
                             weight_decay=config.weight_decay, loss=config.loss,
                             warm_start=config.warm_start or config.protocol == "fedavg",
                             step_loop=config.step_loop, agent_batching=config.agent_batching)
  key = jax.random.PRNGKey(config.seed)
  learners = []
  for name in config.agent_models:
    if name == FOREST:
      learners.append(ForestLearner(n_estimators=config.forest_trees,
                                    max_depth=config.forest_max_depth, seed=config.seed))
    else:
      model = get_model(name, num_classes, width=config.width, tiny=config.tiny,
                        norm=config.norm)
      learners.append(FlaxLearner(model=model, input_shape=tuple(input_shape),
                                  config=train_config, key=key))
  return learners


def round_key(seed: int, t: int, a: int) -> jax.Array:
  """The key of agent ``a``'s learner in round ``t``: ``fold_in(fold_in(PRNGKey(seed), t), a)``."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), t), a)


def _with_key(learner: Any, key: jax.Array) -> Any:
  if hasattr(learner, "with_key"):
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
      models = fedkrr.fit_all(learners, [x_all] * m, [y_all] * m)
    else:
      models = fedkrr.fit_all(learners, xs, ys)
    return BaselineState(state.round + 1), RoundOutput(models, tuple(range(m)), None)

  return Protocol(name, init, step)


def make_protocol(config: ExperimentConfig, learners: Sequence[Any]) -> Protocol:
  """The protocol of ``config``: fedkrr's KD protocols, FedAvg, or a baseline."""
  if config.protocol in KD_PROTOCOLS:
    return fedkrr.get_protocol(config.protocol, config.start)
  if config.protocol == "fedavg":
    from neural._src.fedavg import check_same_architecture
    from neural._src.fedavg import fedavg
    from neural._src.training import init_variables
    check_same_architecture(learners)
    first = learners[0]
    key = jax.random.split(jax.random.PRNGKey(config.seed))[1]
    return fedavg(init_variables(first.model, key, first.input_shape))
  return _baseline(config.protocol)


def total_rounds(config: ExperimentConfig) -> int:
  """Rounds a run does: ``config.rounds``, or 1 for the baselines central and local."""
  return 1 if config.protocol in BASELINE_PROTOCOLS else config.rounds


# ---------------------------------------------------------------------------
# Metrics


def scores(probs: np.ndarray, labels: np.ndarray, targets: np.ndarray,
           loss: str) -> tuple[float, float]:
  """``(accuracy, loss)`` of predictions ``probs`` (n, C) against int labels and one-hot targets."""
  probs = np.asarray(probs, dtype=np.float64)
  accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
  if loss == "mse":
    value = float(np.mean((probs - targets) ** 2))
  else:
    value = float(-np.mean(np.sum(targets * np.log(np.clip(probs, 1e-7, 1.0)), axis=1)))
  return accuracy, value


class _Evaluator:
  """Turns a round's output into metric rows; keeps EKD's running test predictions."""

  def __init__(self, config: ExperimentConfig, data: RunData, running: np.ndarray | None):
    from neural._src.data import one_hot
    self.config = config
    self.data = data
    self.test_targets = one_hot(data.y_test, data.num_classes)
    self.running = running

  def _row(self, t, agent, probs, model_name, **extra):
    acc, loss = scores(probs, self.data.y_test, self.test_targets, self.config.loss)
    return {"round": t, "agent": agent, "protocol": self.config.protocol, "model": model_name,
            "test_accuracy": acc, "test_loss": loss, **extra}

  def _model_row(self, t, agent, model, probs, **extra):
    train = np.asarray(model.predict(self.data.xs[agent]))
    train_acc = float(np.mean(np.argmax(train, axis=1) == self.data.labels[agent]))
    return self._row(t, agent, probs, self.config.agent_models[agent],
                     train_accuracy=train_acc, num_train=int(len(self.data.labels[agent])),
                     **extra)

  def rows(self, t: int, state: Any, out: RoundOutput) -> list[dict[str, Any]]:
    x_test = self.data.x_test
    preds = [np.asarray(m.predict(x_test), dtype=np.float32) for m in out.models]
    rows = []
    if out.weights is None or (len(out.models) == 1 and not out.cumulative):
      for model, agent, probs in zip(out.models, out.agents, preds):
        rows.append(self._model_row(t, int(agent), model, probs))
    else:
      combined = sum(np.float32(w) * p for w, p in zip(out.weights, preds))
      if out.cumulative:
        self.running = combined if self.running is None else self.running + combined
        combined = self.running
      rows.append(self._row(t, "ensemble", combined, "+".join(sorted(set(
          self.config.agent_models)))))
      if self.config.protocol == "ekd":
        m = self.config.agents
        for model, agent, probs in zip(out.models, out.agents, preds):
          rows.append(self._model_row(t, int(agent), model, probs, start=(agent - t) % m))
    if self.config.protocol == "fedavg":
      probs = np.asarray(state.model.predict(x_test), dtype=np.float32)
      rows.append(self._row(t, "server", probs, self.config.agent_models[0]))
    return rows


# ---------------------------------------------------------------------------
# Progress: counts the fits of a round without changing how they are grouped


@dataclasses.dataclass(frozen=True)
class _Counted:
  learner: Any
  bar: Any

  @property
  def batch_key(self):
    key = getattr(self.learner, "batch_key", None)
    return None if key is None else (type(self.learner), key)

  def fit(self, x, targets):
    model = self.learner.fit(x, targets)
    self.bar.update(1)
    return model

  @classmethod
  def fit_batch(cls, wrapped, xs, targets):
    models = type(wrapped[0].learner).fit_batch([w.learner for w in wrapped], xs, targets)
    wrapped[0].bar.update(len(wrapped))
    return models

  def with_init(self, init):
    return _Counted(self.learner.with_init(init), self.bar)

  def __getattr__(self, name):   # model, input_shape, config (FedAvg's checks)
    return getattr(self.learner, name)


# ---------------------------------------------------------------------------
# The run


def train_and_evaluate(config: ExperimentConfig, workdir: str | os.PathLike, *,
                       progress: bool = False, max_rounds: int | None = None,
                       on_round_end: Callable[[int], None] | None = None
                       ) -> list[dict[str, Any]]:
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

  Returns:
    All metric rows of the run so far (as in ``metrics.jsonl``).

  Raises:
    ExperimentError: a different config in ``workdir``, or data the protocol
      cannot use. ``ConfigError``, ``DataError``, ``PartitionError``: bad settings.
  """
  rounds = total_rounds(config)
  with open_run(workdir, config, from_dict=ExperimentConfig.from_dict, rounds=rounds,
                load_data=lambda: load_run_data(config)) as run:
    if run.done < rounds:
      _run_rounds(config, run, rounds, progress, max_rounds, on_round_end)
    if run.done >= rounds:
      _plot(run.workdir, config, run.rows)
    return list(run.rows)


def _run_rounds(config: ExperimentConfig, run: Run, rounds: int, progress: bool,
                max_rounds: int | None, on_round_end: Callable[[int], None] | None) -> None:
  data, checkpoint, done = run.data, run.checkpoint, run.done
  learners = build_learners(config, data.xs[0].shape[1:], data.num_classes)
  protocol = make_protocol(config, learners)
  state = None if checkpoint is None else checkpoint["state"]
  inits = [None] * config.agents if checkpoint is None else list(checkpoint["inits"])
  evaluator = _Evaluator(config, data, None if checkpoint is None else checkpoint["running"])
  fits_per_round = 1 if config.protocol == "akd" else config.agents

  from tqdm.auto import tqdm
  round_bar = tqdm(total=rounds, initial=done, desc=f"{config.protocol} rounds", unit="round",
                   disable=not progress)
  stop = rounds if max_rounds is None else min(rounds, done + max_rounds)
  try:
    for t in range(done, stop):
      fit_bar = tqdm(total=fits_per_round, desc=f"round {t} fits", unit="fit", leave=False,
                     disable=not progress)
      round_learners = []
      for a, learner in enumerate(learners):
        learner = _with_key(learner, round_key(config.seed, t, a))
        if config.warm_start and config.protocol != "fedavg" and inits[a] is not None:
          learner = learner.with_init(inits[a])
        round_learners.append(_Counted(learner, fit_bar))
      (state, out), = fedkrr.iterate(protocol, round_learners, data.xs, data.ys,
                                     rounds=t + 1, state=state)
      fit_bar.close()
      for model, agent in zip(out.models, out.agents):
        if hasattr(model, "variables"):
          inits[agent] = model.variables
      run.finish_round(t, evaluator.rows(t, state, out),
                       {"state": state, "inits": inits, "running": evaluator.running,
                        "config": config.to_dict()}, on_round_end)
      round_bar.update(1)
  finally:
    round_bar.close()


def _plot(workdir: Path, config: ExperimentConfig, rows: list[dict[str, Any]]) -> None:
  from neural._src.plots import plot_run
  plot_run(rows, workdir / PLOT_FILE,
           title=f"{config.protocol} on {config.dataset} ({config.partition}"
                 + (f", alpha={config.alpha:g}" if config.partition == "label-split" else "")
                 + f"; {','.join(config.agent_models)})")


def _run_one(config: Any, workdir: Path, **kwargs) -> list[dict[str, Any]]:
  """``train_and_evaluate`` for a KD-protocol config, ``run_method`` for a method's config."""
  if isinstance(config, ExperimentConfig):
    return train_and_evaluate(config, workdir, **kwargs)
  from neural._src.methods import run_method
  return run_method(config, workdir, **kwargs)


def run_configs(runs: Sequence[tuple[str, ExperimentConfig]], workdir: str | os.PathLike, *,
                progress: bool = False, description: str = "",
                max_rounds: int | None = None) -> dict[str, list[dict[str, Any]]]:
  """Runs (or resumes) named runs: a single unnamed run in ``workdir``, else one subdirectory each.

  With several runs, ``workdir/sweep.json`` lists them and ``workdir/accuracy.png``
  shows them side by side (one panel per value of the first grid axis).

  Returns:
    The metric rows of each run, by name.
  """
  workdir = Path(workdir)
  if len(runs) == 1 and runs[0][0] == "":
    return {"": _run_one(runs[0][1], workdir, progress=progress, max_rounds=max_rounds)}
  workdir.mkdir(parents=True, exist_ok=True)
  names = [name for name, _ in runs]
  sweep = {"description": description, "runs": names}
  sweep_path = workdir / SWEEP_FILE
  if sweep_path.exists():
    saved = json.loads(sweep_path.read_text())
    if saved.get("runs") != names:
      raise ExperimentError(f"workdir: {workdir} holds a sweep of other runs "
                            f"({', '.join(saved.get('runs', [])[:3])}...); use another workdir")
  else:
    atomic_write(sweep_path, json.dumps(sweep, indent=2) + "\n")
  results = {}
  for i, (name, config) in enumerate(runs):
    if progress:
      print(f"[{i + 1}/{len(runs)}] {name}", flush=True)
    results[name] = _run_one(config, workdir / name, progress=progress, max_rounds=max_rounds)
  from neural._src.plots import plot_sweep
  plot_sweep(results, workdir / PLOT_FILE, title=description)
  return results
