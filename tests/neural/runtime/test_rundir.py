"""Run directories safe to share: checkpoints that never run code, the lock, metrics repair,
nothing created by a failed start, and the one-line errors of corrupt files."""

import dataclasses
import json
import os
import pickle
import subprocess
import sys

import filelock
import jax
import numpy as np
import processes  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr
import neural
from neural import training
from neural._src.cli import main
from neural._src.kd.experiment import train_and_evaluate
from neural._src.learners.learners import FlaxModel
from neural._src.runtime import rundir
from neural._src.runtime.checkpoint import CheckpointError
from neural._src.runtime.checkpoint import ModelSlot
from neural._src.runtime.checkpoint import Node
from neural._src.runtime.checkpoint import load_checkpoint
from neural._src.runtime.checkpoint import read_checkpoint
from neural._src.runtime.checkpoint import restore_checkpoint
from neural._src.runtime.checkpoint import save_checkpoint
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import CHECKPOINT_FILE
from neural._src.runtime.rundir import LOCK_FILE
from neural._src.runtime.rundir import METRICS_FILE
from neural._src.runtime.rundir import read_metrics

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
  variables = training.init_variables(model, jax.random.PRNGKey(0), (8, 8, 1))
  x = np.random.default_rng(0).random((10, 8, 8, 1)).astype(np.float32)
  targets = np.eye(3, dtype=np.float32)[np.arange(10) % 3]
  forest = neural.ForestLearner(n_estimators=2).fit(x, targets)
  tx = training.make_optimizer(training.OptimizerConfig("adam", schedule="cosine", decay_steps=4))
  state = fedkrr.protocols.get_protocol("ekd").init([np.ones((2, 3)), np.zeros((2, 3))])
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
  back = restore_checkpoint({k: v for k, v in raw.items() if k != "rows"}, _slots(tree))
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


@pytest.mark.parametrize("name", ["neural._src.figures.report:platform.uname_result", "os:system",
                                  "neural.__main__:X", "builtins:eval"])
def test_a_type_named_by_a_checkpoint_is_never_looked_up(tmp_path, name):
  """The file names a type as a string: compared with the target's, never imported."""
  target = {"s": fedkrr.protocols.get_protocol("avgkd").init([np.ones(2)] * 2)}
  save_checkpoint(tmp_path / "c.npz", target)
  _with_skeleton(tmp_path / "c.npz",
                 lambda s: s.replace("fedkrr._src.protocols:AveragedState", name))
  modules = set(sys.modules)
  raw = read_checkpoint(tmp_path / "c.npz")
  assert isinstance(raw["s"], Node) and raw["s"].name == name   # inert data
  with pytest.raises(CheckpointError, match="where an AveragedState .*belongs"):
    restore_checkpoint(raw, target)
  assert set(sys.modules) == modules   # nothing was imported


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('"ref": "a0"', '"ref": "a1"'), r"\['s'\]\.targets\[0\]: an array"),
    (lambda s: s.replace('{"t": "array", "ref": "a0"}', '3'), "an int in the file where an array"),
    (lambda s: s.replace('"items": [0,', '"items": [true,'), "a bool in the file where an int"),
])
def test_a_checkpoint_that_differs_from_the_target_names_the_place(tmp_path, edit, message):
  target = {"s": fedkrr.protocols.get_protocol("avgkd").init([np.ones(2), np.ones((3,))])}
  save_checkpoint(tmp_path / "c.npz", target)
  _with_skeleton(tmp_path / "c.npz", edit)
  with pytest.raises(CheckpointError, match=message):
    restore_checkpoint(read_checkpoint(tmp_path / "c.npz"), target)


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
  from fedkrr._src.io import files
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
  from fedkrr._src.io import files
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
  from neural._src.datasets.data import DataError
  from neural._src.datasets.data import _read_cifar_batch
  proof = tmp_path / "pwned"
  (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": Exploit(proof), b"labels": [0]}))
  with pytest.raises(DataError, match="system"):
    _read_cifar_batch(str(tmp_path / "test_batch"))
  assert not proof.exists()


# ---------------------------------------------------------------------------
# Checkpoints with wrong content, checked before anything is written


def _edit_checkpoint(path, edit):
  """Applies ``edit(top)`` to the checkpoint's top-level items (a dict of skeleton nodes)."""
  def change(text):
    skeleton = json.loads(text)
    top = dict(skeleton["tree"]["items"])
    edit(top)
    skeleton["tree"]["items"] = [[k, v] for k, v in top.items()]
    return json.dumps(skeleton)
  _with_skeleton(path, change)


def _first(node, tag):
  """The first skeleton node tagged ``tag`` under ``node`` (depth first)."""
  if isinstance(node, dict):
    if node.get("t") == tag:
      return node
    children = list(node.values())
  elif isinstance(node, list):
    children = node
  else:
    return None
  for child in children:
    found = _first(child, tag)
    if found is not None:
      return found
  return None


def _forest_for_network(top):
  network = _first(top["state"], "flax_model")
  network.clear()
  network.update({"t": "forest_model", "skops": {"t": "array", "ref": "a0"}, "num_outputs": 10})


@pytest.mark.parametrize("protocol, edit, message", [
    ("avgkd", lambda top: top.update(rows={"t": "list", "items": [1, 2]}),
     "rows[0] is not a JSON object"),
    ("avgkd", lambda top: top.pop("state"), "no state"),
    ("avgkd", lambda top: top.update(round=7), "round 7 is not a round count in 0..2"),
    ("avgkd", lambda top: top.update(round=-1), "round -1 is not a round count"),
    ("backfit-gs", _forest_for_network, "a ForestModel in the file where a trained network"),
    ("avgkd",
     lambda top: top["state"].update(type="neural._src.figures.report:platform.uname_result"),
     "an uname_result of 2 fields in the file where an AveragedState"),
    ("avgkd", lambda top: top["state"].update(type="neural.__main__:X"),
     "a X of 2 fields in the file where an AveragedState"),
])
def test_a_checkpoint_with_wrong_content_is_refused_before_anything_is_written(
    tmp_path, capsys, protocol, edit, message):
  workdir = tmp_path / "run"
  flags = [*FLAGS, "--protocol", protocol, "--workdir", str(workdir)]
  assert main(["run", *flags, "--max-rounds", "1"]) == 0
  _edit_checkpoint(workdir / CHECKPOINT_FILE, edit)
  before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.name != LOCK_FILE}
  modules = set(sys.modules)
  capsys.readouterr()
  assert main(["run", *flags]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0] and "delete it" in err[0], err
  assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.name != LOCK_FILE} == before
  assert set(sys.modules) == modules   # nothing imported (neural.__main__ would run the CLI)


