"""``neural reproduce --batch B`` against one run at a time: the wall time, and the same numbers.

    python benchmarks/reproduce_batch.py                      # Fig. 6, 1 seed, 2 rounds, 1 epoch
    python benchmarks/reproduce_batch.py --batch 12 --seeds 3

Runs the same shortened figure twice into fresh directories, side by side in one
run: ``neural reproduce`` with ``--batch 1`` (one run after another), then with
``--batch B`` (up to B runs of one protocol, their seeds and Alphas, trained as one
program: ``neural._src.jobs.batched``). Printed: each wall time, their ratio
(batch 1 / batch B: above 1, batches are faster), and the largest differences of
every run's metrics between the two (batched numbers equal the runs alone up to
float32 rounding, which Adam's many steps can amplify: measured on a CPU, Fig. 6's CNNs
were bit-equal and its MLP variant (``--set 'models=["mlp"]' --set width=512``) within
6 of 1,000 test points and a relative 8e-3 in loss; the command exits 1 beyond 1% in
either). The default (``--seeds 1 --set rounds=2
--set epochs=1``: Fig. 6's 24 small runs, 4 Alphas per protocol, so batches of 4)
keeps the runs' shapes and compilations.
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


def _reproduce(workdir: Path, figure: str, batch: str, extra: list[str]) -> float:
  """Seconds of wall time of one ``neural reproduce`` call (its output is kept quiet)."""
  started = time.perf_counter()
  subprocess.run([sys.executable, "-m", "neural", "reproduce", "--figure", figure,
                  "--workdir", str(workdir), "--no-progress", "--batch", batch, *extra],
                 check=True, stdout=subprocess.DEVNULL)
  return time.perf_counter() - started


def _rows(workdir: Path) -> dict[str, list[dict]]:
  return {str(p.relative_to(workdir)): [json.loads(line) for line in p.read_text().splitlines()]
          for p in workdir.rglob("metrics.jsonl")}


def _differences(first: dict[str, list[dict]], second: dict[str, list[dict]]
                 ) -> tuple[float, float, bool]:
  """(largest accuracy difference, largest relative loss difference, same rows and keys)."""
  acc = loss = 0.0
  same = first.keys() == second.keys() and bool(first)
  for name, rows in first.items():
    other = second.get(name, [])
    same = same and len(rows) == len(other)
    for a, b in zip(rows, other):
      same = same and a.keys() == b.keys()
      for key, value in a.items():
        if isinstance(value, float) and "accuracy" in key:
          acc = max(acc, abs(value - b[key]))
        elif isinstance(value, float):
          loss = max(loss, abs(value - b[key]) / max(abs(value), 1e-12))
  return acc, loss, same


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--figure", default="6", help="the figure (default 6)")
  parser.add_argument("--batch", default="4", help="runs per batch (default 4)")
  parser.add_argument("--seeds", default="1", help="seeds (default 1)")
  parser.add_argument("--set", action="append", default=None, metavar="FIELD=VALUE",
                      help="config overrides (default: rounds=2, epochs=1)")
  args = parser.parse_args()
  extra = ["--seeds", args.seeds]
  for item in args.set or ["rounds=2", "epochs=1"]:
    extra += ["--set", item]
  print(f"neural reproduce --figure {args.figure} {' '.join(extra)}; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
  with tempfile.TemporaryDirectory() as tmp:
    one = _reproduce(Path(tmp) / "batch1", args.figure, "1", extra)
    print(f"  --batch 1: {one:7.1f} s", flush=True)
    many = _reproduce(Path(tmp) / "batched", args.figure, args.batch, extra)
    print(f"  --batch {args.batch}: {many:7.1f} s", flush=True)
    acc, loss, same = _differences(_rows(Path(tmp) / "batch1"), _rows(Path(tmp) / "batched"))
  print(f"  ratio (batch 1 / batch {args.batch}): {one / many:.2f}; load average "
        f"{os.getloadavg()[0]:.1f} at the end")
  print(f"  largest differences: accuracy {acc:.4f}, relative loss {loss:.2e}; "
        f"same runs and rows: {same}")
  return 0 if same and acc <= 0.01 and loss <= 0.01 else 1


if __name__ == "__main__":
  sys.exit(main())
