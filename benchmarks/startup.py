"""Start-up of the ``neural`` command: help and a finished run's rerun against importing JAX.

    python benchmarks/startup.py            # 3 repeats of each, medians
    python benchmarks/startup.py --repeats 5

Every ``neural`` command used to import JAX, Flax, Optax, matplotlib and scikit-learn
before it did anything. Now ``neural --help``, ``neural run --help`` and the rerun of a
finished run load none of them. This times each command in a fresh interpreter (the
median of ``--repeats`` runs, side by side with the reference: an interpreter that only
imports ``jax``, ``flax.linen`` and ``optax``, the least any command paid before) and
prints the seconds and the ratios to the reference. A loaded machine slows all of them
alike; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUN = ["run", "--dataset", "digits", "--train-subset", "60", "--test-subset", "30",
       "--models", "mlp", "--tiny", "--protocol", "avgkd", "--rounds", "1", "--epochs", "1",
       "--no-progress"]


def _seconds(argv: list[str]) -> float:
  start = time.perf_counter()
  subprocess.run(argv, check=True, capture_output=True)
  return time.perf_counter() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  neural = [sys.executable, "-m", "neural"]
  workdir = os.path.join(tempfile.mkdtemp(prefix="startup-"), "run")
  subprocess.run(neural + RUN + ["--workdir", workdir], check=True, capture_output=True)
  cases = {
      "import jax, flax.linen, optax (reference)":
          [sys.executable, "-c", "import jax, flax.linen, optax"],
      "neural --help": neural + ["--help"],
      "neural run --help": neural + ["run", "--help"],
      "neural run (a finished run, again)": neural + RUN + ["--workdir", workdir],
  }
  times = {name: [] for name in cases}
  for _ in range(args.repeats):   # interleaved, so that a load change hits every case
    for name, argv in cases.items():
      times[name].append(_seconds(argv))
  reference = statistics.median(times[next(iter(cases))])
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
  print(f"median of {args.repeats} runs each, load average {load:.1f} on {os.cpu_count()} cores")
  for name, values in times.items():
    median = statistics.median(values)
    print(f"  {name:45s} {median:6.2f} s   {median / reference:5.2f} x the reference")


if __name__ == "__main__":
  main()
