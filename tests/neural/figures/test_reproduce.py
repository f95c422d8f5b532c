"""``neural reproduce``: the paper's statements, their noise-aware rules, the control on the
authors' curves, one figure end to end (seeds, resume) and the command."""

import importlib.util
import json
from pathlib import Path
import platform

import jax
import numpy as np
import pytest

import neural
from neural import evidence
from neural._src.cli import main
from neural._src.evidence.authors import control_table
from neural._src.evidence.claims import ALL
from neural._src.evidence.claims import CLAIMS
from neural._src.evidence.claims import evaluate
from neural._src.evidence.rules import NOT_REPRODUCED
from neural._src.evidence.rules import NOT_TESTABLE
from neural._src.evidence.rules import REPRODUCED
from neural._src.figures.reproduce import shipped_figures
from neural._src.figures.reproduce_curves import figure_label
from neural._src.figures.reproduce_report import against_control
from neural._src.figures.reproduce_report import markdown
from neural._src.jobs.runs import run_one
from neural._src.jobs.specs import load_spec

FIGURES = ("Fig. 4", "Fig. 5", "Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10", "Fig. 11", "Fig. 12",
           "Fig. 13", "Fig. 14", "Fig. 15")
BIG = 10_000   # test points: a binomial error of at most 0.005


def _row(t, agent, protocol, accuracy, **extra):
  return {"round": t, "agent": agent, "protocol": protocol, "model": "cnn",
          "test_accuracy": accuracy, "test_loss": 0.0, **extra}


def _finished_rows(config, rounds=4):
  """Rows of a finished run of ``config`` with ``rounds`` paper rounds (constant accuracy:
  names are what count)."""
  m = config.agents
  if config.protocol == "akd":
    return [_row(t, (config.start + t) % m, "akd", 0.5) for t in range(rounds * m)]
  if config.protocol == "ekd":
    return [r for t in range(2 * rounds) for r in [_row(t, "ensemble", "ekd", 0.5)] + [
        _row(t, a, "ekd", 0.5, start=(a - t) % m) for a in range(m)]]
  rounds = 1 if config.protocol == "central" else rounds
  server = ["server"] if config.protocol == "fedavg" else []
  return [_row(t, a, config.protocol, 0.5) for t in range(rounds) for a in [*range(m), *server]]


def _check(checks, statement, setting=""):
  found = [c for c in checks if c.statement == statement and c.setting == setting]
  assert len(found) == 1, (statement, setting, [(c.statement, c.setting) for c in checks])
  return found[0]


# ---------------------------------------------------------------------------
# The statements, from rows and from plain numbers


def _akd(paper_values, start=0):
  """AKD rows of two agents whose paper rounds (two steps each) have these means."""
  return [_row(2 * k + i, (start + i) % 2, "akd", v) for k, v in enumerate(paper_values)
          for i in range(2)]


def test_statements_from_rows_and_settings_the_runs_lack():
  down, flat = [0.90, 0.85, 0.80, 0.75, 0.70], [0.90, 0.90, 0.90, 0.90, 0.90]
  results = {"same__from-agent1": _akd(down), "same__from-agent2": _akd(down, start=1),
             "same-no-reg__from-agent1": _akd(flat), "same-no-reg__from-agent2": _akd(flat, 1)}
  checks = evidence.check_statements(4, results)
  degrades = "AKD degrades with rounds"
  assert _check(checks, degrades, "same").verdict == REPRODUCED
  assert _check(checks, degrades, "same-no-reg").verdict != REPRODUCED
  assert _check(checks, "AKD degrades faster with regularisation").verdict == REPRODUCED
  missing = _check(checks, "AKD degrades faster with data heterogeneity")
  assert missing.verdict == NOT_TESTABLE and "data-het__from-agent*" in missing.numbers
  assert {c.setting for c in checks if c.statement == degrades} == {"same", "same-no-reg"}


