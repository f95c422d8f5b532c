"""Local training speed: the training scaffold against the simplest programs doing the same work.

    python benchmarks/train_speed.py                 # CNN, batch 64 and 512, 2 agents (~2 min)
    python benchmarks/train_speed.py --agents 1,2,5 --repeats 3   # section 2 for each
    python benchmarks/train_speed.py --fit           # also one paper CNN fit, end to end
    python benchmarks/train_speed.py --model mlp     # the paper's MLP (no convolution)

The work: one epoch of the paper's MNIST CNN (two 5x5 conv layers, 16 and 32
channels; 28,938 parameters) over the first 2,048 images of the embedded MNIST
subset, squared error of the softmax output against one-hot targets,
PyTorch-style Adam (lr 1e-3, L2 3e-4 added to the gradient). Printed, measured
side by side in one run after a warm-up that compiles every program (best of
``--repeats``):

1. ``training.train`` (the scaffold, ``step_loop="auto"``), the scaffold forced to
   one ``lax.scan`` per epoch (``step_loop="scan"``, the structure the scaffold
   replaced) and to one jitted step per mini-batch (``"python"``), and the plain
   loop: one jitted Flax + Optax step per mini-batch in training mode (dropout
   on) with NumPy batches, at batch 64 and 512; the ratios to the plain loop
   (target for the scaffold: <= 1.2). Where ``torch`` happens to be installed
   (never a dependency), the same network and optimiser in PyTorch too.
2. ``--agents`` agents of the same CNN (one epoch each, 1,024 images per agent; a
   comma-separated list runs the section for each number):
   ``training.train_batch`` with ``agent_batching="auto"``, ``"vmap"`` and
   ``"sequential"``, and the ratio of agents together (auto) to one after the
   other (target on a CPU: <= 1; on a GPU the vmapped program should cost under
   1.5x one agent, printed as vmapped / one agent).
3. ``--fit``: one ``FlaxLearner.fit`` of the paper's CNN on 2,000 images for 20
   epochs (batch 64), compilation included: what a round of ``neural run`` pays
   per agent.

``--model mlp`` runs the same sections with the paper's MLP (two hidden layers of
512, dropout 0.2; no PyTorch column): without a convolution "auto" is the scan, on
a CPU too. What "auto" chose is printed with the figures.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from timing import best_time

import neural
from neural import training
from neural.training import per_example_loss
from neural.training import resolve_loop


def plain_loop(model, config, x, t, params, seed=0):
  """The obvious program: one jitted step per mini-batch, batches cut in NumPy."""
  tx = training.make_optimizer(config)

  @jax.jit
  def step(p, o, xb, tb, i):
    rngs = {"dropout": jax.random.fold_in(jax.random.PRNGKey(seed), i)}   # training mode
    loss = lambda p: jnp.mean(per_example_loss(
        model.apply({"params": p}, xb, train=True, rngs=rngs), tb, "mse"))
    updates, o = tx.update(jax.grad(loss)(p), o, p)
    return optax.apply_updates(p, updates), o

  def run():
    p, o = params, tx.init(params)
    perm = np.random.default_rng(seed).permutation(len(x))
    for i in range(0, len(x), config.batch_size):
      idx = perm[i:i + config.batch_size]
      p, o = step(p, o, x[idx], t[idx], i)
    return p

  return run


def torch_loop(x, t, batch_size):
  """The same CNN, loss and optimiser in PyTorch, or None when torch is not installed."""
  try:
    import torch
  except ImportError:
    return None
  torch.manual_seed(0)
  xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
  tt = torch.from_numpy(t)
  nn = torch.nn
  net = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

  def run():
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=3e-4)
    perm = torch.randperm(len(xt))
    for i in range(0, len(xt), batch_size):
      idx = perm[i:i + batch_size]
      opt.zero_grad()
      loss = nn.functional.mse_loss(torch.softmax(net(xt[idx]), dim=1), tt[idx])
      loss.backward()
      opt.step()

  return run, torch.get_num_threads()


def timed(fn, repeats):
  jax.block_until_ready(fn())   # warm-up: compiles
  return best_time(fn, repeats)


def agents_section(model, variables, x, t, key, m, repeats):
  """Section 2: m agents together (vmapped, auto) against one after the other and one agent."""
  n = len(x) // 2
  print(f"\n2. {m} agents of one architecture, one epoch of {n} images each, batch 64")
  config = training.TrainConfig(epochs=1, batch_size=64)
  xs = np.stack([x[:n]] * m)
  ts = np.stack([t[:n]] * m)
  stacked = jax.tree.map(lambda a: jnp.stack([a] * m), variables)
  keys = jax.random.split(key, m)
  times = {}
  for mode in ("auto", "vmap", "sequential"):
    c = training.TrainConfig(epochs=1, batch_size=64, agent_batching=mode)
    times[mode] = timed(lambda c=c: training.train_batch(model, stacked, xs, ts, keys, c),
                        repeats)
  t_one = timed(lambda: training.train(model, variables, x[:n], t[:n], key, config), repeats)
  print(f"together (auto): {times['auto']:.4f}s   vmap: {times['vmap']:.4f}s   "
        f"sequential: {times['sequential']:.4f}s   one agent: {t_one:.4f}s")
  print(f"ratio together (auto) / one after the other: {times['auto'] / times['sequential']:.2f}")
  print(f"ratio vmapped / one agent: {times['vmap'] / t_one:.2f}")
  return times["vmap"]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--points", type=int, default=2048)
  parser.add_argument("--agents", default="2",
                      help="numbers of agents of section 2, comma-separated (default 2)")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--fit", action="store_true", help="also time one 20-epoch paper fit")
  parser.add_argument("--model", default="cnn", choices=("cnn", "mlp"),
                      help="the paper's CNN (default) or MLP")
  args = parser.parse_args(argv)

  data = neural.load_dataset("mnist-subset", seed=0)
  x = np.asarray(data.x_train[:args.points], np.float32)
  t = neural.data.one_hot(data.y_train[:args.points], data.num_classes)
  model = neural.get_model(args.model, data.num_classes)
  variables = training.init_variables(model, jax.random.PRNGKey(0), x.shape[1:])
  key = jax.random.PRNGKey(1)
  print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}); paper "
        f"{args.model.upper()} "
        f"({sum(a.size for a in jax.tree.leaves(variables))} parameters), one epoch of "
        f"{len(x)} images, mse, PyTorch-style Adam; best of {args.repeats}")
  loop, batching = resolve_loop("auto", "auto", lambda: args.model == "cnn")
  print(f"auto on this backend for this model: step_loop={loop}, agent_batching={batching}")

  print("\n1. one model")
  print(f"{'batch':>5s} {'scaffold':>9s} {'scan':>8s} {'python':>8s} {'plain':>8s} {'torch':>8s}"
        f"   {'scaffold/plain':>14s} {'scan/plain':>10s} {'python/plain':>12s} "
        f"{'scaffold/torch':>14s}")
  for batch_size in (64, 512):
    config = training.TrainConfig(epochs=1, batch_size=batch_size)
    scan = training.TrainConfig(epochs=1, batch_size=batch_size, step_loop="scan")
    python = training.TrainConfig(epochs=1, batch_size=batch_size, step_loop="python")
    t_auto = timed(lambda c=config: training.train(model, variables, x, t, key, c), args.repeats)
    t_scan = timed(lambda c=scan: training.train(model, variables, x, t, key, c), args.repeats)
    t_python = timed(lambda c=python: training.train(model, variables, x, t, key, c), args.repeats)
    t_plain = timed(plain_loop(model, config, x, t, variables["params"]), args.repeats)
    reference = torch_loop(x, t, batch_size) if args.model == "cnn" else None
    t_torch = timed(reference[0], args.repeats) if reference else float("nan")
    print(f"{batch_size:5d} {t_auto:8.3f}s {t_scan:7.3f}s {t_python:7.3f}s {t_plain:7.3f}s "
          f"{t_torch:7.3f}s   {t_auto / t_plain:14.2f} {t_scan / t_plain:10.2f} "
          f"{t_python / t_plain:12.2f} {t_auto / t_torch:14.2f}")
  if reference is None:
    print("(no PyTorch column: torch is not installed, or the model is not the CNN)")
  else:
    print(f"(torch with {reference[1]} threads)")

  vmapped = {m: agents_section(model, variables, x, t, key, m, args.repeats)
             for m in (int(a) for a in args.agents.split(","))}
  if 1 in vmapped and len(vmapped) > 1:
    print("\nvmapped M agents / vmapped 1 agent (the same program but for the agent axis): "
          + ", ".join(f"M = {m}: {tm / vmapped[1]:.2f}" for m, tm in vmapped.items() if m != 1))

  if args.fit:
    print(f"\n3. one paper {args.model.upper()} fit: 2,000 images, 20 epochs, batch 64, "
          f"compilation included")
    learner = neural.FlaxLearner(model, x.shape[1:], training.TrainConfig(epochs=20),
                                 jax.random.PRNGKey(2))
    t0 = time.perf_counter()
    jax.block_until_ready(learner.fit(x[:2000], t[:2000]).variables)
    print(f"FlaxLearner.fit: {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
  main()
