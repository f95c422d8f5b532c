"""Run directories without training, for the tests of what reads runs back: a config,
the metric rows and a checkpoint holding them, as ``neural run`` leaves them."""

import json
from pathlib import Path

import neural


def write_run(folder: Path, rows, rounds: int | None = None, done: int | None = None) -> Path:
  """A run directory of ``rows`` (``round``, ``agent``, ``test_accuracy`` ...).

  Args:
    folder: the run directory (created).
    rows: the metric rows logged (all written to ``metrics.jsonl``).
    rounds: the config's rounds (default: the rounds ``rows`` cover).
    done: the checkpoint's round, its rows those of rounds ``< done`` (default: the
      rounds ``rows`` cover, at most ``rounds``; no rows: no checkpoint).
  """
  logged = 1 + max((r["round"] for r in rows), default=-1)
  rounds = logged if rounds is None else rounds
  done = min(rounds, logged) if done is None else done
  config = neural.ExperimentConfig().replace(rounds=max(rounds, 1))
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(config.to_json())
  (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  if rows:
    neural.runs.save_checkpoint(folder / "checkpoint.npz", {
        "round": done, "rows": [r for r in rows if r["round"] < done],
        "config": config.to_dict(), "state": {}})
  return folder
