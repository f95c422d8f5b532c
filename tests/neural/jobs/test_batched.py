"""Runs batched into one program (neural._src.jobs.batched): each run's numbers are those of
the run alone, a batch stops and resumes run by run, and what batches together."""

import dataclasses
import json
import signal
import subprocess
import sys
import threading

import jax
import numpy as np
import processes  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import neural
from neural._src.cli import reproduce_parser
from neural._src.cli import run_parser
from neural._src.jobs import batched
from neural._src.jobs.batched import AUTO_BATCH_CPU
from neural._src.jobs.batched import AUTO_BATCH_GPU
from neural._src.jobs.batched import batch_groups
from neural._src.jobs.batched import batch_size
from neural._src.jobs.batched import run_batch
from neural._src.jobs.runs import run_one
from neural._src.jobs.workers import run_in_batches
from neural._src.learners.learners import FlaxLearner
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import ExperimentError

# A tiny sweep: two seeds x two Alphas of one protocol (Fig. 6's axes), networks of both
# kinds: the MLP's batched agents are vmapped; the CNN's run one after another on a CPU
# (train_loop's agent_batching "auto"), inside the same stacked fit.
BASE = dict(dataset="digits", train_subset=120, test_subset=60, agents=2, tiny=True, epochs=1,
            batch_size=32, rounds=2, partition="label-split", epoch_eval=True)
SWEEP = [(0, 0.0), (0, 0.5), (1, 0.0), (1, 0.5)]


def _configs(protocol, model):
  return [ExperimentConfig(**BASE, models=(model,), protocol=protocol, seed=seed, alpha=alpha)
          for seed, alpha in SWEEP]


def _same(batched, alone):
  """Equal rows up to float32 rounding: a vmapped program sums in another order than a run
  alone, and a last-digit difference can flip a prediction near a tie, so an accuracy may
  differ by one point (1/60 of the test set, 1/num_train of an agent's training set) and
  a loss by a relative 1e-5."""
  assert len(batched) == len(alone)
  for b, a in zip(batched, alone, strict=True):
    assert b.keys() == a.keys()
    for key, value in a.items():
      if "accuracy" in key:
        points = a["num_train"] if key == "train_accuracy" else BASE["test_subset"]
        np.testing.assert_allclose(b[key], value, rtol=0, atol=1 / points + 1e-9, err_msg=key)
      elif isinstance(value, float):
        np.testing.assert_allclose(b[key], value, rtol=1e-5, err_msg=key)
      else:
        assert b[key] == value, key


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
  """The rows of each run of the sweeps alone (the reference), by (protocol, model)."""
  root = tmp_path_factory.mktemp("alone")
  return {(protocol, model): [run_one(c, root / f"{protocol}-{model}-{i}")
                              for i, c in enumerate(_configs(protocol, model))]
          for protocol, model in (("avgkd", "mlp"), ("akd", "cnn"))}


@pytest.mark.parametrize("protocol,model,fits", [("avgkd", "mlp", 2), ("akd", "cnn", 1)])
def test_batched_runs_equal_the_runs_alone(tmp_path, alone, protocol, model, fits,
                                           monkeypatch):
  """Every round's fits of the four runs (each its own data, split, keys and test set) are
  one program; each run's rows are those of the run alone."""
  configs = _configs(protocol, model)
  items = [(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)]
  fit_batch, sizes = FlaxLearner.fit_batch.__func__, []

  def spy(cls, learners, xs, targets):
    sizes.append(len(learners))
    return fit_batch(cls, learners, xs, targets)

  monkeypatch.setattr(FlaxLearner, "fit_batch", classmethod(spy))
  rows = run_batch(items)
  assert sizes == [fits * len(configs)] * BASE["rounds"]
  for i, (got, want) in enumerate(zip(rows, alone[protocol, model], strict=True)):
    _same(got, want)
    on_disk = [json.loads(line) for line in (tmp_path / f"run{i}" / "metrics.jsonl")
               .read_text().splitlines()]
    assert on_disk == got   # each run its own directory: metrics, checkpoint, figure
    assert (tmp_path / f"run{i}" / "checkpoint.npz").exists()
    assert (tmp_path / f"run{i}" / "accuracy.png").exists()


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_runs_of_other_learning_rates_and_weight_decays_batch_to_their_own_numbers(
    tmp_path, model, monkeypatch):
  """Learning rates and weight decays are data of the one program (per agent under vmap,
  per agent one after another for a CPU's convolutions); a decay of 0 (no term at all)
  fits in a program of its own."""
  fit_batch, rates = FlaxLearner.fit_batch.__func__, []

  def spy(cls, learners, xs, targets):
    rates.append(sorted({learner.config.learning_rate for learner in learners}))
    return fit_batch(cls, learners, xs, targets)
  base = ExperimentConfig(**{**BASE, "rounds": 1}, models=(model,), protocol="avgkd", alpha=0.5)
  configs = [dataclasses.replace(base, learning_rate=lr, weight_decay=wd)
             for lr, wd in ((1e-3, 0.0), (1e-2, 0.0), (1e-3, 3e-4), (1e-2, 1e-2))]
  want = [run_one(c, tmp_path / f"alone{i}") for i, c in enumerate(configs)]
  assert len({rows[0]["test_loss"] for rows in want}) == len(configs)   # the rates matter
  monkeypatch.setattr(FlaxLearner, "fit_batch", classmethod(spy))
  got = run_batch([(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)])
  assert rates == [[1e-3, 1e-2], [1e-3, 1e-2]]   # two programs: decay 0, decay > 0
  for rows, reference in zip(got, want, strict=True):
    _same(rows, reference)


