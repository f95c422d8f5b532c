"""The ``neural`` command line: ``neural run`` (one run or a sweep), ``neural compare``,
``neural configs``.

Errors are one line on stderr (``neural: error: ...``) and exit code 2. The
networks compute in float32; ``neural run`` does not enable JAX's float64 mode,
``neural compare`` does (for the closed-form theory; the networks stay float32).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
import sys
from typing import Any

# Command-line flags that override config fields: flag -> (field, type).
_FLAGS = {
    "dataset": str, "data_dir": str, "train_subset": int, "test_subset": int,
    "partition": str, "alpha": float, "beta": float, "shards_per_agent": int,
    "agents": int, "width": int, "norm": str, "protocol": str, "start": int,
    "rounds": int, "epochs": int, "batch_size": int, "learning_rate": float,
    "weight_decay": float, "loss": str, "seed": int, "forest_trees": int,
    "forest_max_depth": int, "step_loop": str, "agent_batching": str,
}


def _floats(text: str) -> list[float]:
  try:
    return [float(v) for v in text.split(",")]
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="neural",
      description="Model-agnostic federated learning by knowledge distillation with neural "
                  "networks and random forests (Afonin & Karimireddy, Sec. 6, App. H).")
  sub = parser.add_subparsers(dest="command", required=True)
  run = sub.add_parser(
      "run", help="run (or resume) an experiment or a sweep of experiments",
      description="Runs an experiment into --workdir (config.json, metrics.jsonl, "
                  "checkpoint.npz, accuracy.png). Started again with the same command, a "
                  "killed run resumes after its last finished round. --config takes a JSON "
                  "file or the name of a shipped config (`neural configs`); flags override "
                  "its values (and those of every run of a sweep).")
  run.add_argument("--config", metavar="FILE|NAME", help="config file or shipped config name")
  run.add_argument("--workdir", required=True, metavar="DIR", help="the run directory")
  run.add_argument("--dataset", help="digits, mnist-subset, mnist, cifar10 or synthetic")
  run.add_argument("--data-dir", metavar="DIR", help="directory of the mnist / cifar10 files")
  run.add_argument("--train-subset", type=int, metavar="N", help="use N training points")
  run.add_argument("--test-subset", type=int, metavar="N", help="evaluate on N test points")
  run.add_argument("--partition",
                   help="iid, label-split, dirichlet-clients, dirichlet-classes or shards")
  run.add_argument("--alpha", type=float, help="label-split mixing fraction in [0, 1]")
  run.add_argument("--beta", type=float, help="Dirichlet concentration")
  run.add_argument("--proportions", type=_floats, metavar="P1,P2,...",
                   help="iid shares per agent, e.g. 0.7,0.3")
  run.add_argument("--shards-per-agent", type=int, metavar="K")
  run.add_argument("--agents", type=int, metavar="M", help="number of agents")
  run.add_argument("--models", metavar="M1,M2,...",
                   help="one model per agent or one for all: cnn, mlp, vgg, resnet8, "
                        "resnet18, forest")
  run.add_argument("--width", type=int, help="network width (default: the model's)")
  run.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=None,
                   help="tiny network variants")
  run.add_argument("--norm", help="normalisation of VGG / ResNets: group or none")
  run.add_argument("--protocol",
                   help="akd, avgkd, pkd, ekd, backfit-gs, backfit-jacobi, fedavg, central, "
                        "local")
  run.add_argument("--start", type=int, help="starting agent of AKD (0-based)")
  run.add_argument("--rounds", type=int, metavar="R")
  run.add_argument("--epochs", type=int, metavar="E", help="local epochs per round")
  run.add_argument("--batch-size", type=int, metavar="B")
  run.add_argument("--learning-rate", "--lr", type=float, dest="learning_rate")
  run.add_argument("--weight-decay", type=float, help="L2 added to the gradient (3e-4)")
  run.add_argument("--loss", help="mse (default) or ce")
  run.add_argument("--warm-start", action=argparse.BooleanOptionalAction, default=None,
                   help="start each round from the agent's previous model")
  run.add_argument("--seed", type=int, metavar="S")
  run.add_argument("--forest-trees", type=int, metavar="T")
  run.add_argument("--forest-max-depth", type=int, metavar="D")
  run.add_argument("--step-loop", metavar="auto|scan|python",
                   help="local training as one compiled loop per epoch (scan), one jitted step "
                        "per mini-batch (python), or by backend and model (auto, the default)")
  run.add_argument("--agent-batching", metavar="auto|vmap|sequential",
                   help="agents of one architecture trained as one vmapped program, one after "
                        "the other, or by backend and model (auto, the default)")
  run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                   help="set any config field (a method's too); VALUE is JSON or a plain "
                        "string, e.g. --set topology=ring --set lambdas=[1,2]; repeatable")
  run.add_argument("--max-rounds", type=int, metavar="K",
                   help="stop after K rounds in this call (resume later)")
  run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bars over rounds and agents (default on)")
  compare = sub.add_parser(
      "compare", help="a KD run beside its closed-form kernel twin (fedkrr)",
      description="Runs (or resumes) a KD experiment (akd, avgkd, pkd, ekd, backfit-*) into "
                  "--workdir, computes the fedkrr closed form of the same protocol on the same "
                  "data with each agent's kernel (empirical NTK at initialisation by default) "
                  "and the ridge matched to the weight decay, and writes compare.json, "
                  "compare.md and compare.png there. Takes the flags of `neural run`.")
  for action in run._actions:   # the flags of `neural run`, but --max-rounds
    if action.dest not in ("help", "max_rounds"):
      compare._add_action(action)
  compare.add_argument("--kernel", default="ntk",
                       help="ntk (empirical NTK at initialisation; default), nngp or relu-ntk "
                            "(infinite-width ReLU MLP), rbf (cheap stand-in)")
  compare.add_argument("--ridge", type=float, metavar="C",
                       help="the ridge c (default: matched to the weight decay, C wd / 2)")
  compare.add_argument("--max-points", type=int, default=2000, metavar="N",
                       help="refuse runs with more training plus test points (default 2000)")
  sub.add_parser("configs", help="list the shipped paper configs",
                 description="Lists the configs shipped with the package (paper figures at "
                             "paper scale and as small CPU versions): name, number of runs, "
                             "description.")
  return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields set on the command line."""
  out = {name: getattr(args, name) for name in _FLAGS if getattr(args, name) is not None}
  for name in ("proportions", "tiny", "warm_start"):
    if getattr(args, name) is not None:
      out[name] = getattr(args, name)
  if args.models is not None:
    out["models"] = [m.strip() for m in args.models.split(",")]
  for item in getattr(args, "sets", None) or []:
    field, eq, text = item.partition("=")
    if not eq or not field.strip():
      raise ValueError(f"--set: expected FIELD=VALUE, got {item!r}")
    try:
      out[field.strip()] = json.loads(text)
    except json.JSONDecodeError:
      out[field.strip()] = text
  return out


