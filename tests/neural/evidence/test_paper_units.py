"""Rows in the paper's units (``neural.evidence.paper_rounds``): AKD rounds, agent means, EKD's
even sums."""

import pytest

from neural import evidence


def _row(t, agent, acc, protocol, **extra):
  return {"round": t, "agent": agent, "protocol": protocol, "model": "cnn",
          "test_accuracy": acc, "test_loss": 1 - acc, **extra}


def test_an_akd_round_is_m_steps_and_its_value_the_agents_mean():
  # Two agents: step t trains agent t mod 2; the paper's round r is steps 2(r-1), 2(r-1)+1.
  accs = [0.9, 0.7, 0.6, 0.4, 0.3]   # the fifth step's round is not finished
  rows = [_row(t, t % 2, a, "akd") for t, a in enumerate(accs)]
  paper = evidence.paper_rounds(rows)
  assert [r["round"] for r in paper] == [1, 2]
  assert [r["steps"] for r in paper] == [[0, 1], [2, 3]]
  assert paper[0]["test_accuracy"] == pytest.approx(0.8)
  assert paper[1]["test_accuracy"] == pytest.approx(0.5)
  assert paper[1]["agent_accuracies"] == [0.6, 0.4]


def test_avgkd_and_fedavg_average_the_agents_and_leave_the_server_out():
  rows = [_row(0, 0, 0.5, "fedavg"), _row(0, 1, 0.7, "fedavg"), _row(0, "server", 0.1, "fedavg"),
          _row(1, 0, 0.8, "fedavg"), _row(1, 1, 0.6, "fedavg"), _row(1, "server", 0.1, "fedavg")]
  paper = evidence.paper_rounds(rows)
  assert [(r["round"], round(r["test_accuracy"], 6)) for r in paper] == [(1, 0.6), (2, 0.7)]
  assert all(r["agent"] == "mean of agents" for r in paper)


def test_ekd_shows_the_even_partial_sums_only():
  rows = []
  for t in range(5):
    rows.append(_row(t, "ensemble", 0.5 + 0.1 * t, "ekd"))
    rows += [_row(t, a, 0.3, "ekd", start=(a - t) % 2) for a in range(2)]
  paper = evidence.paper_rounds(rows)
  assert [(r["round"], r["steps"]) for r in paper] == [(1, [0]), (2, [2]), (3, [4])]
  assert [r["test_accuracy"] for r in paper] == pytest.approx([0.5, 0.7, 0.9])


def test_rows_of_methods_and_backfitting_pass_through():
  method_rows = [{"round": 0, "agent": 0, "method": "mhd", "test_accuracy": 0.3}]
  assert evidence.paper_rounds(method_rows) == method_rows
  backfit = [_row(0, "ensemble", 0.4, "backfit-gs")]
  assert evidence.paper_rounds(backfit) == backfit
  assert evidence.paper_rounds([]) == []


def test_a_run_is_plotted_in_either_unit(tmp_path, capsys):
  from neural._src.cli import main
  flags = ["--dataset", "digits", "--train-subset", "80", "--test-subset", "40", "--models",
           "mlp", "--tiny", "--protocol", "akd", "--rounds", "4", "--epochs", "1",
           "--no-progress"]
  assert main(["run", *flags, "--workdir", str(tmp_path / "paper")]) == 0
  out = capsys.readouterr().out
  assert "the paper's rounds 1-2 (mean of agents, last local epoch):" in out
  assert main(["run", *flags, "--units", "steps", "--workdir", str(tmp_path / "steps")]) == 0
  assert "the paper's rounds" not in capsys.readouterr().out
  for units in ("paper", "steps"):
    assert (tmp_path / units / "accuracy.png").stat().st_size > 0
  assert (tmp_path / "paper" / "metrics.jsonl").read_text() == \
      (tmp_path / "steps" / "metrics.jsonl").read_text()   # the units change only the view


def test_best_epoch_accuracy_is_averaged_when_asked_and_needs_the_rows():
  rows = [_row(0, 0, 0.5, "avgkd", best_epoch_test_accuracy=0.6),
          _row(0, 1, 0.7, "avgkd", best_epoch_test_accuracy=0.9)]
  best = evidence.paper_rounds(rows, accuracy="best")
  assert best[0]["test_accuracy"] == pytest.approx(0.75)
  assert best[0]["last_epoch_test_accuracy"] == pytest.approx(0.6)
  assert evidence.paper_rounds(rows)[0]["test_accuracy"] == pytest.approx(0.6)
  without = [_row(0, 0, 0.5, "avgkd"), _row(0, 1, 0.7, "avgkd")]
  with pytest.raises(ValueError, match="epoch_eval"):
    evidence.paper_rounds(without, accuracy="best")
  with pytest.raises(ValueError, match="accuracy: expected one of last, best"):
    evidence.paper_rounds(rows, accuracy="first")
