"""The claims of benchmarks/repshare_table.py and benchmarks/ddist_claims.py: each
statement built from a complete synthetic input, a statement reaching every verdict,
and the scripts end to end on fake run directories of several seeds (no training)."""

import importlib.util
from pathlib import Path
import sys

from fake_runs import write_run
import numpy as np
import pytest

import neural
from neural._src.evidence import rules

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SEEDS = 3


def load(script: str):
  """A benchmark script as a module (benchmarks/ is not a package)."""
  spec = importlib.util.spec_from_file_location(f"paper_claims_{script}",
                                                BENCHMARKS / f"{script}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


repshare = load("repshare_table")
ddist = load("ddist_claims")


# (effect per seed, the statement's expected verdict, test points): a clear gain, a
# clear loss, a tie on a test set large enough for the interval to lie within the
# minimum effect, a gain inside the seeds' noise.
CASES = {
    "reproduced": ([0.05, 0.06, 0.05], rules.REPRODUCED, 360),
    "not reproduced": ([-0.05, -0.06, -0.05], rules.NOT_REPRODUCED, 360),
    "tie": ([0.0, 0.001, -0.001], rules.NO_DIFFERENCE, 10**7),
    "noisy": ([0.10, -0.05, 0.04], rules.INCONCLUSIVE, 360),
}


# --- representation sharing (Table 1, Fig. 3) ---

def table1_input(ours_minus_il=(0.02, 0.02, 0.02)):
  """``{(method, N): per seed}``: every run of repshare_small, ours_code = IL + the gain
  at N = 2, 5, 10."""
  base = {"il": 0.85, "fedavg": 0.86, "fd": 0.87, "fd_code": 0.88, "ours": 0.10}
  final = {("cl", 1): np.full(SEEDS, 0.95)}
  for size, gain in zip(repshare.SIZES, ours_minus_il):
    for method, acc in base.items():
      final[method, size] = np.full(SEEDS, acc)
    final["ours_code", size] = final["il", size] + gain
  return final


def test_every_table1_claim_builds_from_a_complete_input():
  final = table1_input()
  rows = repshare.table1_claims(final, final, 360)
  # ours_code and ours over IL and FedAvg (4), the growth, FL < IL, CL, and per FD
  # variant: close at N = 2 and 5, beats at N = 10, converges more slowly (2 x 4)
  assert len(rows) == 4 + 3 + 8
  assert len({statement for statement, _, _ in rows}) == len(rows)
  for statement, paper, judgement in rows:
    assert judgement.verdict in rules.VERDICTS, statement
    assert paper and judgement.seeds == SEEDS


def test_a_missing_run_leaves_out_only_its_statements():
  final = {k: v for k, v in table1_input().items() if k[0] != "fedavg"}
  statements = [s for s, _, _ in repshare.table1_claims(final, {}, 360)]
  assert not any("FedAvg" in s or "round" in s for s in statements)
  assert any(s.startswith("`ours_code` beats IL") for s in statements)


@pytest.mark.parametrize("case", CASES)
def test_ours_beats_il_reaches_each_verdict(case):
  gain, verdict, n = CASES[case]
  final = table1_input()
  for size in repshare.SIZES:
    final["ours_code", size] = final["il", size] + np.asarray(gain)
  (judgement,) = [j for s, _, j in repshare.table1_claims(final, final, n)
                  if s == "`ours_code` beats IL at N = 2, 5 and 10"]
  assert judgement.verdict == verdict
  assert len(judgement.effects) == 3


def test_the_text_variant_at_chance_is_not_reproduced():
  rows = repshare.table1_claims(table1_input(), table1_input(), 360)
  (judgement,) = [j for s, _, j in rows if s == "`ours` beats IL at N = 2, 5 and 10"]
  assert judgement.verdict == rules.NOT_REPRODUCED


def test_the_gap_over_il_grows_with_n():
  rows = repshare.table1_claims(table1_input((0.01, 0.03, 0.06)), {}, 360)
  (judgement,) = [j for s, _, j in rows if s.startswith("the gain of `ours_code` over IL")]
  assert judgement.verdict == rules.REPRODUCED
  assert judgement.effects[0][1].effect == pytest.approx(0.05)


def lambda_input(gains):
  """``{(lambda_KD, lambda_disc): per seed}`` of the 3 x 3 grid: IL at 0.90 + the gain."""
  return {(kd, disc): 0.90 + np.asarray(gains.get((kd, disc), [0.0] * SEEDS))
          for kd in (0.0, 1.0, 10.0) for disc in (0.0, 1.0, 10.0)}


def test_every_lambda_claim_builds_and_disc_alone_does_not_help():
  gains = {(10.0, 0.0): [0.05, 0.051, 0.049], (10.0, 1.0): [0.09, 0.09, 0.091]}
  rows = repshare.lambda_claims(lambda_input(gains), 360)
  verdicts = {s: j.verdict for s, _, j in rows}
  assert len(rows) == 4
  assert verdicts["lambda_KD = 10, lambda_disc = 1 beats IL"] == rules.REPRODUCED
  assert verdicts["L_KD alone (lambda_KD = 10) beats IL"] == rules.REPRODUCED
  assert verdicts["adding L_disc (lambda_disc = 1) to L_KD improves"] == rules.REPRODUCED
  (alone,) = [j for s, _, j in rows if s.startswith("L_disc alone")]
  assert len(alone.effects) == 2   # lambda_disc 1 and 10
  assert repshare.NO_GAIN == rules.TOL   # the rules' "does not improve"
  # no gain at all: at or below 0.03 once the test set's error allows it (at n = 360
  # and p = 0.9 the half-width alone is 0.031)
  assert alone.verdict == rules.INCONCLUSIVE
  (alone,) = [j for s, _, j in repshare.lambda_claims(lambda_input(gains), 10**4)
              if s.startswith("L_disc alone")]
  assert alone.verdict == rules.REPRODUCED
  helps = {(0.0, 1.0): [0.08, 0.09, 0.08]}
  (alone,) = [j for s, _, j in repshare.lambda_claims(lambda_input(helps), 360)
              if s.startswith("L_disc alone")]
  assert alone.verdict == rules.NOT_REPRODUCED


def repshare_rows(ours_code: float, rounds: int = 12):
  """Metric rows of a run whose clients' mean accuracy rises to ``ours_code``."""
  curve = np.linspace(0.1, ours_code, rounds)
  return [{"round": t, "agent": a, "test_accuracy": float(curve[t] + (a - 0.5) * 0.01)}
          for t in range(rounds) for a in range(2)]


def test_repshare_table_reads_seeds_and_decides(tmp_path, monkeypatch, capsys):
  for s in range(SEEDS):
    for (method, size), acc in table1_input((0.06, 0.07, 0.08)).items():
      name = "cl" if method == "cl" else f"n{size}_{method}"
      write_run(tmp_path / f"seed={s}" / name, repshare_rows(float(acc[s]) + 0.001 * s))
  seeds, curves = repshare.read_curves(tmp_path)
  assert seeds == ["seed=0", "seed=1", "seed=2"]
  assert curves["n2_il"].shape == (SEEDS, 12)
  assert curves["n2_il"][:, -1] == pytest.approx([0.85, 0.851, 0.852])
  monkeypatch.setattr(sys, "argv", ["repshare_table.py", "--workdir", str(tmp_path)])
  repshare.main()
  out = capsys.readouterr().out
  assert "il            0.851 ±0.001" in out
  assert "| `ours_code` beats IL at N = 2, 5 and 10 |" in out
  assert "| 3 | reproduced |" in out
  assert out.rstrip().endswith("not reproduced.")


def test_repshare_table_still_reads_one_workdir(tmp_path, monkeypatch, capsys):
  gains = {(10.0, 1.0): [0.05] * SEEDS}
  for (kd, disc), acc in lambda_input(gains).items():
    write_run(tmp_path / f"lambda_kd={kd}__lambda_disc={disc}", repshare_rows(float(acc[0])))
  monkeypatch.setattr(sys, "argv", ["repshare_table.py", "--workdir", str(tmp_path)])
  repshare.main()
  out = capsys.readouterr().out
  assert "final mean test accuracy minus lambda_KD = lambda_disc = 0 (0.900)" in out
  assert "+0.050" in out
  assert "| lambda_KD = 10, lambda_disc = 1 beats IL |" in out
  assert "| 1 |" in out   # one seed: the binomial term only


def test_an_unfinished_seed_is_named(tmp_path):
  write_run(tmp_path / "seed=0" / "n2_il", repshare_rows(0.9, rounds=12))
  write_run(tmp_path / "seed=1" / "n2_il", repshare_rows(0.9, rounds=5))
  with pytest.raises(neural.ExperimentError, match="n2_il: its seeds have different rounds"):
    repshare.read_curves(tmp_path)


# --- D-Distillation (Fig. 2, Lemma 4, Fig. 3) ---

FIG2 = {"d-distillation": [0.87, 0.86, 0.88], "d-sgd": [0.94, 0.93, 0.94],
        "silo-sgd": [0.79, 0.80, 0.78]}


def test_every_fig2_claim_builds_from_a_complete_input():
  rows = ddist.fig2_claims(FIG2, [0.0125, 0.013, 0.012], [0.006, 0.0065, 0.0058], 360)
  verdicts = [j.verdict for _, _, j in rows]
  assert verdicts == [rules.REPRODUCED, rules.NOT_REPRODUCED, rules.REPRODUCED]
  (_, evidence, _), = rows[2][2].effects
  assert evidence.effect == pytest.approx(np.mean([1 - 0.006 / 0.0125, 1 - 0.0065 / 0.013,
                                                   1 - 0.0058 / 0.012]))
  assert evidence.se == 0.0   # a ratio of consensus errors: no test points


@pytest.mark.parametrize("case", CASES)
def test_beats_silo_sgd_reaches_each_verdict(case):
  gain, verdict, n = CASES[case]
  accuracy = dict(FIG2, **{"d-distillation": np.asarray(FIG2["silo-sgd"]) + gain})
  rows = ddist.fig2_claims(accuracy, [1.0] * 3, [0.5] * 3, n)
  assert rows[0][0] == "D-Distillation beats Silo-SGD (Fig. 2)"
  assert rows[0][2].verdict == verdict


def fig3_input(left_gain, right_gain):
  accuracy = {}
  for panel, gain in (("two_models", left_gain), ("four_models", right_gain)):
    accuracy[panel, "d-sgd"] = np.array([0.50, 0.51, 0.52])
    accuracy[panel, "silo-sgd"] = np.array([0.45, 0.46, 0.44])
    accuracy[panel, "d-distillation"] = accuracy[panel, "d-sgd"] + gain
  return accuracy


def test_every_fig3_claim_builds_from_a_complete_input():
  rows = ddist.fig3_claims(fig3_input(0.08, 0.16), 360)
  assert [j.verdict for _, _, j in rows] == [rules.REPRODUCED] * 4
  rows = ddist.fig3_claims(fig3_input(-0.08, -0.16), 360)
  assert [j.verdict for _, _, j in rows][:3] == [rules.NOT_REPRODUCED] * 3


def ddist_rows(accuracy: float, rounds: int, models=("mlp",), consensus=None):
  """Metric rows of a D-Distillation run: devices, then the mean row."""
  rows = []
  for t in range(rounds):
    extra = {} if consensus is None else {"consensus_error": consensus * 0.8 ** t}
    devices = [{"round": t, "agent": a, "model": models[a % len(models)],
                "test_accuracy": accuracy + (0.02 if a % 2 else -0.02),
                "comm_floats_total": 1000 * (t + 1), **extra} for a in range(4)]
    rows += devices + [{"round": t, "agent": "mean", "model": "+".join(models),
                        "test_accuracy": accuracy, **extra}]
  return rows


def test_ddist_claims_reads_seeds_and_decides(tmp_path, monkeypatch, capsys):
  for s in range(SEEDS):
    for method, acc in FIG2.items():
      write_run(tmp_path / "ddist" / f"seed={s}" / f"method={method}",
                ddist_rows(acc[s], 6, consensus=0.0125 if method == "d-distillation" else None))
    for (panel, method), acc in fig3_input(-0.08, -0.16).items():
      write_run(tmp_path / "fig3" / f"seed={s}" / f"{panel}__method={method}",
                ddist_rows(float(acc[s]), 4, models=("lenet5", "resnet8")))
  results = ddist.read_seeds(tmp_path / "ddist")
  assert list(results) == ["seed=0", "seed=1", "seed=2"]
  run = results["seed=0"]["method=d-distillation"]
  assert run.accuracy == pytest.approx(0.87)
  assert run.consensus == pytest.approx(tuple(0.0125 * 0.8 ** t for t in range(6)))
  assert run.comm_total == 6000
  monkeypatch.setattr(sys, "argv", ["ddist_claims.py", "--workdir", str(tmp_path / "ddist"),
                                    "--fig3-workdir", str(tmp_path / "fig3")])
  ddist.main()
  out = capsys.readouterr().out
  assert "d-distillation  0.870 ± 0.010" in out
  assert "lenet5 0.410, resnet8 0.450" in out   # d-sgd - 0.08 -/+ 0.02, over the seeds
  assert "| D-Distillation beats Silo-SGD (Fig. 2) |" in out
  assert "relative drop of consensus_error +0.672" in out   # 1 - 0.8^5
  assert out.rstrip().endswith("2 reproduced, 0 no difference, 0 inconclusive, "
                               "5 not reproduced.")


def test_ddist_claims_names_a_missing_run(tmp_path):
  write_run(tmp_path / "seed=0" / "method=d-sgd", ddist_rows(0.9, 2))
  results = ddist.read_seeds(tmp_path)
  with pytest.raises(neural.ExperimentError, match="method=d-distillation"):
    ddist.report_fig2(results, 360)
