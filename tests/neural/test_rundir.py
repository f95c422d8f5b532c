"""Run directories safe to share: checkpoints that never run code, the lock, metrics repair,
nothing created by a failed start, and the one-line errors of corrupt files."""

import json
import os
import pickle
import sys

import filelock
import jax
import numpy as np
import pytest

import fedkrr
import neural
from neural._src.checkpoint import CheckpointError
from neural._src.checkpoint import ModelSlot
from neural._src.checkpoint import Node
from neural._src.checkpoint import load_checkpoint
from neural._src.checkpoint import read_checkpoint
from neural._src.checkpoint import restore
from neural._src.checkpoint import save_checkpoint
from neural._src.cli import main
from neural._src.config import ExperimentConfig
from neural._src.experiment import train_and_evaluate
from neural._src.learners import FlaxModel
from neural._src.rundir import CHECKPOINT_FILE
from neural._src.rundir import LOCK_FILE
from neural._src.rundir import METRICS_FILE
from neural._src.rundir import read_metrics

TINY = dict(dataset="digits", train_subset=120, test_subset=60, models=("mlp",), tiny=True,
            epochs=1, batch_size=32, rounds=2, protocol="avgkd")
FLAGS = ["--dataset", "digits", "--train-subset", "100", "--test-subset", "40", "--agents", "2",
         "--models", "mlp", "--tiny", "--protocol", "avgkd", "--rounds", "2", "--epochs", "1",
         "--batch-size", "32", "--no-progress"]


class Exploit:
  """A pickle whose loading would run a command (here: create a file)."""

  def __init__(self, target):
    self.target = target

  def __reduce__(self):
    return (os.system, (f"touch {self.target}",))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("run")
  rows = train_and_evaluate(ExperimentConfig(**TINY), workdir)
  return workdir, rows


def _tree():
  model = neural.get_model("vgg", 3, tiny=True)
  variables = neural.init_variables(model, jax.random.PRNGKey(0), (8, 8, 1))
  x = np.random.default_rng(0).random((10, 8, 8, 1)).astype(np.float32)
  targets = np.eye(3, dtype=np.float32)[np.arange(10) % 3]
  forest = neural.ForestLearner(n_estimators=2).fit(x, targets)
  tx = neural.make_optimizer(neural.OptimizerConfig("adam", schedule="cosine", decay_steps=4))
  state = fedkrr.get_protocol("ekd").init([np.ones((2, 3)), np.zeros((2, 3))])
  tree = {"round": 2, "state": state, "models": (FlaxModel(model, variables), forest, None),
          "opt": tx.init(variables["params"]), "by_int": {3: np.float32(1.5)}}
  return tree, x


def _slots(tree):
  """The tree's target: models as slots (module and variables' shapes), the rest as is."""
  flax_model, forest, _ = tree["models"]
  return {**tree, "models": (ModelSlot(flax_model.model, flax_model.variables, 3),
                             ModelSlot(None, None, forest.num_outputs), None)}


def test_checkpoint_round_trip_restores_into_the_target(tmp_path):
  tree, x = _tree()
  save_checkpoint(tmp_path / "c.npz", {**tree, "rows": [{"round": 0, "agent": "server"}]})
  raw = read_checkpoint(tmp_path / "c.npz")
  assert list(raw["rows"][0]) == ["round", "agent"]   # plain data, key order kept
  back = restore({k: v for k, v in raw.items() if k != "rows"}, _slots(tree))
  assert type(back["state"]) is type(tree["state"]) and back["state"].round == 0
  assert back["models"][0].model is tree["models"][0].model and back["models"][2] is None
  np.testing.assert_allclose(back["models"][0].predict(x), tree["models"][0].predict(x))
  np.testing.assert_allclose(back["models"][1].predict(x), tree["models"][1].predict(x))
  assert jax.tree.structure(back["opt"]) == jax.tree.structure(tree["opt"])
  assert back["by_int"] == {3: np.float32(1.5)}


def _with_skeleton(path, edit):
  with np.load(path) as data:
    arrays = dict(data)
  arrays["__skeleton__"] = np.asarray(edit(str(arrays["__skeleton__"])))
  np.savez(path, **arrays)


@pytest.mark.parametrize("name", ["neural._src.report:platform.uname_result", "os:system",
                                  "neural.__main__:X", "builtins:eval"])
