"""How large N can be: time and peak memory of the exact and the matrix-free path.

    python benchmarks/scale.py                                  # N = 2,000 .. 10,000, both paths
    python benchmarks/scale.py --sizes 10000,20000 --exact-max 20000   # the ratio where both run
    python benchmarks/scale.py --sizes 100000                   # matrix-free only (> --exact-max)
    python benchmarks/scale.py --mnist ~/data/mnist --device gpu --dtype float32   # whole MNIST
    python benchmarks/scale.py --mnist subset                   # the embedded 5,000-image subset
    python benchmarks/scale.py --data P.npz                     # any problem file (fedkrr run's)

Each (path, N) runs in a child process of its own, so that the peak memory is that
run's: the child's peak resident set (``ru_maxrss``, which includes JAX's runtime,
about 0.3 GiB) on the CPU, and also the device's ``peak_bytes_in_use`` on a GPU. The
synthetic problems are ``fedkrr.synthetic_regression`` with two agents of N / 2
points each in ``--dim`` dimensions (RBF kernels of bandwidths 0.1 and 0.2, ridge
1e-3); MNIST is split at random into two agents of 30,000 images
(flattened to 784 values in [0, 1], one-hot labels, RBF with gamma = 1 / (d var x)).
Each run computes ``--rounds`` rounds of ``--protocol`` at ``--n-eval`` test points,
compilation included, and the parent prints, per N: the time and peak memory of each
path, the error of the matrix-free predictions against the exact ones (max |diff| /
max |exact|), the ratios matrix-free / exact, and which path ``fedkrr.choose_path``
picks on this machine. Timings on a shared CPU are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def _problem(args):
  """The benchmark's problem, evaluation points and test labels (or None)."""
  import jax.numpy as jnp

  import fedkrr
  dtype = jnp.float64 if args.dtype == "float64" else jnp.float32
  if args.data:
    problem, x_eval = fedkrr.load_problem(args.data, dtype=dtype)
    return problem, x_eval, None
  if args.mnist:
    import neural
    if args.mnist == "subset":
      ds = neural.load_dataset("mnist-subset")
    else:
      ds = neural.load_dataset("mnist", args.mnist)
    x = ds.x_train.reshape(ds.num_train, -1)
    y = neural.one_hot(ds.y_train, ds.num_classes)
    order = np.random.default_rng(args.seed).permutation(x.shape[0])
    halves = np.array_split(order, 2)
    gamma = 1.0 / (x.shape[1] * float(np.var(x)))
    problem = fedkrr.make_problem([x[h] for h in halves], [y[h] for h in halves],
                                  fedkrr.RBF(gamma), args.ridge, dtype=dtype)
    x_test = ds.x_test.reshape(ds.num_test, -1)[:args.n_eval]
    return problem, jnp.asarray(x_test, dtype), ds.y_test[:args.n_eval]
  half = args.n // 2
  data = fedkrr.synthetic_regression(args.seed, sizes=(half, args.n - half), dim=args.dim,
                                     heterogeneity=1.0, n_test=args.n_eval)
  problem = fedkrr.make_problem(data.xs, data.ys, [fedkrr.RBF(0.1), fedkrr.RBF(0.2)],
                                args.ridge, dtype=dtype)
  return problem, jnp.asarray(data.x_test, dtype), None


def _peak_device_bytes():
  import jax
  device = jax.devices()[0]
  if device.platform == "cpu":
    return None
  stats = device.memory_stats() or {}
  return stats.get("peak_bytes_in_use")


def child(args) -> None:
  """One (path, N) run: prints one JSON line and saves the predictions to ``--out``."""
  import fedkrr
  fedkrr.avoid_cpu_eigh_deadlock()
  import jax
  jax.config.update("jax_enable_x64", args.dtype == "float64")
  problem, x_eval, y_test = _problem(args)
  start = time.perf_counter()
  if args.path == "exact":
    preds = fedkrr.trajectory(problem, args.protocol, args.rounds, x_eval)
  else:
    tile = args.tile_elements or (fedkrr.TILE_ELEMENTS if args.device == "cpu" else 1 << 24)
    preds = fedkrr.matfree_trajectory(problem, args.protocol, args.rounds, x_eval,
                                      landmarks=args.landmarks, tile_elements=tile)
  preds = np.asarray(jax.block_until_ready(preds))
  seconds = time.perf_counter() - start
  row = {"path": args.path, "n": problem.num_points, "seconds": seconds,
         "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
         "peak_device": _peak_device_bytes(), "device": jax.devices()[0].device_kind,
         "rule": fedkrr.choose_path(problem, args.protocol, args.rounds, x_eval.shape[0])}
  if y_test is not None:
    last = preds[-1, 0] if args.protocol in ("avgkd", "pkd", "pkd-mean") else preds[-1]
    row["accuracy"] = float(np.mean(np.argmax(last, axis=-1) == y_test))
  fedkrr.atomic_savez(args.out, predictions=preds)
  print(json.dumps(row), flush=True)


