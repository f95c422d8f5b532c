"""AKD over 20 paper rounds at the small scale: a gradual decline, not a collapse.

The small Fig. 4 config (``fig04_akd_small``) runs 5 paper rounds of AKD so that the
figure fits a CPU with three seeds. This script runs two of its AKD runs (same data,
and data heterogeneity: label split, Alpha 0.1; both from agent 1) for 20 paper rounds
(40 AKD steps) with one seed, and prints the paper's curve (``neural.evidence.paper_rounds``:
the mean of the two agents per round, the best local epoch):

    python scripts/akd_20_rounds.py --workdir runs/akd20 [--seed 0]

About 6 minutes per run on a 2-core CPU; started again, finished runs are read and
unfinished ones resume. docs/reproduce.md shows the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

RUNS = ("same__from-agent1", "data-het__from-agent1")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", required=True, help="directory of the two runs")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--paper-rounds", type=int, default=20)
  args = parser.parse_args(argv)

  import neural
  from neural._src.jobs.specs import load_spec
  from neural._src.kd.experiment import train_and_evaluate

  for name, config in load_spec("fig04_akd_small").expand({"seed": args.seed}):
    if name not in RUNS:
      continue
    config = config.replace(rounds=args.paper_rounds * config.agents)
    start = time.perf_counter()
    rows = train_and_evaluate(config, os.path.join(args.workdir, name))
    curve = [round(r["test_accuracy"], 3) for r in neural.evidence.paper_rounds(rows, "best")]
    print(json.dumps({"run": name, "seed": args.seed, "seconds": round(time.perf_counter()
                                                                        - start),
                      "paper_rounds": curve}))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
