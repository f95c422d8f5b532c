"""``neural reproduce``: the paper's statements and their rules, one figure end to end, resume."""

import json

import pytest

import neural
from neural._src.claims import ALL
from neural._src.claims import CLAIMS
from neural._src.claims import NOT_REPRODUCED
from neural._src.claims import NOT_TESTABLE
from neural._src.claims import REPRODUCED
from neural._src.claims import Curve
from neural._src.claims import Group
from neural._src.claims import Ordered
from neural._src.claims import evaluate
from neural._src.cli import main
from neural._src.reproduce import figure_label
from neural._src.reproduce import shipped_figures
from neural._src.specs import load_spec
from neural._src.specs import run_one

FIGURES = ("Fig. 4", "Fig. 5", "Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10", "Fig. 11", "Fig. 12",
           "Fig. 13", "Fig. 14", "Fig. 15")


def _row(t, agent, protocol, accuracy, **extra):
  return {"round": t, "agent": agent, "protocol": protocol, "model": "cnn",
          "test_accuracy": accuracy, "test_loss": 0.0, **extra}


def _akd(paper_values, start=0):
  """AKD rows of two agents whose paper rounds (two steps each) have these means."""
  return [_row(2 * k + i, (start + i) % 2, "akd", v) for k, v in enumerate(paper_values)
          for i in range(2)]


def _per_agent(protocol, agent_values):
  """Rows of AvgKD-like runs: ``agent_values[a][t]``."""
  return [_row(t, a, protocol, v) for a, vs in enumerate(agent_values) for t, v in enumerate(vs)]


def _finished_rows(config):
  """Rows of a finished two-round run of ``config`` (constant accuracy: names are what count)."""
  m = config.agents
  if config.protocol == "akd":
    return [_row(t, (config.start + t) % m, "akd", 0.5) for t in range(2 * m)]
  if config.protocol == "ekd":
    return [r for t in range(2 * m) for r in [_row(t, "ensemble", "ekd", 0.5)] + [
        _row(t, a, "ekd", 0.5, start=(a - t) % m) for a in range(m)]]
  rounds = 1 if config.protocol == "central" else 2
  return [_row(t, a, config.protocol, 0.5) for t in range(rounds) for a in range(m)]


def _check(checks, statement, setting=""):
  found = [c for c in checks if c.statement == statement and c.setting == setting]
  assert len(found) == 1, (statement, setting, checks)
  return found[0]


# ---------------------------------------------------------------------------
# The statements and their rules, on hand-made rows


def test_a_degrading_akd_curve_reproduces_akd_degrades_a_flat_one_does_not():
  down, flat = [0.90, 0.85, 0.80, 0.75], [0.90, 0.90, 0.89, 0.90]
  results = {"same__from-agent1": _akd(down), "same__from-agent2": _akd(down, start=1),
             "same-no-reg__from-agent1": _akd(flat), "same-no-reg__from-agent2": _akd(flat, 1)}
  checks = neural.check_statements(4, results)
  degrades = "AKD degrades with rounds"
  assert _check(checks, degrades, "same").verdict == REPRODUCED
  assert "0.900 -> 0.750 (-0.150)" in _check(checks, degrades, "same").numbers
  assert _check(checks, degrades, "same-no-reg").verdict == NOT_REPRODUCED
  faster = _check(checks, "AKD degrades faster with regularisation")
  assert faster.verdict == REPRODUCED and "+0.150" in faster.numbers
  # A setting the runs lack (model-het, data-het) cannot be tested.
  missing = _check(checks, "AKD degrades faster with data heterogeneity")
  assert missing.verdict == NOT_TESTABLE and "data-het__from-agent*" in missing.numbers
  assert {c.setting for c in checks if c.statement == degrades} == {"same", "same-no-reg"}


def test_an_unfinished_run_is_not_testable():
  config = neural.ExperimentConfig(protocol="akd", rounds=10)
  checks = neural.check_statements("Fig. 4", {"same__from-agent1": _akd([0.9, 0.8])},
                                   {"same__from-agent1": config})
  check = _check(checks, "AKD degrades with rounds", "same")
  assert check.verdict == NOT_TESTABLE and "2 of 5 rounds" in check.numbers


