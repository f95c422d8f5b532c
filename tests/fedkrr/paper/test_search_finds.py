"""``fedkrr search`` end to end: the known counterexamples are found and replay through
``fedkrr run``; an identity holds on everything searched. (Apart from test_search.py, the
longest file of the suite, so that the two test workers can share the searches.)"""

import json

import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main
from fedkrr._src.paper import search
from fedkrr._src.paper.search_claims import BY_ID
from fedkrr._src.problem_io import load_problem


def _fedkrr_run(tmp_path, problem, *args):
  out = tmp_path / f"run{len(list(tmp_path.glob('run*.npz')))}.npz"
  assert main(["run", "--problem", str(problem), *args, "--out", str(out),
               "--no-progress"]) == 0
  return np.load(out)["predictions"]


def _rel(a, b):
  return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


def _replays_through_run(claim, path, tmp_path):
  """What the counterexample breaks, shown by `fedkrr run` on the saved file alone."""
  problem, x_eval = load_problem(path)
  if claim == "appg-ekd-central":
    ekd = _fedkrr_run(tmp_path, path, "--protocol", "ekd", "--rounds", "100",
                      "--method", "simulate")
    central = _fedkrr_run(tmp_path, path, "--protocol", "central")
    return _rel(ekd[-1], central[0]) > 1e-6
  if claim == "prop5-finite-sums":
    avgkd = _fedkrr_run(tmp_path, path, "--protocol", "avgkd", "--rounds", "4",
                        "--method", "simulate")
    printed = [fedkrr.rates.avgkd_partial_sums_as_printed(problem, t, x_eval) for t in (1, 2, 3)]
    return max(_rel(p, avgkd[t, 0]) for t, p in zip((1, 2, 3), printed)) > 1e-8
  if claim == "prop2-akd-to-zero":
    akd = _fedkrr_run(tmp_path, path, "--protocol", "akd", "--rounds", "100",
                      "--method", "simulate")
    return np.max(np.abs(akd[-2:])) > np.max(np.abs(akd[:2]))   # grows instead of decaying
  raise AssertionError(claim)


@pytest.mark.parametrize("claim", ["appg-ekd-central", "prop5-finite-sums", "prop2-akd-to-zero"])
def test_the_search_finds_the_known_counterexamples_and_they_replay(claim, tmp_path, x64):
  result = search.search_claim(claim, budget_seconds=120, seed=0, out=tmp_path,
                               max_instances=3000)
  assert not result.holds and result.counterexample == f"{claim}.npz"
  assert result.counterexample_residual > result.tolerance
  assert search.confirms(result.counterexample_residual, result.replay_residual,
                         result.tolerance)
  record = json.loads((tmp_path / f"{claim}.json").read_text())
  for key in ("claim", "holds", "searched", "worst_residual", "counterexample", "description"):
    assert key in record
  assert record["holds"] is False and record["searched"] >= 1 and record["claim"] == claim
  # the saved problem is the counterexample: its residual, recomputed from the file, violates
  problem, x_eval = load_problem(tmp_path / result.counterexample)
  assert float(BY_ID[claim].residual(problem, x_eval)) > result.tolerance
  assert _replays_through_run(claim, tmp_path / result.counterexample, tmp_path)


def test_a_search_on_an_identity_finds_nothing(tmp_path, x64):
  result = search.search_claim("prop4-rate-cos2", budget_seconds=60, seed=1, out=tmp_path,
                               max_instances=200)
  assert result.holds and result.counterexample is None and result.searched >= 200
  assert 0.0 <= result.worst_residual <= result.tolerance
  assert not list(tmp_path.glob("*.npz"))
  assert json.loads((tmp_path / "prop4-rate-cos2.json").read_text())["holds"] is True
