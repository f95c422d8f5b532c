"""``fedkrr search``: shipped findings still break their claims; one search per claim of
verify; shrinking, skipping, bad arguments and the command. (The searches that must find or
not find: test_search_finds.py.)"""


import json

import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main
from fedkrr._src.paper import search
from fedkrr._src.paper import search_space as space_lib
from fedkrr._src.paper.search_claims import BY_ID
from fedkrr._src.paper.verify import CHECKS
from fedkrr._src.problem_io import load_problem


def test_every_claim_of_verify_has_a_search_with_its_id():
  claims = {c.id for c in CHECKS if c.kind == "claim"}
  assert set(search.search_ids()) == claims
  assert all(s.id in {c.id for c in CHECKS} for s in search.SEARCHES)


def test_shipped_findings_cover_every_claim_and_their_counterexamples_still_break(x64):
  found = {r.claim: r for r in fedkrr.paper.known_findings()}
  assert set(found) == set(search.search_ids())
  for claim, result in found.items():
    assert result.holds == (result.counterexample is None), claim
    if result.holds:
      continue
    spec = BY_ID[claim]
    problem, x_eval = load_problem(fedkrr.paper.findings_dir() / result.counterexample)
    value = float(spec.residual(problem, x_eval))
    assert value > spec.tolerance, claim
    assert search.confirms(value, float(spec.replay(problem, x_eval)), spec.tolerance), claim


def test_verify_rows_say_what_the_search_found():
  rows = fedkrr.paper.run_checks(seeds=(0,), only="prop5-finite-sums", quick=True)
  assert rows[0].search == "counterexample (prop5-finite-sums.npz)"
  assert "counterexample (prop5-finite-sums.npz)" in fedkrr.paper.checks_table(rows)
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


def test_a_tiny_budget_still_searches_one_family(x64):
  """A budget of 1e-6 s: the result rests on instances (not "holds" after none, with a
  worst residual of -inf)."""
  claim = next(i for i in search.search_ids() if i != "prop2-akd-to-zero")
  result = search.search_claim(claim, 1e-6, max_instances=1)
  assert result.searched >= 1
  assert np.isfinite(result.worst_residual) or not result.holds
  json.dumps(result.as_dict(), allow_nan=False)