def test_an_unfinished_run_is_not_testable():
  config = neural.ExperimentConfig(protocol="akd", rounds=10)
  checks = evidence.check_statements("Fig. 4", {"same__from-agent1": _akd([0.9, 0.8])},
                                   {"same__from-agent1": config})
  check = _check(checks, "AKD degrades with rounds", "same")
  assert check.verdict == NOT_TESTABLE and "2 of 5 rounds" in check.numbers


def test_ekd_runs_give_their_ensemble_and_the_akd_runs_inside():
  rows = []
  for t in range(4):   # two agents, four steps: even sums at t = 0, 2
    rows.append(_row(t, "ensemble", "ekd", [0.80, 0.5, 0.86, 0.4][t]))
    for a in range(2):
      rows.append(_row(t, a, "ekd", 0.7 - 0.05 * t + 0.01 * a, start=(a - t) % 2))
  curves = evidence.paper_curves({"alpha=0.0__ekd": rows})
  ekd = curves["alpha=0.0__ekd"]
  assert ekd.values == ((0.80, 0.86),) and ekd.local == ((0.70, 0.71),) and not ekd.agents
  akd = curves["alpha=0.0__ekd:akd-from-agent1"]
  assert akd.protocol == "akd" and akd.values[0] == pytest.approx((0.68, 0.58))
  assert akd.agents[0] == (pytest.approx((0.7, 0.6)), pytest.approx((0.66, 0.56)))


def test_fedavg_runs_give_their_clients_and_their_averaged_model_and_both_are_judged():
  clients, server = [0.50, 0.55, 0.60], [0.80, 0.85, 0.88]
  rows = [r for t in range(3) for r in [_row(t, a, "fedavg", clients[t]) for a in range(2)]
          + [_row(t, "server", "fedavg", server[t])]]
  curves = evidence.paper_curves({"alpha=0.0__fedavg": rows})
  assert curves["alpha=0.0__fedavg"].values == (tuple(clients),)
  averaged = curves["alpha=0.0__fedavg:server"]
  assert averaged.values == (tuple(server),) and averaged.protocol == "fedavg"
  avgkd = [0.5, 0.7, 0.7]
  checks = evidence.check_claims(6, {"alpha=0.0": {"avgkd": [avgkd] * 3, "fedavg": [clients] * 3,
                                                 "fedavg:server": [server] * 3}},
                               test_points=BIG)
  paper = _check(checks, "AvgKD consistently outperforms FedAvg", "alpha=0.0")
  both = _check(checks, "AvgKD consistently outperforms FedAvg (FedAvg's averaged model; the "
                        "paper scored its clients)", "alpha=0.0")
  assert (paper.verdict, both.verdict) == (REPRODUCED, NOT_REPRODUCED)
  assert "alpha=0.0__fedavg:server" in both.runs


def test_check_claims_takes_plain_numbers_per_seed_and_other_figures():
  seeds = [[0.50, 0.90, 0.85, 0.80, 0.70], [0.52, 0.91, 0.86, 0.78, 0.71],
           [0.51, 0.90, 0.86, 0.79, 0.70]]
  checks = evidence.check_claims("8", {"alpha=0.0": {"pkd-mean": seeds}}, test_points=BIG,
                               other={6: {"alpha=0.0": {"pkd-mean": [[0.5, 0.9, 0.9, 0.9,
                                                                      0.88]] * 3}}})
  check = _check(checks, "PKD degrades with rounds (pkd-mean)", "alpha=0.0")
  assert check.verdict == REPRODUCED and check.seeds == 3
  cross = _check(checks, "PKD degrades faster than with one model (Fig. 6)", "alpha=0.0")
  assert cross.verdict == REPRODUCED and "Fig. 6/alpha=0.0__pkd-mean" in cross.runs
  with pytest.raises(ValueError, match=r"curves\['alpha=0.0'\]\['pkd'\]\['mean'\]\[0\]\[1\]"):
    evidence.check_claims(8, {"alpha=0.0": {"pkd": [[0.5, "high"]]}})
  with pytest.raises(ValueError, match="'agents' has 1 seeds, 'mean' 3"):
    evidence.check_claims(8, {"alpha=0.0": {"pkd": {"mean": seeds, "agents": [[[0.5]]]}}})


