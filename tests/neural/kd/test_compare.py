"""neural.compare: the closed-form twin of a KD run, the rate fitter, files and the command."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
from neural._src.cli import main
from neural._src.datasets.run_data import load_run_data
from neural._src.kd.compare import CompareError
from neural._src.kd.compare import compare
from neural._src.kd.compare import geometric_rate
from neural._src.kd.compare import mlp_ntk
from neural._src.kd.compare import theory_curves
from neural._src.kd.compare import theory_problem
from neural._src.models.models import get_model
from neural._src.runtime.config import ExperimentConfig
from neural._src.training.training import init_variables

# A few digits (8x8), unequal agents (so the N / N_a kernel scales differ), tiny MLPs;
# every agent's and the test set's size pads to the same compiled training and predict.
TINY = dict(dataset="digits", train_subset=26, test_subset=12, proportions=(0.6, 0.4),
            models=("mlp",), width=8, rounds=4, epochs=1, batch_size=32, seed=3)


@pytest.mark.parametrize("r", [0.3, 0.8, -0.6])
def test_geometric_rate_recovers_a_known_rate(r):
  t = np.arange(6)
  assert geometric_rate(0.4 - 0.7 * r ** t) == pytest.approx(abs(r), rel=1e-10)


def test_geometric_rate_without_enough_changes_is_nan_and_bad_input_raises():
  assert np.isnan(geometric_rate([1.0, 0.5]))            # one change
  assert np.isnan(geometric_rate([0.2, 0.2, 0.2, 0.2]))  # flat
  with pytest.raises(CompareError, match="curve"):
    geometric_rate([[1.0, 2.0], [3.0, 4.0]])
  with pytest.raises(CompareError, match="curve"):
    geometric_rate([1.0, np.nan, 0.5])


def _scaled_rbf(gamma, scale):
  rbf = fedkrr.RBF(gamma)
  return lambda x1, x2: scale * rbf(x1, x2)


def test_theory_side_equals_fedkrr_on_the_same_data(assert_close):
  protocol = "akd"   # as the end-to-end run below: the compiled closed form is shared
  config = ExperimentConfig(**{**TINY, "protocol": protocol, "start": 1})
  data = load_run_data(config)
  theory = theory_problem(config, data, kernel="rbf")
  curves = theory_curves(theory, config)

  # Directly: the flat data, the one-hot targets, each agent's RBF scaled by N / N_a.
  xs = [x.reshape(len(x), -1) for x in data.xs]
  n = sum(len(x) for x in xs)
  x_train = np.concatenate(xs)
  gamma = 1.0 / (x_train.shape[1] * np.var(x_train))
  kernels = [_scaled_rbf(gamma, n / len(x)) for x in xs]
  c = data.num_classes * config.weight_decay / 2
  problem = fedkrr.make_problem(xs, data.ys, kernels, ridge=c)
  x_test = data.x_test.reshape(len(data.x_test), -1)
  direct = np.asarray(fedkrr.trajectory(problem, protocol, config.rounds, x_test,
                                     params=fedkrr.ProtocolParams(start=1)))
  ours = curves.predictions["chain"]
  expected = direct
  # The Gram entries come from other blocks (points x agent a vs X_i x X_j), so they
  # differ by rounding, amplified by the condition of c I + K (about 1e6 here).
  assert_close(ours, expected, rtol=1e-7 if problem.ridge.dtype == jnp.float64 else 1e-3)
  assert theory.ridge == pytest.approx(c)
  assert theory.scales == pytest.approx((n / len(xs[0]), n / len(xs[1])))
  # The round map's spectral radius is the per-cycle degradation rate ** (1 / M), M = 2.
  assert curves.degradation_rate == pytest.approx(curves.spectral_radius ** 2, rel=1e-6)
  assert list(curves.agents["chain"]) == [1, 0, 1, 0]


def test_mlp_ntk_equals_the_empirical_ntk():
  """Against the definition: (1/C) sum_c <df_c(x)/dtheta, df_c(x')/dtheta> by jacrev."""
  model = get_model("mlp", 3, width=8)
  params = init_variables(model, jax.random.PRNGKey(0), (8, 8, 1))["params"]
  x = jnp.asarray(np.random.default_rng(0).uniform(size=(6, 64)), jnp.float32)

  @jax.jit
  def reference(params, x):
    jac = jax.jacrev(lambda p: model.apply({"params": p}, x))(params)   # leaves (n, C, ...)
    flat = jnp.concatenate([j.reshape(j.shape[0], j.shape[1], -1)
                            for j in jax.tree_util.tree_leaves(jac)], axis=-1)
    return jnp.einsum("ncp,mcp->nm", flat[:4], flat) / flat.shape[1]

  expected = np.asarray(reference(params, x))
  ours = np.asarray(mlp_ntk(model, params, x[:4], x))
  np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("compare")
  config = ExperimentConfig(**{**TINY, "protocol": "akd", "start": 1})
  return config, workdir, compare(config, workdir, kernel="ntk")


def test_compare_writes_the_table_the_figure_and_the_json(compared):
  config, workdir, result = compared
  for name in ("compare.json", "compare.md", "compare.png", "metrics.jsonl"):
    assert (workdir / name).is_file()
  saved = json.loads((workdir / "compare.json").read_text())
  assert saved["kernel"] == "ntk" and saved["config"] == config.to_dict()
  assert [r["agent"] for r in saved["rows"]] == [1, 0, 1, 0]   # the AKD chain from agent 1
  assert set(saved["rates"]) == {"chain"}
  metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  for row in result.rows:   # the network columns are the run's own metrics
    net, = [m for m in metrics if m["round"] == row["round"] and m["agent"] == row["agent"]]
    assert row["network_accuracy"] == net["test_accuracy"]
    assert row["network_sq_error"] == net["test_loss"]
    assert 0 <= row["theory_accuracy"] <= 1 and row["theory_sq_error"] > 0
  assert result.spectral_radius > 0   # may exceed 1: two agents' NTKs differ (Prop. VIII)
  assert "| round | series |" in (workdir / "compare.md").read_text()


def test_cli_compare_resumes_the_run_and_writes_the_files(compared, tmp_path, capsys):
  config, workdir, _ = compared
  path = tmp_path / "tiny.json"
  path.write_text(config.to_json())
  before = (workdir / "metrics.jsonl").read_text()
  assert main(["compare", "--config", str(path), "--workdir", str(workdir), "--kernel", "rbf",
               "--no-progress"]) == 0
  assert (workdir / "metrics.jsonl").read_text() == before   # finished run: no training
  assert json.loads((workdir / "compare.json").read_text())["kernel"] == "rbf"
  assert "spectral radius" in capsys.readouterr().out
  assert main(["compare", "--config", str(path), "--workdir", str(tmp_path / "x"),
               "--protocol", "fedavg"]) == 2
  assert "KD protocol" in capsys.readouterr().err


def test_compare_pkd_mean_matches_each_agent_to_its_closed_form(tmp_path, assert_close):
  """The authors' code's PKD: one series per agent, the run's rows beside fedkrr's pkd-mean."""
  config = ExperimentConfig(**{**TINY, "protocol": "pkd-mean", "rounds": 2})
  result = compare(config, tmp_path, kernel="rbf")
  assert set(result.rates) == {"agent 0", "agent 1"}
  assert [(r["round"], r["agent"]) for r in result.rows] == [(0, 0), (1, 0), (0, 1), (1, 1)]
  assert all(r["network_accuracy"] is not None for r in result.rows)
  theory = theory_problem(config, load_run_data(config), kernel="rbf")
  curves = theory_curves(theory, config)
  direct = np.asarray(fedkrr.trajectory(theory.problem, "pkd-mean", 2, theory.x_eval))
  for a in range(2):
    assert_close(curves.predictions[f"agent {a}"], direct[:, a])
    assert np.all(curves.limits[f"agent {a}"] == 0)   # pkd-mean's limit, like PKD's
  paper = np.asarray(fedkrr.trajectory(theory.problem, "pkd", 2, theory.x_eval))
  assert not np.allclose(direct[1], paper[1])   # round 1 differs from the paper's PKD


@pytest.mark.parametrize("changes, kernel, max_points, match", [
    (dict(models=("mlp", "forest")), "ntk", 2000, "random forest"),
    (dict(models=("cnn",)), "nngp", 2000, "MLP"),
    (dict(protocol="fedavg"), "ntk", 2000, "KD protocol"),
    (dict(), "laplace", 2000, "kernel"),
    (dict(), "rbf", 37, "max_points"),   # 26 training + 12 test points
])
def test_compare_refuses_what_has_no_kernel_twin(changes, kernel, max_points, match, tmp_path):
  config = ExperimentConfig(**{**TINY, **changes})
  with pytest.raises(CompareError, match=match):
    compare(config, tmp_path, kernel=kernel, max_points=max_points)
  assert not (tmp_path / "metrics.jsonl").exists()   # refused before training


@pytest.mark.parametrize("options, match", [
    (dict(ridge=float("nan")), "ridge: expected a finite number >= 0"),
    (dict(ridge=float("inf")), "ridge: expected a finite number >= 0"),
    (dict(ridge=-1.0), "ridge: expected a finite number >= 0"),
    (dict(ridge=True), "ridge: expected a finite number >= 0"),
    (dict(max_points=0), "max_points: expected an integer >= 1"),
    (dict(ntk_batch_size=0), "ntk_batch_size: expected an integer >= 1"),
    (dict(ntk_batch_size=1.5), "ntk_batch_size: expected an integer >= 1"),
])
def test_compare_checks_its_numbers_before_training(options, match, tmp_path):
  with pytest.raises(CompareError, match=match):
    compare(ExperimentConfig(**TINY), tmp_path, kernel="rbf", **options)
  assert not (tmp_path / "metrics.jsonl").exists()   # refused before training


def test_cli_compare_ridge_nan_is_one_line_before_training(tmp_path, capsys):
  assert main(["compare", "--workdir", str(tmp_path / "w"), "--ridge", "nan", "--kernel", "rbf",
               "--dataset", "digits", "--train-subset", "26", "--test-subset", "12",
               "--models", "mlp", "--width", "8", "--rounds", "2", "--epochs", "1",
               "--protocol", "akd", "--no-progress"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "ridge: expected a finite number" in err
  assert not (tmp_path / "w" / "metrics.jsonl").exists()