def _run_child(args, path: str, n: int, out: str) -> dict | None:
  cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--n", str(n),
         "--out", out]
  for flag in ("rounds", "protocol", "n_eval", "dim", "ridge", "landmarks", "dtype", "seed",
               "device", "tile_elements"):
    cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
  if args.mnist:
    cmd += ["--mnist", args.mnist]
  if args.data:
    cmd += ["--data", args.data]
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false",
             JAX_PLATFORMS="cpu" if args.device == "cpu" else "cuda")
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
  except subprocess.TimeoutExpired:
    print(f"  {path} N = {n}: over --timeout {args.timeout} s", flush=True)
    return None
  if proc.returncode != 0:
    tail = ((proc.stderr or "").strip().splitlines() or ["(no output)"])[-1]
    print(f"  {path} N = {n}: failed (exit {proc.returncode}): {tail}", flush=True)
    return None
  return json.loads((proc.stdout or "").strip().splitlines()[-1])


def _gib(nbytes) -> str:
  return "-" if nbytes is None else f"{nbytes / 2 ** 30:.2f}"


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--sizes", default="2000,5000,10000", help="total numbers of points N")
  parser.add_argument("--exact-max", type=int, default=20000,
                      help="run the exact path only up to this N (default 20000)")
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--protocol", default="avgkd")
  parser.add_argument("--n-eval", type=int, default=1000, help="evaluation (test) points")
  parser.add_argument("--dim", type=int, default=5, help="input dimension of synthetic data")
  parser.add_argument("--ridge", type=float, default=1e-3)
  parser.add_argument("--landmarks", type=int, default=500, help="Nystrom landmarks per agent")
  parser.add_argument("--tile-elements", type=int, default=0,
                      help="kernel entries per tile of the matrix-free path (default: "
                           "fedkrr.TILE_ELEMENTS = 2^18 on a CPU, 2^24 on a GPU)")
  parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
  parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
  parser.add_argument("--mnist", metavar="PATH",
                      help="directory of the four MNIST IDX files (60,000 training images), "
                           "or 'subset' for the embedded 5,000-image subset")
  parser.add_argument("--data", metavar="P.npz", help="a problem file (docs/cli.md)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
  parser.add_argument("--child", choices=("exact", "matfree"), help=argparse.SUPPRESS)
  parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    args.path = args.child
    child(args)
    return
  sizes = [0] if (args.mnist or args.data) else [int(s) for s in args.sizes.split(",")]
  what = (f"MNIST {args.mnist}" if args.mnist else args.data if args.data
          else f"synthetic d = {args.dim}")
  print(f"{what}, two agents, {args.protocol}, {args.rounds} rounds, {args.n_eval} evaluation "
        f"points, {args.dtype}, {args.device}, {os.cpu_count()} cores, ridge {args.ridge}, "
        f"{args.landmarks} landmarks", flush=True)
  header = (f"{'N':>8} {'path':>8} {'time s':>9} {'peak GiB':>9} {'device GiB':>10} "
            f"{'rel. error':>10} {'time ratio':>10} {'mem ratio':>9}  rule")
  print(header, flush=True)
  with tempfile.TemporaryDirectory() as tmp:
    for n in sizes:
      rows, preds = {}, {}
      for path in ("exact", "matfree"):
        if path == "exact" and not (args.mnist or args.data) and n > args.exact_max:
          continue
        if path == "exact" and args.mnist and args.mnist != "subset":
          continue   # 60,000 points: the exact path does not fit (docs/scale.md)
        out = os.path.join(tmp, f"{path}-{n}.npz")
        row = _run_child(args, path, n, out)
        if row is None:
          continue
        rows[path] = row
        with np.load(out) as f:
          preds[path] = f["predictions"]
      for path, row in rows.items():
        err = ratio_t = ratio_m = "-"
        if path == "matfree" and "exact" in rows:
          ex, mf = preds["exact"].astype(np.float64), preds["matfree"].astype(np.float64)
          err = f"{np.max(np.abs(mf - ex)) / np.max(np.abs(ex)):.2e}"
          ratio_t = f"{row['seconds'] / rows['exact']['seconds']:.2f}x"
          ratio_m = f"{row['peak_rss'] / rows['exact']['peak_rss']:.2f}x"
        acc = f"  accuracy {row['accuracy']:.4f}" if "accuracy" in row else ""
        print(f"{row['n']:>8} {path:>8} {row['seconds']:>9.1f} {_gib(row['peak_rss']):>9} "
              f"{_gib(row['peak_device']):>10} {err:>10} {ratio_t:>10} {ratio_m:>9}  "
              f"{row['rule']}{acc}", flush=True)


if __name__ == "__main__":
  main()
