"""The ``fedkrr`` command: run on problem files, errors on bad files (demo: test_report.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main
from fedkrr._src.problem_io import load_problem
from fedkrr._src.problem_io import save_problem

RNG = np.random.default_rng(5)
XS = [RNG.normal(size=(8, 2)), RNG.normal(size=(6, 2)) + 1.0]
YS = [RNG.normal(size=8), RNG.normal(size=6)]
X_EVAL = RNG.normal(size=(4, 2))
KERNELS = [fedkrr.RBF(0.5), fedkrr.Laplace(0.5)]


@pytest.fixture
def problem_file(tmp_path, x64):
  path = tmp_path / "p.npz"
  save_problem(path, fedkrr.make_problem(XS, YS, KERNELS, 1e-2), X_EVAL)
  return path


def _run(*args):
  return main(["run", *map(str, args)])


def test_problem_file_round_trip(problem_file, assert_close):
  problem, x_eval = load_problem(problem_file)
  assert problem.sizes == (8, 6) and float(problem.ridge) == 1e-2
  assert [type(k) for k in problem.kernels] == [fedkrr.RBF, fedkrr.Laplace]
  assert_close(x_eval, X_EVAL)


@pytest.mark.parametrize("protocol, shape", [
    ("akd", (5, 4)), ("avgkd", (5, 2, 4)), ("pkd", (5, 2, 4)), ("pkd-mean", (5, 2, 4)),
    ("ekd", (5, 4)),
    ("backfit-gs", (5, 4)), ("backfit-jacobi", (5, 4)), ("central", (2, 4)), ("local", (2, 4))])
def test_run_both_methods_agree(protocol, shape, problem_file, tmp_path, assert_close):
  outs = {}
  for method in ("closed-form", "simulate"):
    out = tmp_path / f"{method}.npz"
    start = 1 if protocol == "akd" else 0   # the others have no starting agent
    assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", 5,
                "--start", start, "--method", method, "--out", out) == 0
    outs[method] = np.load(out)["predictions"]
  assert outs["closed-form"].shape == shape
  assert_close(outs["closed-form"], outs["simulate"])
  problem, x_eval = load_problem(problem_file)
  if protocol == "akd":  # row t is the round-t model of the run started at --start
    assert_close(outs["closed-form"], fedkrr.trajectory(problem, "akd", 5, x_eval,
                                                        params=fedkrr.ProtocolParams(start=1)))


@pytest.mark.parametrize("protocol", ["akd", "avgkd", "ekd", "central"])
def test_run_matfree_agrees_with_the_closed_form(protocol, problem_file, tmp_path, capsys):
  outs = {}
  for method in ("closed-form", "matfree", "auto"):
    out = tmp_path / f"{method}.npz"
    assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", 4,
                "--method", method, "--no-progress", "--out", out) == 0
    outs[method] = np.load(out)["predictions"]
  # CG stops at a relative residual of 1e-10 per fit; 4 rounds of fits compound it a little.
  gap = np.max(np.abs(outs["matfree"] - outs["closed-form"])) / np.max(np.abs(outs["closed-form"]))
  assert outs["matfree"].shape == outs["closed-form"].shape and gap < 1e-7
  # A 14-point problem fits in memory: auto is the closed form, and says so.
  np.testing.assert_array_equal(outs["auto"], outs["closed-form"])
  assert "--method auto: closed-form" in capsys.readouterr().err


def test_run_matfree_refuses_a_limit_and_a_zero_ridge(problem_file, tmp_path, capsys, x64):
  out = tmp_path / "o.npz"
  assert _run("--problem", problem_file, "--protocol", "avgkd", "--rounds", 2, "--limit",
              "--method", "matfree", "--out", out) == 2
  assert "--limit: the limit is one solve with the N x N recurrence matrix" in (
      capsys.readouterr().err)
  path = tmp_path / "c0.npz"
  save_problem(path, fedkrr.make_problem(XS, YS, KERNELS, 0.0), X_EVAL)
  assert _run("--problem", path, "--protocol", "avgkd", "--rounds", 2, "--method", "matfree",
              "--out", out) == 2
  assert "ridge: the matrix-free path needs c > 0" in capsys.readouterr().err
  assert _run("--problem", problem_file, "--protocol", "akd", "--rounds", 4, "--every", 3,
              "--method", "matfree", "--out", out) == 2
  assert "--every: " in capsys.readouterr().err
  assert not out.exists()


def test_run_writes_the_limit(problem_file, tmp_path, assert_close):
  out = tmp_path / "o.npz"
  assert _run("--problem", problem_file, "--protocol", "avgkd", "--rounds", 3, "--limit",
              "--out", out) == 0
  data = np.load(out)
  problem, x_eval = load_problem(problem_file)
  expected = fedkrr.limit(problem, "avgkd", x_eval)
  assert_close(data["limit"], expected.predictions)
  assert float(data["spectral_radius"]) < 1


def test_run_without_a_limit_says_so(tmp_path, capsys, x64):
  # c = 0 self-distillation (App. C): the models never change, the spectral radius is 1.
  path, out = tmp_path / "p.npz", tmp_path / "o.npz"
  save_problem(path, fedkrr.make_problem([XS[0], XS[0]], [YS[0], YS[0]], fedkrr.Linear(), 0.0),
               X_EVAL)
  assert _run("--problem", path, "--protocol", "akd", "--rounds", 3, "--limit", "--out", out) == 0
  assert "limit" not in np.load(out).files
  assert "does not converge" in capsys.readouterr().err


def _corrupt(tmp_path, **changes):
  path = tmp_path / "bad.npz"
  arrays = dict(np.load(_good(tmp_path)))
  for key, value in changes.items():
    if value is None:
      arrays.pop(key)
    else:
      arrays[key] = value
  np.savez(path, **arrays)
  return path


def _good(tmp_path):
  path = tmp_path / "good.npz"
  if not path.exists():
    save_problem(path, fedkrr.make_problem(XS, YS, KERNELS, 1e-2), X_EVAL)
  return path


@pytest.mark.parametrize("changes, message", [
    (dict(y_1=None), "missing y_1"),
    (dict(kernel_0=np.asarray('{"name": "sigmoid"}')), "kernel_0: unknown kernel 'sigmoid'"),
    (dict(kernel_1=np.asarray('{"name": "rbf", "gamma": -2}')),
     "gamma must be a finite number > 0"),
    (dict(kernel_1=np.arange(3)), "kernel_1 must be a JSON string"),
    (dict(ridge=np.asarray(-1.0)), "ridge: expected a finite number >= 0"),
    (dict(x_1=np.full((6, 2), np.nan)), "xs[1]: contains 12 NaN or infinite"),
    (dict(x_eval=np.zeros((3, 5))), "x_eval: expected shape (n, 2), got (3, 5)"),
    (dict(y_0=np.zeros(7)), "ys[0]: expected shape (8,) or (8, C)"),
])
def test_bad_problem_files_get_one_line_errors(changes, message, tmp_path, capsys, x64):
  path = _corrupt(tmp_path, **changes)
  assert _run("--problem", path, "--protocol", "avgkd", "--rounds", 2,
              "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err
  assert err.startswith("fedkrr: error: ") and err.count("\n") == 1
  assert message in err
  assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds: protocol akd needs a number of rounds >= 1"),
    (["--rounds", "2", "--start", "5"], "--start: expected an agent index in 0..1, got 5"),
])
def test_bad_arguments_get_one_line_errors(args, message, problem_file, tmp_path, capsys):
  assert _run("--problem", problem_file, "--protocol", "akd", *args,
              "--out", tmp_path / "o.npz") == 2
  assert message in capsys.readouterr().err


def test_missing_or_unreadable_file_from_a_shell(tmp_path):
  not_npz = tmp_path / "p.npz"
  not_npz.write_text("hello")
  for path, message in [(tmp_path / "nope.npz", "no such file"),
                        (not_npz, "not an .npz archive")]:
    proc = subprocess.run(
        [sys.executable, "-m", "fedkrr._src.cli", "run", "--problem", str(path), "--protocol",
         "ekd", "--rounds", "3", "--out", str(tmp_path / "o.npz")],
        capture_output=True, text=True, env=os.environ | {"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_float32_run_from_a_shell(problem_file, tmp_path, assert_close):
  out = tmp_path / "o.npz"
  proc = subprocess.run(
      [sys.executable, "-m", "fedkrr._src.cli", "run", "--problem", str(problem_file),
       "--protocol", "ekd", "--rounds", "4", "--float32", "--out", str(out)],
      capture_output=True, text=True, env=os.environ | {"JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr
  preds = np.load(out)["predictions"]
  assert preds.dtype == np.float32
  problem, x_eval = load_problem(problem_file)
  assert_close(preds, fedkrr.trajectory(problem, "ekd", 4, x_eval), dtype=np.float32)


def test_out_is_written_as_named_and_never_over_the_input(problem_file, tmp_path, capsys):
  out = tmp_path / "result.bin"
  assert _run("--problem", problem_file, "--protocol", "akd", "--rounds", 2, "--out", out) == 0
  assert out.exists() and not (tmp_path / "result.bin.npz").exists()
  assert f"wrote {out}" in capsys.readouterr().out
  before = problem_file.read_bytes()
  for target, message in [(problem_file, "would overwrite the input"),
                          (f"{tmp_path}{os.sep}", "expected a file name")]:
    assert _run("--problem", problem_file, "--protocol", "akd", "--rounds", 2,
                "--out", target) == 2
    assert message in capsys.readouterr().err
  assert problem_file.read_bytes() == before
  assert not (tmp_path / ".npz").exists()


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_starts(problem_file, tmp_path,
                                                                     capsys):
  out = tmp_path / "o.npz"
  out.write_bytes(b"previous result")
  assert _run("--problem", problem_file, "--protocol", "ekd", "--rounds", 10**9, "--out", out) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "needs about" in err and "--every " in err
  assert out.read_bytes() == b"previous result"


@pytest.mark.parametrize("protocol, every", [("avgkd", 3), ("ekd", 2), ("akd", 2)])
def test_every_keeps_every_kth_round(protocol, every, problem_file, tmp_path, assert_close):
  full, kept = tmp_path / "full.npz", tmp_path / "kept.npz"
  assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", 7, "--out", full) == 0
  for method in ("closed-form", "simulate"):
    assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", 7, "--every",
                every, "--method", method, "--out", kept) == 0
    assert_close(np.load(kept)["predictions"], np.load(full)["predictions"][::every])


def test_every_for_akd_must_be_a_multiple_of_the_agents(problem_file, tmp_path, capsys):
  assert _run("--problem", problem_file, "--protocol", "akd", "--rounds", 7, "--every", 3,
              "--out", tmp_path / "o.npz") == 2
  assert "multiple of 2" in capsys.readouterr().err


@pytest.mark.parametrize("changes, message", [
    (dict(x_0=XS[0] * 1e200), "kernel_0 (rbf) is not finite on x_0"),
    (dict(kernel_1=np.asarray('{"name": "polynomial", "degree": 1000000000}')), "kernel_1"),
])
def test_non_finite_results_are_an_error(changes, message, tmp_path, capsys, x64):
  out = tmp_path / "o.npz"
  assert _run("--problem", _corrupt(tmp_path, **changes), "--protocol", "avgkd", "--rounds", 2,
              "--out", out) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "not finite" in err and message in err
  assert not out.exists()


def test_labels_that_overflow_float32_are_an_error(tmp_path, capsys):
  # 1e39 is finite in the file (float64) and inf once cast to float32.
  path = _corrupt(tmp_path, y_0=np.full(8, 1e38), y_1=np.full(6, 1e39))
  assert _run("--problem", path, "--protocol", "avgkd", "--rounds", 3, "--float32",
              "--out", tmp_path / "o.npz") == 2
  assert "not finite" in capsys.readouterr().err


@pytest.mark.parametrize("make, message", [
    (lambda p: np.save(p, np.zeros(3)), "not an .npz archive"),
    (lambda p: open(p, "w").write("x_0 = 1\n"), "not an .npz archive"),
    (lambda p: np.savez(p, obj=np.array([{}], dtype=object)), "Python objects"),
])
def test_files_that_are_no_problem_file_are_named(make, message, tmp_path, capsys):
  path = tmp_path / "p.data"
  make(path)
  path, = tmp_path.glob("p.data*")   # np.save / np.savez add their own suffix
  assert _run("--problem", path, "--protocol", "akd", "--rounds", 2,
              "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err
  assert message in err and "allow_pickle" not in err


def test_a_ridge_string_is_named_and_a_kernel_in_bytes_is_read(tmp_path, capsys, x64):
  assert _run("--problem", _corrupt(tmp_path, ridge=np.asarray("0.01")), "--protocol", "akd",
              "--rounds", 2, "--out", tmp_path / "o.npz") == 2
  assert "ridge must be a number" in capsys.readouterr().err
  path = _corrupt(tmp_path, kernel_0=np.asarray(b'{"name": "rbf", "gamma": 0.5}'))
  assert _run("--problem", path, "--protocol", "akd", "--rounds", 2,
              "--out", tmp_path / "o.npz") == 0


def test_toy_refuses_absurd_rounds_and_keeps_existing_outputs(tmp_path, capsys):
  (tmp_path / "toy.csv").write_text("previous")
  assert main(["toy", "--out", str(tmp_path), "--rounds", str(10**9)]) == 2
  assert "needs about" in capsys.readouterr().err
  assert (tmp_path / "toy.csv").read_text() == "previous"
  with pytest.raises(SystemExit):
    main(["toy", "--out", str(tmp_path), "--seed", str(2**32)])
  assert "0..2^32 - 1" in capsys.readouterr().err


def test_an_interrupted_simulation_exits_130_and_writes_nothing(problem_file, tmp_path,
                                                                 monkeypatch, capsys):
  from fedkrr._src import protocols

  def interrupted(*args, **kwargs):
    raise KeyboardInterrupt

  monkeypatch.setattr(protocols, "simulate", interrupted)
  assert _run("--problem", problem_file, "--protocol", "akd", "--rounds", 5, "--method",
              "simulate", "--out", tmp_path / "o.npz") == 130
  assert "interrupted" in capsys.readouterr().err
  assert not (tmp_path / "o.npz").exists()


def test_help_names_the_claim_ids_and_where_verify_s_cost_is(capsys):
  from fedkrr._src.cli import _parser
  from fedkrr._src.paper.search_claims import BY_ID
  for command in ("search", "verify"):
    with pytest.raises(SystemExit):
      _parser().parse_args([command, "--help"])
  out = capsys.readouterr().out
  for claim in BY_ID:
    assert f"  {claim} " in out, claim   # one id per line: never broken at a hyphen
  # What verify costs is one page (docs/benchmarks.md), not a number in the help.
  assert "docs/benchmarks.md" in out and "--seeds 1" in out and "CPU time" not in out


@pytest.fixture(scope="module")
def wide_problem(tmp_path_factory):
  """120,000 points in two agents: only its estimate is ever computed here."""
  def write(ridge):
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(60_000, 1)), rng.normal(size=(60_000, 1))]
    ys = [rng.normal(size=60_000), rng.normal(size=60_000)]
    path = tmp_path_factory.mktemp("wide") / f"p{ridge}.npz"
    save_problem(path, fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), ridge), xs[0][:5])
    return path
  return write


@pytest.mark.parametrize("method", ["matfree", "auto"])
def test_the_matrix_free_path_refuses_what_cannot_fit(wide_problem, tmp_path, capsys, method):
  """A billion rounds gather a billion rounds of predictions: refused before any work."""
  assert _run("--problem", wide_problem(1e-3), "--protocol", "avgkd", "--rounds", 10**9,
              "--method", method, "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err.splitlines()
  assert err[-1].startswith("fedkrr: error: avgkd by matfree") and "needs about" in err[-1]
  assert "--every" in err[-1] and not (tmp_path / "o.npz").exists()


def test_hints_only_suggest_what_would_work(wide_problem, tmp_path, capsys, monkeypatch):
  """c = 0: the closed form's Gram blocks do not fit, and the matrix-free path needs c > 0,
  so neither --method matfree nor fewer rounds is suggested. On a machine of 16 GiB free
  (pinned: on a GPU of 141 GiB, --float32's 94 GiB would fit and rightly be suggested)."""
  from fedkrr._src.platform import memory
  monkeypatch.setattr(memory, "memory_limit", lambda: 16 * 2**30)   # what fedkrr.plan_run reads
  assert _run("--problem", wide_problem(0.0), "--protocol", "avgkd", "--rounds", 10,
              "--method", "auto", "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err.splitlines()[-1]
  assert "needs about" in err and "nothing the command offers fits" in err
  assert "matfree" not in err.split("needs about")[1] and "--every" not in err


@pytest.mark.parametrize("protocol", ["avgkd", "pkd", "ekd", "backfit-gs", "central"])
def test_start_outside_akd_is_refused_not_ignored(protocol, problem_file, tmp_path, capsys):
  assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", "2", "--start", "1",
              "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and f"--start: protocol {protocol} has no starting agent" in err
  assert not (tmp_path / "o.npz").exists()
  assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", "2", "--start", "0",
              "--out", tmp_path / "o.npz") == 0   # the default, said out loud: fine


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_to_a_full_device_names_the_standard_output(problem_file, tmp_path):
  with open("/dev/full", "w") as full:
    proc = subprocess.run(
        [sys.executable, "-m", "fedkrr._src.cli", "run", "--problem", str(problem_file),
         "--protocol", "akd", "--rounds", "2", "--out", str(tmp_path / "o.npz")],
        stdout=full, stderr=subprocess.PIPE, text=True,
        env=os.environ | {"JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 2
  assert proc.stderr == ("fedkrr: error: cannot write the standard output (No space left on "
                         "device)\n"), proc.stderr


def test_weights_run_weighted_avgkd_as_the_library_does(problem_file, tmp_path):
  """--weights W1,W2: the library's weighted AvgKD, bit for bit."""
  out = tmp_path / "w.npz"
  assert _run("--problem", problem_file, "--protocol", "weighted-avgkd", "--rounds", 4,
              "--weights", "0.25,0.75", "--limit", "--out", out) == 0
  problem, x_eval = load_problem(problem_file)
  expected = fedkrr.run(problem, "weighted-avgkd", 4, x_eval, method="closed-form", limit=True,
                        params=fedkrr.ProtocolParams(weights=(0.25, 0.75)))
  with np.load(out) as written:
    np.testing.assert_array_equal(written["predictions"], expected.predictions)
    np.testing.assert_array_equal(written["limit"], expected.limit)
  equal = fedkrr.run(problem, "weighted-avgkd", 4, x_eval, method="closed-form")
  assert not np.array_equal(expected.predictions, equal.predictions)   # the weights count


@pytest.mark.parametrize("protocol, weights, message", [
    ("weighted-avgkd", "0.5,0.25", "--weights: expected weights summing to 1"),
    ("weighted-avgkd", "1", "--weights: expected one weight per agent (2), got 1"),
    ("weighted-avgkd", "0,1", "--weights: expected finite weights in (0, 1]"),
    ("weighted-avgkd", "a,b", "--weights: expected numbers separated by commas"),
    ("avgkd", "0.5,0.5", "--weights: protocol avgkd takes no weights"),
    ("central", "0.5,0.5", "--weights: protocol central takes no weights"),
])
def test_weights_are_checked_as_the_library_checks_them(problem_file, tmp_path, capsys,
                                                       protocol, weights, message):
  assert _run("--problem", problem_file, "--protocol", protocol, "--rounds", 2,
              "--weights", weights, "--out", tmp_path / "o.npz") == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message in err, err
  assert not (tmp_path / "o.npz").exists()