def test_avgkd_statements_against_the_centralised_run():
  results = {"same__avgkd": _per_agent("avgkd", [[0.95, 0.93, 0.93, 0.93], [0.90, 0.92, 0.92,
                                                                            0.92]]),
             "same__central": _per_agent("central", [[0.97], [0.97]])}
  checks = neural.check_statements(5, results)
  assert _check(checks, "AvgKD does not degrade", "same").verdict == REPRODUCED
  assert _check(checks, "AvgKD converges within a few rounds", "same").verdict == REPRODUCED
  below = _check(checks, "AvgKD stays below the centralised model", "same")
  assert below.verdict == REPRODUCED and "centralised 0.970" in below.numbers
  best = "the best accuracy is agent 1's at round 1 (local training)"
  assert _check(checks, best, "same").verdict == REPRODUCED
  results["same__central"] = _per_agent("central", [[0.92], [0.92]])
  checks = neural.check_statements(5, results)
  assert _check(checks, "AvgKD stays below the centralised model", "same").verdict == \
      NOT_REPRODUCED


def test_ekd_runs_give_their_ensemble_and_the_akd_runs_inside():
  rows = []
  for t in range(4):   # two agents, four steps: even sums at t = 0, 2
    rows.append(_row(t, "ensemble", "ekd", [0.80, 0.5, 0.86, 0.4][t]))
    for a in range(2):
      rows.append(_row(t, a, "ekd", 0.7 - 0.05 * t + 0.01 * a, start=(a - t) % 2))
  curves = neural.paper_curves({"alpha=0.0__ekd": rows})
  ekd = curves["alpha=0.0__ekd"]
  assert ekd.values == (0.80, 0.86) and ekd.local == (0.70, 0.71) and not ekd.agents
  # From agent 1: agent 0 at t = 0 (0.70), agent 1 at t = 1 (0.66), agent 0 at t = 2, ...
  akd = curves["alpha=0.0__ekd:akd-from-agent1"]
  assert akd.protocol == "akd" and akd.values == pytest.approx((0.68, 0.58))
  assert akd.agents == (pytest.approx((0.7, 0.6)), pytest.approx((0.66, 0.56)))
  checks = neural.check_statements(8, {"alpha=0.0__ekd": rows})
  assert _check(checks, "AKD degrades with rounds", "alpha=0.0").verdict == REPRODUCED
  benefit = _check(checks, "both agents benefit from EKD in the early rounds", "alpha=0.0")
  assert benefit.verdict == REPRODUCED and "ensemble best 0.860" in benefit.numbers


def test_ordered_rule_allows_small_steps_the_wrong_way_but_needs_the_ends_apart():
  def groups(drops):
    return [Group(f"g{i}", (Curve(f"g{i}", "pkd", (0.9, 0.9 - d)),)) for i, d in
            enumerate(drops)]
  rule = Ordered("drop")
  assert rule(groups([0.3, 0.2, 0.21, 0.0]))[0] == REPRODUCED   # 0.01 back: within tol
  assert rule(groups([0.3, 0.2, 0.25, 0.0]))[0] == NOT_REPRODUCED
  assert rule(groups([0.05, 0.05, 0.05, 0.045]))[0] == NOT_REPRODUCED   # ends too close


def test_every_statement_names_runs_the_paper_scale_configs_have():
  """No pattern of CLAIMS is a typo: each matches a run of its figure's full-size config.

  The text's recipes (``_text``) do not run the authors' PKD (pkd-mean).
  """
  figures = shipped_figures()
  assert tuple(figures) == FIGURES
  assert {c.figure for c in CLAIMS} == set(FIGURES)
  for figure, scales in figures.items():
    for name in scales["paper"] + scales["small"]:
      runs = load_spec(name).expand()
      results = {run: _finished_rows(config) for run, config in runs}
      curves = neural.paper_curves(results)
      checks = evaluate([c for c in CLAIMS if c.figure == figure], curves)
      assert checks
      untestable = [c for c in checks if c.verdict == NOT_TESTABLE
                    and not c.rule.startswith("compares with")
                    and not (name.endswith("_text") and c.statement.endswith("(pkd-mean)"))]
      assert not untestable, (name, untestable[0])


