"""A mini-batch larger than the data costs what the whole data costs.

    python benchmarks/large_batch.py                    # 100 points, batch 10^6 (~1 min)
    python benchmarks/large_batch.py --points 500 --batch 100000 --epochs 5

``neural.training.train`` of the tiny CNN on ``--points`` digits for ``--epochs`` epochs,
side by side in one run (best of ``--repeats`` after a warm-up that compiles):
batch = the number of points (the whole data, the reference) and batch =
``--batch``, far beyond it. A batch larger than the data is the whole data (one
step per epoch, cut to the data's size), so the ratio should be about 1; before
that rule every step computed the loss on ``--batch`` padded slots (10^6 slots
for 100 points: minutes instead of a second). Also printed: the largest
difference of the trained parameters (float32 rounding: the same steps on the
same points, the padding cut).
"""

from __future__ import annotations

import argparse
import warnings

import jax
import numpy as np
from timing import best_time

import neural


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--points", type=int, default=100)
  parser.add_argument("--batch", type=int, default=1_000_000)
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)

  data = neural.load_dataset("digits")
  x, labels = data.x_train[:args.points], data.y_train[:args.points]
  targets = neural.data.one_hot(labels, data.num_classes)
  model = neural.get_model("cnn", data.num_classes, tiny=True)
  variables = neural.training.init_variables(model, jax.random.PRNGKey(0), x.shape[1:])
  key = jax.random.PRNGKey(1)

  def fit(batch_size):
    config = neural.training.TrainConfig(epochs=args.epochs, batch_size=batch_size)
    return lambda: neural.training.train(model, variables, x, targets, key, config)["params"]

  with warnings.catch_warnings():
    warnings.simplefilter("ignore", neural.training.LargeBatchWarning)
    whole, large = fit(args.points), fit(args.batch)
    results = {"whole": whole(), "large": large()}          # the warm-up compiles
    times = {name: best_time(fn, args.repeats) for name, fn in (("whole", whole),
                                                                  ("large", large))}
  difference = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                   for a, b in zip(jax.tree.leaves(results["whole"]),
                                   jax.tree.leaves(results["large"])))
  print(f"{args.points} points, {args.epochs} epochs, tiny CNN, {jax.default_backend()}")
  print(f"  batch {args.points:>9,} (the data)  {times['whole']:8.3f} s")
  print(f"  batch {args.batch:>9,}             {times['large']:8.3f} s")
  print(f"  ratio large / data: {times['large'] / times['whole']:.2f} (target: about 1)")
  print(f"  largest parameter difference: {difference:.2e}")


if __name__ == "__main__":
  main()
