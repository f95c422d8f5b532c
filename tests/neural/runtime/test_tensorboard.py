"""A run's TensorBoard event file holds its metrics.jsonl, round by round, resumed or not."""

import dataclasses
import json

import numpy as np
import pytest

from neural._src.cli import main
from neural._src.kd.experiment import train_and_evaluate
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import run_method
from neural._src.methods.registry import test_scores as scores_of
from neural._src.runtime import tensorboard
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.tensorboard import EVENTS_FILE
from neural._src.runtime.tensorboard import read_events
from neural._src.runtime.tensorboard import scalars
from neural._src.runtime.tensorboard import write_events

tensorboardX = pytest.importorskip("tensorboardX")


@dataclasses.dataclass(frozen=True)
class TickConfig(MethodConfig):
  """A test-only method: predicts class (t mod C) for every point in round t."""

  method: str = "test-tensorboard"


def _init(config, data):
  return {"count": np.zeros((), np.int32)}


def _step(config, data, state, t):
  probs = np.eye(data.num_classes)[np.full(len(data.y_test), t % data.num_classes)]
  return {"count": state["count"] + 1}, [{"agent": a, "model": "tick",
                                          **scores_of(probs, data.y_test)} for a in (0, 1)]


register_method(Method("test-tensorboard", TickConfig, _init, _step, description="test-only"))


def _metrics(workdir):
  return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def _as_float32(found):
  return [(tag, step, float(np.float32(value))) for tag, step, value in found]


def _events_match_metrics(workdir):
  found, _, whole = read_events(workdir / EVENTS_FILE)
  assert whole
  assert found == _as_float32(scalars(_metrics(workdir)))
  assert len(set((tag, step) for tag, step, _ in found)) == len(found)   # no duplicates
  return found


def test_the_reader_reads_what_tensorboardX_writes(tmp_path):
  """The file format is TensorBoard's: tensorboardX's own writer's file reads back."""
  writer = tensorboardX.SummaryWriter(str(tmp_path))
  for step in range(3):
    writer.add_scalar("test_accuracy/agent_0", 0.25 * step, step)
  writer.close()
  (path,) = tmp_path.glob("events.out.tfevents.*")
  found, times, whole = read_events(path)
  assert whole and len(times) == 3
  assert found == [("test_accuracy/agent_0", s, 0.25 * s) for s in range(3)]


def test_scalars_are_every_number_of_a_row_but_its_round_and_agent():
  rows = [{"round": 2, "agent": "ensemble", "protocol": "ekd", "test_accuracy": 0.75,
           "ok": True, "epoch_test_accuracy": [0.1, 0.2]},
          {"round": 2, "agent": 0, "test_loss": 1.5, "num_train": 10}]
  assert scalars(rows) == [("test_accuracy/ensemble", 2, 0.75), ("test_loss/agent_0", 2, 1.5),
                           ("num_train/agent_0", 2, 10.0)]


def test_a_kd_run_writes_its_metrics_as_events(tmp_path):
  config = ExperimentConfig(dataset="digits", train_subset=90, test_subset=30, models=("mlp",),
                            tiny=True, epochs=1, batch_size=32, rounds=2, protocol="avgkd",
                            tensorboard=True)
  rows = train_and_evaluate(config, tmp_path / "run")
  found = _events_match_metrics(tmp_path / "run")
  assert {step for _, step, _ in found} == {0, 1} and rows == _metrics(tmp_path / "run")
  assert "test_accuracy/agent_0" in {tag for tag, _, _ in found}


def test_a_resumed_run_continues_its_curves_without_duplicates(tmp_path):
  config = TickConfig(dataset="digits", train_subset=90, test_subset=30, agents=2, rounds=4,
                      tensorboard=True)
  run_method(config, tmp_path / "run", max_rounds=1)
  first = (tmp_path / "run" / EVENTS_FILE).read_bytes()
  assert {step for _, step, _ in _events_match_metrics(tmp_path / "run")} == {0}
  run_method(config, tmp_path / "run", max_rounds=2)
  run_method(config, tmp_path / "run")
  found = _events_match_metrics(tmp_path / "run")
  assert {step for _, step, _ in found} == {0, 1, 2, 3}
  # appended, never rewritten: what a live TensorBoard read stays as it was
  assert (tmp_path / "run" / EVENTS_FILE).read_bytes().startswith(first)
  run_method(config, tmp_path / "run")   # read back: nothing written twice
  assert _events_match_metrics(tmp_path / "run") == found


def test_a_run_started_without_it_resumes_and_reads_back_with_it(tmp_path):
  """``tensorboard`` changes no number: the same run, its curves written from round 0."""
  plain = TickConfig(dataset="digits", train_subset=90, test_subset=30, agents=2, rounds=3)
  run_method(plain, tmp_path / "cut", max_rounds=1)
  run_method(plain.replace(tensorboard=True), tmp_path / "cut")
  assert {step for _, step, _ in _events_match_metrics(tmp_path / "cut")} == {0, 1, 2}
  run_method(plain, tmp_path / "done")
  run_method(plain.replace(tensorboard=True), tmp_path / "done")   # a finished run
  assert {step for _, step, _ in _events_match_metrics(tmp_path / "done")} == {0, 1, 2}


def test_a_cut_or_foreign_file_is_rewritten_from_the_rows(tmp_path):
  rows = [{"round": t, "agent": 0, "test_accuracy": 0.1 * t} for t in range(3)]
  path = write_events(tmp_path, rows[:2])
  path.write_bytes(path.read_bytes()[:-3])   # a kill in the middle of an append
  write_events(tmp_path, rows)
  assert read_events(path)[0] == _as_float32(scalars(rows)) and read_events(path)[2]
  write_events(tmp_path, rows[:1])   # rows repaired from the checkpoint: fewer
  assert read_events(path)[0] == _as_float32(scalars(rows[:1]))


def test_asking_without_the_extra_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(tensorboard.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(ConfigError, match=r"fedkrr\[tensorboard\]"):
    run_method(TickConfig(dataset="digits", train_subset=90, test_subset=30, agents=2,
                          rounds=1, tensorboard=True), tmp_path / "run")
  assert not (tmp_path / "run").exists()
  assert main(["run", "--method", "test-tensorboard", "--workdir", str(tmp_path / "cli"),
               "--tensorboard", "--no-progress"]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and 'pip install "fedkrr[tensorboard]"' in err
  assert not (tmp_path / "cli").exists()
