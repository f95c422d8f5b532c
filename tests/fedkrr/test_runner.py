"""``fedkrr.run``: the one front door picks a path, and every path gives the same rounds."""

import numpy as np
import numpy_reference  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr

RNG = np.random.default_rng(11)
XS = [RNG.normal(size=(9, 2)), RNG.normal(size=(7, 2)) + 1.0, RNG.normal(size=(6, 2)) - 1.0]
YS = [RNG.normal(size=9), RNG.normal(size=7), RNG.normal(size=6)]
X_EVAL = RNG.normal(size=(5, 2))
KERNELS = [fedkrr.RBF(0.5), fedkrr.Laplace(0.6), fedkrr.RBF(1.2)]
NP_KERNELS = [numpy_reference.make_kernel("rbf", gamma=0.5),
              numpy_reference.make_kernel("laplace", gamma=0.6),
              numpy_reference.make_kernel("rbf", gamma=1.2)]


@pytest.fixture
def problem(x64):
  return fedkrr.make_problem(XS, YS, KERNELS, 0.05)


@pytest.mark.parametrize("protocol", fedkrr.PROTOCOLS)
def test_every_path_gives_the_literal_rounds(problem, protocol, assert_close):
  """Closed form and literal simulation agree round by round, and with the NumPy
  reference; the closed form is ``fedkrr.trajectory`` itself."""
  runs = {m: fedkrr.run(problem, protocol, 6, X_EVAL, method=m)
          for m in ("closed-form", "simulate")}
  assert {m: r.method for m, r in runs.items()} == {m: m for m in runs}
  np.testing.assert_array_equal(runs["closed-form"].predictions,
                                fedkrr.trajectory(problem, protocol, 6, X_EVAL))
  assert_close(runs["simulate"].predictions, runs["closed-form"].predictions)
  assert_close(runs["closed-form"].predictions,
               numpy_reference.run(protocol, XS, YS, NP_KERNELS, 0.05, 6, X_EVAL))


def test_the_matrix_free_path_gives_the_same_rounds(problem):
  closed = fedkrr.run(problem, "avgkd", 6, X_EVAL, method="closed-form")
  free = fedkrr.run(problem, "avgkd", 6, X_EVAL, method="matfree")
  assert free.method == "matfree"
  np.testing.assert_allclose(free.predictions, closed.predictions, atol=1e-5)


def test_the_sharded_path_gives_the_closed_form_s_rounds(problem, assert_close):
  """One device here (tests/fedkrr/platform/test_distributed.py: across processes)."""
  for protocol in ("avgkd", "akd"):
    params = fedkrr.ProtocolParams(start=1)
    closed = fedkrr.run(problem, protocol, 4, X_EVAL, method="closed-form", params=params)
    spread = fedkrr.run(problem, protocol, 4, X_EVAL, method="sharded", params=params)
    assert spread.method == "sharded" and spread.predictions.shape == closed.predictions.shape
    assert_close(spread.predictions, closed.predictions)


def test_auto_takes_the_closed_form_when_it_fits_and_keeps_every_kth_round(problem):
  result = fedkrr.run(problem, "akd", 12, X_EVAL, every=3, params=fedkrr.ProtocolParams(start=1))
  assert result.method == "closed-form"
  full = fedkrr.run(problem, "akd", 12, X_EVAL, method="closed-form",
                    params=fedkrr.ProtocolParams(start=1))
  np.testing.assert_array_equal(result.predictions, full.predictions[::3])


def test_the_limit_and_the_spectral_radius_with_it(problem, assert_close):
  result = fedkrr.run(problem, "avgkd", 200, X_EVAL, method="closed-form", limit=True)
  lim = fedkrr.limit(problem, "avgkd", X_EVAL)
  assert float(result.spectral_radius) == pytest.approx(float(lim.spectral_radius))
  assert lim.converges and result.notes == ()
  assert_close(result.limit, lim.predictions)
  np.testing.assert_allclose(result.predictions[-1], result.limit, atol=1e-6)   # round 200
  np.testing.assert_array_equal(result.fixed_point, result.limit)