def test_a_type_named_by_a_checkpoint_is_never_looked_up(tmp_path, name):
  """The file names a type as a string: compared with the target's, never imported."""
  target = {"s": fedkrr.get_protocol("avgkd").init([np.ones(2)] * 2)}
  save_checkpoint(tmp_path / "c.npz", target)
  _with_skeleton(tmp_path / "c.npz",
                 lambda s: s.replace("fedkrr._src.protocols:AveragedState", name))
  modules = set(sys.modules)
  raw = read_checkpoint(tmp_path / "c.npz")
  assert isinstance(raw["s"], Node) and raw["s"].name == name   # inert data
  with pytest.raises(CheckpointError, match="where an AveragedState .*belongs"):
    restore(raw, target)
  assert set(sys.modules) == modules   # nothing was imported


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('"ref": "a0"', '"ref": "a1"'), r"\['s'\]\.targets\[0\]: an array"),
    (lambda s: s.replace('{"t": "array", "ref": "a0"}', '3'), "an int in the file where an array"),
    (lambda s: s.replace('"items": [0,', '"items": [true,'), "a bool in the file where an int"),
])
def test_a_checkpoint_that_differs_from_the_target_names_the_place(tmp_path, edit, message):
  target = {"s": fedkrr.get_protocol("avgkd").init([np.ones(2), np.ones((3,))])}
  save_checkpoint(tmp_path / "c.npz", target)
  _with_skeleton(tmp_path / "c.npz", edit)
  with pytest.raises(CheckpointError, match=message):
    restore(read_checkpoint(tmp_path / "c.npz"), target)


def test_a_checkpoint_nested_too_deep_is_one_error(tmp_path):
  save_checkpoint(tmp_path / "c.npz", {"s": 1})
  deep = '{"t": "list", "items": [' * 5000 + "1" + "]}" * 5000
  _with_skeleton(tmp_path / "c.npz", lambda s: s.replace('"tree": {', f'"x": {deep}, "tree": {{'))
  with pytest.raises(CheckpointError, match="nested more than"):
    read_checkpoint(tmp_path / "c.npz")


@pytest.mark.parametrize("content", [b"", b"garbage", b"PK\x03\x04truncated"])
def test_unreadable_checkpoints_are_named(tmp_path, content):
  (tmp_path / "c.npz").write_bytes(content)
  with pytest.raises(CheckpointError, match="c.npz") as info:
    load_checkpoint(tmp_path / "c.npz", {})
  assert "allow_pickle" not in str(info.value)


def test_a_pickled_checkpoint_is_never_loaded(tmp_path, capsys):
  """The old format: a checkpoint.pkl whose loading runs a command is refused unread."""
  workdir = tmp_path / "run"
  assert main(["run", *FLAGS, "--max-rounds", "1", "--workdir", str(workdir)]) == 0
  (workdir / CHECKPOINT_FILE).unlink()
  proof = tmp_path / "pwned"
  (workdir / "checkpoint.pkl").write_bytes(pickle.dumps(Exploit(proof)))
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "checkpoint.pkl" in err[0] and "never read" in err[0]
  assert not proof.exists()


def test_an_object_array_in_a_checkpoint_is_not_unpickled(tmp_path, finished_run):
  workdir, _ = finished_run
  proof = tmp_path / "pwned"
  arrays = dict(np.load(workdir / CHECKPOINT_FILE))
  bad = tmp_path / CHECKPOINT_FILE
  np.savez(bad, **arrays, evil=np.array([Exploit(proof)], dtype=object))
  with pytest.raises(CheckpointError, match="Python objects"):
    read_checkpoint(bad)
  assert not proof.exists()


@pytest.mark.parametrize("content", [b"garbage", b""])
def test_a_corrupt_checkpoint_is_one_line_exit_2(tmp_path, capsys, content):
  workdir = tmp_path / "run"
  assert main(["run", *FLAGS, "--max-rounds", "1", "--workdir", str(workdir)]) == 0
  (workdir / CHECKPOINT_FILE).write_bytes(content)
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and CHECKPOINT_FILE in err[0] and "delete it" in err[0]


def test_a_busy_workdir_is_refused(tmp_path, capsys):
  workdir = tmp_path / "run"
  workdir.mkdir()
  with filelock.FileLock(workdir / LOCK_FILE):
    assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "in use by another run" in err[0]
  assert not (workdir / METRICS_FILE).exists()


def test_a_failed_start_creates_nothing_and_a_corrected_one_runs(tmp_path, capsys):
  workdir = tmp_path / "run"
  assert main(["run", *FLAGS, "--agents", "5000", "--workdir", str(workdir)]) == 2
  assert "neural: error:" in capsys.readouterr().err
  assert not workdir.exists()
  workdir.mkdir()   # an existing empty directory stays empty too
  assert main(["run", *FLAGS, "--agents", "5000", "--workdir", str(workdir)]) == 2
  assert sorted(p.name for p in workdir.iterdir() if p.name != LOCK_FILE) == []
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 0