def _run(args: argparse.Namespace) -> int:
  from neural._src.config import ConfigSpec
  from neural._src.config import load_spec
  from neural._src.experiment import run_configs

  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  if args.max_rounds is not None and args.max_rounds < 1:
    raise ValueError(f"--max-rounds: expected an integer >= 1, got {args.max_rounds}")
  results = run_configs(runs, args.workdir, progress=args.progress,
                        description=spec.description, max_rounds=args.max_rounds)
  for name, rows in results.items():
    if not rows:
      continue
    last = max(r["round"] for r in rows)
    final = [r for r in rows if r["round"] == last]
    summary = ", ".join(f"{_agent(r['agent'])} {r['test_accuracy']:.3f}" for r in final)
    print(f"{name or args.workdir}: round {last}: test accuracy {summary}")
  return 0


def _compare(args: argparse.Namespace) -> int:
  import jax
  jax.config.update("jax_enable_x64", True)   # the theory in float64; networks stay float32
  from neural._src.compare import compare
  from neural._src.config import ConfigSpec
  from neural._src.config import load_spec

  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  if len(runs) != 1:
    raise ValueError(f"--config: compare takes one run, the config is a sweep of {len(runs)} "
                     f"(pick one with flags, or write a config without a grid)")
  result = compare(runs[0][1], args.workdir, kernel=args.kernel, progress=args.progress,
                   ridge=args.ridge, max_points=args.max_points)
  print(f"{args.workdir}: {result.kernel} kernel, ridge c = {result.ridge:.4g}, spectral "
        f"radius {result.spectral_radius:.4f} per round")
  for series in result.rates:
    last = [r for r in result.rows if r["series"] == series][-1]
    net = last["network_accuracy"]
    print(f"  {series}: round {last['round']} test accuracy theory "
          f"{last['theory_accuracy']:.3f}, network {'-' if net is None else f'{net:.3f}'}")
  print(f"  wrote {', '.join(result.paths.values())}")
  return 0


def _agent(agent: Any) -> str:
  return f"agent {agent}" if isinstance(agent, int) else str(agent)


def _configs() -> int:
  from neural._src.config import describe
  for line in describe():
    print(line)
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.command == "compare":   # fedkrr's closed forms: vmapped eigh can stall XLA's CPU pool
    from fedkrr._src.xla_env import avoid_cpu_eigh_deadlock
    avoid_cpu_eigh_deadlock()
  try:
    if args.command == "run":
      return _run(args)
    if args.command == "compare":
      return _compare(args)
    return _configs()
  except (ValueError, OSError) as e:   # ConfigError, DataError, ... are ValueErrors
    message = " ".join(str(e).split())
    print(f"neural: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
