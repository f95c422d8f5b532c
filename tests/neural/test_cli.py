"""The ``neural`` command: run with flags or a config file, resume, errors, configs."""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import neural
from neural._src.cli import compare_parser
from neural._src.cli import main
from neural._src.cli import overrides_from_args
from neural._src.cli import reproduce_parser
from neural._src.cli import run_parser
from neural._src.jobs.specs import ConfigSpec
from neural._src.jobs.specs import shipped_configs
from neural._src.runtime.config import field_help

FLAGS = ["--dataset", "digits", "--train-subset", "100", "--test-subset", "50",
         "--partition", "label-split", "--alpha", "0.5", "--agents", "2", "--models", "mlp",
         "--tiny", "--protocol", "avgkd", "--rounds", "2", "--epochs", "1", "--batch-size", "32",
         "--no-progress"]


def test_run_then_resume_then_other_config_is_an_error(tmp_path, capsys):
  workdir = str(tmp_path / "run")
  assert main(["run", *FLAGS, "--max-rounds", "1", "--workdir", workdir]) == 0
  lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line)["round"] for line in lines] == [0, 0]
  assert main(["run", *FLAGS, "--workdir", workdir]) == 0   # resumes: round 1
  out = capsys.readouterr().out
  assert "round 1: test accuracy agent 0" in out
  config = json.loads((tmp_path / "run" / "config.json").read_text())
  assert (config["alpha"], config["models"], config["tiny"]) == (0.5, ["mlp"], True)
  assert (tmp_path / "run" / "accuracy.png").exists()
  assert main(["run", *FLAGS, "--seed", "3", "--workdir", workdir]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("neural: error: workdir:") and "seed" in err[0]


def test_a_batch_larger_than_the_data_is_said_once(tmp_path, capsys):
  flags = [f for f in FLAGS if f != "32"]
  flags.insert(flags.index("--batch-size") + 1, "1000000")
  assert main(["run", *flags, "--workdir", str(tmp_path)]) == 0
  notes = [line for line in capsys.readouterr().err.splitlines() if "batch_size" in line]
  assert notes == ["neural: note: batch_size 1000000 is larger than the data: each epoch is "
                   "one step on the whole data (the batch is cut to the data's size)"]


def test_bad_value_is_one_line_and_exit_2(tmp_path, capsys):
  assert main(["run", *FLAGS, "--loss", "hinge", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == ["neural: error: loss: expected 'mse' or 'ce', got 'hinge'"]
  assert main(["run", "--config", "no-such-config", "--workdir", str(tmp_path)]) == 2
  assert "neither a file nor a shipped config" in capsys.readouterr().err


def test_config_file_with_a_sweep_and_flag_overrides(tmp_path, capsys):
  spec = {"description": "two runs", "base": {"dataset": "digits", "train_subset": 100,
                                              "test_subset": 50, "models": ["mlp"],
                                              "tiny": True, "epochs": 3, "rounds": 4},
          "grid": [{"protocol": ["akd", "local"]}]}
  path = tmp_path / "sweep.json"
  path.write_text(json.dumps(spec))
  workdir = tmp_path / "out"
  assert main(["run", "--config", str(path), "--epochs", "1", "--rounds", "1", "--no-progress",
               "--workdir", str(workdir)]) == 0
  assert json.loads((workdir / "sweep.json").read_text())["runs"] == ["protocol=akd",
                                                                      "protocol=local"]
  for name in ("protocol=akd", "protocol=local"):
    config = json.loads((workdir / name / "config.json").read_text())
    assert (config["epochs"], config["rounds"]) == (1, 1)   # flags win over the file
  assert (workdir / "accuracy.png").exists()
  assert "protocol=akd: round 0" in capsys.readouterr().out


def test_configs_lists_the_shipped_configs():
  result = subprocess.run([sys.executable, "-m", "neural", "configs"], capture_output=True,
                          text=True, check=True)
  names = [line.split()[0] for line in result.stdout.splitlines()]
  assert "fig06_alpha_same_model" in names and "fig06_alpha_same_model_small" in names
  assert sorted(names) == sorted(shipped_configs())   # one line per shipped config
  new = {"ddist_small", "ddist_fig3_small", "mhd_small", "repshare_small", "feddkc_small",
         "feddkc_mnist_small", "feddkc_cinic10_paper", "compare_small"}
  assert new <= set(names)


def _help(argv):
  return run_parser(argv).format_help()


def _has_flag(text, name):
  return re.search(rf"--{name.replace('_', '-')}(?![\w-])", text) is not None


def _shipped_configs():
  """The methods' configs that ship with neural, not the tests' own toy methods (a test
  file run earlier in the same worker may have registered one)."""
  return {m: c for m, c in neural.methods.method_configs().items()
          if c.__module__.startswith("neural.")}


def test_run_help_shows_the_chosen_configs_fields_only(capsys):
  """``neural run --help``: the KD fields; ``--method NAME`` or ``--config NAME``: that
  method's, and no other config's."""
  try:
    main(["run", "--help"])
  except SystemExit as e:
    assert e.code == 0
  text = capsys.readouterr().out
  for name in neural.ExperimentConfig.field_names():
    assert _has_flag(text, name), name
  assert "--aux-heads" not in text and "--lambda-fd" not in text   # other methods' fields
  assert "number of agents M >= 2" in text   # the description from the docstring
  classes = {}
  for method, cls in _shipped_configs().items():
    classes.setdefault(cls, method)
  for cls, method in classes.items():
    text = _help(["--method", method])
    for name in cls.field_names():
      assert _has_flag(text, name), (method, name)
    others = {n for c in classes for n in c.field_names()} - set(cls.field_names())
    assert not [n for n in others if _has_flag(text, n)], method
  text = _help(["--config", "mhd_small"])
  assert "fields of the methods mhd, mhd-isolated, mhd-fedavg (MHDConfig)" in text
  assert "--aux-heads" in text and "--protocol PROTOCOL" not in text and "--units" not in text


def test_every_field_has_its_own_help_in_plain_words():
  """No flag shows a neighbour's text (grouped docstring entries) or a Sphinx role."""
  for cls in {neural.ExperimentConfig, *_shipped_configs().values()}:
    texts = field_help(cls)
    missing = [n for n in cls.field_names() if not texts.get(n)]
    assert not missing, (cls.__name__, missing)
    by_text = {}
    for name in cls.field_names():
      by_text.setdefault(texts[name], []).append(name)
    shared = [names for names in by_text.values() if len(names) > 1]
    assert not shared, (cls.__name__, shared)
  for argv in ([], ["--method", "d-distillation"], ["--method", "repshare"]):
    assert ":func:" not in _help(argv) and ":class:" not in _help(argv)
    assert "``" not in _help(argv)


def test_compare_and_reproduce_offer_only_what_they_accept(capsys):
  for parser in (compare_parser(), reproduce_parser()):
    text = parser.format_help()
    assert "--protocol" in text and "--epochs" in text
    assert "--refinement" not in text and "--aux-heads" not in text and "--method" not in text
  assert "--units" not in compare_parser().format_help()
  assert "--max-rounds" not in compare_parser().format_help()
  assert main(["compare", "--workdir", "w", "--refinement", "kkr"]) == 2
  err = capsys.readouterr().err
  assert "--refinement" in err and "feddkc" in err and "KD protocols only" in err


def test_generated_flags_parse_to_config_values():
  argv = ["--workdir", "w", "--models", "mlp,cnn", "--tiny", "--no-warm-start",
          "--proportions", "0.7,0.3", "--lr", "0.01", "--init-seed", "4"]
  assert overrides_from_args(run_parser(argv).parse_args(argv)) == {
      "models": ["mlp", "cnn"], "tiny": True, "warm_start": False, "proportions": [0.7, 0.3],
      "learning_rate": 0.01, "init_seed": 4}
  argv = ["--workdir", "w", "--method", "mhd", "--aux-heads", "3", "--cosine"]
  assert overrides_from_args(run_parser(argv).parse_args(argv)) == {
      "method": "mhd", "aux_heads": 3, "cosine": True}


def test_a_methods_flag_reaches_its_config_and_is_refused_by_others(tmp_path, capsys):
  argv = ["--workdir", "w", "--method", "mhd", "--labels-per-client", "2", "--aux-heads", "3"]
  runs = ConfigSpec(base={}).expand(overrides_from_args(run_parser(argv).parse_args(argv)))
  assert runs[0][1].to_dict()["aux_heads"] == 3
  assert main(["run", *FLAGS, "--aux-heads", "3", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--aux-heads: not a field of the config run here" in err[0]
  assert "--method" in err[0] and "mhd" in err[0]


def test_configs_fields_lists_a_methods_fields(capsys):
  assert main(["configs", "--fields", "mhd"]) == 0
  out = capsys.readouterr().out
  assert out.startswith("MHDConfig (method mhd):")
  assert "--aux-heads" in out and "an integer; default 1" in out and "--data-seed" in out
  assert main(["configs", "--fields", "kd"]) == 0
  assert "--protocol" in capsys.readouterr().out
  assert main(["configs", "--fields", "no-such-method"]) == 2
  assert "method: expected one of" in capsys.readouterr().err


def test_neural_run_as_users_run_it_in_float32(tmp_path):
  """The suite turns x64 on; users' ``neural run`` has it off: run it that way."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
  workdir = tmp_path / "run"
  subprocess.run([sys.executable, "-m", "neural", "run", *FLAGS, "--rounds", "1",
                  "--workdir", str(workdir)], check=True, capture_output=True, env=env)
  rows = neural.read_metrics(workdir)
  assert [r["agent"] for r in rows] == [0, 1]
  assert all(0 <= r["test_accuracy"] <= 1 and math.isfinite(r["test_loss"]) for r in rows)
  arrays = np.load(workdir / "checkpoint.npz")
  floats = [arrays[k].dtype for k in arrays.files if arrays[k].dtype.kind == "f"]
  assert floats and all(dtype == np.float32 for dtype in floats)   # nothing went to float64


_HEAVY = ("jax", "flax", "optax", "matplotlib", "sklearn", "scipy")
_PROBE = ("import sys\nfrom neural._src.cli import main\ntry:\n  code = main(sys.argv[1:])\n"
          "except SystemExit as e:\n  code = e.code\n"
          f"print('imported:', sorted(m for m in {_HEAVY!r} if m in sys.modules), code)\n")


def _probe(*argv):
  out = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True,
                       check=True)
  return out.stdout


def test_help_and_a_finished_runs_rerun_import_neither_jax_nor_flax(tmp_path):
  """Start-up: `neural --help`, `neural run --help` and the rerun of a finished run do not
  load JAX, Flax, Optax, matplotlib or scikit-learn (they cost seconds to import)."""
  assert "imported: [] 0" in _probe("--help")
  assert "imported: [] 0" in _probe("run", "--help")
  assert "imported: [] 0" in _probe("demo", "--help")
  workdir = tmp_path / "run"
  args = ["run", *FLAGS, "--rounds", "1", "--workdir", str(workdir)]
  assert main(args) == 0
  plot = (workdir / "accuracy.png").stat().st_mtime_ns
  out = _probe(*args)
  assert "imported: [] 0" in out and f"{workdir}: round 0: test accuracy agent 0" in out
  assert (workdir / "accuracy.png").stat().st_mtime_ns == plot   # current: not redrawn
  assert "imported: [] 0" not in _probe(*args[:-2], "--units", "steps", "--workdir",
                                        str(workdir))   # other units: redrawn


def test_configs_fields_alone_names_the_methods(capsys):
  assert main(["configs", "--fields"]) == 0
  names = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
  assert names == ["kd", *neural.methods.method_configs()]


def test_jobs_auto_is_the_measured_best_for_the_backend_and_bad_counts_are_refused(capsys):
  import jax

  from neural._src.jobs.workers import AUTO_JOBS_CPU
  from neural._src.jobs.workers import auto_jobs

  assert reproduce_parser().parse_args(["--figure", "5", "--workdir", "w", "--jobs",
                                        "auto"]).jobs == "auto"
  assert reproduce_parser().parse_args(["--figure", "5", "--workdir", "w", "--jobs",
                                        "3"]).jobs == 3
  for bad in ("0", "many"):
    with pytest.raises(SystemExit):
      reproduce_parser().parse_args(["--figure", "5", "--workdir", "w", "--jobs", bad])
    assert "--jobs" in capsys.readouterr().err
  if jax.default_backend() == "cpu":
    assert auto_jobs() == max(1, min(AUTO_JOBS_CPU, len(os.sched_getaffinity(0))))
  with pytest.raises(neural.ConfigError, match="jobs: expected an integer >= 1 or 'auto'"):
    neural.reproduce(5, "unused", jobs="many")


def test_default_seeds_are_ten_with_jobs_auto_on_a_gpu_else_three_or_one(monkeypatch):
  from neural._src.figures import reproduce as module

  for gpu, expected in ((True, (10, 3, 1)), (False, (3, 3, 1))):
    monkeypatch.setattr(module, "on_gpu", lambda gpu=gpu: gpu)
    assert (module.default_seeds("small", True), module.default_seeds("small", False),
            module.default_seeds("paper", True)) == expected


def test_deterministic_flag_sets_xla_s_deterministic_ops_before_the_command_runs(monkeypatch):
  import neural._src.cli as cli

  monkeypatch.setenv("XLA_FLAGS", "")
  seen = {}
  monkeypatch.setitem(cli._HANDLERS, "configs", lambda args: seen.setdefault(
      "flags", os.environ["XLA_FLAGS"]) and 0)
  monkeypatch.setitem(cli._PARSERS, "configs", lambda rest: _with_deterministic())
  assert cli.main(["configs", "--deterministic"]) == 0
  assert seen["flags"] == "--xla_gpu_deterministic_ops=true"
  assert "--deterministic" in run_parser().format_help()
  assert "--deterministic" in reproduce_parser().format_help()


def _with_deterministic():
  import argparse
  parser = argparse.ArgumentParser()
  parser.add_argument("--deterministic", action="store_true")
  return parser


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "deep", "huge", "missing"])
def test_reproduce_with_reads_only_bounded_regular_files(tmp_path, capsys, kind):
  """--with FILE goes through the bounded reader: one line, exit 2, before any run."""
  path = tmp_path / "other.json"
  if kind == "/dev/zero":
    path = "/dev/zero"
  elif kind == "fifo":
    os.mkfifo(path)   # nobody writes to it: a plain open would wait for ever
  elif kind == "deep":
    path.write_text("[" * 100_000 + "]" * 100_000)
  elif kind == "huge":
    with open(path, "wb") as f:
      f.truncate(65 * 2**20)   # sparse: larger than a reproduce.json may be
  workdir = tmp_path / "w"
  assert main(["reproduce", "--figure", "8", "--workdir", str(workdir), "--with",
               str(path), "--no-progress"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("neural: error: with: "), err
  assert not workdir.exists()


@pytest.mark.parametrize("error", [MemoryError(), type("XlaRuntimeError", (RuntimeError,), {})(
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.0TiB.")])
def test_running_out_of_memory_is_one_line_exit_2(monkeypatch, capsys, error):
  """A --width of 10^6 asked for terabytes of parameters: one line, not a traceback."""
  import neural._src.cli as cli

  def fail(args):
    raise error
  monkeypatch.setitem(cli._HANDLERS, "run", fail)
  assert cli.main(["run", "--dataset", "digits", "--workdir", "unused"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("neural: error: out of memory"), err
  monkeypatch.setitem(cli._HANDLERS, "run", lambda args: 1 / 0)
  with pytest.raises(ZeroDivisionError):   # other errors are not hidden
    cli.main(["run", "--dataset", "digits", "--workdir", "unused"])


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_to_a_full_device_names_the_standard_output():
  with open("/dev/full", "w") as full:
    proc = subprocess.run([sys.executable, "-m", "neural", "configs"], stdout=full,
                          stderr=subprocess.PIPE, text=True)
  assert proc.returncode == 2
  assert proc.stderr == ("neural: error: cannot write the standard output (No space left on "
                         "device)\n"), proc.stderr