def test_a_cifar_statement_is_not_testable_on_mnist():
  runs = {"alpha=0.0": {"ekd": [[0.5, 0.6, 0.7]]}}
  statement = "EKD does not improve with rounds (CIFAR-10, unlike MNIST)"
  on_mnist = _check(evidence.check_claims(9, runs, dataset="mnist-subset"), statement,
                    "alpha=0.0")
  assert on_mnist.verdict == NOT_TESTABLE and "cifar10" in on_mnist.numbers
  on_cifar = _check(evidence.check_claims(9, runs, dataset="cifar10"), statement, "alpha=0.0")
  assert on_cifar.verdict == NOT_REPRODUCED


def test_every_statement_names_runs_the_configs_have():
  """No pattern of CLAIMS is a typo: each matches a run of its figure's configs.

  The text's recipes (``_text``) do not run the authors' PKD (pkd-mean); statements
  comparing figures need the other figure's runs.
  """
  figures = shipped_figures()
  assert tuple(figures) == FIGURES
  assert {c.figure for c in CLAIMS} == set(FIGURES)
  for figure, scales in figures.items():
    for name in scales["paper"] + scales["small"]:
      runs = load_spec(name).expand()
      results = {run: _finished_rows(config) for run, config in runs}
      checks = evaluate([c for c in CLAIMS if c.figure == figure], evidence.paper_curves(results))
      assert checks
      untestable = [c for c in checks if c.verdict == NOT_TESTABLE
                    and not any("/" in r for r in c.runs)
                    and not (name.endswith("_text") and "pkd-mean" in " ".join(c.runs))]
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
# The control: the authors' curves


def test_the_authors_curves_have_every_run_of_their_figures():
  for figure in ("Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10"):
    curves = evidence.authors_curves(figure)
    own = [c for name, c in curves.items() if "/" not in name]
    assert {c.setting for c in own} == {"alpha=0.0", "alpha=0.01", "alpha=0.1", "alpha=1.0"}
    for c in own:
      assert c.seeds == 1 and c.test_points == 10_000
      assert c.done == (1 if c.protocol == "central" else 20), c.name
      assert np.all((c.array() > 0.05) & (c.array() <= 1.0))
  assert evidence.authors_curves("Fig. 4") == {}
  # Figs. 8 and 10 compare with the same-model figure's curves.
  assert any(n.startswith("Fig. 6/") for n in evidence.authors_curves("Fig. 8"))


def test_every_statement_of_the_authors_figures_is_decided_on_their_curves():
  """Every one but those about what the authors never ran or logged: the paper's PKD (their
  code's PKD is pkd-mean) and FedAvg's averaged model (they logged its clients). Those
  have no control, not another run's verdict."""
  def theirs(check):
    return not any(r.endswith(("__pkd", "__fedavg:server")) for r in check.runs)
  for figure in ("Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10"):
    checks = evidence.control_checks(figure)
    untested = [c for c in checks if c.verdict == NOT_TESTABLE and "cifar10" not in c.numbers]
    assert checks and untested, figure
    assert not [c for c in untested if theirs(c)], figure


def test_the_control_beside_runs_is_cut_to_their_rounds_and_takes_their_spread():
  curves = evidence.authors_curves("Fig. 6")
  full = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6")}
  horizons = {name: 5 for name in curves}
  cut = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6", horizons)}
  key = ("AKD degrades with rounds", "alpha=0.0")
  assert full[key].numbers != cut[key].numbers
  changed = [k for k in full if full[k].verdict != cut[k].verdict]
  assert changed, "cutting 20 rounds to 5 changes no verdict"
  # The floor: the runs' seed spread makes a one-seed verdict of the authors' wider.
  floors = {k: 0.05 for k in cut}
  wide = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6", horizons, floors)}
  assert sum(c.verdict == "reproduced" for c in wide.values()) < sum(
      c.verdict == "reproduced" for c in cut.values())