def test_a_checkpoint_of_the_first_format_still_resumes(tmp_path, capsys):
  workdir = tmp_path / "run"
  assert main(["run", *FLAGS, "--max-rounds", "1", "--workdir", str(workdir)]) == 0
  _with_skeleton(workdir / CHECKPOINT_FILE,
                 lambda s: s.replace("neural-checkpoint/2", "neural-checkpoint/1"))
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 0
  assert max(r["round"] for r in read_metrics(workdir)) == 1


def test_importing_neural_main_runs_nothing():
  import importlib
  module = importlib.import_module("neural.__main__")   # guarded: the CLI runs as a script only
  assert callable(module.main)


# ---------------------------------------------------------------------------
# Training that diverges, configs that are not finite


def test_a_run_that_diverges_stops_naming_round_agent_and_learning_rate(tmp_path, capsys):
  workdir = tmp_path / "run"
  assert main(["run", *FLAGS, "--lr", "1e30", "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "round 0, agent 0" in err[0] and "learning_rate=1e+30" in err[0]
  assert not workdir.exists()   # a start that finished no round leaves nothing behind
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 0   # a corrected config runs


def test_a_method_that_diverges_stops_before_writing_the_round(tmp_path):
  from neural._src.methods import mhd
  from neural._src.runtime.rundir import DivergenceError
  config = mhd.MHDConfig(method="mhd-isolated", dataset="digits", train_subset=120,
                         test_subset=30, agents=2, rounds=1, model="mlp", width=8, tiny=True,
                         aux_heads=1, public_fraction=0.25, labels_per_client=3,
                         graph="complete", steps_per_round=2, batch_size=8,
                         public_batch_size=8, optimizer="sgd", momentum=0.0, cosine=False,
                         learning_rate=1e30)
  with pytest.raises(DivergenceError, match=r"round 0.*learning_rate=1e\+30"):
    neural.methods.run_method(config, tmp_path / "run")
  assert not (tmp_path / "run" / METRICS_FILE).exists()


@pytest.mark.parametrize("flags, message", [
    (["--lr", "inf"], "learning_rate: expected a finite number, got inf"),
    (["--set", "learning_rate=NaN"], "learning_rate: expected a number, got 'NaN'"),
    (["--set", "proportions=" + "[" * 3000 + "]" * 3000], "proportions: expected"),
])
def test_configs_refuse_numbers_that_are_not_finite(tmp_path, capsys, flags, message):
  assert main(["run", *FLAGS, *flags, "--workdir", str(tmp_path / "run")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0] and len(err[0]) < 400
  assert not (tmp_path / "run").exists()


def test_metric_rows_are_always_valid_json(tmp_path):
  from neural._src.runtime.rundir import ExperimentError
  from neural._src.runtime.rundir import append_metrics
  with pytest.raises(ExperimentError, match="not finite"):
    append_metrics(tmp_path, [{"round": 0, "test_loss": float("nan")}])
  assert not (tmp_path / METRICS_FILE).exists()


# ---------------------------------------------------------------------------
# Workdirs: races, symbolic links


@pytest.mark.parametrize("kind, message", [("dangling", "dangling symbolic link"),
                                           ("loop", "symbolic link loop"),
                                           ("under a file", "which is a regular file"),
                                           ("empty", "expected a directory name, got ''")])
def test_unusable_workdirs_are_refused_before_the_data_loads(tmp_path, capsys, monkeypatch, kind,
                                                             message):
  from neural._src.datasets import run_data
  monkeypatch.setattr(run_data, "load_dataset", lambda *a, **k: pytest.fail("data loaded"))
  if kind == "under a file":
    (tmp_path / "file").write_text("x")
    workdir = str(tmp_path / "file" / "run")
  elif kind == "empty":   # not the current directory
    workdir = ""
  else:
    workdir = tmp_path / "link"
    workdir.symlink_to(tmp_path / ("nowhere" if kind == "dangling" else "link"))
  assert main(["run", *FLAGS, "--workdir", str(workdir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0]


def test_two_runs_started_together_on_a_new_workdir(tmp_path):
  """One runs; the other is told the workdir is in use (never 'File exists')."""
  workdir = tmp_path / "new" / "run"
  args = [sys.executable, "-m", "neural", "run", *FLAGS, "--rounds", "4", "--workdir",
          str(workdir)]
  procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=processes.env()) for _ in range(2)]
  results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
  assert all(code in (0, 2) for code, _ in results) and any(code == 0 for code, _ in results)
  for code, err in results:
    assert "Errno" not in err and "Traceback" not in err
    if code == 2:
      assert "in use by another run" in err
  assert max(r["round"] for r in read_metrics(workdir)) == 3


@pytest.mark.parametrize("edit", ["config", "round"])
def test_a_finished_run_is_read_back_only_if_it_is_the_run_asked_for(tmp_path, capsys, edit):
  """The fast path for a finished run checks what a resume checks: the checkpoint's config
  (not only config.json's) and a round count of exactly the config's."""
  workdir = tmp_path / "run"
  flags = [*FLAGS, "--workdir", str(workdir)]
  assert main(["run", *flags]) == 0
  if edit == "config":   # config.json edited to another learning rate, asked for with --lr
    saved = json.loads((workdir / "config.json").read_text())
    saved["learning_rate"] = 0.01
    (workdir / "config.json").write_text(json.dumps(saved))
    flags += ["--lr", "0.01"]
    message = "it holds the state of another config"
  else:                  # the checkpoint claims more rounds than the config has
    _edit_checkpoint(workdir / CHECKPOINT_FILE, lambda top: top.update(round=99))
    message = "round 99 is not a round count in 0..2"
  before = {p.name: p.read_bytes() for p in workdir.iterdir() if p.name != LOCK_FILE}
  capsys.readouterr()
  assert main(["run", *flags]) == 2
  out = capsys.readouterr()
  err = out.err.strip().splitlines()
  assert len(err) == 1 and message in err[0], err
  assert "test accuracy" not in out.out   # no numbers of the other run
  assert {p.name: p.read_bytes() for p in workdir.iterdir() if p.name != LOCK_FILE} == before


def test_a_checkpoint_written_before_a_field_existed_still_matches_its_config():
  config = ExperimentConfig()
  old = config.to_dict()
  del old["agent_weights"]   # a run written before the field was added
  assert rundir._same_config(old, config)
  weighted = dataclasses.replace(config, protocol="weighted-avgkd", agent_weights=(0.5, 0.5))
  assert not rundir._same_config(old, weighted)
  assert not rundir._same_config({**old, "epochs": 3}, config)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_metrics_are_never_appended_through_a_link(tmp_path, link):
  """The one append helper opens with O_NOFOLLOW and checks the opened file's links."""
  outside = tmp_path / "outside.txt"
  outside.write_text("keep me\n")
  path = tmp_path / "metrics.jsonl"
  (path.symlink_to if link == "symlink" else path.hardlink_to)(outside)
  with pytest.raises(fedkrr.io.WriteError, match="symbolic link|2 hard links") as info:
    rundir.append_metrics(tmp_path, [{"round": 0, "agent": 0, "test_accuracy": 0.5}])
  assert "\n" not in str(info.value)
  assert outside.read_text() == "keep me\n"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_resume_refuses_metrics_linked_outside_the_workdir(tmp_path, link):
  workdir = tmp_path / "run"
  config = ExperimentConfig(**TINY)
  train_and_evaluate(config, workdir, max_rounds=1)
  outside = tmp_path / "outside.jsonl"
  outside.write_bytes((workdir / METRICS_FILE).read_bytes())
  before = outside.read_bytes()
  (workdir / METRICS_FILE).unlink()
  ((workdir / METRICS_FILE).symlink_to if link == "symlink"
   else (workdir / METRICS_FILE).hardlink_to)(outside)
  with pytest.raises(neural.ExperimentError, match="never writes through"):
    train_and_evaluate(config, workdir)
  assert outside.read_bytes() == before


def test_staging_files_of_a_killed_run_are_removed_on_the_next_start(tmp_path):
  workdir = tmp_path / "run"
  config = ExperimentConfig(**TINY)
  train_and_evaluate(config, workdir, max_rounds=1)
  stale = [workdir / ".checkpoint.npz.a1b2c3d4.tmp", workdir / ".metrics.jsonl.zz_9YY8x.tmp",
           workdir / ".config.json.abcdefgh.tmp"]
  for p in stale:
    p.write_bytes(b"\0" * 1000)
  others = [workdir / ".notes.txt.abcdefgh.tmp", workdir / "mine.tmp"]
  for p in others:
    p.write_text("not a run's")
  (workdir / ".accuracy.png.linklink.tmp").symlink_to(tmp_path / "elsewhere")
  train_and_evaluate(config, workdir)
  assert not any(p.exists() for p in stale)
  assert all(p.exists() for p in others)
  assert os.path.islink(workdir / ".accuracy.png.linklink.tmp")


def test_a_finished_run_on_read_only_media_reads_back(finished_run, monkeypatch):
  """The rerun of a finished run whose lock cannot be created (EROFS) reads its rows."""
  import errno

  from neural._src.jobs.runs import run_one
  workdir, rows = finished_run

  def read_only(self, *args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")

  monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
  assert rundir.finished_rows(workdir, ExperimentConfig(**TINY), 2) == rows
  assert run_one(ExperimentConfig(**TINY), workdir) == rows


@pytest.mark.parametrize("fresh", [True, False])
def test_a_start_that_fails_before_its_first_round_leaves_nothing(tmp_path, fresh):
  """A model that cannot be built (a width that does not fit, say) fails in the run's
  first step: no config.json, no .lock, no directory are left behind."""
  from neural._src.runtime.rounds import run_rounds
  workdir = tmp_path / "run"
  if not fresh:
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine")
  config = ExperimentConfig(**TINY)

  def begin(data, checkpoint):
    raise MemoryError("the model does not fit")

  with pytest.raises(MemoryError):
    run_rounds(config, workdir, from_dict=ExperimentConfig.from_dict, rounds=2,
               load_data=lambda: None, expected=lambda data, done: {}, begin=begin,
               desc="", title="")
  if fresh:
    assert not workdir.exists()
  else:
    assert sorted(p.name for p in workdir.iterdir()) == [".lock", "notes.txt"]


def test_a_disk_error_reading_the_checkpoint_never_advises_deleting_it(tmp_path, monkeypatch):
  import errno
  import zipfile

  workdir = tmp_path / "run"
  config = ExperimentConfig(**TINY)
  train_and_evaluate(config, workdir, max_rounds=1)
  before = (workdir / CHECKPOINT_FILE).read_bytes()

  def eio(self, *args):
    raise OSError(errno.EIO, "Input/output error")

  monkeypatch.setattr(zipfile.ZipExtFile, "read", eio)
  with pytest.raises(fedkrr.io.DiskReadError):
    fedkrr.io.read_npz(workdir / CHECKPOINT_FILE)
  with pytest.raises(neural.ExperimentError, match="the disk failed while it was read") as info:
    train_and_evaluate(config, workdir)
  assert "do not delete it" in str(info.value) and "delete it and" not in str(info.value)
  monkeypatch.undo()
  assert (workdir / CHECKPOINT_FILE).read_bytes() == before
  assert len(train_and_evaluate(config, workdir)) > 0   # the disk is back: it resumes
