"""Table 1 and Fig. 3 of Berdoz (2022) from a finished sweep of the shipped repshare configs.

    neural run --config repshare_small --workdir runs/repshare_small
    python benchmarks/repshare_table.py --workdir runs/repshare_small
    neural run --config repshare_lambdas_small --workdir runs/repshare_lambdas
    python benchmarks/repshare_table.py --workdir runs/repshare_lambdas

Reads the metrics of every run of the sweep (``WORKDIR/RUN/metrics.jsonl``; runs
named ``[DATASET__]cl`` and ``[DATASET__]nN_METHOD`` as in the shipped configs)
and prints, per dataset, the clients' mean test accuracy after the last round
(Table 1: CL, then a row per method and a column per number of clients N), and
the first round at which that mean reaches ``--reach`` (how fast each method
converges: Fig. 4 compares the curves). For the ablation sweep (runs named
``lambda_kd=A__lambda_disc=B``) it prints Fig. 3's grid: each pair's final mean
accuracy minus that of lambda_KD = lambda_disc = 0 (independent learning).
"""

from __future__ import annotations

import argparse
from pathlib import Path
import re

import numpy as np

import neural

ORDER = ("ours", "ours_code", "fd", "fd_code", "fedavg", "il")


def mean_curve(rows) -> np.ndarray:
  """The clients' mean test accuracy per round."""
  last = max(r["round"] for r in rows)
  return np.array([np.mean([r["test_accuracy"] for r in rows if r["round"] == t])
                   for t in range(last + 1)])


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--workdir", required=True, type=Path)
  parser.add_argument("--reach", type=float, default=0.9)
  args = parser.parse_args()
  runs = sorted(p for p in args.workdir.iterdir() if (p / "metrics.jsonl").exists())
  grid = {}
  for run in runs:
    match = re.fullmatch(r"lambda_kd=([\d.]+)__lambda_disc=([\d.]+)", run.name)
    if match:
      grid[float(match.group(1)), float(match.group(2))] = \
          mean_curve(neural.read_metrics(run))[-1]
  if grid:
    kds, discs = sorted({k for k, _ in grid}), sorted({d for _, d in grid})
    base = grid.get((0.0, 0.0), np.nan)
    print(f"final mean test accuracy minus lambda_KD = lambda_disc = 0 ({base:.3f}), "
          f"rows lambda_KD, columns lambda_disc")
    print(f"{'':<8}" + "".join(f"{d:>8g}" for d in discs))
    for k in kds:
      print(f"{k:<8g}" + "".join(f"{grid[k, d] - base:>+8.3f}" if (k, d) in grid
                                 else f"{'-':>8}" for d in discs))
    return
  curves: dict[str, dict[tuple[str, int], np.ndarray]] = {}
  for run in runs:
    dataset, _, name = run.name.rpartition("__")
    match = re.fullmatch(r"n(\d+)_(\w+)", name)
    key = ("cl", 1) if name == "cl" else (match.group(2), int(match.group(1))) if match else None
    if key is not None:
      curve = mean_curve(neural.read_metrics(run))
      curves.setdefault(dataset or args.workdir.name, {})[key] = curve
  for dataset, table in curves.items():
    sizes = sorted({n for _, n in table if n > 1})
    methods = [m for m in ORDER if any((m, n) in table for n in sizes)]

    def cell(key, kind, table=table):
      if key not in table:
        return f"{'-':>8}"
      c = table[key]
      hit = np.flatnonzero(c >= args.reach)
      reach = str(int(hit[0])) if hit.size else "never"
      return f"{c[-1]:>8.3f}" if kind == "acc" else f"{reach:>8}"

    for kind, title in (("acc", "mean test accuracy after the last round"),
                        ("reach", f"first round with mean test accuracy >= {args.reach}")):
      print(f"{dataset}: {title}")
      print(f"{'':<11}" + "".join(f"{'N=' + str(n):>8}" for n in sizes))
      if ("cl", 1) in table:
        print(f"{'cl (N=1)':<11}{cell(('cl', 1), kind)}")
      for m in methods:
        print(f"{m:<11}" + "".join(cell((m, n), kind) for n in sizes))
      print()


if __name__ == "__main__":
  main()