def test_a_protocol_that_does_not_converge_keeps_its_fixed_point_but_no_limit(problem):
  """Jacobi backfitting diverges here: no limit, a note, and the fixed point the rounds miss."""
  result = fedkrr.run(problem, "backfit-jacobi", 6, X_EVAL, method="closed-form", limit=True)
  lim = fedkrr.limit(problem, "backfit-jacobi", X_EVAL)
  assert not lim.converges and float(result.spectral_radius) >= 1.0
  assert result.limit is None and "does not converge" in result.notes[0]
  np.testing.assert_array_equal(result.fixed_point, np.asarray(lim.predictions))
  assert fedkrr.run(problem, "avgkd", 6, X_EVAL).fixed_point is None   # limit=False


def test_baselines_are_each_agents_model_and_have_no_limit(problem, assert_close):
  central = fedkrr.run(problem, "central", None, X_EVAL, limit=True)
  assert central.limit is None and "no rounds" in central.notes[0]
  assert_close(central.predictions,
               numpy_reference.central(XS, YS, NP_KERNELS, 0.05, X_EVAL))
  local = fedkrr.run(problem, "local", None, X_EVAL, method="simulate")
  assert local.predictions.shape == (3, 5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(protocol="akd", rounds=0), "rounds: protocol akd needs a number of rounds >= 1"),
    (dict(protocol="nope", rounds=2), "protocol: expected one of"),
    (dict(protocol="akd", rounds=2, method="exact"), "method: expected one of"),
    (dict(protocol="akd", rounds=2, params=fedkrr.ProtocolParams(start=3)),
     "start: expected an agent index in 0..2, got 3"),
    (dict(protocol="akd", rounds=6, every=2), "every: AKD's rounds cycle through the 3"),
    (dict(protocol="pkd", rounds=2, method="matfree", limit=True), "limit: the limit is one"),
    (dict(protocol="backfit-gs", rounds=2, method="sharded"), "method: sharded runs the "
                                                              "protocols .*, not backfit-gs"),
    (dict(protocol="central", rounds=None, method="sharded"), "method: sharded runs"),
    (dict(protocol="pkd", rounds=4, method="sharded", every=2), "every: the sharded path"),
    (dict(protocol="pkd", rounds=4, method="sharded", limit=True), "limit: the sharded path"),
])
def test_bad_arguments_are_named(problem, kwargs, message):
  protocol, rounds = kwargs.pop("protocol"), kwargs.pop("rounds")
  with pytest.raises(ValueError, match=message):
    fedkrr.run(problem, protocol, rounds, X_EVAL, **kwargs)


def test_the_matrix_free_path_needs_a_ridge(x64):
  problem = fedkrr.make_problem(XS, YS, KERNELS, 0.0)
  with pytest.raises(fedkrr.ProblemError, match="ridge: the matrix-free path needs c > 0"):
    fedkrr.run(problem, "pkd", 2, X_EVAL, method="matfree")
  assert fedkrr.run(problem, "pkd", 2, X_EVAL).method == "closed-form"   # auto: c = 0


def test_predictions_that_are_not_finite_name_the_round_and_the_cause(x64):
  problem = fedkrr.make_problem([XS[0] * 1e200, XS[1]], YS[:2], KERNELS[:2], 0.05)
  with pytest.raises(ValueError, match="not finite .* from round 0 on: kernel_0 \\(rbf\\)"):
    fedkrr.run(problem, "pkd", 2, X_EVAL[:, :2], method="closed-form")


@pytest.mark.parametrize("method", ["closed-form", "simulate", "auto"])
def test_sizes_past_the_machine_s_memory_raise_before_any_work(problem, method):
  """A billion rounds kept: a SizeError in Python, as `fedkrr run` refuses it, not an abort
  of the interpreter inside XLA (the closed form's scan over 10^9 rounds)."""
  x_eval = np.zeros((50, 2))   # 10^9 rounds of predictions: terabytes on any machine
  with pytest.raises(ValueError, match=r"^avgkd by \S+ on 22 points .* needs about .*every=k"):
    fedkrr.run(problem, "avgkd", 10**9, x_eval, method=method)


def _one_point_agents(m, seed=0):
  rng = np.random.default_rng(seed)
  xs = [rng.normal(size=(1, 2)) for _ in range(m)]
  ys = [rng.normal(size=1) for _ in range(m)]
  return fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 0.1), rng.normal(size=(4, 2))


