"""Several agents' convolutions in one program: which route costs least per agent.

    python benchmarks/conv_routes.py                  # M = 1 and 5 agents, batch 64
    python benchmarks/conv_routes.py --agents 1,2,5,10 --batch 64 --repeats 20

The work: the two convolution layers of the paper's MNIST CNN (5x5, 1 -> 16 and
16 -> 32 channels, 'SAME', each followed by ReLU and a 2x2 max-pool) for M agents,
each with its own weights and its own batch of 28x28 images: the loss (the sum of
squares of the output) and its gradient with respect to both kernels, one jitted
program per route. A training step of ``neural.training.train_batch`` with
``agent_batching="vmap"`` spends its convolution time here. The routes:

* ``grouped``: ``jax.vmap`` of one agent's ``lax.conv_general_dilated``; XLA
  turns a convolution whose kernel has an agent axis into a grouped convolution
  (``feature_group_count = M``), what a vmapped training step runs today;
* ``blocks``: one dense convolution over the M agents' channels side by side,
  with a block-diagonal kernel (agent a's kernel in block (a, a), zeros
  elsewhere): M times the arithmetic of ``grouped``, but a dense kernel;
* ``unrolled``: the M convolutions one after the other in the one program;
* ``im2col``: patches (``lax.conv_general_dilated_patches``) and one batched
  matrix product per layer.

Printed per route and per M: the time of one forward and backward pass, the
ratio to the same route at M = 1 (the GPU target of the training step is
M = 5 vmapped <= 1.5x one agent), and the largest difference of the gradients
from ``grouped``'s (they are the same sums in other orders: float32 rounding).
Which route is fastest differs by device; the numbers of one run are in
docs/devices.md.
"""

from __future__ import annotations

import argparse

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
from timing import best_time

DIMENSIONS = ("NHWC", "HWIO", "NHWC")
PADS = ((2, 2), (2, 2))


def conv(x, kernel):
  return lax.conv_general_dilated(x, kernel, (1, 1), PADS, dimension_numbers=DIMENSIONS)


def pool(x):
  b, h, w, c = x.shape
  return jnp.max(x.reshape(b, h // 2, 2, w // 2, 2, c), axis=(2, 4))


def grouped(x, kernels):
  """``vmap`` over agents of one agent's two layers (x: (M, B, 28, 28, 1))."""
  def one(x, k1, k2):
    return pool(jax.nn.relu(conv(pool(jax.nn.relu(conv(x, k1))), k2)))
  return jax.vmap(one)(x, *kernels)


def block_conv(x, kernel):
  """M agents' convolutions as one dense one: x (M, B, H, W, C), kernel (M, kh, kw, C, O)."""
  m, b, h, w, c = x.shape
  kh, kw, o = kernel.shape[1], kernel.shape[2], kernel.shape[4]
  side_by_side = jnp.moveaxis(x, 0, 3).reshape(b, h, w, m * c)       # channel a * C + c
  eye = jnp.eye(m, dtype=bool)[:, None, None, None, :, None]          # (a, 1, 1, 1, a', 1)
  blocks = jnp.where(eye, kernel[:, :, :, :, None, :], 0)              # (a, kh, kw, C, a', O)
  blocks = jnp.moveaxis(blocks, 0, 2).reshape(kh, kw, m * c, m * o)
  y = conv(side_by_side, blocks)
  return jnp.moveaxis(y.reshape(b, h, w, m, o), 3, 0)


def blocks(x, kernels):
  k1, k2 = kernels
  layer = lambda x, k: jax.vmap(pool)(jax.nn.relu(block_conv(x, k)))
  return layer(layer(x, k1), k2)


def unrolled(x, kernels):
  k1, k2 = kernels
  return jnp.stack([pool(jax.nn.relu(conv(pool(jax.nn.relu(conv(x[a], k1[a]))), k2[a])))
                    for a in range(x.shape[0])])


def im2col_conv(x, kernel):
  """Patches and a batched matrix product: x (M, B, H, W, C), kernel (M, kh, kw, C, O)."""
  m, b, h, w, c = x.shape
  kh, kw, o = kernel.shape[1], kernel.shape[2], kernel.shape[4]
  patches = lax.conv_general_dilated_patches(
      x.reshape(m * b, h, w, c), (kh, kw), (1, 1), PADS, dimension_numbers=DIMENSIONS)
  patches = patches.reshape(m, b * h * w, c * kh * kw)       # features ordered (c, kh, kw)
  weights = jnp.transpose(kernel, (0, 3, 1, 2, 4)).reshape(m, c * kh * kw, o)
  return jnp.einsum("mpk,mko->mpo", patches, weights).reshape(m, b, h, w, o)


def im2col(x, kernels):
  k1, k2 = kernels
  layer = lambda x, k: jax.vmap(pool)(jax.nn.relu(im2col_conv(x, k)))
  return layer(layer(x, k1), k2)


ROUTES = {"grouped": grouped, "blocks": blocks, "unrolled": unrolled, "im2col": im2col}


def gradient_program(route):
  loss = lambda kernels, x: jnp.sum(route(x, kernels) ** 2)
  return jax.jit(jax.value_and_grad(loss))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--agents", default="1,5", help="comma-separated numbers of agents")
  parser.add_argument("--batch", type=int, default=64, help="images per agent")
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--width", type=int, default=16, help="channels of the first layer")
  args = parser.parse_args()
  counts = [int(m) for m in args.agents.split(",")]
  if 1 not in counts:
    counts = [1, *counts]
  print(f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
        f"two 5x5 conv layers (1 -> {args.width} -> {2 * args.width} channels), batch "
        f"{args.batch} per agent, forward and backward, best of {args.repeats}")
  rng = np.random.default_rng(0)
  programs = {name: gradient_program(route) for name, route in ROUTES.items()}
  times: dict[tuple[str, int], float] = {}
  for m in counts:
    x = jnp.asarray(rng.random((m, args.batch, 28, 28, 1), dtype=np.float32))
    kernels = (jnp.asarray(0.2 * rng.standard_normal((m, 5, 5, 1, args.width)), jnp.float32),
               jnp.asarray(0.05 * rng.standard_normal((m, 5, 5, args.width, 2 * args.width)),
                           jnp.float32))
    reference = None
    for name, program in programs.items():
      _, grads = jax.block_until_ready(program(kernels, x))   # compile
      times[name, m] = best_time(lambda p=program, k=kernels, x=x: p(k, x), args.repeats)
      if reference is None:
        reference = grads
      scale = max(float(jnp.max(jnp.abs(g))) for g in reference)
      diff = max(float(jnp.max(jnp.abs(g - r))) for g, r in zip(grads, reference)) / scale
      print(f"M = {m:2d}  {name:9s} {1e3 * times[name, m]:8.3f} ms   "
            f"/ M = 1: {times[name, m] / times.get((name, 1), times[name, m]):5.2f}   "
            f"gradients vs grouped: {diff:.1e} (relative to the largest)")
  best = {m: min(ROUTES, key=lambda r, m=m: times[r, m]) for m in counts}
  print("fastest: " + ", ".join(f"M = {m}: {best[m]} ({1e3 * times[best[m], m]:.3f} ms, "
                                f"{times[best[m], m] / times['grouped', 1]:.2f}x grouped at M = 1)"
                                for m in counts))


if __name__ == "__main__":
  main()