def test_the_control_table_in_the_docs_is_what_the_rules_say_today():
  """docs/reproduce.md pins the control: a change to a rule or to the data shows here."""
  docs = (Path(__file__).resolve().parents[3] / "docs" / "reproduce.md").read_text()
  assert control_table() in docs


def test_the_script_derives_the_curves_from_logs_in_the_authors_layout(tmp_path):
  """scripts/authors_curves.py on a made-up checkout: which file feeds which curve."""
  script = Path(__file__).resolve().parents[3] / "scripts" / "authors_curves.py"
  spec = importlib.util.spec_from_file_location("authors_curves", script)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  base = tmp_path / "config" / "data-heterog" / "MNIST"
  agents_dir = base / "2 agents"

  def per_round(acc0, acc1, rounds=3):
    return {str(r): {"0": {"Test_acc": acc0 - 0.01 * r}, "1": {"Test_acc": acc1 - 0.01 * r}}
            for r in range(rounds)}
  for name in ("AvgKD", "PKD", "FedAvg", "AKD", "EKD"):
    (agents_dir / name).mkdir(parents=True)
  (base / "Centralized").mkdir()
  (base / "Centralized" / "result.json").write_text(json.dumps({"Test_acc": 0.99}))
  for a in ("0", "0.01", "0.1", "1"):
    for name in ("AvgKD", "PKD", "FedAvg", "AKD"):
      (agents_dir / name / f"result_{a}.json").write_text(json.dumps(per_round(0.9, 0.8)))
    steps = {str(t): {"Test_acc": 0.5 + 0.01 * t} for t in range(6)}
    (agents_dir / "EKD" / f"result_{a}.json").write_text(json.dumps(steps))
  curves = module.figure_curves(tmp_path, "Fig. 6")["curves"]["alpha=0.1"]
  assert curves["avgkd"]["agents"] == [[[0.9, 0.89, 0.88], [0.8, 0.79, 0.78]]]
  assert curves["avgkd"]["mean"] == [[0.85, 0.84, 0.83]]
  assert curves["ekd"]["mean"] == [[0.5, 0.52, 0.54]]   # the even partial sums
  assert curves["ekd"]["local"] == [[0.9, 0.8]]
  assert curves["pkd"] == curves["pkd-mean"]
  assert curves["central"]["mean"] == [[0.99]]
  assert "ekd:akd-from-agent2" not in curves   # MNIST has no log of AKD from agent 2


# ---------------------------------------------------------------------------
# End to end: a small figure shrunk, two seeds, interrupted, resumed

SHRINK = dict(dataset="digits", rounds=3, epochs=1, train_subset=120, test_subset=60,
              batch_size=32, tiny=True, models=["mlp"])


@pytest.fixture(scope="module")
def fig5(tmp_path_factory):
  """Fig. 5 shrunk, two seeds: a first call stopped after one round of each run, resumed."""
  workdir = tmp_path_factory.mktemp("fig5")
  first = neural.reproduce(5, workdir, overrides=SHRINK, seeds=2, max_rounds=1)
  second = neural.reproduce(5, workdir, overrides=SHRINK, seeds=2)
  return workdir, first, second


def test_reproduce_writes_the_report_json_and_figure_with_a_row_per_run(fig5):
  workdir, _, result = fig5
  runs = [name for name, _ in load_spec("fig05_avgkd_small").expand()]
  for k in range(2):
    assert json.loads((workdir / f"seed={k}" / "sweep.json").read_text())["runs"] == runs
  md = (workdir / "reproduce.md").read_text()
  assert (workdir / "reproduce.png").stat().st_size > 0
  report = json.loads((workdir / "reproduce.json").read_text())
  assert report["figure"] == "Fig. 5" and report["seeds"] == [0, 1]
  (config,) = report["configs"]
  assert [r["run"] for r in config["runs"]] == runs
  assert all(r["seeds"] == 2 and r["finished"] for r in config["runs"])
  for run in runs:
    setting, variant = run.split("__")
    assert f"| {setting} | {variant} |" in md
  assert len(config["statements"]) == len(result.checks) > 0
  for check in result.checks:
    assert check.verdict != NOT_TESTABLE and check.seeds == 2
    assert f"| {check.statement} |" in md
  assert "--seeds 2" in md and "no control column" in md
  # The JSON's curves are check_claims' format: the same verdicts from them.
  again = evidence.check_claims(5, config["curves"])
  assert [c.verdict for c in again] == [c.verdict for c in result.checks]


