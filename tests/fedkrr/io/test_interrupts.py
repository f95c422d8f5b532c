"""Ctrl-C and ``kill`` stop every long ``fedkrr`` command the same way: real signals sent to
real processes once they report progress; one line, exit 130 (SIGINT) or 143 (SIGTERM)
within seconds, nothing half-written. (Process start-up dominates: a few seconds each.)"""

import signal

import numpy as np
import processes  # a helper on pytest's pythonpath (pyproject.toml)
import pytest

import fedkrr

CLI = "fedkrr._src.cli"
QUICK = 20.0   # seconds: the stop takes well under one; the bound leaves room for a busy CI


def _check(stopped, signum, out_dir):
  assert stopped.reached, stopped.stderr[-500:]
  assert stopped.returncode == 128 + signum, stopped.stderr[-800:]
  assert stopped.seconds < QUICK
  print(f"stopped {stopped.seconds:.2f} s after the signal")
  line = processes.last_line(stopped.stderr)
  assert line.startswith("fedkrr: interrupted by " + signal.Signals(signum).name), line
  assert "Traceback" not in stopped.stderr and "Exception ignored" not in stopped.stderr
  assert processes.leftovers(out_dir) == []


@pytest.fixture(scope="module")
def long_problem(tmp_path_factory):
  """Two agents of 3,000 points: a round by conjugate gradients takes a while."""
  rng = np.random.default_rng(0)
  xs = [rng.normal(size=(3000, 2)), rng.normal(size=(3000, 2)) + 0.5]
  ys = [rng.normal(size=3000), rng.normal(size=3000)]
  path = tmp_path_factory.mktemp("p") / "p.npz"
  fedkrr.save_problem(path, fedkrr.make_problem(xs, ys, fedkrr.RBF(0.5), 1e-4),
                      rng.normal(size=(5, 2)))
  return path


@pytest.mark.parametrize("method, signum", [("matfree", signal.SIGINT),
                                            ("simulate", signal.SIGTERM)])
def test_run_stops_at_once_and_writes_nothing(long_problem, tmp_path, method, signum):
  out = tmp_path / "o.npz"
  stopped = processes.stop_when(
      [CLI, "run", "--problem", str(long_problem), "--protocol", "avgkd", "--rounds", "100000",
       "--every", "1000", "--method", method, "--out", str(out)], "avgkd", signum)
  _check(stopped, signum, tmp_path)
  assert not out.exists()


def test_toy_stops_and_keeps_the_previous_set(tmp_path):
  (tmp_path / "toy.csv").write_text("previous")
  stopped = processes.stop_when([CLI, "toy", "--out", str(tmp_path), "--rounds", "20000"],
                                "toy panels", signal.SIGTERM)
  _check(stopped, signal.SIGTERM, tmp_path)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.csv"]
  assert (tmp_path / "toy.csv").read_text() == "previous"


def test_verify_stops_before_writing_its_table(tmp_path):
  out = tmp_path / "checks.json"
  stopped = processes.stop_when([CLI, "verify", "--json", str(out)], "%", signal.SIGINT)
  _check(stopped, signal.SIGINT, tmp_path)
  assert not out.exists()


def test_search_all_stops_and_is_not_swallowed(tmp_path):
  """The interrupt reaches no finaliser (it once vanished into a WeakKeyDictionary callback
  and the search wrote two more claims' files): the process ends at the signal."""
  stopped = processes.stop_when([CLI, "search", "--all", "--budget-seconds", "600", "--out",
                                 str(tmp_path / "found")], "%|", signal.SIGINT, delay=2.0)
  _check(stopped, signal.SIGINT, tmp_path)
  assert not (tmp_path / "found" / "summary.json").exists()
  for found in (tmp_path / "found").glob("*.npz"):   # a counterexample comes with its report
    assert found.with_suffix(".json").exists()
