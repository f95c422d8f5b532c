"""benchmarks/mhd_study.py and benchmarks/feddkc_claims.py decide the papers' claims with
neural.evidence.judge: on made-up per-seed summaries (no training), each verdict is reached, each
effect is the statistic its claim names, and every claim of every study builds its effects."""

import importlib.util
from pathlib import Path
import sys

from fake_runs import write_run
import numpy as np
import pytest

import neural
from neural._src.evidence import rules

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
VERDICTS = {rules.REPRODUCED, rules.NOT_REPRODUCED, rules.NO_DIFFERENCE, rules.INCONCLUSIVE}


def _load(name):
  spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module   # dataclasses look their module up while it loads
  spec.loader.exec_module(module)
  return module


@pytest.fixture(scope="module")
def mhd():
  return _load("mhd_study")


@pytest.fixture(scope="module")
def feddkc():
  return _load("feddkc_claims")


# --- multi-headed distillation


def _mhd_summaries(mhd, study, seeds=3, points=(360, 120), seed=0):
  """Made-up summaries of every run of the study's config, one per seed: accuracies in
  [0.05, 0.95] per head, every hop distance a claim reads."""
  rng = np.random.default_rng(seed)
  runs = neural.load_spec(mhd.STUDIES[study]).expand({"seed": 0})
  out = []
  for _ in range(seeds):
    summary = {}
    for name, config in runs:
      heads = config.aux_heads + 1
      summary[name] = {
          "shared": rng.uniform(0.05, 0.95, heads), "private": rng.uniform(0.05, 0.95, heads),
          "reported": float(rng.uniform(0.05, 0.95)),
          "hops": {d: rng.uniform(0.05, 0.95, heads) for d in (1, 2, 3, -1)},
          "points": {"shared": points[0], "private": points[1]}}
    out.append(summary)
  return out


@pytest.mark.parametrize("study", ["table1", "ablation", "topology"])
def test_every_mhd_claim_builds_its_effects(mhd, study):
  summaries = _mhd_summaries(mhd, study)
  claims = mhd.CLAIMS[study]()
  assert claims
  for claim in claims:
    j = mhd.judge_claim(claim, summaries)
    assert j.verdict in VERDICTS, claim.text
    assert j.seeds == 3
    for effect, _, _ in j.effects:
      assert np.shape(effect.per_seed) == (3,)
      assert effect.n in (360, 120)
  table = mhd.claims_table(claims, dict(enumerate(summaries)))
  # two tables: a row per claim in each, and each its header and rule
  assert sum(line.startswith("| ") for line in table.splitlines()) == 2 * len(claims) + 4


def _mhd_claim(mhd, study, text):
  (claim,) = [c for c in mhd.CLAIMS[study]() if c.text.startswith(text)]
  return claim


def _with(summaries, run, kind, h, values):
  """The summaries with ``summaries[seed][run][kind][h]`` set to ``values[seed]``."""
  out = []
  for s, value in zip(summaries, values):
    s = {name: {**r, kind: np.array(r[kind], dtype=float)} for name, r in s.items()}
    s[run][kind][h] = value
    out.append(s)
  return out


@pytest.mark.parametrize("mhd_acc, isolated_acc, points, verdict", [
    ([0.60, 0.62, 0.58], [0.45, 0.46, 0.44], 360, rules.REPRODUCED),
    ([0.45, 0.46, 0.44], [0.60, 0.62, 0.58], 360, rules.NOT_REPRODUCED),
    # a tie on a test set so large that its binomial error is negligible
    ([0.600, 0.601, 0.599], [0.600, 0.600, 0.600], 10**7, rules.NO_DIFFERENCE),
    # a gain on average, inside the seeds' spread
    ([0.80, 0.45, 0.70], [0.55, 0.56, 0.54], 360, rules.INCONCLUSIVE),
])
def test_mhd_beats_isolated_reaches_each_verdict(mhd, mhd_acc, isolated_acc, points, verdict):
  claim = _mhd_claim(mhd, "table1", "MHD's last aux head beats isolated")
  summaries = _mhd_summaries(mhd, "table1", points=(points, points))
  summaries = _with(summaries, "skew=100.0__method=mhd", "shared", -1, mhd_acc)
  summaries = _with(summaries, "skew=100.0__method=mhd-isolated", "shared", 0, isolated_acc)
  j = mhd.judge_claim(claim, summaries)
  assert j.verdict == verdict
  # the same as judging the difference directly
  direct = neural.evidence.judge(neural.evidence.difference("d", mhd_acc, isolated_acc, points))
  assert (j.effects[0][1].effect, j.effects[0][1].noise) == pytest.approx(
      (direct.effects[0][1].effect, direct.effects[0][1].noise))