def test_each_seed_of_the_small_scale_draws_its_own_test_images_so_the_interval_is_the_seeds(
    fig5):
  """At small scale each seed splits the embedded data with its own seed: the curves say
  so, and every check decided on numbers uses the seeds' t-interval alone."""
  _, _, result = fig5
  curves = result.configs[0].curves
  for c in curves.values():
    assert c.test_sets == ("digits:seed=0:subset=60", "digits:seed=1:subset=60")
    assert not c.shares_test
  decided = [c for c in result.checks if c.numbers and c.verdict != NOT_TESTABLE]
  assert decided and {c.term for c in decided} == {"seeds"}


def test_the_report_records_its_environment_and_the_time_of_every_call(fig5):
  """reproduce.json says where it was computed and how long the figure took over the
  calls that ran it (the first stopped after one round, then resumed)."""
  workdir, first, second = fig5
  report = json.loads((workdir / "reproduce.json").read_text())
  env = report["environment"]
  assert env["python"] == platform.python_version()
  assert env["packages"]["jax"] == jax.__version__ and env["device"]["backend"] == "cpu"
  assert env["cpu"]["cores"] >= 1 and isinstance(env["cpu"]["flags"], list)
  lines = (workdir / "calls.jsonl").read_text().splitlines()
  assert len(lines) == 2 and report["calls"] == 2 == second.calls and first.calls == 1
  seconds = [json.loads(line)["seconds"] for line in lines]
  assert report["seconds_total"] == pytest.approx(second.seconds_total, abs=0.1)
  assert second.seconds_total == pytest.approx(seconds[0] + second.seconds, abs=0.2)
  assert second.seconds_total > second.seconds > 0
  md = (workdir / "reproduce.md").read_text()
  assert "2 calls in this workdir" in md and f"Python {env['python']}, jax {jax.__version__}" in md
  # A line cut by a crash is skipped; the others still count.
  from neural._src.figures.reproduce import earlier_calls
  (workdir / "extra").mkdir()
  (workdir / "extra" / "calls.jsonl").write_text('{"seconds": 5}\n{"seco\n{"seconds": -1}\n')
  assert earlier_calls(workdir / "extra") == (1, 5.0)


def test_seeds_differ_and_a_resumed_seed_equals_one_straight_run(fig5, tmp_path):
  workdir, first, second = fig5
  avgkd = second.configs[0].curves["same__avgkd"]
  assert avgkd.seeds == 2 and avgkd.values[0] != avgkd.values[1]
  unfinished = [c for c in first.checks if c.verdict == NOT_TESTABLE]
  assert unfinished and all("unfinished" in c.numbers for c in unfinished)
  config = dict(load_spec("fig05_avgkd_small").expand({**SHRINK, "seed": 1}))[
      "data-het__avgkd"]
  run_one(config, tmp_path / "straight")
  assert (tmp_path / "straight" / "metrics.jsonl").read_text() == \
      (workdir / "seed=1" / "data-het__avgkd" / "metrics.jsonl").read_text()


def test_worker_processes_run_the_same_rounds(fig5, tmp_path):
  """``jobs=2`` (worker processes) with ``max_rounds=1``: every run's first round is the
  first round of the same run done in this process, to the byte."""
  workdir, _, _ = fig5
  result = neural.reproduce(5, tmp_path, overrides=SHRINK, seeds=2, max_rounds=1, jobs=2)
  runs = [name for name, _ in load_spec("fig05_avgkd_small").expand()]
  for k in range(2):
    assert json.loads((tmp_path / f"seed={k}" / "sweep.json").read_text())["runs"] == runs
    for run in runs:
      ours = (tmp_path / f"seed={k}" / run / "metrics.jsonl").read_text().splitlines()
      theirs = (workdir / f"seed={k}" / run / "metrics.jsonl").read_text().splitlines()
      assert ours and ours == theirs[:len(ours)]
      assert {json.loads(line)["round"] for line in ours} == {0}
  assert any(c.verdict == NOT_TESTABLE and "unfinished" in c.numbers for c in result.checks)


