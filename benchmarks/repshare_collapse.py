"""Representation sharing (Berdoz 2022): why the text's L_KD with lambda_KD = 10 stays at chance.

    python benchmarks/repshare_collapse.py --workdir runs/repshare-collapse

Runs "repshare" side by side in one call, on the setting of ``repshare_small``
(1,200 digits split iid, the thesis's LeNet-5 with d' = 84) with 2 clients,
varying only the weight and the reduction of L_KD = mean_i ||s_i - tbar^{y_i}||^2
(and L_disc's reduction, as the thesis's code pairs them), and prints per round
the clients' mean test accuracy and the spread of the relay's global class
means (``class_mean_spread``: mean distance of the C class representations from
their centre; 0 means all classes share one representation). Ending with
the spread shrinking round after round and the accuracy at chance is the collapse;
the variants show what it depends on:

- ``text``: the text's sums (squared norm over the d' coordinates, L_disc summed
  over the C classes), lambda_KD = 10 (Sec. 4);
- ``text_random_off``: the same with the relay's random first-round targets
  switched off (``init_scale = 0``: all-zero targets);
- ``text_models``: the same, first targets from the untrained models (the code's);
- ``text_kd1``, ``text_kd0.1``: the text's sums with lambda_KD = 1 and 0.1;
- ``code``: the thesis's code (PyTorch ``MSELoss``/``BCELoss``: means over the d'
  coordinates and the C classes, i.e. lambda_KD / d' per squared unit, first targets
  from the untrained models), lambda_KD = 10;
- ``no_kd``: lambda_KD = 0 (L_CE + L_disc only);
- ``il``: independent learning (L_CE only).

Every run writes its run directory under ``WORKDIR`` (resumable, as ``neural run``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from neural.methods import run_method
from neural.methods.representation_sharing import RepShareConfig

BASE = dict(dataset="digits", train_subset=1200, partition="iid", backbone="lenet5",
            feature_dim=84, agents=2, lambda_kd=10.0, lambda_disc=1.0, n_avg=10, seed=0)
VARIANTS = {
    "text": {},
    "text_random_off": {"init_scale": 0.0},
    "text_models": {"initial_targets": "models"},
    "text_kd1": {"lambda_kd": 1.0},
    "text_kd0.1": {"lambda_kd": 0.1},
    "code": {"kd_reduction": "mean", "disc_reduction": "mean", "initial_targets": "models"},
    "no_kd": {"lambda_kd": 0.0},
    "il": {"method": "repshare-independent"},
}


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--workdir", required=True, type=Path)
  parser.add_argument("--rounds", type=int, default=12)
  parser.add_argument("--every", type=int, default=2, help="print every k-th round")
  args = parser.parse_args()
  table = {}
  for name, changes in VARIANTS.items():
    config = RepShareConfig(**{"method": "repshare", **BASE, "rounds": args.rounds, **changes})
    rows = run_method(config, args.workdir / name)
    table[name] = [
        (float(np.mean([r["test_accuracy"] for r in rows if r["round"] == t])),
         next((r["class_mean_spread"] for r in rows if r["round"] == t
               and "class_mean_spread" in r), float("nan")))
        for t in range(args.rounds)]
  shown = [t for t in range(args.rounds) if t % args.every == 0 or t == args.rounds - 1]
  print("mean test accuracy / spread of the global class means, by round")
  print(f"{'variant':<16}" + "".join(f"{'r' + str(t):>13}" for t in shown))
  for name, cells in table.items():
    print(f"{name:<16}" + "".join(f"{cells[t][0]:>6.2f} /{cells[t][1]:>5.2f}" for t in shown))


if __name__ == "__main__":
  main()
