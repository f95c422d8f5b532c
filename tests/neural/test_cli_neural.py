"""The ``neural`` command: run with flags or a config file, resume, errors, configs."""

import json
import subprocess
import sys

from neural._src.cli import main
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
  new = {"ddist_small", "mhd_small", "repshare_small", "feddkc_small", "compare_small"}
  assert new <= set(names)