def test_mhd_topology_effects_are_the_statistics_the_claims_name(mhd):
  summaries = _mhd_summaries(mhd, "topology")
  last = {run: np.array([s[run]["shared"][-1] for s in summaries])
          for run in ("graph=islands", "graph=directed-ring", "graph=complete")}
  main = {run: np.array([s[run]["shared"][0] for s in summaries]) for run in last}
  close = _mhd_claim(mhd, "topology", "The baseline (complete graph) matches")
  (effect, _, _), = mhd.judge_claim(close, summaries).effects
  full, cyc, isl = last["graph=complete"], last["graph=directed-ring"], last["graph=islands"]
  np.testing.assert_allclose(effect.per_seed, np.abs(full - isl) - np.abs(full - cyc))
  aux = _mhd_claim(mhd, "topology", "The topology effect is on the aux heads")
  (effect, _, _), = mhd.judge_claim(aux, summaries).effects
  np.testing.assert_allclose(effect.per_seed, (cyc - isl) - np.abs(
      main["graph=directed-ring"] - main["graph=islands"]))
  # "best on Cycle-1, then Cycle-2, then Cycle-3": two differences, both must hold
  order = _mhd_claim(mhd, "topology", "Cycle: best on the direct teacher")
  j = mhd.judge_claim(order, summaries)
  assert [e.label for e, _, _ in j.effects] == ["Cycle-1 - Cycle-2", "Cycle-2 - Cycle-3"]
  assert all(e.n == 120 for e, _, _ in j.effects)   # peer accuracies: beta_priv's n


def test_mhd_summary_and_test_points(mhd):
  rows = [{"round": r, "test_accuracy": 0.5 + a, "head_accuracies": [0.4, 0.5 + a],
           "private_accuracies": [0.9, 0.8], "peer_accuracies": [[0.9, 0.3], [0.8, 0.2 + a]],
           "peer_hops": [0, 1] if a == 0 else [1, 0]}
          for r in (0, 1) for a in (0.0, 0.1)]
  s = mhd.summarise(rows, {"shared": 360, "private": 100})
  np.testing.assert_allclose(s["shared"], [0.4, 0.55])
  assert s["reported"] == pytest.approx(0.55)
  # each client's peer at hop 1, per head: client 0's peer 1 and client 1's peer 0
  np.testing.assert_allclose(s["hops"][1], [(0.3 + 0.9) / 2, (0.2 + 0.8) / 2])
  # iid labels: beta_priv weighs every class as the test set does, n is the test set's size
  config = neural.load_spec("mhd_small").expand({"seed": 0})[0][1].replace(skew=0.0)
  points = mhd.count_test_points(config)
  assert points["shared"] == len(neural.data.load_train_test(config)[3])
  assert 0.8 * points["shared"] < points["private"] <= 1.05 * points["shared"]
  skewed = mhd.count_test_points(config.replace(skew=100.0))
  assert skewed["private"] < 0.5 * skewed["shared"]   # about 3 primary digits of 10


# --- FedDKC


