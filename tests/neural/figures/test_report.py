"""The main job (``neural demo``): each part's files and the report, at tiny scale."""

import json

import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main as fedkrr_main
from fedkrr._src.problem_io import load_problem
from neural._src.cli import main
from neural._src.figures.report import MainJobSettings
from neural._src.figures.report import run_main_job


def test_closed_form_part_through_the_command(tmp_path, x64, capsys):
  assert main(["demo", "--out", str(tmp_path), "--parts", "closed-forms", "--rounds", "3"]) == 0
  part = tmp_path / "closed-forms"
  summary = json.loads((part / "summary.json").read_text())
  assert {r["protocol"] for r in summary["protocols"]} == set(fedkrr.PROTOCOLS)
  assert max(r["max_rel_gap"] for r in summary["protocols"]) <= 1e-9
  for name in ["problem.npz", "summary.md", "test_mse.png"] + \
      [f"trajectory_{p}.npz" for p in fedkrr.PROTOCOLS]:
    assert (part / name).stat().st_size > 0
  load_problem(part / "problem.npz")
  report = (tmp_path / "report.md").read_text()
  assert "## 1. Closed forms against literal round-by-round runs" in report
  assert "![closed forms](closed-forms/test_mse.png)" in report
  assert "[1/1]" in capsys.readouterr().out


def test_every_part_at_tiny_scale(tmp_path, x64):
  settings = MainJobSettings(
      parts=("verify", "toy", "mnist"), toy_rounds=5, verify_only="prop3-idempotent",
      protocols=("akd", "avgkd"), kernel="rbf",
      mnist_overrides=(("train_subset", 40), ("test_subset", 30), ("rounds", 2),
                       ("epochs", 1), ("width", 16)))
  path = run_main_job(tmp_path, settings, progress=False)
  report = path.read_text()
  for part, figure in [("verify", "verify.json"), ("toy", "toy.png"),
                       ("mnist", "side_by_side.png"), ("mnist/akd", "compare.png"),
                       ("mnist/avgkd", "compare.md")]:
    assert (tmp_path / part / figure).stat().st_size > 0, (part, figure)
  rows = json.loads((tmp_path / "verify" / "verify.json").read_text())
  assert [r["id"] for r in rows] == ["prop3-idempotent"] and rows[0]["holds"]
  assert "1 of 1 statements hold" in report
  assert "**AKD on MNIST**" in report and "**AvgKD on MNIST**" in report
  assert report.count("| AKD |") >= 1 and report.count("| AvgKD |") >= 2
  assert "partition iid " not in report and "iid ," not in report
  assert "per cycle of 2 rounds" in report and "spectral radius per round" in report
  assert "fitted rate" not in report   # 2 rounds: too few to fit a rate, so none is shown
  # FedAvg on AvgKD's split, scored by its clients and by its averaged model
  fedavg = [json.loads(line) for line in
            (tmp_path / "mnist" / "fedavg" / "metrics.jsonl").read_text().splitlines()]
  server = {r["round"]: r["test_accuracy"] for r in fedavg if r["agent"] == "server"}
  assert sorted(server) == [0, 1]
  assert "| 2 | " in report and f" {server[1]:.3f} |" in report
  assert "**AvgKD vs FedAvg, scored both ways**" in report
  assert "scored by its clients (the paper's way)" in report
  assert "scored by its averaged model (what FedAvg deploys)" in report
  timings = json.loads((tmp_path / "timings.json").read_text())
  assert set(timings) == {"verify", "toy", "mnist", "total", "cpu_seconds", "cores",
                          "load_average"}
  assert f"{timings['cpu_seconds']:.0f} s of CPU time" in report
  assert np.isclose(timings["total"], sum(timings[p] for p in ("verify", "toy", "mnist")),
                    rtol=0.05)


def test_fedavg_both_ways_reads_the_margins_from_the_rows():
  from neural._src.figures.report import _fedavg_both_ways
  avgkd = [{"round": t, "agent": a, "test_accuracy": acc}
           for t, acc in enumerate([0.50, 0.70, 0.72]) for a in (0, 1)]
  clients = [{"round": t, "agent": a, "test_accuracy": acc}
             for t, acc in enumerate([0.50, 0.55, 0.56]) for a in (0, 1)]
  server = [{"round": t, "agent": "server", "test_accuracy": acc}
            for t, acc in enumerate([0.60, 0.80, 0.82])]
  table, text = _fedavg_both_ways(avgkd, clients + server, num_test=10_000)
  assert "| 3 | 0.720 | 0.560 | 0.820 |" in table
  # rounds 2-3: AvgKD 0.71 against clients 0.555 (+0.155) and server 0.81 (-0.100)
  assert "scored by its clients (the paper's way), AvgKD is ahead (+0.155)" in text
  assert "scored by its averaged model (what FedAvg deploys), AvgKD is behind (-0.100)" in text
  assert "Which FedAvg model is scored decides the comparison here." in text
  same = [dict(r, test_accuracy=0.56 if r["round"] else 0.6) for r in server]
  _, text = _fedavg_both_ways(avgkd, clients + same, num_test=10_000)
  assert "Both scorings agree here." in text


def test_bad_settings_are_refused_naming_the_argument(tmp_path, capsys):
  with pytest.raises(ValueError, match="parts: expected names from verify, toy"):
    MainJobSettings(parts=("verify", "plots"))
  with pytest.raises(ValueError, match="toy_rounds: expected an integer >= 2, got 1"):
    MainJobSettings(toy_rounds=1)
  with pytest.raises(ValueError, match="rounds: expected an integer >= 1, got 0"):
    MainJobSettings(rounds=0)
  for flags, named in [(["--parts", "nope"], "--parts"), (["--rounds", "0"], "--rounds"),
                       (["--seed", "-1"], "--seed"), (["--seed", str(2**32)], "--seed")]:
    with pytest.raises(SystemExit) as exit_:
      main(["demo", "--out", str(tmp_path), *flags])
    assert exit_.value.code == 2
    assert f"argument {named}: expected" in capsys.readouterr().err
  assert not (tmp_path / "report.md").exists()


def test_fedkrr_demo_points_to_neural_demo_and_runs_nothing(tmp_path, capsys):
  assert fedkrr_main(["demo", "--out", str(tmp_path / "run"), "--parts", "toy"]) == 2
  err = capsys.readouterr().err
  assert "neural demo --out" in err and "--parts toy" in err
  assert not (tmp_path / "run").exists()