def test_batches_of_a_runs_seeds_give_the_rounds_of_the_runs_alone(fig5, tmp_path):
  """``batch=2``: each run's two seeds train as one program; every run's first round is
  that of the same run alone, up to float32 rounding (a vmapped program of other agents
  sums in another order: losses within a relative 1e-5, accuracies within a test point)."""
  workdir, _, _ = fig5
  neural.reproduce(5, tmp_path, overrides=SHRINK, seeds=2, max_rounds=1, batch=2)
  for k in range(2):
    for run in [name for name, _ in load_spec("fig05_avgkd_small").expand()]:
      ours = [json.loads(line) for line in
              (tmp_path / f"seed={k}" / run / "metrics.jsonl").read_text().splitlines()]
      theirs = [json.loads(line) for line in
                (workdir / f"seed={k}" / run / "metrics.jsonl").read_text().splitlines()]
      assert ours and {r["round"] for r in ours} == {0}
      for a, b in zip(ours, theirs, strict=False):
        assert a.keys() == b.keys() and a["agent"] == b["agent"]
        np.testing.assert_allclose(a["test_loss"], b["test_loss"], rtol=1e-5)
        assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 1 / 60 + 1e-9


def test_the_report_shows_the_control_and_lists_what_the_authors_runs_do_not_support():
  curves = evidence.authors_curves("Fig. 6")
  own = {n: c for n, c in curves.items() if "/" not in n}
  checks = tuple(evaluate([c for c in CLAIMS if c.figure == "Fig. 6"], own))
  control = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6")}
  result = neural.Reproduction("Fig. 6", "paper", {}, (0,), (evidence.ConfigReproduction(
      "fig06", "", "w", own, checks, control, "w/reproduce.png"),), {"md": "", "json": ""}, 1.0)
  md = markdown(result, "w")
  assert "authors' runs" in md and "do not support this at these tolerances" in md
  row = next(line for line in md.splitlines() if "| AvgKD consistently outperforms FedAvg |"
             in line and "alpha=1.0" in line)
  assert row.endswith("| binomial | no difference (near the threshold) |  | no difference (see "
                      "below) |  |")   # a tie, and -0.005 ± 0.003 is 0.002 from -0.01
  n = len(checks)
  tally = against_control(result)
  same, neither = len(tally["same"]), len(tally["neither"])
  assert same + neither == n and neither == sum(
      c.verdict in ("inconclusive", NOT_TESTABLE) for c in checks)
  assert (f"of {n} checks: {same} reach the control's decided verdict, 0 are inconclusive "
          f"here where the control decides, 0 are decided here where the control is not, "
          f"{neither} are decided on neither side (not counted as agreement), and 0 reach "
          f"another decided verdict") in md
  assert "reach different decided verdicts" not in md


def test_the_report_sets_the_local_models_beside_the_authors_and_flags_other_splits():
  curves = evidence.authors_curves("Fig. 6")
  own = {n: c for n, c in curves.items() if "/" not in n}
  lower = own["alpha=0.01__avgkd"]
  own["alpha=0.01__avgkd"] = lower._replace(values=((lower.values[0][0] - 0.1,)
                                                    + lower.values[0][1:],))
  checks = tuple(evaluate([c for c in CLAIMS if c.figure == "Fig. 6"], own))
  control = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6")}
  result = neural.Reproduction("Fig. 6", "paper", {}, (0,), (evidence.ConfigReproduction(
      "fig06", "", "w", own, checks, control, "w/reproduce.png"),), {"md": "", "json": ""}, 1.0)
  md = markdown(result, "w")
  assert "### The local models beside the authors'" in md
  first = lower.values[0][0]
  assert f"| alpha=0.01 | {first - 0.1:.3f} | {first:.3f} | -0.100 (settings differ) |" in md
  assert f"| alpha=0.0 | {own['alpha=0.0__avgkd'].values[0][0]:.3f} |" in md
  row = next(line for line in md.splitlines()
             if "| AvgKD outperforms FedAvg at high data heterogeneity |" in line
             and "alpha=0.01" in line)
  assert f"(settings differ: local models {first - 0.1:.3f} here, {first:.3f} theirs)" in row
  assert "settings differ: local" not in next(
      line for line in md.splitlines()
      if "| AvgKD outperforms FedAvg at high data heterogeneity |" in line and "alpha=0.0 " in line)


