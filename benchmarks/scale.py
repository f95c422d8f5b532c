"""How large N can be: time and peak memory of the exact and the matrix-free path.

    python benchmarks/scale.py                                  # N = 2,000 .. 10,000, both paths
    python benchmarks/scale.py --sizes 10000,20000 --exact-max 20000   # the ratio where both run
    python benchmarks/scale.py --sizes 100000                   # matrix-free only (> --exact-max)
    python benchmarks/scale.py --mnist ~/data/mnist --device gpu --dtype float32   # whole MNIST
    python benchmarks/scale.py --mnist subset                   # the embedded 5,000-image subset
    python benchmarks/scale.py --data P.npz                     # any problem file (fedkrr run's)

    python benchmarks/scale.py --throughput 20000               # one kernel pass: before / now
    python benchmarks/scale.py --throughput 50000 --tiles 262144,1048576   # two tile sizes

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
max |exact|), the ratios matrix-free / exact, and which path ``fedkrr.scale.choose_method``
picks on this machine. For the matrix-free path it also prints how many kernel entries
the run evaluated, as passes over one agent's ``N_a^2`` block (the fits' symmetric
products evaluate about half of it each, as counted by the fits' ``matvecs``: CG
iterations, true residuals and any start that had to form its product;
the predictions ``n_x N_a`` each; the preconditioners ``N_a m``), and the entries per
second; ``--cold`` starts every CG from 0 (no warm starts) and ``--history 1`` from the last
solution alone, for comparison. Each run's JSON line also lists every fit's products
(``fit_products``).

``--throughput N_a`` times one pass over an agent's kernel (``N_a`` points, d = ``--dim``,
RBF gamma 0.1, a vector) side by side, interleaved and repeated: the tiled product as it
was before (``k(tile, X) @ v`` with XLA's exponential, kept in this script as
``before_matvec``), ``fedkrr.scale.kernel_matvec`` now, and ``fedkrr.scale.symmetric_matvec`` (the
CG's product); it prints each one's best wall and process-CPU time, its entries per
second (symmetric: the full ``N_a^2`` counted, as the product it replaces) and the
ratios to before. ``--tiles 262144,1048576`` times both products at each of these tile
sizes, side by side in the same run. Timings on a shared CPU are noisy: compare within
one run.
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
    y = neural.data.one_hot(ds.y_train, ds.num_classes)
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


def before_matvec(kernel, x1, x2, v, tile_elements):
  """The matrix-free kernel product as it was before the symmetric and direct-difference
  tiles (kept here for the side-by-side pass timing): ``k(tile, x2) @ v`` in row tiles."""
  import jax
  import jax.numpy as jnp
  n = x1.shape[0]
  rows = max(1, min(n, tile_elements // x2.shape[0]))
  tiles = -(-n // rows)
  x1 = jnp.concatenate([x1, jnp.broadcast_to(x1[:1], (tiles * rows - n, x1.shape[1]))])
  out = jax.lax.map(lambda t: kernel(t, x2) @ v, x1.reshape(tiles, rows, -1))
  return out.reshape((tiles * rows,) + out.shape[2:])[:n]


def throughput(args) -> None:
  """One pass over an agent's kernel: before / kernel_matvec / symmetric_matvec."""
  import fedkrr
  fedkrr.avoid_cpu_eigh_deadlock()   # the XLA flags of the runs (child) above
  import jax
  jax.config.update("jax_enable_x64", args.dtype == "float64")
  import jax.numpy as jnp
  n = args.throughput
  dtype = jnp.float64 if args.dtype == "float64" else jnp.float32
  rng = np.random.default_rng(args.seed)
  x = jnp.asarray(rng.normal(size=(n, args.dim)), dtype)
  v = jnp.asarray(rng.normal(size=n), dtype)
  kernel = fedkrr.RBF(0.1)
  try:
    tiles = ([int(t) for t in args.tiles.split(",")] if args.tiles
             else [args.tile_elements or fedkrr.scale.TILE_ELEMENTS])
  except ValueError:
    tiles = [0]
  if any(t < 1 for t in tiles):
    raise SystemExit(f"--tiles: expected positive entry counts separated by commas, got "
                     f"{args.tiles!r}")
  tile = tiles[0]
  fns = {"before": jax.jit(lambda x, v: before_matvec(kernel, x, x, v, tile))}
  for t in tiles:
    label = "" if len(tiles) == 1 else f" {t}"
    fns["kernel_matvec" + label] = jax.jit(
        lambda x, v, t=t: fedkrr.scale.kernel_matvec(kernel, x, x, v, t))
    fns["symmetric_matvec" + label] = jax.jit(
        lambda x, v, t=t: fedkrr.scale.symmetric_matvec(kernel, x, v, t))
  outs = {name: np.asarray(jax.block_until_ready(fn(x, v))) for name, fn in fns.items()}
  best = {name: [float("inf"), float("inf")] for name in fns}
  for _ in range(args.repeats):
    for name, fn in fns.items():
      wall, cpu = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(x, v))
      best[name][0] = min(best[name][0], time.perf_counter() - wall)
      best[name][1] = min(best[name][1], time.process_time() - cpu)
  print(f"one pass over {n} x {n} RBF entries (d = {args.dim}, {args.dtype}, tiles of "
        f"{', '.join(map(str, tiles))} entries), best of {args.repeats}, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
  width = max(map(len, fns))
  print(f"{'product':>{width}} {'wall s':>8} {'cpu s':>8} {'G entries/s':>11} {'per cpu-s':>9} "
        f"{'wall ratio':>10} {'cpu ratio':>9} {'rel. diff':>9}")
  ref = outs["before"]
  for name, (wall, cpu) in best.items():
    diff = np.max(np.abs(outs[name] - ref)) / np.max(np.abs(ref))
    print(f"{name:>{width}} {wall:8.3f} {cpu:8.3f} {n * n / wall / 1e9:11.2f} "
          f"{n * n / cpu / 1e9:9.2f} {best['before'][0] / wall:9.2f}x "
          f"{best['before'][1] / cpu:8.2f}x {diff:9.1e}",
          flush=True)


class _Count:
  """Kernel entries evaluated by the matrix-free run (mirrors the tiling of fedkrr's products)."""

  def __init__(self, tile_elements: int):
    self.tile = tile_elements
    self.entries = 0
    self.fits: list[int] = []   # each fit's symmetric products

  def product(self, n1: int, n2: int) -> None:
    rows = max(1, min(n1, self.tile // max(n2, 1)))
    self.entries += -(-n1 // rows) * rows * n2

  def symmetric(self, n: int, times: int) -> None:
    # fedkrr.scale.symmetric_matvec's row tiles: 2 tile / n points, at most n / 32, at least 1.
    rows = max(1, min((2 * self.tile) // max(n, 1), n // 32))
    tiles = -(-n // rows)
    self.entries += times * tiles * rows * (tiles // 2 + 1) * rows


class _CountedModel:
  def __init__(self, model, count: _Count):
    self.model, self.count = model, count

  def predict(self, x):
    self.count.product(int(x.shape[0]), int(self.model.x_train.shape[0]))
    return self.model.predict(x)


class _CountedLearner:
  """A matrix-free learner that counts its fits' kernel entries and forwards warm starts."""

  def __init__(self, learner, count: _Count, warm: bool):
    self.learner, self.count, self.warm = learner, count, warm

  def fit(self, x, targets):
    model = self.learner.fit(x, targets)
    n = int(x.shape[0])
    if self.learner.preconditioner is None or self.learner.preconditioner.basis.shape[0] != n:
      self.count.product(n, min(self.learner.landmarks, n))
    self.count.symmetric(n, int(model.matvecs))
    self.count.fits.append(int(model.matvecs))
    return _CountedModel(model, self.count)

  def warm_start_from(self, model):
    if not self.warm:
      return self
    return _CountedLearner(self.learner.warm_start_from(model.model), self.count, self.warm)


def child(args) -> None:
  """One (path, N) run: prints one JSON line and saves the predictions to ``--out``."""
  import fedkrr
  fedkrr.avoid_cpu_eigh_deadlock()
  import jax
  jax.config.update("jax_enable_x64", args.dtype == "float64")
  problem, x_eval, y_test = _problem(args)
  start = time.perf_counter()
  if args.path == "exact":
    preds = fedkrr.run(problem, args.protocol, args.rounds, x_eval,
                       method="closed-form").predictions
  else:
    # fedkrr.scale.matfree_trajectory's learners and rounds, each learner counting its entries.
    tile = args.tile_elements or (fedkrr.scale.TILE_ELEMENTS if args.device == "cpu" else 1 << 24)
    count = _Count(tile)
    learners = fedkrr.scale.matfree_learners(problem, landmarks=args.landmarks, tile_elements=tile,
                                             history=args.history)
    for n_a in problem.sizes:
      count.product(n_a, min(args.landmarks, n_a))
    learners = [_CountedLearner(learner, count, not args.cold) for learner in learners]
    preds = fedkrr.simulate(args.protocol, learners, problem.xs, problem.ys, args.rounds, x_eval)
  preds = np.asarray(jax.block_until_ready(preds))
  seconds = time.perf_counter() - start
  row = {"path": args.path, "n": problem.num_points, "seconds": seconds,
         "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
         "peak_device": _peak_device_bytes(), "device": jax.devices()[0].device_kind,
         "rule": fedkrr.scale.choose_method(problem, args.protocol, args.rounds, x_eval.shape[0])}
  if args.path == "matfree":
    block = sum(n_a ** 2 for n_a in problem.sizes) / problem.num_agents
    row["entries"] = count.entries
    row["passes"] = count.entries / block
    row["fit_products"] = count.fits
  if y_test is not None:
    last = preds[-1, 0] if args.protocol in ("avgkd", "pkd", "pkd-mean") else preds[-1]
    row["accuracy"] = float(np.mean(np.argmax(last, axis=-1) == y_test))
  fedkrr.io.atomic_savez(args.out, predictions=preds)
  print(json.dumps(row), flush=True)


def _run_child(args, path: str, n: int, out: str) -> dict | None:
  cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--n", str(n),
         "--out", out]
  for flag in ("rounds", "protocol", "n_eval", "dim", "ridge", "landmarks", "dtype", "seed",
               "device", "tile_elements", "history"):
    cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
  if args.cold:
    cmd += ["--cold"]
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
                           "fedkrr.scale.TILE_ELEMENTS = 2^20 on a CPU, 2^24 on a GPU)")
  parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
  parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
  parser.add_argument("--mnist", metavar="PATH",
                      help="directory of the four MNIST IDX files (60,000 training images), "
                           "or 'subset' for the embedded 5,000-image subset")
  parser.add_argument("--data", metavar="P.npz", help="a problem file (docs/cli.md)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
  parser.add_argument("--cold", action="store_true",
                      help="matrix-free fits start CG from 0 (no warm starts)")
  parser.add_argument("--history", type=int, default=8,
                      help="latest solutions each warm start combines (1: the last, scaled)")
  parser.add_argument("--throughput", type=int, default=0, metavar="N_A",
                      help="only time one kernel pass over N_A points: before / now")
  parser.add_argument("--repeats", type=int, default=3, help="repeats of --throughput")
  parser.add_argument("--tiles", default="", metavar="T1,T2,...",
                      help="--throughput: time both products at each of these tile sizes "
                           "(kernel entries; 'before' takes the first)")
  parser.add_argument("--child", choices=("exact", "matfree"), help=argparse.SUPPRESS)
  parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    args.path = args.child
    child(args)
    return
  if args.throughput:
    throughput(args)
    return
  sizes = [0] if (args.mnist or args.data) else [int(s) for s in args.sizes.split(",")]
  what = (f"MNIST {args.mnist}" if args.mnist else args.data if args.data
          else f"synthetic d = {args.dim}")
  print(f"{what}, two agents, {args.protocol}, {args.rounds} rounds, {args.n_eval} evaluation "
        f"points, {args.dtype}, {args.device}, {os.cpu_count()} cores, ridge {args.ridge}, "
        f"{args.landmarks} landmarks, "
        f"{'cold CG starts' if args.cold else f'warm starts from {args.history} solutions'}; "
        f"load average "
        f"{os.getloadavg()[0]:.1f}", flush=True)
  header = (f"{'N':>8} {'path':>8} {'time s':>9} {'passes':>7} {'G entries/s':>11} "
            f"{'peak GiB':>9} {'device GiB':>10} {'rel. error':>10} {'time ratio':>10} "
            f"{'mem ratio':>9}  rule")
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
        passes = f"{row['passes']:.1f}" if "passes" in row else "-"
        rate = f"{row['entries'] / row['seconds'] / 1e9:.2f}" if "entries" in row else "-"
        print(f"{row['n']:>8} {path:>8} {row['seconds']:>9.1f} {passes:>7} {rate:>11} "
              f"{_gib(row['peak_rss']):>9} {_gib(row['peak_device']):>10} {err:>10} "
              f"{ratio_t:>10} {ratio_m:>9}  {row['rule']}{acc}", flush=True)
      if "fit_products" in rows.get("matfree", {}):
        print(f"{'':>8} kernel products of each fit, in order: "
              f"{' '.join(map(str, rows['matfree']['fit_products']))}", flush=True)


if __name__ == "__main__":
  main()
