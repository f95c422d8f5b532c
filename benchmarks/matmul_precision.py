"""How exact a float32 kernel-times-vector product is, at JAX's default precision and at full.

    python benchmarks/matmul_precision.py              # N = 20,000 points, d = 5, RBF
    python benchmarks/matmul_precision.py --n 5000 --columns 1,10

On GPUs with tensor cores (NVIDIA Ampere and later) JAX multiplies float32
matrices in TF32 at its default precision, about 3 decimal digits; conjugate
gradients on such products stall near a relative residual of 1e-3. fedkrr's
matrix products run at ``precision=HIGHEST`` (``fedkrr``'s kernels and its
matrix-free path). Printed: the error of ``K @ v`` in float32 against the same
product in float64, relative to the largest entry of the float64 result, with
v a vector (a matrix-vector product, which GPUs run without tensor cores) and
with v a matrix of 10 columns (a matrix product: the matrix-free path's labels of
several classes, the squared distances of kernels on more than 16 dimensions), for

* ``default``: ``jnp.matmul(K, v)`` at JAX's default precision,
* ``highest``: ``jnp.matmul(K, v, precision=HIGHEST)``,
* ``fedkrr.scale.kernel_matvec``: the library's tiled product (never stores K).

On a CPU all three are full float32 (about 1e-6 at this size); on a tensor-core
GPU ``default`` of the matrix product is TF32. The numbers of one GPU run are in docs/devices.md.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)   # the float64 reference; the rest is float32

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fedkrr  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--n", type=int, default=20_000, help="points (K is n x n)")
  parser.add_argument("--dim", type=int, default=5)
  parser.add_argument("--gamma", type=float, default=0.5, help="the RBF kernel's gamma")
  parser.add_argument("--columns", default="1,10",
                      help="columns of v, comma-separated (1: v is a vector)")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  x = rng.standard_normal((args.n, args.dim))
  kernel = fedkrr.RBF(gamma=args.gamma)
  print(f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
        f"RBF(gamma={args.gamma}) on {args.n} x {args.n} points in {args.dim} dimensions, "
        "float32 K @ v against float64")
  for columns in (int(c) for c in args.columns.split(",")):
    v = rng.standard_normal(args.n if columns == 1 else (args.n, columns))
    report(kernel, x, v)


def report(kernel, x: np.ndarray, v: np.ndarray) -> None:
  """Prints the float32 products' errors for one right-hand side ``v``."""
  exact = np.asarray(fedkrr.scale.kernel_matvec(kernel, jnp.asarray(x), jnp.asarray(x),
                                                jnp.asarray(v)))
  x32, v32 = jnp.asarray(x, jnp.float32), jnp.asarray(v, jnp.float32)
  k32 = kernel(x32, x32)
  products = {
      "default": jax.jit(lambda k, v: jnp.matmul(k, v))(k32, v32),
      "highest": jax.jit(lambda k, v: jnp.matmul(k, v, precision=jax.lax.Precision.HIGHEST))(
          k32, v32),
      "fedkrr.scale.kernel_matvec": fedkrr.scale.kernel_matvec(kernel, x32, x32, v32),
  }
  scale = np.max(np.abs(exact))
  shape = "a vector" if v.ndim == 1 else f"{v.shape[1]} columns"
  for name, y in products.items():
    error = np.max(np.abs(np.asarray(y, np.float64) - exact)) / scale
    print(f"v of {shape:10s} {name:22s} max error / max |K v|: {error:.1e}")


if __name__ == "__main__":
  main()