def test_the_report_counts_and_lists_verdicts_against_the_control():
  curves = evidence.authors_curves("Fig. 6")
  own = {n: c for n, c in curves.items() if "/" not in n}
  checks = list(evaluate([c for c in CLAIMS if c.figure == "Fig. 6"], own))
  control = {(c.statement, c.setting): c for c in evidence.control_checks("Fig. 6")}
  held = [i for i, c in enumerate(checks) if c.verdict == "reproduced"]
  failed = [i for i, c in enumerate(checks) if c.verdict == "not reproduced"]
  checks[held[0]] = checks[held[0]]._replace(verdict="not reproduced", numbers="flipped")
  checks[held[1]] = checks[held[1]]._replace(verdict="inconclusive")
  checks[failed[0]] = checks[failed[0]]._replace(verdict="reproduced")
  result = neural.Reproduction("Fig. 6", "paper", {}, (0,), (evidence.ConfigReproduction(
      "fig06", "", "w", own, tuple(checks), control, "w/reproduce.png"),),
      {"md": "", "json": ""}, 1.0)
  tally = against_control(result)
  undecided = sum(c.verdict in ("inconclusive", NOT_TESTABLE) for c in checks) - 1
  assert {k: len(v) for k, v in tally.items()} == {
      "same": len(checks) - 3 - undecided, "inconclusive": 1, "undecided": 0,
      "neither": undecided, "opposite": 2}
  md = markdown(result, "w")
  assert (f"{len(checks) - 3 - undecided} reach the control's decided verdict, 1 is "
          "inconclusive here") in md
  assert "and 2 reach another decided verdict" in md
  listed = md.split("reach different decided verdicts", 1)[1].strip().splitlines()
  first = checks[held[0]]
  assert listed[0].startswith(f"- #{held[0] + 1} {first.statement}")
  assert "here not reproduced: flipped; the authors' runs reproduced:" in listed[0]
  assert len([line for line in listed if line.startswith("- #")]) == 2


# ---------------------------------------------------------------------------
# The command