def _feddkc_summaries(gain1, gain5=None, seeds=3, clients=5, betas=(3.0, 0.5), noise=0.0,
                      seed=0):
  """Made-up summaries (%): FedGKT's clients at 50 (Top-1) and 80 (Top-5) plus noise, KKR
  and SKR ``gain1[level][seed]`` (a number: every level and seed) points above it."""
  rng = np.random.default_rng(seed)
  gain5 = gain1 if gain5 is None else gain5
  out = []
  for i in range(seeds):
    summary = {}
    for level, b in enumerate(betas):
      base = {1: 50 + noise * rng.standard_normal(clients),
              5: 80 + noise * rng.standard_normal(clients)}
      summary[b, "fedgkt"] = base
      for v in ("kkr", "skr"):
        g1, g5 = (np.broadcast_to(np.asarray(g, dtype=float), (len(betas), seeds))[level, i]
                  for g in (gain1, gain5))
        summary[b, v] = {1: base[1] + g1 + noise * rng.standard_normal(clients),
                         5: base[5] + g5 + noise * rng.standard_normal(clients)}
    out.append(summary)
  return out


def _feddkc_judgement(feddkc, summaries, text, n=300):
  rows = [(t, p, j) for t, p, j in feddkc.judge_claims(summaries, n) if t.startswith(text)]
  assert len(rows) == 1, text
  return rows[0][2]


@pytest.mark.parametrize("gain, noise, n, verdict", [
    # 300 test points: the binomial term alone is +- 5.7 points at 50%
    (8.0, 0.5, 300, rules.REPRODUCED),
    (-8.0, 0.5, 300, rules.NOT_REPRODUCED),
    (0.0, 0.01, 10**7, rules.NO_DIFFERENCE),
    # +8 points on average, but -2 .. +18 from seed to seed
    ([[18.0, -2.0, 8.0], [18.0, -2.0, 8.0]], 0.0, 300, rules.INCONCLUSIVE),
])
def test_feddkc_average_top1_reaches_each_verdict(feddkc, gain, noise, n, verdict):
  summaries = _feddkc_summaries(gain, noise=noise)
  j = _feddkc_judgement(feddkc, summaries, "KKR beats FedGKT in average Top-1", n)
  assert j.verdict == verdict
  (effect, e, _), = j.effects
  kkr = np.array([[s[b, "kkr"][1].mean() for b in (3.0, 0.5)] for s in summaries])
  gkt = np.array([[s[b, "fedgkt"][1].mean() for b in (3.0, 0.5)] for s in summaries])
  np.testing.assert_allclose(effect.per_seed, (kkr - gkt).mean(axis=1))
  assert effect.scale == 100 and effect.n == n


def test_every_feddkc_claim_builds_its_effects(feddkc):
  summaries = _feddkc_summaries(1.0, noise=2.0)
  rows = feddkc.judge_claims(summaries, 300)
  assert len(rows) == 10   # five claims for KKR and five for SKR
  for text, _, j in rows:
    assert j.verdict in VERDICTS, text
    assert j.seeds == 3
  table = neural.evidence.judgement_table(rows)
  assert "| KKR beats FedGKT (Top-1) at every level" in table


def test_feddkc_every_level_growth_and_most_clients(feddkc):
  # better by 10 points at beta 0.5, worse by 10 at beta 3.0: the gain grows, not at every
  # level
  summaries = _feddkc_summaries([[-10.0], [10.0]], noise=0.3)
  every = _feddkc_judgement(feddkc, summaries, "KKR beats FedGKT (Top-1) at every level")
  assert [v for _, _, v in every.effects] == [rules.NOT_REPRODUCED, rules.REPRODUCED]
  assert every.verdict == rules.NOT_REPRODUCED
  grows = _feddkc_judgement(feddkc, summaries, "KKR's Top-1 gain grows")
  assert grows.verdict == rules.REPRODUCED
  assert grows.effects[0][0].per_seed == pytest.approx([20.0] * 3, abs=2.0)
  most = _feddkc_judgement(feddkc, summaries, "KKR improves most clients' Top-1")
  (effect, _, _), = most.effects
  share = [np.mean(np.concatenate([s[b, "kkr"][1] > s[b, "fedgkt"][1] for b in (3.0, 0.5)]))
           for s in summaries]
  np.testing.assert_allclose(effect.per_seed, np.array(share) - 0.5)
  assert effect.n == 0


