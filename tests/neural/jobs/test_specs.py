"""Config files with sweeps (``neural._src.jobs.specs``), the shipped paper configs, run_configs."""

import json
import os

import pytest

from neural._src.jobs.runs import run_configs
from neural._src.jobs.specs import ConfigSpec
from neural._src.jobs.specs import load_spec
from neural._src.jobs.specs import shipped_configs
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig

FIGURES = ("Fig. 4", "Fig. 5", "Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10", "Fig. 11", "Fig. 12",
           "Fig. 13", "Fig. 14", "Fig. 15")
SMALL = sorted(name for name in shipped_configs() if name.endswith("_small"))
# Configs of the other papers' methods ("method" in their fields): their smoke runs are in
# each method's tests; here they are checked as a family (NAME_small and NAME_paper).
METHOD_CONFIGS = sorted(name for name in shipped_configs() if "method" in load_spec(name).base)
KD_SMALL = [name for name in SMALL if name not in METHOD_CONFIGS]
# The main job's theory-vs-network config and the AvgKD Alpha = 0 study (docs/avgkd_alpha0.md):
# no paper figure of their own.
EXTRA_SMALL = ("compare_small", "avgkd_alpha0_small", "avgkd_alpha0_twin_small")
# Method configs on data that has no embedded stand-in: a paper version only (CINIC-10's
# CPU-scale counterpart is feddkc_small / feddkc_mnist_small).
PAPER_ONLY = ("feddkc_cinic10",)
# One round of one epoch on a few points: the smoke test of every small config.
QUICK = dict(rounds=1, epochs=1, train_subset=80, test_subset=40, batch_size=32)


def test_grid_expands_to_the_product_with_overrides_winning():
  spec = ConfigSpec(base=dict(partition="label-split", alpha=0.5, rounds=4),
                    grid=({"alpha": [0.0, 0.1]},
                          {"avg": {"protocol": "avgkd"}, "fa": {"protocol": "fedavg"}}))
  runs = spec.expand({"rounds": 2})
  assert [name for name, _ in runs] == ["alpha=0.0__avg", "alpha=0.0__fa", "alpha=0.1__avg",
                                        "alpha=0.1__fa"]
  assert [(c.alpha, c.protocol, c.rounds) for _, c in runs] == [
      (0.0, "avgkd", 2), (0.0, "fedavg", 2), (0.1, "avgkd", 2), (0.1, "fedavg", 2)]
  assert ConfigSpec(base={}).expand() == [("", ExperimentConfig())]


def test_grid_errors(tmp_path):
  with pytest.raises(ConfigError, match="not a config field"):
    ConfigSpec(base={}, grid=({"alfa": [0.1]},)).expand()
  with pytest.raises(ConfigError, match=r"^alpha: expected"):
    ConfigSpec(base=dict(partition="label-split"), grid=({"alpha": [0.5, 2.0]},)).expand()
  path = tmp_path / "c.json"
  path.write_text(json.dumps({"base": {}, "grids": []}))
  with pytest.raises(ConfigError, match="unknown key 'grids'"):
    load_spec(path)
  with pytest.raises(ConfigError, match="neither a file nor a shipped config"):
    load_spec(tmp_path / "missing.json")