def test_an_unknown_figure_is_one_line_naming_the_figures_and_exit_2(tmp_path, capsys):
  assert main(["reproduce", "--figure", "7", "--workdir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == ["neural: error: figure: no shipped config reproduces Fig. 7; the figures are "
                 "4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15"]
  assert not list(tmp_path.iterdir())


def test_bad_seeds_and_an_unreadable_other_figure_are_one_line(tmp_path, capsys):
  assert main(["reproduce", "--figure", "5", "--seeds", "0", "--workdir", str(tmp_path)]) == 2
  assert "seeds: expected an integer >= 1, got 0" in capsys.readouterr().err
  assert main(["reproduce", "--figure", "8", "--with", str(tmp_path / "nope"), "--workdir",
               str(tmp_path)]) == 2
  assert "is not a readable reproduce.json" in capsys.readouterr().err
  assert not list(tmp_path.iterdir())


def test_paper_rounds_keep_each_runs_steps_per_paper_round(tmp_path, capsys):
  from neural._src.evidence.paper_units import paper_round_count
  from neural._src.evidence.paper_units import steps_for_paper_rounds
  from neural._src.figures.reproduce import with_paper_rounds
  from neural._src.jobs.specs import load_spec
  for protocol in ("akd", "avgkd", "pkd", "ekd", "fedavg", "central"):
    for agents in (2, 3, 5):
      for k in (1, 5, 20):
        assert paper_round_count(protocol, steps_for_paper_rounds(protocol, k, agents),
                                 agents) == k, (protocol, agents, k)
  runs = load_spec("fig06_alpha_same_model_small").expand()
  assert {c.rounds for n, c in runs if n.endswith("__ekd")} == {10}   # 5 paper rounds
  longer = dict(with_paper_rounds(runs, 20))
  assert {n: c.rounds for n, c in longer.items() if n.startswith("alpha=0.0__")} == {
      "alpha=0.0__avgkd": 20, "alpha=0.0__pkd": 20, "alpha=0.0__pkd-mean": 20,
      "alpha=0.0__ekd": 40, "alpha=0.0__fedavg": 20, "alpha=0.0__central": 20}
  assert with_paper_rounds(runs, None) is runs
  with pytest.raises(SystemExit) as exit_:
    main(["reproduce", "--figure", "6", "--workdir", str(tmp_path), "--paper-rounds", "0"])
  assert exit_.value.code == 2
  assert "argument --paper-rounds: expected an integer >= 1" in capsys.readouterr().err
  assert main(["reproduce", "--figure", "6", "--workdir", str(tmp_path), "--paper-rounds", "20",
               "--rounds", "3"]) == 2
  assert "set either paper_rounds" in capsys.readouterr().err
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


def test_seeds_scored_on_one_test_set_get_the_paired_term_from_their_outcomes(tmp_path):
  """With the data seed fixed every seed is scored on the same test images; runs that
  record their per-image outcomes give each check the paired test-set term."""
  overrides = {**SHRINK, "data_seed": 0, "record_outcomes": True}
  result = neural.reproduce(5, tmp_path, overrides=overrides, seeds=2)
  curves = result.configs[0].curves
  assert all(c.shares_test and c.outcome_array() is not None for c in curves.values())
  for c in curves.values():   # each agent's outcomes give its values, round by round
    np.testing.assert_allclose(c.agent_outcome_array().mean(axis=-1), c.agent_array(),
                               atol=1e-9)
    np.testing.assert_allclose(c.outcome_array().mean(axis=-1), c.array(), atol=1e-9)
  decided = [c for c in result.checks if c.numbers and c.verdict != NOT_TESTABLE]
  assert decided and {c.term for c in decided} == {"paired"}
  report = json.loads((tmp_path / "reproduce.json").read_text())
  assert {s["term"] for s in report["configs"][0]["statements"]} == {"paired"}


def test_a_calls_file_that_is_a_link_costs_the_timing_not_the_result(tmp_path, capsys):
  """calls.jsonl linked elsewhere is not written through; the call still ends well and
  says its time was not recorded."""
  from neural._src.figures.reproduce import _log_call

  (tmp_path / "seed=0").mkdir()
  outside = tmp_path / "outside.txt"
  outside.write_text("keep\n")
  (tmp_path / "calls.jsonl").symlink_to(outside)
  _log_call(tmp_path, 0.0)
  assert outside.read_text() == "keep\n"
  assert "this call's time is not in" in capsys.readouterr().err


def test_the_small_scale_tables_in_the_docs_come_from_the_committed_reproductions():
  """docs/reproduce.md's small-scale tables are what scripts/reproduce_docs.py prints from
  the reproduce.json of each figure kept in docs/reproductions/ (runs made by the
  committed code, with their environment): regenerable by one command."""
  root = Path(__file__).resolve().parents[3]
  spec = importlib.util.spec_from_file_location("reproduce_docs",
                                                root / "scripts" / "reproduce_docs.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  docs = (root / "docs" / "reproduce.md").read_text()
  for figure in module.FIGURES:
    report = json.loads((root / "docs" / "reproductions" / f"fig{figure}" /
                         "reproduce.json").read_text())
    assert report["environment"]["commit"] and report["calls"] >= 1
    section = module.section(report)
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert table in docs, figure
    assert section.splitlines()[2] in docs, figure   # the headline and where it ran
