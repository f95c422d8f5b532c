"""run_rounds: the one round loop of every run, the KD protocols' and the methods'."""

import ast
import contextlib
import dataclasses
from pathlib import Path

import numpy as np

from neural._src.kd.experiment import train_and_evaluate
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import register_method
from neural._src.methods.registry import run_method
from neural._src.methods.registry import test_scores as scores_of
from neural._src.runtime import rounds
from neural._src.runtime.config import ExperimentConfig

SRC = Path(rounds.__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class CountConfig(MethodConfig):
  """A test-only method: predicts class (t mod C) for every point in round t."""

  method: str = "test-count"


def _init(config, data):
  return {"count": np.zeros((), np.int32)}


def _step(config, data, state, t):
  probs = np.eye(data.num_classes)[np.full(len(data.y_test), t % data.num_classes)]
  return {"count": state["count"] + 1}, [{"agent": 0, "model": "count",
                                          **scores_of(probs, data.y_test)}]


register_method(Method("test-count", CountConfig, _init, _step, description="test-only"))


def test_only_the_round_loop_opens_runs_and_writes_rounds():
  """No module but rounds.py opens a run directory, writes a round or draws a run."""
  callers = {}
  for path in sorted(SRC.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("open_run", "finish_round", "plot_run"):
          callers.setdefault(name, set()).add(path.relative_to(SRC).as_posix())
  assert callers == {name: {"rounds.py"} for name in ("open_run", "finish_round", "plot_run")}


def test_kd_runs_and_method_runs_resume_through_the_one_round_loop(tmp_path, monkeypatch):
  """Both runners open their run in rounds.run_rounds, which resumes them after the
  checkpointed round; a run cut by max_rounds ends with an uninterrupted run's rows."""
  opened = []
  real_open_run = rounds.open_run

  @contextlib.contextmanager
  def spy(workdir, config, **kwargs):
    with real_open_run(workdir, config, **kwargs) as run:
      opened.append((type(config).__name__, run.done))
      yield run

  monkeypatch.setattr(rounds, "open_run", spy)
  kd = ExperimentConfig(dataset="digits", train_subset=90, test_subset=30, models=("mlp",),
                        tiny=True, epochs=1, batch_size=32, rounds=2, protocol="avgkd")
  method = CountConfig(dataset="digits", train_subset=90, test_subset=30, agents=2, rounds=2)
  for name, config, run in (("kd", kd, train_and_evaluate), ("method", method, run_method)):
    full = run(config, tmp_path / f"{name}-full")
    first = run(config, tmp_path / f"{name}-cut", max_rounds=1)
    assert {r["round"] for r in first} == {0}
    assert run(config, tmp_path / f"{name}-cut", max_rounds=1) == full
  assert opened == [("ExperimentConfig", 0)] * 2 + [("ExperimentConfig", 1)] \
      + [("CountConfig", 0)] * 2 + [("CountConfig", 1)]