@pytest.mark.parametrize("name", ["../x", "/tmp/x", "a/b", "a\\b", "..", ".", "", "x" * 201])
def test_a_grid_entry_s_name_is_a_plain_folder_name(tmp_path, capsys, name):
  """The name becomes the run's folder under the workdir: nothing may land outside it."""
  from neural._src.cli import main

  path = tmp_path / "c.json"
  path.write_text(json.dumps({"base": {"dataset": "digits"},
                              "grid": [{name: {"protocol": "avgkd"}}]}))
  with pytest.raises(ConfigError, match=r"grid\[0\]: the run name .* is not a plain folder"):
    load_spec(path)
  before = sorted(p.name for p in tmp_path.parent.iterdir())
  assert main(["run", "--config", str(path), "--workdir", str(tmp_path / "w")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "not a plain folder name" in err[0]
  assert sorted(p.name for p in tmp_path.parent.iterdir()) == before
  assert not (tmp_path / "w").exists()


def test_grid_values_with_separators_name_one_folder_under_the_workdir():
  spec = ConfigSpec(base={}, grid=({"data_dir": ["x/../../../y", "a\\b", "50%"]},))
  assert [name for name, _ in spec.expand()] == [
      "data_dir=x%2F..%2F..%2F..%2Fy", "data_dir=a%5Cb", "data_dir=50%25"]
  many = ConfigSpec(base={}, grid=({"data_dir": ["d" * 300]},))
  with pytest.raises(ConfigError, match="longer than a folder name may be"):
    many.expand()


@pytest.mark.parametrize("content, message", [
    ({"base": 5}, "base: expected an object of config fields"),
    ({"base": {}, "grid": [{"alpha": []}]}, r"grid\[0\]: 'alpha' has no values"),
    ({"base": {}, "grid": {"alpha": [1]}}, "grid: expected a list of axes"),
    ({"base": {}, "description": ["x"]}, "description: expected a string"),
    ({"base": {"learning_rate": 1e308 * 10}}, "not a finite number"),
])
def test_malformed_config_files_are_one_line_errors(tmp_path, content, message):
  path = tmp_path / "c.json"
  path.write_text(json.dumps(content))
  with pytest.raises(ConfigError, match=message) as info:
    load_spec(path)
  assert "\n" not in str(info.value)


def test_a_config_nested_thousands_deep_is_one_line(tmp_path):
  path = tmp_path / "c.json"
  path.write_text('{"base": ' + "[" * 5000 + "]" * 5000 + "}")
  with pytest.raises(ConfigError, match="nested more than 64 levels") as info:
    load_spec(path)
  assert str(path) in str(info.value)


def test_a_failed_first_run_of_a_sweep_leaves_nothing(tmp_path):
  spec = ConfigSpec(base=dict(dataset="mnist", rounds=1), grid=({"alpha": [0.0, 1.0]},))
  with pytest.raises(ValueError, match="needs data_dir"):
    run_configs(spec.expand(), tmp_path / "sweep")
  assert not (tmp_path / "sweep").exists()


def test_plain_config_file_loads(tmp_path):
  path = tmp_path / "c.json"
  path.write_text(ExperimentConfig(rounds=7).to_json())
  assert load_spec(path).expand() == [("", ExperimentConfig(rounds=7))]


def test_every_figure_has_a_paper_and_a_small_config():
  shipped = {name: path for name, path in shipped_configs().items()
             if name not in METHOD_CONFIGS and name not in EXTRA_SMALL}
  figures = {}
  for name in shipped:
    spec = load_spec(name)
    assert spec.description and spec.expand()
    figures.setdefault(spec.figure, set()).add(name.endswith("_small"))
  assert set(figures) == set(FIGURES)
  assert all(kinds == {True, False} for kinds in figures.values())
  for name in KD_SMALL:   # small versions use embedded data only
    assert all(c.dataset in ("digits", "mnist-subset") for _, c in load_spec(name).expand())
  for name in set(shipped) - set(SMALL):   # paper scale: the paper's data and optimiser
    for _, c in load_spec(name).expand():
      assert c.dataset in ("mnist", "cifar10") and c.learning_rate == 1e-3
      assert c.weight_decay in (0.0, 3e-4) and not c.tiny


def test_paper_settings():
  fig6 = dict(load_spec("fig06_alpha_same_model").expand())
  assert {c.protocol for c in fig6.values()} == {"avgkd", "pkd", "pkd-mean", "ekd", "fedavg",
                                                 "central"}
  assert {c.alpha for c in fig6.values()} >= {0.0, 1.0}
  fig4 = dict(load_spec("fig04_akd").expand())
  same = fig4["same__from-agent2"]
  assert (same.protocol, same.start, same.proportions) == ("akd", 1, (0.7, 0.3))
  assert fig4["same-no-reg__from-agent1"].weight_decay == 0.0
  assert fig4["model-het__central"].agent_models == ("cnn", "mlp")
  assert fig4["data-het__from-agent1"].alpha == 0.1
  fig15 = load_spec("fig15_avgkd_5_agents").expand()
  assert all(c.agents == 5 and c.protocol == "avgkd" for _, c in fig15)
  assert all(c.loss == "ce" for name in ("fig09_cifar10_same_model", "fig11_akd_ce")
             for _, c in load_spec(name).expand())
  assert all(c.agent_models == ("mlp", "forest") for _, c in load_spec("fig13_mlp_forest").expand())


def test_paper_configs_follow_the_authors_code():
  """Batch 512 and standardised MNIST; the CIFAR VGG-9 recipe; 20 paper rounds everywhere."""
  fig6 = dict(load_spec("fig06_alpha_same_model").expand())
  assert {c.alpha for c in fig6.values()} == {0.0, 0.01, 0.1, 1.0}
  assert all(c.batch_size == 512 and c.normalize for c in fig6.values())
  for c in fig6.values():   # AKD and EKD: 2 steps per paper round; the rest: 1
    assert c.rounds == {"ekd": 40, "central": 20}.get(c.protocol, 20)
  for _, c in load_spec("fig04_akd").expand():
    assert c.rounds == (40 if c.protocol == "akd" else 20)
  fig9 = [c for _, c in load_spec("fig09_cifar10_same_model").expand()]
  assert all((c.agent_models, c.norm, c.weight_decay, c.epochs, c.batch_size)
             == (("vgg9", "vgg9"), "none", 0.0, 40, 256) for c in fig9)
  assert all(c.agent_models == ("resnet8", "vgg9")
             for _, c in load_spec("fig10_cifar10_different_model").expand())
  text = [c for _, c in load_spec("fig09_cifar10_same_model_text").expand()]
  assert all(c.agent_models == ("vgg", "vgg") for c in text)   # the text's VGG16
  # the code's choices: flip and crop on CIFAR-10, FedAvg from the mean of two inits with
  # equal weights, PKD as the code runs it beside the paper's, the best local epoch logged
  assert all(c.augment == "crop-flip" for c in fig9)
  fedavg = [c for c in fig6.values() if c.protocol == "fedavg"]
  assert fedavg and all((c.fedavg_init, c.fedavg_weights) == ("mean", "equal") for c in fedavg)
  assert all(c.augment == "none" and c.protocol != "pkd-mean" for c in text)
  for name in shipped_configs():
    if name.startswith("fig"):
      assert all(c.epoch_eval for _, c in load_spec(name).expand()), name


def test_every_method_config_has_a_paper_and_a_small_version():
  families = {}
  for name in METHOD_CONFIGS:
    family, _, kind = name.rpartition("_")
    assert kind in ("small", "paper"), name
    families.setdefault(family, set()).add(kind)
    spec = load_spec(name)
    assert spec.description and spec.figure, name
    runs = spec.expand()
    assert len({c.method for _, c in runs}) >= 1
    if kind == "small":
      assert all(c.dataset in ("digits", "mnist-subset") for _, c in runs), name
  assert all(kinds == ({"paper"} if family in PAPER_ONLY else {"small", "paper"})
             for family, kinds in families.items()), families
  assert {"ddist", "mhd", "repshare", "feddkc", "feddkc_mnist", *PAPER_ONLY} <= set(families)


@pytest.mark.parametrize("name", KD_SMALL)
def test_small_config_runs_one_round(name, tmp_path):
  """Each small config for one round: its first run (all its runs are validated by expand).

  Every protocol runs end to end in test_experiment.py. With ``NEURAL_FULL_SMOKE=1``
  one run of every distinct (protocol, models, loss, partition) of the config runs
  (about 4 minutes on 2 CPU cores: XLA compiles one program per shape).
  """
  runs, seen = [], set()
  for run_name, config in load_spec(name).expand(QUICK):
    kind = (config.protocol, config.agent_models, config.loss, config.partition)
    if kind not in seen and (not runs or os.environ.get("NEURAL_FULL_SMOKE") == "1"):
      seen.add(kind)
      runs.append((run_name, config))
  results = run_configs(runs, tmp_path)
  assert set(results) == {run_name for run_name, _ in runs}
  for run_name, _ in runs:
    rows = results[run_name]
    assert rows and all(r["round"] == 0 for r in rows)
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in rows)
    assert (tmp_path / run_name / "accuracy.png").exists()
  assert (tmp_path / "accuracy.png").exists()


@pytest.mark.parametrize("name", ["sweep.json", "accuracy.png", "reproduce.md", "Sweep.JSON",
                                  ".lock", "metrics.jsonl", "a\udc80b"])
def test_a_grid_entry_named_like_a_file_of_the_sweep_is_refused(name, tmp_path):
  spec = {"base": {"dataset": "digits"},
          "grid": [{name: {"rounds": 1}, "other": {"rounds": 2}}]}
  path = tmp_path / "c.json"
  path.write_text(json.dumps(spec))
  with pytest.raises(ConfigError, match="the run name") as info:
    load_spec(path).expand()
  assert "\n" not in str(info.value)
