"""``fedkrr search``: known counterexamples are found and replay through ``fedkrr run``,
identities hold on everything searched, shipped findings still break their claims."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from fedkrr._src import search
from fedkrr._src import search_space as space_lib
from fedkrr._src.cli import main
from fedkrr._src.problem_io import load_problem
from fedkrr._src.search_claims import BY_ID
from fedkrr._src.verify import CHECKS


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
    printed = [fedkrr.avgkd_partial_sums_as_printed(problem, t, x_eval) for t in (1, 2, 3)]
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


def test_every_claim_of_verify_has_a_search_with_its_id():
  claims = {c.id for c in CHECKS if c.kind == "claim"}
  assert set(search.search_ids()) == claims
  assert all(s.id in {c.id for c in CHECKS} for s in search.SEARCHES)


def test_shipped_findings_cover_every_claim_and_their_counterexamples_still_break(x64):
  found = {r.claim: r for r in fedkrr.known_findings()}
  assert set(found) == set(search.search_ids())
  for claim, result in found.items():
    assert result.holds == (result.counterexample is None), claim
    if result.holds:
      continue
    spec = BY_ID[claim]
    problem, x_eval = load_problem(fedkrr.findings_dir() / result.counterexample)
    value = float(spec.residual(problem, x_eval))
    assert value > spec.tolerance, claim
    assert search.confirms(value, float(spec.replay(problem, x_eval)), spec.tolerance), claim


def test_verify_rows_say_what_the_search_found():
  rows = fedkrr.run_checks(seeds=(0,), only="prop5-finite-sums", quick=True)
  assert rows[0].search == "counterexample (prop5-finite-sums.npz)"
  assert "counterexample (prop5-finite-sums.npz)" in fedkrr.checks_table(rows)
  assert search.search_note(None) == "not searched"


def test_a_violation_stands_only_if_the_independent_route_agrees():
  assert search.confirms(1.2, 1.19, 1.0)
  assert not search.confirms(1.2, 0.99, 1.0)           # the replay does not exceed the tolerance
  assert not search.confirms(1.2e-3, 3.4e-5, 1e-6)     # both routes are rounding: they disagree
  assert not search.confirms(1.2, float("nan"), 1.0)
  # a radius within rounding of 1: the routes agree to 5e-10, but the margin is 1e-9
  assert not search.confirms(1.0 + 3e-10, 1.0 - 2e-10, 1.0 - 1e-9)


def test_shrinking_keeps_the_parameters_consistent_with_the_family(x64):
  rng = np.random.default_rng(0)
  space = space_lib.Space(agents=(2, 3))
  family = space_lib.Family((3, 2, 2), 2, (("rbf", ()), ("laplace", ()), ("linear", ())), False)
  params = space_lib.take(space_lib.draw_params(family, [(0.5,), (0.3,), ()], rng, 2), 0)
  seen = set()
  for fam, par in space_lib.shrink_candidates(family, params, space):
    problem = fam.problem(par)
    assert problem.sizes == fam.sizes and problem.xs[0].shape[1] == fam.dim
    assert len(problem.kernels) == fam.num_agents and par["x_eval"].shape[1] == fam.dim
    assert space_lib.size_key(fam) < space_lib.size_key(family)
    seen.add((fam.sizes, fam.dim))
  assert ((2, 2, 2), 2) in seen and ((3, 2), 2) in seen and ((3, 2, 2), 1) in seen


def test_nearly_singular_gram_matrices_are_skipped_at_zero_ridge(x64):
  family = space_lib.Family((2, 2), 1, (("rbf", ()),), True)
  x = np.array([[0.0], [1.0]])
  params = {"xs": (x, x + 2.0), "ys": (np.ones(2), np.ones(2)), "x_eval": x,
            "log_k": ((np.log(1.0),),), "log_ridge": np.asarray(0.0)}
  assert bool(space_lib.conditioned(family, family.problem(params), True))
  close = dict(params, xs=(np.array([[0.0], [1e-5]]), x + 2.0))   # two points 1e-5 apart
  assert not bool(space_lib.conditioned(family, family.problem(close), True))
  assert not bool(space_lib.conditioned(family, family.problem(close), False))


def test_bad_arguments_name_what_was_expected(tmp_path, x64):
  with pytest.raises(ValueError, match="claim: unknown id 'prop99'.*prop2-akd-to-zero"):
    search.search_claim("prop99", 10)
  with pytest.raises(ValueError, match="budget_seconds: expected a number of seconds > 0"):
    search.search_claim("prop2-akd-to-zero", 0)
  with pytest.raises(ValueError, match="max_instances"):
    search.search_claim("prop2-akd-to-zero", 10, max_instances=0)
  not_a_dir = tmp_path / "file"
  not_a_dir.write_text("")
  assert main(["search", "--claim", "prop2-akd-to-zero", "--budget-seconds", "1",
               "--out", str(not_a_dir)]) == 2
  assert main(["search", "--claim", "nope", "--budget-seconds", "1",
               "--out", str(tmp_path / "d")]) == 2


def test_search_needs_float64(monkeypatch):
  import jax
  monkeypatch.setattr(jax.config, "read", lambda name: False)
  with pytest.raises(ValueError, match="needs float64"):
    search.search_claim("prop2-akd-to-zero", 1)


def test_the_command_writes_the_json_and_prints_the_table(tmp_path, capsys, x64):
  out = tmp_path / "found"
  # prop2-akd-to-zero: the claim whose counterexample the search finds fastest
  assert main(["search", "--claim", "prop2-akd-to-zero", "--budget-seconds", "60",
               "--max-instances", "2000", "--out", str(out), "--no-progress"]) == 0
  printed = capsys.readouterr().out
  assert "| prop2-akd-to-zero | Prop. II | NO |" in printed and "1 broken" in printed
  assert (out / "prop2-akd-to-zero.json").exists() and (out / "prop2-akd-to-zero.npz").exists()
  problem, _ = load_problem(out / "prop2-akd-to-zero.npz")
  assert problem.num_agents == 2 and jnp.isfinite(problem.ridge)
