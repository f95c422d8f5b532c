"""The ``neural`` command: run with flags or a config file, resume, errors, configs."""

import json
import math
import os
import subprocess
import sys

import numpy as np

import neural
from neural._src.cli import _parser
from neural._src.cli import main
from neural._src.cli import overrides_from_args
from neural._src.specs import ConfigSpec
from neural._src.specs import shipped_configs

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


def test_flags_are_generated_from_every_configs_fields(capsys):
  """``neural run --help`` lists each config's fields, grouped, with their descriptions."""
  try:
    main(["run", "--help"])
  except SystemExit as e:
    assert e.code == 0
  text = capsys.readouterr().out
  for cls in [neural.ExperimentConfig, *neural.methods.method_configs().values()]:
    for name in cls.field_names():
      assert f"--{name.replace('_', '-')}" in text, name
  assert "fields of the methods mhd, mhd-fedavg, mhd-isolated (MHDConfig)" in text
  assert "number of agents M >= 2" in text   # the description from the docstring


def test_generated_flags_parse_to_config_values():
  args = _parser().parse_args(["run", "--workdir", "w", "--models", "mlp,cnn", "--tiny",
                               "--no-warm-start", "--proportions", "0.7,0.3", "--lr", "0.01",
                               "--aux-heads", "3", "--init-seed", "4", "--cosine"])
  assert overrides_from_args(args) == {
      "models": ["mlp", "cnn"], "tiny": True, "warm_start": False, "proportions": [0.7, 0.3],
      "learning_rate": 0.01, "aux_heads": 3, "init_seed": 4, "cosine": True}


def test_a_methods_flag_reaches_its_config_and_is_refused_by_others(tmp_path, capsys):
  runs = ConfigSpec(base={}).expand(overrides_from_args(_parser().parse_args(
      ["run", "--workdir", "w", "--method", "mhd", "--labels-per-client", "2",
       "--aux-heads", "3"])))
  assert runs[0][1].to_dict()["aux_heads"] == 3
  assert main(["run", *FLAGS, "--aux-heads", "3", "--workdir", str(tmp_path)]) == 2
  assert "aux_heads: not a field of the KD experiment config" in capsys.readouterr().err


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