def test_the_planner_routes_many_agents_to_the_literal_rounds(x64):
  """24 agents of one point each: AvgKD's closed form would form 552 transfer blocks (100
  agents: 9,900, minutes of compilation at 6 GB); "auto" runs the literal rounds, which
  give the same numbers, and an explicit closed form is refused in one line."""
  from fedkrr._src import runner
  problem, x_eval = _one_point_agents(24)
  assert runner.closed_form_blocks("avgkd", 24) == 552 > runner.MAX_CLOSED_FORM_BLOCKS
  assert runner.choose_method(problem, "avgkd", 3, 4) == "simulate"
  result = fedkrr.run(problem, "avgkd", 3, x_eval)
  assert result.method == "simulate"
  literal = fedkrr.simulate("avgkd", fedkrr.krr_learners(problem), problem.xs, problem.ys, 3,
                            x_eval)
  np.testing.assert_allclose(result.predictions, np.asarray(literal), rtol=1e-10)
  for kwargs, name in ((dict(method="closed-form"), "method"), (dict(limit=True), "limit")):
    with pytest.raises(ValueError, match=f"^{name}: the closed form of avgkd for 24 agents "
                                         f"forms 552 transfer blocks"):
      fedkrr.run(problem, "avgkd", 3, x_eval, **kwargs)
  # AKD's ring: 24 blocks, the closed form as before
  assert runner.choose_method(problem, "akd", 3, 4) == "closed-form"


def test_the_command_plans_many_agents_to_the_literal_rounds(tmp_path, capsys):
  from fedkrr._src.cli import main
  problem, x_eval = _one_point_agents(24)
  fedkrr.save_problem(tmp_path / "p.npz", problem, x_eval)
  assert main(["run", "--problem", str(tmp_path / "p.npz"), "--protocol", "avgkd",
               "--rounds", "2", "--out", str(tmp_path / "o.npz"), "--method", "auto"]) == 0
  assert "--method auto: simulate" in capsys.readouterr().err
  assert main(["run", "--problem", str(tmp_path / "p.npz"), "--protocol", "avgkd",
               "--rounds", "2", "--out", str(tmp_path / "o.npz")]) == 2   # the closed form
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--method: the closed form" in err


def test_run_with_the_limit_checks_once_and_factorises_each_block_once(problem, monkeypatch):
  """One ``fedkrr.run(..., limit=True)``: its arguments checked once (``check_run``, the
  protocol's parameters), each agent's ``c I + K^a_aa`` factorised once for both the
  trajectory and the limit."""
  from fedkrr._src import closed_form
  from fedkrr._src import linalg
  from fedkrr._src import runner

  calls = {"check_run": 0, "check_params": 0, "ridge_factor": 0}

  def counting(name, fn):
    def wrapper(*args, **kwargs):
      calls[name] += 1
      return fn(*args, **kwargs)
    return wrapper

  monkeypatch.setattr(runner, "check_run", counting("check_run", runner.check_run))
  for module in (runner, closed_form):
    monkeypatch.setattr(module, "check_params", counting("check_params", module.check_params))
  monkeypatch.setattr(linalg, "ridge_factor", counting("ridge_factor", linalg.ridge_factor))
  closed_form.solve.clear_cache()   # the factorisations are counted while JAX traces
  result = fedkrr.run(problem, "avgkd", 4, X_EVAL, method="closed-form", limit=True)
  assert result.limit is not None
  assert calls == {"check_run": 1, "check_params": 1, "ridge_factor": problem.num_agents}


def test_start_keyword_still_works_with_a_deprecation_warning(problem):
  """``start=S`` is ``params=fedkrr.ProtocolParams(start=S)``, with a warning naming it."""
  params = fedkrr.ProtocolParams(start=2)
  expected = fedkrr.run(problem, "akd", 3, X_EVAL, method="simulate", params=params)
  with pytest.warns(DeprecationWarning, match=r"params=fedkrr\.ProtocolParams\(start=\.\.\.\)"):
    old = fedkrr.run(problem, "akd", 3, X_EVAL, method="simulate", start=2)
  np.testing.assert_array_equal(old.predictions, expected.predictions)
  with pytest.warns(DeprecationWarning, match="start= is deprecated"):
    assert fedkrr.protocols.get_protocol("akd", start=2).init(problem.ys).agent == 2
  with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="start: given as 1"):
    fedkrr.run(problem, "akd", 3, X_EVAL, start=1, params=params)
