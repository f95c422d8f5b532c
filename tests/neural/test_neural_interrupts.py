"""Ctrl-C and ``kill`` stop ``neural run``, ``reproduce`` and ``compare`` the same way: real
signals to real processes once they report progress; one line, exit 130 (SIGINT) or 143
(SIGTERM) within seconds, no traceback, nothing half-written, and the run resumes."""

import json
import signal

import processes  # a helper on pytest's pythonpath (pyproject.toml)

QUICK = 20.0   # seconds: the stop takes well under one; the bound leaves room for a busy CI
FLAGS = ["--dataset", "digits", "--train-subset", "100", "--test-subset", "40", "--agents", "2",
         "--models", "mlp", "--tiny", "--epochs", "1", "--batch-size", "32"]


def _check(stopped, signum, workdir):
  assert stopped.reached, stopped.stderr[-500:]
  assert stopped.returncode == 128 + signum, stopped.stderr[-800:]
  assert stopped.seconds < QUICK
  line = processes.last_line(stopped.stderr)
  assert line == (f"neural: interrupted by {signal.Signals(signum).name}; run the same command "
                  f"again to resume"), line
  assert "Traceback" not in stopped.stderr
  assert processes.leftovers(workdir) == []


def test_run_stops_and_resumes(tmp_path):
  """Stopped while it trains: whatever is in the workdir is whole (rows of finished rounds
  only, matching the checkpoint: the resumed run repairs nothing), and the same command
  resumes the run."""
  workdir = tmp_path / "run"
  args = ["neural", "run", *FLAGS, "--protocol", "avgkd", "--rounds", "40", "--workdir",
          str(workdir), "--progress"]
  stopped = processes.stop_when(args, "round 0 fits", signal.SIGTERM, delay=1.0)
  _check(stopped, signal.SIGTERM, workdir)
  metrics = workdir / "metrics.jsonl"
  rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() \
      else []
  done = len(rows) // 2
  assert len(rows) == 2 * done and all(r["round"] < done for r in rows)
  resumed = processes.run([*args, "--max-rounds", "1", "--no-progress"])
  assert resumed.returncode == 0, resumed.stderr[-800:]
  assert "note" not in resumed.stderr and "Traceback" not in resumed.stderr
  rows = [json.loads(line) for line in metrics.read_text().splitlines()]
  assert max(r["round"] for r in rows) == done and len(rows) == 2 * (done + 1)


def test_reproduce_stops_at_once(tmp_path):
  workdir = tmp_path / "fig"
  stopped = processes.stop_when(["neural", "reproduce", "--figure", "5", "--workdir",
                                 str(workdir), "--set", "rounds=30", "--progress"], "rounds",
                                signal.SIGINT)
  _check(stopped, signal.SIGINT, tmp_path)
  assert not (workdir / "reproduce.md").exists()


SMALL = ["--set", "dataset=digits", "--set", "train_subset=120", "--set", "test_subset=60",
         "--set", "epochs=1", "--set", "batch_size=32", "--set", "tiny=true", "--set",
         'models=["mlp"]', "--seeds", "1", "--jobs", "2", "--progress"]


def _rows(workdir):
  return {p: len(p.read_text().splitlines()) for p in workdir.rglob("metrics.jsonl")}


def test_reproduce_with_workers_stops_them_first(tmp_path):
  """A signal to the command alone (``kill PID``) stops its worker processes, each cleanly
  (whole rounds only: a run resumes as after ``neural run`` is stopped), before the command
  exits."""
  workdir = tmp_path / "fig"
  args = ["neural", "reproduce", "--figure", "5", "--workdir", str(workdir), *SMALL,
          "--set", "rounds=60"]
  stopped = processes.stop_when(args, "at a time in worker processes", signal.SIGTERM,
                                until=lambda: len(_rows(workdir)) >= 2, delay=1.0)
  _check(stopped, signal.SIGTERM, tmp_path)
  assert len(stopped.children) >= 2   # the workers (and multiprocessing's resource tracker)
  assert all(processes.ended(pid, 1.0) for pid in stopped.children)
  assert not (workdir / "reproduce.md").exists()
  for metrics in workdir.rglob("metrics.jsonl"):   # two agents' rows per finished round
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(rows) % 2 == 0 and all(r["round"] < len(rows) // 2 for r in rows)


def test_reproduce_workers_end_when_the_command_is_killed(tmp_path):
  """Killed outright (SIGKILL: no handler runs), the command leaves its workers behind;
  they see their parent gone and stop by themselves, cleanly, within seconds."""
  workdir = tmp_path / "fig"
  stopped = processes.stop_when(["neural", "reproduce", "--figure", "5", "--workdir",
                                 str(workdir), *SMALL, "--set", "rounds=60"],
                                "at a time in worker processes", signal.SIGKILL,
                                until=lambda: len(_rows(workdir)) >= 2, delay=1.0)
  assert stopped.reached and stopped.returncode == -signal.SIGKILL
  assert len(stopped.children) >= 2
  assert all(processes.ended(pid, QUICK) for pid in stopped.children)
  assert processes.leftovers(workdir) == []


def test_compare_stops_at_once(tmp_path):
  workdir = tmp_path / "cmp"
  stopped = processes.stop_when(["neural", "compare", *FLAGS, "--protocol", "avgkd", "--rounds",
                                 "30", "--workdir", str(workdir), "--progress"], "rounds",
                                signal.SIGTERM)
  _check(stopped, signal.SIGTERM, tmp_path)
  assert not (workdir / "compare.json").exists()
