"""One federated problem with its agents on 1 device and on k devices, side by side.

    python benchmarks/devices.py                          # 8 agents, 1 vs 4 host CPU devices
    python benchmarks/devices.py --agents 8 --devices 8 --n 400 --rounds 200

JAX fixes its devices when it starts, so every setting runs in a child process of
its own: ``XLA_FLAGS=--xla_force_host_platform_device_count=k`` (set here, for the
child only) gives k CPU "devices", all on the cores of this machine. For each
protocol the child times :func:`fedkrr.scale.sharded_trajectory` on the agent mesh,
cold (with compilation and the blocks) and warm (the rounds alone, blocks reused),
and the one-device :func:`fedkrr.trajectory` next to it. The parent prints the
times, the largest difference of the k-device predictions from the one-device
ones (0 when they are the same bits), and their largest difference from
``fedkrr.trajectory`` relative to its largest prediction (a protocol that
diverges, as Jacobi backfitting with several agents can, grows without bound).

Host devices share the same cores, so this shows that the numbers do not change
and what the collectives cost, not a speed-up; on a machine with several GPUs
(``JAX_PLATFORMS=cuda``) the same script times real devices.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

HERE = Path(__file__).resolve().parent


def child(args: argparse.Namespace) -> None:
  """Runs every protocol on ``args.devices`` devices; predictions and times to ``args.out``."""
  import fedkrr
  fedkrr.avoid_cpu_eigh_deadlock()
  import jax
  import numpy as np
  sys.path.insert(0, str(HERE))
  from timing import best_time
  jax.config.update("jax_enable_x64", True)

  per_agent = args.n // args.agents
  data = fedkrr.synthetic_regression(0, sizes=(per_agent,) * args.agents, dim=5,
                                     heterogeneity=0.5, n_test=args.n_eval)
  kernels = [fedkrr.RBF(0.1 * (1 + a % 3)) for a in range(args.agents)]
  problem = fedkrr.make_problem(data.xs, data.ys, kernels, 1e-3)
  mesh = fedkrr.scale.agent_mesh(args.agents, jax.devices()[:args.devices])
  arrays, times = {}, {}
  for protocol in args.protocols.split(","):
    t0 = time.perf_counter()
    blocks = fedkrr.scale.shard_blocks(problem, mesh)
    preds = jax.block_until_ready(fedkrr.scale.sharded_trajectory(problem, protocol, args.rounds,
                                                                  data.x_test, blocks=blocks))
    cold = time.perf_counter() - t0
    warm = best_time(functools.partial(fedkrr.scale.sharded_trajectory, problem, protocol,
                                       args.rounds, data.x_test, blocks=blocks), args.repeats)
    closed_form = functools.partial(fedkrr.trajectory, problem, protocol, args.rounds,
                                    data.x_test)
    closed = jax.block_until_ready(closed_form())
    closed_warm = best_time(closed_form, args.repeats)
    arrays[f"{protocol}/sharded"] = np.asarray(preds)
    arrays[f"{protocol}/closed"] = np.asarray(closed)
    times[protocol] = {"cold": cold, "warm": warm, "closed_form_warm": closed_warm}
  fedkrr.io.atomic_savez(args.out, **arrays)
  Path(args.out + ".json").write_text(json.dumps({"devices": mesh.size, "times": times,
                                                  "platform": jax.devices()[0].platform}))


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--agents", type=int, default=8, help="agents M")
  parser.add_argument("--devices", type=int, default=4, help="k: devices of the sharded run")
  parser.add_argument("--n", type=int, default=800, help="total number of points N")
  parser.add_argument("--rounds", type=int, default=100, help="rounds T")
  parser.add_argument("--n-eval", type=int, default=200, help="evaluation points")
  parser.add_argument("--repeats", type=int, default=3, help="warm repeats (best is kept)")
  parser.add_argument("--protocols", default="avgkd,ekd,backfit-jacobi")
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  import numpy as np
  print(f"M = {args.agents} agents, N = {args.n}, T = {args.rounds}, {args.n_eval} evaluation "
        f"points, float64, {os.cpu_count()} cores")
  results = {}
  with tempfile.TemporaryDirectory() as tmp:
    for devices in sorted({1, args.devices}):
      print(f"running on {devices} device(s) ...", flush=True)
      out = os.path.join(tmp, f"devices{devices}.npz")
      env = dict(os.environ)
      env.setdefault("JAX_PLATFORMS", "cpu")
      env["XLA_FLAGS"] = (f"{env.get('XLA_FLAGS', '')} "
                          f"--xla_force_host_platform_device_count={devices}").strip()
      cmd = [sys.executable, __file__, "--child", "--out", out] + [
          f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
          if k not in ("child", "out", "devices")] + [f"--devices={devices}"]
      subprocess.run(cmd, env=env, check=True)
      with np.load(out, allow_pickle=False) as arrays:
        results[devices] = (dict(arrays), json.loads(Path(out + ".json").read_text()))
  (one, one_info), (many, many_info) = results[1], results[args.devices]
  k = many_info["devices"]
  print(f"platform {many_info['platform']}; the sharded run uses {k} devices")
  print(f"{'protocol':>15} {'1 dev warm':>11} {f'{k} dev warm':>11} {f'{k} dev cold':>11} "
        f"{'trajectory':>11} {f'max|{k} - 1|':>12} {'rel. to traj':>13} {'max|traj|':>10}")
  for protocol in args.protocols.split(","):
    t1, tk = one_info["times"][protocol], many_info["times"][protocol]
    ref = one[f"{protocol}/closed"]
    scale = max(float(np.max(np.abs(ref))), 1e-300)
    same = float(np.max(np.abs(many[f"{protocol}/sharded"] - one[f"{protocol}/sharded"])))
    closed = float(np.max(np.abs(many[f"{protocol}/sharded"] - ref))) / scale
    print(f"{protocol:>15} {t1['warm']:>10.3f}s {tk['warm']:>10.3f}s {tk['cold']:>10.3f}s "
          f"{t1['closed_form_warm']:>10.3f}s {same:>12.1e} {closed:>13.1e} {scale:>10.2e}")


if __name__ == "__main__":
  main()