def test_figure_labels_and_configs_per_scale():
  assert figure_label(4) == figure_label("4") == figure_label("Fig. 4") == "Fig. 4"
  assert neural.figure_configs(4) == ["fig04_akd_small"]
  assert neural.figure_configs("4", "paper") == ["fig04_akd"]
  assert neural.figure_configs(9, "paper") == ["fig09_cifar10_same_model",
                                               "fig09_cifar10_same_model_text"]
  with pytest.raises(neural.ConfigError, match="scale: expected one of small, paper"):
    neural.figure_configs(4, "huge")
  with pytest.raises(neural.ConfigError, match="figure number"):
    figure_label("four")
  assert ALL == ("*",)


# ---------------------------------------------------------------------------
# End to end: a small figure shrunk, interrupted, resumed

SHRINK = dict(dataset="digits", rounds=2, epochs=1, train_subset=120, test_subset=60,
              batch_size=32, tiny=True, models=["mlp"])


@pytest.fixture(scope="module")
def fig5(tmp_path_factory):
  """Fig. 5 shrunk: a first call stopped after one round of each run, then resumed."""
  workdir = tmp_path_factory.mktemp("fig5")
  first = neural.reproduce(5, workdir, overrides=SHRINK, max_rounds=1)
  second = neural.reproduce(5, workdir, overrides=SHRINK)
  return workdir, first, second


def test_reproduce_writes_the_report_json_and_figure_with_a_row_per_run(fig5):
  workdir, _, result = fig5
  runs = [name for name, _ in load_spec("fig05_avgkd_small").expand()]
  assert json.loads((workdir / "sweep.json").read_text())["runs"] == runs
  md = (workdir / "reproduce.md").read_text()
  assert (workdir / "reproduce.png").stat().st_size > 0
  report = json.loads((workdir / "reproduce.json").read_text())
  assert report["figure"] == "Fig. 5" and report["scale"] == "small"
  (config,) = report["configs"]
  assert [r["run"] for r in config["runs"]] == runs
  for run in runs:
    setting, variant = run.split("__")
    assert f"| {setting} | {variant} |" in md
  assert len(config["statements"]) == len(result.checks) > 0
  for check in result.checks:
    assert check.verdict in (REPRODUCED, NOT_REPRODUCED)   # every setting runs at small scale
    assert f"| {check.statement} |" in md
  assert "--set rounds=2" in md and "--set dataset=digits" in md


def test_the_interrupted_call_marks_unfinished_runs_and_the_resumed_run_equals_one_run(
    fig5, tmp_path):
  workdir, first, second = fig5
  assert first.configs[0].curves["same__avgkd"].values[:1] == \
      second.configs[0].curves["same__avgkd"].values[:1]
  unfinished = [c for c in first.checks if c.verdict == NOT_TESTABLE]
  assert unfinished and all("unfinished" in c.numbers for c in unfinished)
  config = dict(load_spec("fig05_avgkd_small").expand(SHRINK))["data-het__avgkd"]
  run_one(config, tmp_path / "straight")
  assert (tmp_path / "straight" / "metrics.jsonl").read_text() == \
      (workdir / "data-het__avgkd" / "metrics.jsonl").read_text()


# ---------------------------------------------------------------------------
# The command


def test_an_unknown_figure_is_one_line_naming_the_figures_and_exit_2(tmp_path, capsys):
  assert main(["reproduce", "--figure", "7", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == ["neural: error: figure: no shipped config reproduces Fig. 7; the figures are "
                 "4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15"]
  assert not list(tmp_path.iterdir())


def test_paper_scale_without_data_is_the_data_error(tmp_path, capsys):
  assert main(["reproduce", "--figure", "5", "--scale", "paper", "--no-progress",
               "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "needs data_dir" in err[0] and "train-images-idx3-ubyte" in err[0]
  assert not list(tmp_path.iterdir())   # nothing left behind: no sweep.json, no run directory
  assert main(["reproduce", "--figure", "9", "--scale", "paper", "--no-progress",
               "--data-dir", str(tmp_path / "none"), "--workdir", str(tmp_path)]) == 2
  assert "is not a directory" in capsys.readouterr().err
  assert not list(tmp_path.iterdir())
