"""Numbers a refactor must keep: records them into a folder, or compares two folders.

    python scripts/record_numbers.py record DIR     # before (and after) a refactor
    python scripts/record_numbers.py compare OLD NEW

``record`` writes ``DIR/fedkrr.npz``: every protocol of ``fedkrr.PROTOCOLS`` and the
two baselines on two fixed problems (4 agents with different kernels and unequal
sizes, one output and two), through every path of ``fedkrr.run`` (closed form with
its limit, literal rounds, matrix-free, sharded where the protocol has it, on the
devices of this process), AKD from agent 1 and weighted AvgKD with unequal weights
among them; and ``DIR/neural/NAME/metrics.jsonl`` of small neural runs (AvgKD, AKD,
PKD, EKD with two MLPs, 2 rounds, on the embedded digits). ``compare`` says which
arrays and metric rows differ (the rows without their timings) and exits 1 if any
does; the same code on the same machine must give the same bits.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import subprocess
import sys

import numpy as np

# Fields of a metrics row that measure time, not numbers.
TIMING_FIELDS = ("seconds", "wall_seconds", "time", "elapsed", "step_seconds")

NEURAL_RUNS = {
    "avgkd": ["--protocol", "avgkd"],
    "akd": ["--protocol", "akd"],
    "pkd": ["--protocol", "pkd"],
    "ekd": ["--protocol", "ekd"],
}
NEURAL_COMMON = ["--dataset", "digits", "--rounds", "2", "--no-progress",
                 "--set", "models=[\"mlp\",\"mlp\"]", "--set", "epochs=2"]


def _problems():
  import fedkrr

  rng = np.random.default_rng(0)
  sizes = (6, 9, 5, 8)
  xs = [rng.normal(size=(n, 2)) for n in sizes]
  kernels = [fedkrr.RBF(0.7), fedkrr.Laplace(0.5), fedkrr.RBF(1.3), fedkrr.Laplace(0.9)]
  x_eval = rng.normal(size=(7, 2))
  one = fedkrr.make_problem(xs, [np.sin(x[:, 0]) + 0.3 * x[:, 1] for x in xs], kernels,
                            ridge=0.05)
  two = fedkrr.make_problem(xs, [np.stack([np.cos(x[:, 1]), x[:, 0] ** 2], axis=1)
                                 for x in xs], kernels, ridge=0.2)
  return {"one": one, "two": two}, x_eval


def record_fedkrr(out: Path) -> int:
  import jax

  jax.config.update("jax_enable_x64", True)
  import fedkrr

  problems, x_eval = _problems()
  arrays: dict[str, np.ndarray] = {}
  for pname, problem in problems.items():
    for protocol in (*fedkrr.PROTOCOLS, "central", "local"):
      variants: dict[str, dict] = {"": {}}
      if protocol == "akd":
        variants["-start1"] = {"params": fedkrr.ProtocolParams(start=1)}
      if protocol == "weighted-avgkd":
        variants = {"-w": {"params": fedkrr.ProtocolParams(weights=(0.1, 0.2, 0.3, 0.4))}}
      for suffix, kwargs in variants.items():
        methods = ["closed-form", "simulate", "matfree"]
        if protocol in fedkrr.scale.SHARDED_PROTOCOLS:
          methods.append("sharded")
        for method in methods:
          key = f"{pname}/{protocol}{suffix}/{method}"
          extra = dict(kwargs)
          if method == "closed-form" and protocol not in ("central", "local"):
            extra["limit"] = True
          if method == "matfree":
            extra.update(tol=1e-12, maxiter=500)
          try:
            result = fedkrr.run(problem, protocol, 6, x_eval, method=method, **extra)
          except (ValueError, fedkrr.ProblemError) as e:
            arrays[key + "/refused"] = np.array(str(e))
            continue
          arrays[key + "/predictions"] = np.asarray(result.predictions)
          for field in ("limit", "spectral_radius", "fixed_point"):
            value = getattr(result, field, None)
            if value is not None:
              arrays[f"{key}/{field}"] = np.asarray(value)
  tmp = out / "fedkrr.tmp.npz"
  np.savez(tmp, **arrays)
  tmp.replace(out / "fedkrr.npz")
  return len(arrays)


def record_neural(out: Path) -> int:
  for name, flags in NEURAL_RUNS.items():
    workdir = out / "neural" / name
    command = [sys.executable, "-m", "neural", "run", "--workdir", str(workdir),
               *NEURAL_COMMON, *flags]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
  return len(NEURAL_RUNS)


def _rows(path: Path) -> list[dict]:
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  return [{k: v for k, v in row.items() if k not in TIMING_FIELDS} for row in rows]


def compare(old: Path, new: Path) -> int:
  a, b = np.load(old / "fedkrr.npz"), np.load(new / "fedkrr.npz")
  differ = sorted(set(a.files) ^ set(b.files))
  for key in sorted(set(a.files) & set(b.files)):
    x, y = a[key], b[key]
    if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
      differ.append(key)
  for metrics in sorted((old / "neural").glob("*/metrics.jsonl")):
    other = new / "neural" / metrics.parent.name / "metrics.jsonl"
    if not other.exists() or _rows(metrics) != _rows(other):
      differ.append(f"neural/{metrics.parent.name}/metrics.jsonl")
  print(f"{len(a.files)} arrays, {len(list((old / 'neural').glob('*/metrics.jsonl')))} "
        f"neural runs compared; {len(differ)} differ")
  for key in differ:
    print(f"  differs: {key}")
  return 1 if differ else 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  rec = sub.add_parser("record")
  rec.add_argument("dir", type=Path)
  rec.add_argument("--no-neural", action="store_true", help="fedkrr's numbers only")
  cmp = sub.add_parser("compare")
  cmp.add_argument("old", type=Path)
  cmp.add_argument("new", type=Path)
  args = parser.parse_args(argv)
  if args.command == "compare":
    return compare(args.old, args.new)
  args.dir.mkdir(parents=True, exist_ok=True)
  n = record_fedkrr(args.dir)
  print(f"fedkrr: {n} arrays in {args.dir / 'fedkrr.npz'}")
  if not args.no_neural:
    print(f"neural: {record_neural(args.dir)} runs in {args.dir / 'neural'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