def test_a_batch_of_one_is_the_run_alone(tmp_path, alone):
  config = _configs("avgkd", "mlp")[0]
  assert run_batch([("only", config, tmp_path / "only")]) == [alone["avgkd", "mlp"][0]]


def test_a_resumed_batch_goes_on_from_each_runs_own_round(tmp_path, alone):
  """Run 0 finished, run 1 at round 1 of 2, runs 2 and 3 not begun: one batch ends them all
  with the numbers of the runs alone (the finished one read back as it is)."""
  configs = _configs("avgkd", "mlp")
  paths = [tmp_path / f"run{i}" for i in range(len(configs))]
  run_one(configs[0], paths[0])
  run_one(configs[1], paths[1], max_rounds=1)
  finished = (paths[0] / "metrics.jsonl").read_bytes()
  rows = run_batch([(f"run{i}", c, p) for i, (c, p) in enumerate(zip(configs, paths))])
  assert (paths[0] / "metrics.jsonl").read_bytes() == finished
  for got, want in zip(rows, alone["avgkd", "mlp"], strict=True):
    _same(got, want)


def test_a_batch_with_max_rounds_stops_each_run_there(tmp_path, alone):
  configs = _configs("avgkd", "mlp")[:2]
  items = [(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)]
  first = run_batch(items, max_rounds=1)
  assert [{r["round"] for r in rows} for rows in first] == [{0}, {0}]
  for got, want in zip(run_batch(items), alone["avgkd", "mlp"][:2], strict=True):
    _same(got, want)


# The batch of the sweep in a real process, ended by SIGTERM at the worst moment: inside a
# run's commit, after its round's metrics were appended and before its checkpoint.
KILLED = """
import os, signal, sys
from pathlib import Path
from fedkrr.io import signals_exit
from neural._src.jobs.batched import run_batch
from neural._src.runtime import rundir
from neural._src.runtime.config import ExperimentConfig

root = Path(sys.argv[1])
configs = [ExperimentConfig.from_dict(c) for c in __import__("json").loads(sys.argv[2])]
append = rundir.append_metrics

def append_then_signal(workdir, rows):
  append(workdir, rows)
  if Path(workdir).name == "run1" and rows[0]["round"] == 1:
    os.kill(os.getpid(), signal.SIGTERM)   # the commit is finished first, then the exit

rundir.append_metrics = append_then_signal
with signals_exit("neural"):
  run_batch([(f"run{i}", c, root / f"run{i}") for i, c in enumerate(configs)])
"""


def test_a_batch_killed_inside_a_commit_resumes_to_the_same_numbers(tmp_path, alone):
  configs = _configs("avgkd", "mlp")
  done = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path),
                         json.dumps([c.to_dict() for c in configs])],
                        capture_output=True, text=True, env=_env(), timeout=240)
  assert done.returncode == 128 + signal.SIGTERM, done.stderr[-800:]
  assert "Traceback" not in done.stderr
  assert processes.leftovers(tmp_path) == []
  for i in range(len(configs)):   # whole rounds only, the killed round's commit included
    metrics = tmp_path / f"run{i}" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] \
        if metrics.exists() else []
    assert len(rows) % 2 == 0 and all(r["round"] < len(rows) // 2 for r in rows)
  assert len((tmp_path / "run1" / "metrics.jsonl").read_text().splitlines()) == 4
  rows = run_batch([(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)])
  for got, want in zip(rows, alone["avgkd", "mlp"], strict=True):
    _same(got, want)


def test_ctrl_c_in_a_library_call_stops_every_run_whole_and_the_batch_resumes(
    tmp_path, alone, monkeypatch):
  """KeyboardInterrupt (no signal handler installed) in the main thread while it fits round
  1's groups: it is raised after every run's thread has stopped, rows of whole rounds only."""
  configs = _configs("avgkd", "mlp")
  items = [(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)]
  fit, calls = batched._Gather._fit, []

  def interrupted(self, requests):
    calls.append(len(requests))
    if len(calls) == 2:
      raise KeyboardInterrupt
    fit(self, requests)

  monkeypatch.setattr(batched._Gather, "_fit", interrupted)
  with pytest.raises(KeyboardInterrupt):
    run_batch(items)
  assert not [t for t in threading.enumerate() if t.name.startswith("run ")]   # all joined
  for _, _, path in items:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 0]   # round 0 committed, round 1 not begun
  monkeypatch.undo()
  for got, want in zip(run_batch(items), alone["avgkd", "mlp"], strict=True):
    _same(got, want)