def test_the_config_of_a_run_that_finished_no_round_is_replaced(tmp_path, capsys):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text(ExperimentConfig(**{**TINY, "seed": 9}).to_json())
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 0
  assert "replaced" in capsys.readouterr().err
  assert json.loads((workdir / "config.json").read_text())["seed"] == 0


def test_metrics_of_a_run_without_its_config_are_left_alone(tmp_path, capsys):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / METRICS_FILE).write_text('{"round": 0, "agent": 0}\n')
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 2
  assert "no config.json" in capsys.readouterr().err
  assert (workdir / METRICS_FILE).read_text() == '{"round": 0, "agent": 0}\n'


def _copy_run(src, dst):
  dst.mkdir()
  for name in ("config.json", METRICS_FILE, CHECKPOINT_FILE):
    (dst / name).write_bytes((src / name).read_bytes())


@pytest.mark.parametrize("damage", ["deleted", "bad line", "no round", "torn tail"])
def test_damaged_metrics_are_repaired_from_the_checkpoint(tmp_path, finished_run, damage, capsys):
  src, rows = finished_run
  workdir = tmp_path / "run"
  _copy_run(src, workdir)
  original = (workdir / METRICS_FILE).read_bytes()
  lines = original.decode().splitlines(keepends=True)
  path = workdir / METRICS_FILE
  if damage == "deleted":
    path.unlink()
  elif damage == "bad line":
    path.write_text("".join(lines[:1] + ["{not json\n"] + lines[1:]))
  elif damage == "no round":
    path.write_text("".join(lines[:1] + ['{"agent": 0}\n'] + lines[1:]))
  else:   # the last row cut in the middle, as a kill during a write would leave it
    path.write_bytes(original[:-7])
  assert train_and_evaluate(ExperimentConfig(**TINY), workdir) == rows
  assert path.read_bytes() == original
  err = capsys.readouterr().err
  assert "rewrote it from the checkpoint" in err and "metrics.jsonl" in err


def test_read_metrics_keeps_every_intact_row(tmp_path):
  good = [{"round": 0, "agent": 0}, {"round": 1, "agent": 0}]
  (tmp_path / METRICS_FILE).write_text(
      json.dumps(good[0]) + "\n{broken\n[1, 2]\n" + json.dumps(good[1]) + "\n")
  assert read_metrics(tmp_path) == good


def test_outputs_are_replaced_atomically(tmp_path, monkeypatch):
  """A write that fails half-way leaves the old file as it was and no temporary file."""
  from fedkrr._src import files
  target = tmp_path / "out.json"
  target.write_text("old")

  def fail(*args, **kwargs):
    raise OSError("disk full")

  monkeypatch.setattr(files.os, "fsync", fail)
  with pytest.raises(OSError, match="disk full"):
    files.atomic_write(target, "new")
  assert target.read_text() == "old"
  assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_outputs_keep_ordinary_permissions(tmp_path):
  from fedkrr._src import files
  fresh = files.atomic_write(tmp_path / "new.txt", "x")
  plain = tmp_path / "plain.txt"
  plain.write_text("x")
  assert fresh.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
  plain.chmod(0o640)
  files.atomic_write(plain, "y")
  assert plain.stat().st_mode & 0o777 == 0o640 and plain.read_text() == "y"


def test_a_seed_beyond_32_bits_and_a_non_utf8_config_are_named(tmp_path, capsys):
  assert main(["run", *FLAGS, "--seed", "4294967296", "--workdir", str(tmp_path / "a")]) == 2
  assert "seed: expected an integer in 0..2^32 - 1" in capsys.readouterr().err
  bad = tmp_path / "c.json"
  bad.write_bytes(b'{"dataset": "digits\xff"}')
  assert main(["run", "--config", str(bad), "--workdir", str(tmp_path / "b")]) == 2
  err = capsys.readouterr().err
  assert str(bad) in err and "UTF-8" in err


def test_a_cifar_batch_that_would_run_code_is_refused(tmp_path):
  from neural._src.data import DataError
  from neural._src.data import _read_cifar_batch
  proof = tmp_path / "pwned"
  (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": Exploit(proof), b"labels": [0]}))
  with pytest.raises(DataError, match="system"):
    _read_cifar_batch(str(tmp_path / "test_batch"))
  assert not proof.exists()