def test_feddkc_summaries_from_final_rows(feddkc):
  rows = [{"round": r, "agent": a, "test_accuracy": 0.1 * r + 0.01 * a,
           "test_top5_accuracy": 0.5} for r in (0, 1) for a in (1, 0)]
  rows.append({"round": 1, "agent": "server", "test_accuracy": 0.9,
               "test_top5_accuracy": 0.9})
  final = feddkc.final_client_rows(rows)
  assert [r["agent"] for r in final] == [0, 1]
  results = {(b, v, s): final for b in (3.0, 0.5) for v in feddkc.VARIANTS for s in (0, 1)}
  summaries = feddkc.summarise(results, [0, 1])
  assert len(summaries) == 2
  np.testing.assert_allclose(summaries[1][0.5, "kkr"][1], [10.0, 11.0])
  np.testing.assert_allclose(summaries[0][3.0, "fedgkt"][5], [50.0, 50.0])


# --- every claim script reads runs through neural.runs.read_seeds: finished runs only


def _ddist_rows(accuracy, rounds):
  """A D-Distillation sweep's run: four devices and the mean row (with consensus) a round."""
  rows = []
  for t in range(rounds):
    rows += [{"round": t, "agent": a, "model": "mlp", "test_accuracy": accuracy,
              "comm_floats_total": 10 * (t + 1)} for a in range(4)]
    rows.append({"round": t, "agent": "mean", "model": "mlp", "test_accuracy": accuracy,
                 "consensus_error": 0.8 ** t})
  return rows


def _ddist_sweep(root, seeds=("seed=0", "seed=1", "seed=2"), rounds=6, cut=None):
  """``root/SEED/method=M`` for the three methods; ``cut = (seed, method, done, logged)``
  stops that run after ``done`` rounds (its config still has ``rounds``)."""
  for s in seeds:
    for i, m in enumerate(("d-distillation", "d-sgd", "silo-sgd")):
      done = logged = rounds
      if cut is not None and cut[:2] == (s, f"method={m}"):
        done, logged = cut[2:]
      write_run(root / s / f"method={m}", _ddist_rows(0.9 - 0.1 * i, logged), rounds, done)


def _repshare_sweep(root, seeds=("seed=0", "seed=1", "seed=2"), rounds=12, cut=None):
  for s in seeds:
    for name in ("n2_il", "n2_ours_code"):
      done = logged = rounds
      if cut is not None and cut[:2] == (s, name):
        done, logged = cut[2:]
      rows = [{"round": t, "agent": a, "test_accuracy": 0.5 + 0.01 * t}
              for t in range(logged) for a in range(2)]
      write_run(root / s / name, rows, rounds, done)


def _main(module, argv, monkeypatch, capsys):
  """``(exit status, stdout, stderr)`` of the script's ``main`` with ``argv``."""
  monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *map(str, argv)])
  try:
    module.main()
    code = 0
  except SystemExit as e:
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err


@pytest.fixture(scope="module")
def ddist():
  return _load("ddist_claims")


@pytest.fixture(scope="module")
def repshare():
  return _load("repshare_table")


def _one_line_refusal(code, out, err, *words):
  assert code == 2
  assert "| reproduced" not in out and "decided over" not in out and "statements" not in out
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
  for w in words:
    assert w in err, (w, err)


# a run stopped by --max-rounds (its checkpoint and metrics at round 1 of 6), one killed
# between the metrics append and the checkpoint (rows of round 2 logged, checkpoint at
# round 2), and one cut to round 0 with its checkpoint (the old scripts took each
# run's last logged round as its last)
@pytest.mark.parametrize("done, logged", [(1, 1), (2, 3), (0, 1)])
@pytest.mark.parametrize("script", ["ddist", "repshare"])
def test_claim_scripts_refuse_an_unfinished_run(script, done, logged, tmp_path, monkeypatch,
                                                capsys, request):
  module = request.getfixturevalue(script)
  if script == "ddist":
    _ddist_sweep(tmp_path, cut=("seed=1", "method=d-sgd", done, logged))
    argv, run = ["--workdir", tmp_path], "method=d-sgd"
  else:
    _repshare_sweep(tmp_path, cut=("seed=1", "n2_il", done, logged))
    argv, run = ["--workdir", tmp_path], "n2_il"
  code, out, err = _main(module, argv, monkeypatch, capsys)
  _one_line_refusal(code, out, err, f"seed=1/{run}", f"unfinished: {done} of its")