def test_an_error_in_one_run_stops_the_batch_and_names_the_run(tmp_path):
  configs = _configs("avgkd", "mlp")[:3]
  other = dataclasses.replace(configs[1], epochs=2)
  run_one(other, tmp_path / "run1", max_rounds=1)   # run1's directory holds another run
  with pytest.raises(ExperimentError, match=r"^run1: "):
    run_batch([(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)])


def test_batch_groups_share_protocol_and_shapes_and_differ_in_seeds_alpha_and_rates():
  a = ExperimentConfig(**BASE, models=("mlp",), protocol="avgkd", seed=0, alpha=0.0)
  configs = [a, dataclasses.replace(a, seed=1, alpha=0.5),              # 0, 1: one group
             dataclasses.replace(a, protocol="pkd"),                     # 2: another protocol
             dataclasses.replace(a, data_seed=7, init_seed=9),           # 3: with 0
             dataclasses.replace(a, models=("cnn",)),                    # 4: another model
             dataclasses.replace(a, epochs=2),                           # 5: other steps
             dataclasses.replace(a, learning_rate=0.01, weight_decay=0.1),   # 6: with 0
             dataclasses.replace(a, train_subset=100)]                   # 7: other data
  assert batch_groups(configs, 8) == [[0, 1, 3, 6], [2], [4], [5], [7]]
  assert batch_groups(configs, 3) == [[0, 1, 3], [6], [2], [4], [5], [7]]
  assert batch_groups(configs, 1) == [[i] for i in (0, 1, 3, 6, 2, 4, 5, 7)]
  with pytest.raises(neural.ConfigError, match="size: expected an integer >= 1"):
    batch_groups(configs, 0)


def test_batch_flag_takes_counts_and_auto_and_refuses_the_rest(capsys):
  for parser, args in ((run_parser, ["--workdir", "w"]),
                       (reproduce_parser, ["--figure", "6", "--workdir", "w"])):
    assert parser().parse_args([*args, "--batch", "auto"]).batch == "auto"
    assert parser().parse_args([*args, "--batch", "4"]).batch == 4
    assert parser().parse_args(args).batch == 1
    for bad in ("0", "many", "-2"):
      with pytest.raises(SystemExit):
        parser().parse_args([*args, "--batch", bad])
      err = capsys.readouterr().err.strip().splitlines()
      assert "argument --batch: expected an integer" in err[-1]
  assert batch_size("auto", lambda: True) == AUTO_BATCH_GPU
  assert batch_size("auto", lambda: False) == AUTO_BATCH_CPU
  with pytest.raises(neural.ConfigError, match=r"^batch: expected an integer >= 1 or 'auto', "
                                               r"got 0$"):
    neural.reproduce(6, "unused", batch=0)


def _env():
  """The command lines' environment, in this process's precision (the references' own)."""
  return processes.env() | {"JAX_ENABLE_X64": "1" if jax.config.read("jax_enable_x64") else "0"}


def _by_config(alone):
  return {(c.seed, c.alpha): rows for c, rows in zip(_configs("avgkd", "mlp"),
                                                     alone["avgkd", "mlp"], strict=True)}


def test_neural_run_runs_a_grid_in_batches(tmp_path, alone):
  """``neural run --config GRID --batch 4``: the sweep's four runs as one batch in this
  process, each in its directory with the rows of the run alone."""
  grid = {"description": "tiny", "base": {**BASE, "models": ["mlp"], "protocol": "avgkd"},
          "grid": [{"seed": [0, 1]}, {"alpha": [0.0, 0.5]}]}
  path = tmp_path / "grid.json"
  path.write_text(json.dumps(grid))
  out = subprocess.run([sys.executable, "-m", "neural", "run", "--config", str(path),
                        "--workdir", str(tmp_path / "sweep"), "--batch", "4", "--no-progress"],
                       capture_output=True, text=True, env=_env(), timeout=240)
  assert out.returncode == 0, out.stderr[-800:]
  names = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["runs"]
  assert len(names) == 4 and (tmp_path / "sweep" / "accuracy.png").exists()
  for name in names:
    config = json.loads((tmp_path / "sweep" / name / "config.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "sweep" / name / "metrics.jsonl")
            .read_text().splitlines()]
    _same(rows, _by_config(alone)[config["seed"], config["alpha"]])


def test_worker_processes_take_whole_batches(tmp_path, alone):
  """``--jobs 2 --batch 2``: two workers, each a batch of two runs (a task of ``runs``)."""
  configs = _configs("avgkd", "mlp")
  tasks = [(f"run{i}", c, tmp_path / f"run{i}") for i, c in enumerate(configs)]
  rows = run_in_batches(tasks, 2, jobs=2)
  for got, want in zip(rows, alone["avgkd", "mlp"], strict=True):
    _same(got, want)
