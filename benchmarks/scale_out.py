"""A figure's runs per hour by executor, side by side in one run, and the same numbers.

    python benchmarks/scale_out.py                          # shortened Fig. 6 on this CPU
    python benchmarks/scale_out.py --ways jobs1,batch --batch 8
    python benchmarks/scale_out.py --scale paper --data-dir DIR --seeds 1 \\
        --ways workers,batch --rounds-timed 2             # on a GPU: extrapolated figure

Runs the same (shortened) ``neural reproduce --figure N`` once per way into fresh
directories, one after the other:

- ``jobs1``: every run in the command's own process (``--jobs 1``);
- ``workers``: the local pool, ``--jobs J`` (every worker on every core);
- ``workers-own-cores``: the same with each worker on its own share of the cores
  (``NEURAL_WORKER_CORES=own``: XLA's threads hold up, the CNN's numbers change);
- ``batch``: runs that share a protocol and shapes in one vmapped program each
  (``--batch B``), in the command's process;
- ``ray``: one Ray task per run on a local Ray instance that the command starts
  (``--executor ray``; needs the extra ``pip install ".[ray]"``).

Printed per way: the wall time, runs per hour, the ratio to the first way, and whether
every run's ``metrics.jsonl`` equals the first way's byte for byte (the script exits 1
when one does not, except for ``batch`` and ``workers-own-cores``, whose numbers equal
within float32 rounding: there the largest difference of a test accuracy is printed).
Then the cost of a task itself: each way called again on its finished directory (every
run read back, nothing trained), divided by the runs.

``--rounds-timed K`` (paper scale): each way does only the first K rounds of every run
(``--max-rounds K``), and again K + 1 rounds into another fresh directory; the difference
is one more round, start-up and compilation cancelled, and the figure's time is
extrapolated as (first K rounds less K rounds: start-up, data, compilation) + (the logged
rounds of the longest run) x (one more round); ``--epochs-of-figure E`` scales a round to
E epochs where ``--set epochs=e`` shortened them (a GPU check's time limit).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

WAYS = ("jobs1", "workers", "workers-own-cores", "batch", "ray")
# The ways whose numbers equal the runs one at a time within float32 rounding, not bytes.
ROUNDED = ("workers-own-cores", "batch")


def _command(way: str, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
  """The ``neural reproduce`` flags and the environment of one way."""
  env = dict(os.environ)
  if way == "jobs1":
    return ["--jobs", "1"], env
  if way == "workers":
    return ["--jobs", str(args.jobs)], env
  if way == "workers-own-cores":
    return ["--jobs", str(args.jobs)], env | {"NEURAL_WORKER_CORES": "own"}
  if way == "batch":
    return ["--jobs", "1", "--batch", str(args.batch)], env
  return ["--executor", "ray"], env


def _reproduce(workdir: Path, flags: list[str], env: dict[str, str], common: list[str],
               max_rounds: int | None = None) -> float:
  """Seconds of wall time of one ``neural reproduce`` call (its output kept quiet)."""
  extra = [] if max_rounds is None else ["--max-rounds", str(max_rounds)]
  started = time.perf_counter()
  subprocess.run([sys.executable, "-m", "neural", "reproduce", *common, "--workdir",
                  str(workdir), "--no-progress", *flags, *extra], check=True,
                 stdout=subprocess.DEVNULL, env=env)
  return time.perf_counter() - started


def _metrics(workdir: Path) -> dict[str, bytes]:
  return {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("metrics.jsonl")}


def _largest_difference(first: dict[str, bytes], other: dict[str, bytes]) -> float:
  """The largest difference of a test accuracy between two sets of runs (inf: other rows)."""
  worst = 0.0
  for name, text in first.items():
    ours = [json.loads(line) for line in text.decode().splitlines()]
    theirs = [json.loads(line) for line in other.get(name, b"").decode().splitlines()]
    if len(ours) != len(theirs):
      return float("inf")
    for a, b in zip(ours, theirs, strict=True):
      if (a["round"], a["agent"]) != (b["round"], b["agent"]):
        return float("inf")
      worst = max(worst, abs(a["test_accuracy"] - b["test_accuracy"]))
  return worst


def _logged_rounds(workdir: Path) -> int:
  """The most rounds a run of the figure logs (from the runs' config.json)."""
  rounds = [json.loads(p.read_text()).get("rounds", 1) for p in workdir.rglob("config.json")]
  return max(rounds, default=1)


def _epochs(workdir: Path) -> int:
  """The epochs a round of the runs in ``workdir`` trains (their config.json)."""
  epochs = [json.loads(p.read_text()).get("epochs", 1) for p in workdir.rglob("config.json")]
  return max(max(epochs, default=1), 1)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--figure", default="6", help="the figure (default 6)")
  parser.add_argument("--scale", default="small", choices=("small", "paper"))
  parser.add_argument("--data-dir", help="the paper-scale data (benchmarks/fake_mnist.py)")
  parser.add_argument("--seeds", default="1", help="seeds (default 1)")
  parser.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE",
                      help="config overrides (default at small scale: rounds=1 epochs=2)")
  parser.add_argument("--ways", default=",".join(WAYS),
                      help=f"the ways to compare, the first the reference (default: "
                           f"{','.join(WAYS)})")
  parser.add_argument("--jobs", default="2", help="the local pool's workers (default 2)")
  parser.add_argument("--batch", default="auto", help="runs per batch (default auto)")
  parser.add_argument("--rounds-timed", type=int, metavar="K",
                      help="time the first K rounds and one more, extrapolate the figure")
  parser.add_argument("--epochs-of-figure", type=int, metavar="E",
                      help="with --rounds-timed and --set epochs=e: extrapolate to E epochs a "
                           "round (a round's training time scaled by E / e)")
  args = parser.parse_args()
  ways = [w.strip() for w in args.ways.split(",") if w.strip()]
  unknown = [w for w in ways if w not in WAYS]
  if unknown or not ways:
    parser.error(f"--ways: expected names from {', '.join(WAYS)}, got {args.ways!r}")
  common = ["--figure", args.figure, "--scale", args.scale, "--seeds", args.seeds]
  if args.data_dir:
    common += ["--data-dir", args.data_dir]
  for item in args.set if args.set is not None else (
      ["rounds=1", "epochs=2"] if args.scale == "small" else []):
    common += ["--set", item]
  print(f"neural reproduce {' '.join(common)}; {len(os.sched_getaffinity(0))} cores, load "
        f"average {os.getloadavg()[0]:.1f} at the start", flush=True)
  failed = False
  with tempfile.TemporaryDirectory() as tmp:
    results: dict[str, tuple[float, dict[str, bytes]]] = {}
    for way in ways:
      flags, env = _command(way, args)
      workdir = Path(tmp) / way
      if args.rounds_timed:
        first = _reproduce(workdir, flags, env, common, args.rounds_timed)
        longer = _reproduce(Path(tmp) / f"{way}-longer", flags, env, common,
                            args.rounds_timed + 1)
        more = max(0.0, longer - first)
        rounds = _logged_rounds(workdir)
        scale = (args.epochs_of_figure / _epochs(workdir)) if args.epochs_of_figure else 1.0
        # start-up, data and compilation once, then every round at the figure's epochs
        seconds = max(0.0, first - args.rounds_timed * more) + rounds * more * scale
        print(f"  {way:18s} first {args.rounds_timed} rounds {first:8.1f} s, one more "
              f"{more:7.1f} s: the figure ({rounds} rounds"
              f"{f', x{scale:g} epochs' if scale != 1 else ''}) about {seconds / 60:6.1f} min",
              flush=True)
      else:
        seconds = _reproduce(workdir, flags, env, common)
      metrics = _metrics(workdir)
      results[way] = (seconds, metrics)
      reference_seconds, reference = results[ways[0]]
      per_hour = 3600 * len(metrics) / seconds
      if way in ROUNDED or ways[0] in ROUNDED:
        difference = _largest_difference(reference, metrics)
        same = f"largest accuracy difference {difference:.4f}"
        failed |= difference > 0.05
      else:
        equal = metrics == reference and bool(metrics)
        same = "same metrics" if equal else "METRICS DIFFER"
        failed |= not equal
      print(f"  {way:18s} {seconds:8.1f} s, {per_hour:6.0f} runs/hour, "
            f"{reference_seconds / seconds:5.2f}x of {ways[0]}; {same}", flush=True)
    if not args.rounds_timed:
      print("a task's own cost (the same call again: every run read back):")
      for way in ways:
        flags, env = _command(way, args)
        seconds = _reproduce(Path(tmp) / way, flags, env, common)
        runs = len(results[way][1])
        print(f"  {way:18s} {seconds:6.1f} s for {runs} runs read back, "
              f"{seconds / max(runs, 1):.3f} s a run", flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
