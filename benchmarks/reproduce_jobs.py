"""``neural reproduce --jobs J`` against one run at a time: the wall time, and the same numbers.

    python benchmarks/reproduce_jobs.py                      # Fig. 6, 1 seed, 1 round (~8 min)
    python benchmarks/reproduce_jobs.py --figure 5 --jobs 2 --set rounds=2

Runs the same shortened figure twice into fresh directories, side by side in one
run: ``neural reproduce`` with ``--jobs 1`` (every run in the command's own
process), then with ``--jobs J`` (worker processes). Printed: each wall time,
their ratio (jobs 1 / jobs J: how many more runs per hour the workers do), and
whether every run's ``metrics.jsonl`` is the same byte for byte in both (the
command exits 1 if one is not). The default shortening (``--seeds 1 --set
rounds=1``: one paper round of each of Fig. 6's 24 runs, 10 epochs each) keeps
the runs' shapes and compilations, so the ratio is the one a full figure sees,
up to the last few runs (when fewer runs than workers are left).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time


def _reproduce(workdir: Path, figure: str, jobs: int, extra: list[str]) -> float:
  """Seconds of wall time of one ``neural reproduce`` call (its output is kept quiet)."""
  started = time.perf_counter()
  subprocess.run([sys.executable, "-m", "neural", "reproduce", "--figure", figure,
                  "--workdir", str(workdir), "--no-progress", "--jobs", str(jobs), *extra],
                 check=True, stdout=subprocess.DEVNULL)
  return time.perf_counter() - started


def _metrics(workdir: Path) -> dict[str, bytes]:
  return {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("metrics.jsonl")}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--figure", default="6", help="the figure (default 6)")
  parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
  parser.add_argument("--seeds", default="1", help="seeds (default 1)")
  parser.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE",
                      help="config overrides (default: rounds=1)")
  args = parser.parse_args()
  extra = ["--seeds", args.seeds]
  for item in args.set or ["rounds=1"]:
    extra += ["--set", item]
  print(f"neural reproduce --figure {args.figure} {' '.join(extra)}; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
  with tempfile.TemporaryDirectory() as tmp:
    one = _reproduce(Path(tmp) / "jobs1", args.figure, 1, extra)
    print(f"  --jobs 1: {one:7.1f} s", flush=True)
    many = _reproduce(Path(tmp) / f"jobs{args.jobs}", args.figure, args.jobs, extra)
    print(f"  --jobs {args.jobs}: {many:7.1f} s", flush=True)
    first, second = _metrics(Path(tmp) / "jobs1"), _metrics(Path(tmp) / f"jobs{args.jobs}")
  same = first == second and bool(first)
  print(f"  jobs 1 / jobs {args.jobs}: {one / many:.2f}x the runs per hour; "
        f"{len(first)} runs' metrics.jsonl {'the same, byte for byte' if same else 'DIFFER'}")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
