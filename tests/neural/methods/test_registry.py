"""The method plug-in: typed configs, the registry, run_method (resume), config files, CLI."""

import dataclasses
import importlib
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from neural._src.cli import main
from neural._src.datasets.run_data import load_run_data
from neural._src.jobs.specs import load_spec
from neural._src.methods.registry import Method
from neural._src.methods.registry import MethodConfig
from neural._src.methods.registry import get_method
from neural._src.methods.registry import method_config_from_dict
from neural._src.methods.registry import register_method
from neural._src.methods.registry import round_rng
from neural._src.methods.registry import run_method
from neural._src.methods.registry import test_scores as scores_of
from neural._src.runtime.config import ConfigError
from neural._src.runtime.rundir import ExperimentError
from neural._src.runtime.rundir import read_metrics


@dataclasses.dataclass(frozen=True)
class CentroidConfig(MethodConfig):
  """A toy method: clients share noisy class means; each predicts by nearest mean."""

  method: str = "toy-centroids"
  noise: float = 0.1
  weights: tuple[float, ...] | None = None

  def validate(self):
    super().validate()
    self.need(self.noise >= 0, "noise", "a number >= 0")


def _means(x, y, num_classes):
  x = x.reshape(len(x), -1)
  return np.stack([x[y == c].mean(0) if np.any(y == c) else np.zeros(x.shape[1])
                   for c in range(num_classes)])


def _init(config, data):
  return {"means": np.stack([_means(x, lab, data.num_classes)
                             for x, lab in zip(data.xs, data.labels)])}


def _step(config, data, state, t):
  noise = config.noise * np.asarray(jax.random.normal(round_rng(config.seed, t),
                                                      state["means"].shape))
  shared = state["means"] + noise                 # what each client sends
  means = 0.5 * state["means"] + 0.5 * shared.mean(0, keepdims=True)
  means = means.astype(state["means"].dtype)      # a state keeps init's dtypes (checkpoints)
  x_test = data.x_test.reshape(len(data.x_test), -1)
  rows = []
  for a, m in enumerate(means):
    d = ((x_test[:, None, :] - m[None, :, :]) ** 2).sum(-1)
    probs = np.exp(-(d - d.min(1, keepdims=True)))
    probs = probs / probs.sum(1, keepdims=True)
    rows.append({"agent": a, "model": "centroids", **scores_of(probs, data.y_test),
                 "comm_floats": int(m.size)})
  return {"means": means}, rows


register_method(Method("toy-centroids", CentroidConfig, _init, _step,
                       description="test-only toy method"))
TINY = dict(method="toy-centroids", dataset="digits", train_subset=150, test_subset=50,
            agents=3, rounds=3)


class Interrupt(Exception):
  pass


def _interrupt_at_round_1(t):
  if t == 1:
    raise Interrupt


def test_config_fields_are_typed_and_checked():
  config = method_config_from_dict({**TINY, "noise": 1, "weights": [1, 2]})
  assert isinstance(config, CentroidConfig)
  assert config.noise == 1.0 and isinstance(config.noise, float)
  assert config.weights == (1.0, 2.0)
  assert CentroidConfig.from_json(config.to_json()) == config
  with pytest.raises(ConfigError, match="noise: expected a number >= 0"):
    config.replace(noise=-1.0)
  with pytest.raises(ConfigError, match="noise: expected a number, got 'x'"):
    config.replace(noise="x")
  with pytest.raises(ConfigError, match="rounds: expected an integer, got 1.5"):
    config.replace(rounds=1.5)
  with pytest.raises(ConfigError, match="epochs: not a field of the 'toy-centroids' config"):
    method_config_from_dict({**TINY, "epochs": 3})
  with pytest.raises(ConfigError, match="method: expected one of .*toy-centroids"):
    method_config_from_dict({**TINY, "method": "nope"})
  assert get_method("toy-centroids").config_cls is CentroidConfig


def test_default_data_is_the_kd_protocols_split():
  config = CentroidConfig(**TINY)
  data = get_method("toy-centroids").load_data or load_run_data
  ours, theirs = data(config), load_run_data(config)
  for a in range(3):
    np.testing.assert_array_equal(ours.xs[a], theirs.xs[a])
  assert sum(len(lab) for lab in ours.labels) == 150 and len(ours.y_test) == 50


def test_interrupted_run_resumes_to_the_same_metrics(tmp_path):
  config = CentroidConfig(**TINY)
  full = run_method(config, tmp_path / "full")
  assert [(r["round"], r["agent"]) for r in full] == [(t, a) for t in range(3) for a in range(3)]
  assert all(r["method"] == "toy-centroids" and r["comm_floats"] == 640 for r in full)

  def interrupt(t):
    if t == 1:
      raise Interrupt

  with pytest.raises(Interrupt):
    run_method(config, tmp_path / "cut", on_round_end=interrupt)
  assert max(r["round"] for r in read_metrics(tmp_path / "cut")) == 1
  assert run_method(config, tmp_path / "cut") == full
  assert (tmp_path / "cut" / "accuracy.png").exists()
  with pytest.raises(ExperimentError, match="different config"):
    run_method(config.replace(noise=0.5), tmp_path / "cut")
  assert run_method(config.replace(noise=0.5, seed=1), tmp_path / "other") != full


def test_config_file_sweep_and_cli(tmp_path, capsys):
  path = tmp_path / "toy.json"
  path.write_text(json.dumps({"description": "toy sweep", "base": TINY,
                              "grid": [{"noise": [0.0, 1.0]}]}))
  runs = load_spec(path).expand()
  assert [name for name, _ in runs] == ["noise=0.0", "noise=1.0"]
  assert all(isinstance(c, CentroidConfig) for _, c in runs)
  code = main(["run", "--config", str(path), "--workdir", str(tmp_path / "w"), "--rounds", "1",
               "--set", "weights=[0.5, 0.5]", "--no-progress"])
  assert code == 0
  saved = json.loads((tmp_path / "w" / "noise=1.0" / "config.json").read_text())
  assert saved["weights"] == [0.5, 0.5] and saved["rounds"] == 1
  assert "noise=1.0: round 0: test accuracy" in capsys.readouterr().out
  code = main(["run", "--config", str(path), "--workdir", str(tmp_path / "x"),
               "--set", "noise"])
  assert code == 2 and "--set: expected FIELD=VALUE" in capsys.readouterr().err


def test_the_worked_example_of_docs_architecture_runs_and_resumes(tmp_path, monkeypatch):
  """The method added in docs/architecture.md registers, runs, checkpoints and resumes."""
  text = (Path(__file__).resolve().parents[3] / "docs" / "architecture.md").read_text()
  code = text.split("```python\n", 1)[1].split("```", 1)[0]
  (tmp_path / "consensus_example.py").write_text(code)
  monkeypatch.syspath_prepend(str(tmp_path))
  example = importlib.import_module("consensus_example")
  assert get_method("consensus").config_cls is example.ConsensusConfig
  config = example.ConsensusConfig(train_subset=240, test_subset=60, public_points=60,
                                   agents=2, rounds=2)
  killed = tmp_path / "killed"
  with pytest.raises(Interrupt):
    run_method(config, killed, on_round_end=_interrupt_at_round_1)
  rows = run_method(config, killed)                   # resumes round 1 from the checkpoint
  assert rows == run_method(config, tmp_path / "whole")
  assert [(r["round"], r["agent"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
  assert all(r["comm_floats"] == 600 for r in rows)   # 60 public points x 10 classes