@pytest.mark.parametrize("script", ["ddist", "repshare"])
def test_claim_scripts_refuse_seeds_of_different_rounds(script, tmp_path, monkeypatch, capsys,
                                                        request):
  module = request.getfixturevalue(script)
  sweep = _ddist_sweep if script == "ddist" else _repshare_sweep
  sweep(tmp_path, seeds=("seed=0", "seed=1"), rounds=6)
  sweep(tmp_path, seeds=("seed=2",), rounds=4)   # finished, but with other rounds
  code, out, err = _main(module, ["--workdir", tmp_path], monkeypatch, capsys)
  _one_line_refusal(code, out, err, "its seeds have different rounds", "seed=2")


@pytest.mark.parametrize("script", ["ddist", "repshare"])
def test_claim_scripts_count_only_seed_folders_named_by_an_integer(script, tmp_path,
                                                                   monkeypatch, capsys, request):
  module = request.getfixturevalue(script)
  sweep = _ddist_sweep if script == "ddist" else _repshare_sweep
  sweep(tmp_path, seeds=("seed=0", "seed=1", "seed=01", "seed=0.bak", "seed=1 copy",
                         "seed=+2", "seed="))
  assert list(neural.runs.seed_folders(tmp_path)) == ["seed=0", "seed=1"]
  code, out, err = _main(module, ["--workdir", tmp_path], monkeypatch, capsys)
  assert code == 0, err
  assert "seed=0, seed=1" in out and "seed=0, seed=1, " not in out
  assert "seed=01" not in out and "0.bak" not in out


@pytest.mark.parametrize("script", ["ddist", "repshare"])
@pytest.mark.parametrize("case", ["missing", "file", "empty", "empty metrics", "no config"])
def test_claim_scripts_say_one_line_on_a_missing_or_empty_workdir(script, case, tmp_path,
                                                                  monkeypatch, capsys, request):
  module = request.getfixturevalue(script)
  workdir = tmp_path / "runs"
  if case == "file":
    workdir.write_text("not a folder")
  elif case == "empty":
    (workdir / "seed=0").mkdir(parents=True)
  elif case == "empty metrics":
    run = workdir / "seed=0" / ("method=d-sgd" if script == "ddist" else "n2_il")
    write_run(run, [], rounds=6)
  elif case == "no config":
    run = workdir / "seed=0" / ("method=d-sgd" if script == "ddist" else "n2_il")
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"round": 0, "agent": 0, "test_accuracy": 0.5}\n')
  code, out, err = _main(module, ["--workdir", workdir], monkeypatch, capsys)
  _one_line_refusal(code, out, err, str(workdir))
  if case == "empty metrics":
    assert "unfinished: 0 of its 6 rounds" in err


def test_read_run_tells_a_finished_run_from_an_unfinished_one(tmp_path):
  rows = [{"round": t, "agent": 0, "test_accuracy": 0.5} for t in range(3)]
  finished = neural.read_run(write_run(tmp_path / "a", rows))
  assert finished.finished and (finished.done, finished.rounds) == (3, 3)
  assert finished.rows == rows
  cut = neural.read_run(write_run(tmp_path / "b", rows, rounds=5), finished=False)
  assert not cut.finished and (cut.done, cut.rounds) == (3, 5)
  with pytest.raises(neural.ExperimentError, match="unfinished: 3 of its 5 rounds done"):
    neural.read_run(tmp_path / "b")
  # metrics that are not the checkpoint's (a row changed by hand)
  run = write_run(tmp_path / "c", rows)
  (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().replace("0.5", "0.9"))
  with pytest.raises(neural.ExperimentError, match="does not match its checkpoint"):
    neural.read_run(run)
  # a finished run on read-only media reads back (nothing written, no lock taken)
  run = write_run(tmp_path / "d", rows)
  for p in [*run.iterdir(), run]:
    p.chmod(0o555 if p.is_dir() else 0o444)
  try:
    assert neural.read_run(run).finished
    assert not (run / ".lock").exists()
  finally:
    run.chmod(0o755)
