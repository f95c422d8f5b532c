"""The ``neural`` command line: ``neural run`` (one run or a sweep), ``neural compare``,
``neural reproduce`` (a figure of the paper, its statements checked), ``neural configs``.

Errors are one line on stderr (``neural: error: ...``) and exit code 2. The
networks compute in float32; ``neural run`` does not enable JAX's float64 mode,
``neural compare`` does (for the closed-form theory; the networks stay float32).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import dataclasses
import sys
import textwrap
import types
import typing
from typing import Any
from typing import cast

import jax

from fedkrr import ReadError
from fedkrr import __version__
from fedkrr import avoid_cpu_eigh_deadlock
from fedkrr import exits_on_signals
from fedkrr import parse_json
from neural._src.compare import compare
from neural._src.config import ExperimentConfig
from neural._src.config import RunConfig
from neural._src.config import describe_type
from neural._src.config import field_help
from neural._src.config import field_type
from neural._src.methods.registry import get_method
from neural._src.methods.registry import method_configs
from neural._src.paper_units import UNITS
from neural._src.paper_units import default_accuracy
from neural._src.paper_units import paper_rounds
from neural._src.reproduce import SCALES
from neural._src.reproduce import reproduce
from neural._src.specs import ConfigSpec
from neural._src.specs import all_fields
from neural._src.specs import describe
from neural._src.specs import load_spec
from neural._src.specs import run_configs


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="neural",
      description="Model-agnostic federated learning by knowledge distillation with neural "
                  "networks and random forests (Afonin & Karimireddy, Sec. 6, App. H).")
  parser.add_argument("--version", action="version",
                      version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", required=True)
  run = sub.add_parser(
      "run", help="run (or resume) an experiment or a sweep of experiments",
      usage="neural run [-h] [--config FILE|NAME] --workdir DIR [--FIELD VALUE ...] "
            "[--set FIELD=VALUE] [--max-rounds K] [--progress | --no-progress]",
      description="Runs an experiment into --workdir (config.json, metrics.jsonl, "
                  "checkpoint.npz, accuracy.png). Started again with the same command, a "
                  "killed run resumes after its last finished round. --config takes a JSON "
                  "file or the name of a shipped config (`neural configs`); flags override "
                  "its values (and those of every run of a sweep).")
  run.add_argument("--config", metavar="FILE|NAME", help="config file or shipped config name")
  run.add_argument("--workdir", required=True, metavar="DIR", help="the run directory")
  add_field_flags(run)
  run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                   help="set any config field (a method's too); VALUE is JSON or a plain "
                        "string, e.g. --set topology=ring --set lambdas=[1,2]; repeatable")
  run.add_argument("--units", choices=UNITS, default="paper",
                   help="rounds of accuracy.png and of the summary: paper (the paper's "
                        "figures: an AKD round is M steps, the mean of the agents, EKD's even "
                        "partial sums; default) or steps (every logged step and agent)")
  run.add_argument("--max-rounds", type=int, metavar="K",
                   help="stop after K rounds in this call (resume later)")
  run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bars over rounds and agents (default on)")
  compare = sub.add_parser(
      "compare", help="a KD run beside its closed-form kernel twin (fedkrr)",
      description="Runs (or resumes) a KD experiment (akd, avgkd, pkd, pkd-mean, ekd, "
                  "backfit-*) into --workdir, computes the fedkrr closed form of the same "
                  "protocol on the same data with each agent's kernel (empirical NTK at "
                  "initialisation by default) and the ridge matched to the weight decay, and "
                  "writes compare.json, compare.md and compare.png there. Takes the flags of "
                  "`neural run`.")
  for action in run._actions:   # the flags of `neural run`, but --max-rounds, --units
    if action.dest not in ("help", "max_rounds", "units"):
      compare._add_action(action)
  compare.add_argument("--kernel", default="ntk",
                       help="ntk (empirical NTK at initialisation; default), nngp or relu-ntk "
                            "(infinite-width ReLU MLP), rbf (cheap stand-in)")
  compare.add_argument("--ridge", type=float, metavar="C",
                       help="the ridge c (default: matched to the weight decay, C wd / 2)")
  compare.add_argument("--max-points", type=int, default=5000, metavar="N",
                       help="refuse runs with more training plus test points (default 5000: "
                            "the whole embedded MNIST subset)")
  repro = sub.add_parser(
      "reproduce", help="run a figure of the paper and check its statements",
      usage="neural reproduce [-h] --figure N [--scale small|paper] --workdir DIR "
            "[--data-dir DIR] [--FIELD VALUE ...] [--set FIELD=VALUE] [--max-rounds K] "
            "[--progress | --no-progress]",
      description="Runs (or resumes) every run of the shipped config(s) of Fig. N (small: "
                  "the *_small config, embedded data, a CPU; paper: the full-size config, "
                  "and for Figs. 9-10 the *_text variant too, with the MNIST / CIFAR-10 "
                  "files in --data-dir), draws the figure like the paper (reproduce.png) "
                  "and writes reproduce.md and reproduce.json: round 1, best and last "
                  "round of every run, and each statement the paper makes about the figure "
                  "checked against the numbers (reproduced / not reproduced / not testable "
                  "here). Started again, finished runs are read and the others resume. "
                  "Flags and --set override fields in every run.")
  repro.add_argument("--figure", required=True, metavar="N",
                     help="the figure's number (4, 5, 6, 8-15; `neural configs` lists them)")
  repro.add_argument("--scale", choices=SCALES, default="small",
                     help="small (CPU, embedded data; default) or paper (full size, a GPU, "
                          "--data-dir)")
  for action in run._actions:   # --workdir, the field flags, --set, --max-rounds, --progress
    if action.dest not in ("help", "config", "units"):
      repro._add_action(action)
  configs = sub.add_parser(
      "configs", help="list the shipped paper configs, or the fields of a config",
      description="Lists the configs shipped with the package (paper figures at paper scale "
                  "and as small CPU versions): name, number of runs, description. With "
                  "--fields NAME, lists the fields of a method's config (NAME: a method such "
                  "as mhd, or kd for the KD protocols) with their types and defaults.")
  configs.add_argument("--fields", metavar="NAME",
                       help="list the fields of method NAME's config (kd: the KD protocols)")
  return parser


# Flag spellings beyond --field-name, and metavars, for some fields.
_ALIASES = {"learning_rate": ("--lr",)}
_METAVARS = {"data_dir": "DIR", "train_subset": "N", "test_subset": "N", "agents": "M",
             "rounds": "R", "epochs": "E", "batch_size": "B", "seed": "S",
             "models": "M1,M2,...", "proportions": "P1,P2,...",
             "step_loop": "auto|scan|python", "agent_batching": "auto|vmap|sequential",
             "devices": "one|all"}


def _field_groups() -> list[tuple[str, type, tuple[str, ...]]]:
  """``(title, config class, fields)``: each field once, under the first class that has it."""
  groups = [("fields of every run", RunConfig, RunConfig.field_names())]
  seen = set(groups[0][2])
  classes = [("fields of the KD protocols (ExperimentConfig)", ExperimentConfig)]
  for cls in method_configs().values():
    if all(c is not cls for _, c in classes):
      names = ", ".join(m for m, c in method_configs().items() if c is cls)
      classes.append((f"fields of the methods {names} ({cls.__name__})", cls))
  for title, cls in classes:
    fields = tuple(f for f in cls.field_names() if f not in seen)
    seen.update(fields)
    if fields:
      groups.append((title, cls, fields))
  return groups


def _parse_as(kind: Any) -> Any:
  """An argparse ``type`` for a field annotation (the config coerces and checks it after)."""
  args = typing.get_args(kind)
  if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
    kind = next(a for a in args if a is not type(None))
  if kind in (int, float):
    def parse(text: str) -> Any:
      try:
        return kind(text)
      except ValueError:
        raise argparse.ArgumentTypeError(f"expected {describe_type(kind)}, got {text!r}") \
            from None
    return parse
  if typing.get_origin(kind) is tuple:
    item = typing.get_args(kind)[0]
    return lambda text: [_parse_as(item)(v.strip()) if item is not str else v.strip()
                         for v in text.split(",")]
  return str


def add_field_flags(parser: argparse.ArgumentParser) -> None:
  """Adds ``--field-name`` for every config field, generated from the dataclasses.

  Grouped by config class in ``--help``, with the description from the class's
  docstring; a flag that is not given leaves the field to the config file.
  """
  for title, cls, fields in _field_groups():
    group = parser.add_argument_group(title)
    help_text = field_help(cls)
    for name in fields:
      kind = field_type(cls, name)
      flags = ("--" + name.replace("_", "-"),) + _ALIASES.get(name, ())
      text = help_text.get(name, "").replace("``", "")
      if kind is bool:
        group.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=text)
      else:
        group.add_argument(*flags, dest=name, type=_parse_as(kind), default=argparse.SUPPRESS,
                           metavar=_METAVARS.get(name, name.upper()), help=text)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields set on the command line (flags, then ``--set``)."""
  fields = all_fields()
  out = {name: value for name, value in vars(args).items() if name in fields}
  for item in getattr(args, "sets", None) or []:
    field, eq, text = item.partition("=")
    if not eq or not field.strip():
      raise ValueError(f"--set: expected FIELD=VALUE, got {item!r}")
    try:
      out[field.strip()] = parse_json(text, f"--set {field.strip()}")
    except ReadError:
      out[field.strip()] = text
  return out


def _fields(name: str) -> int:
  """``neural configs --fields NAME``: the fields of a method's (or "kd") config."""
  cls = ExperimentConfig if name in ("kd", "experiment") else get_method(name).config_cls
  help_text = field_help(cls)
  print(f"{cls.__name__} ({'KD protocols' if cls is ExperimentConfig else 'method ' + name}):")
  for f in dataclasses.fields(cls):
    default = f.default if f.default is not dataclasses.MISSING else None
    kind = describe_type(field_type(cls, f.name))
    print(f"  --{f.name.replace('_', '-'):22s} {kind}; default {default!r}")
    if help_text.get(f.name):
      print(textwrap.fill(help_text[f.name], width=96, initial_indent=" " * 6,
                          subsequent_indent=" " * 6))
  return 0


def _run(args: argparse.Namespace) -> int:
  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  if args.max_rounds is not None and args.max_rounds < 1:
    raise ValueError(f"--max-rounds: expected an integer >= 1, got {args.max_rounds}")
  results = run_configs(runs, args.workdir, progress=args.progress,
                        description=spec.description, max_rounds=args.max_rounds,
                        units=args.units)
  for name, rows in results.items():
    if not rows:
      continue
    last = max(r["round"] for r in rows)
    final = [r for r in rows if r["round"] == last]
    summary = ", ".join(f"{_agent(r['agent'])} {r['test_accuracy']:.3f}" for r in final)
    print(f"{name or args.workdir}: round {last}: test accuracy {summary}")
    accuracy = default_accuracy(rows)
    paper = (paper_rounds(rows, accuracy) if args.units == "paper" and rows[0].get("protocol")
             else [])
    if paper and paper != rows:
      curve = " ".join(f"{r['test_accuracy']:.3f}" for r in paper)
      print(f"  the paper's rounds 1-{len(paper)} ({paper[0]['agent']}, {accuracy} local "
            f"epoch): {curve}")
  return 0


def _compare(args: argparse.Namespace) -> int:
  jax.config.update("jax_enable_x64", True)   # the theory in float64; networks stay float32

  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  if len(runs) != 1:
    raise ValueError(f"--config: compare takes one run, the config is a sweep of {len(runs)} "
                     f"(pick one with flags, or write a config without a grid)")
  # compare raises CompareError unless the config is an ExperimentConfig.
  result = compare(cast(ExperimentConfig, runs[0][1]), args.workdir, kernel=args.kernel,
                   progress=args.progress, ridge=args.ridge, max_points=args.max_points)
  print(f"{args.workdir}: {result.kernel} kernel, ridge c = {result.ridge:.4g}, spectral "
        f"radius {result.spectral_radius:.4f} per round")
  for series in result.rates:
    last = [r for r in result.rows if r["series"] == series][-1]
    net = last["network_accuracy"]
    print(f"  {series}: round {last['round']} test accuracy theory "
          f"{last['theory_accuracy']:.3f}, network {'-' if net is None else f'{net:.3f}'}")
  print(f"  wrote {', '.join(result.paths.values())}")
  return 0


def _reproduce(args: argparse.Namespace) -> int:
  result = reproduce(args.figure, args.workdir, scale=args.scale,
                     overrides=overrides_from_args(args), progress=args.progress,
                     max_rounds=args.max_rounds)
  counts = result.counts()
  print(f"{result.paths['md']}: {result.figure} at {result.scale} scale: "
        f"{len(result.checks)} statements: {counts['reproduced']} reproduced, "
        f"{counts['not reproduced']} not reproduced, {counts['not testable here']} not "
        f"testable here")
  for check in result.checks:
    where = f" [{check.setting}]" if check.setting else ""
    print(f"  {check.verdict:17s} {check.statement}{where}: {check.numbers}")
  return 0


def _agent(agent: Any) -> str:
  return f"agent {agent}" if isinstance(agent, int) else str(agent)


def _configs(args: argparse.Namespace) -> int:
  if args.fields:
    return _fields(args.fields)
  for line in describe():
    print(line)
  return 0


@exits_on_signals("neural", dict.fromkeys(("run", "reproduce", "compare"),
                                           "run the same command again to resume"))
def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  if args.command == "compare":   # fedkrr's closed forms: vmapped eigh can stall XLA's CPU pool
    avoid_cpu_eigh_deadlock()
  try:
    if args.command == "run":
      return _run(args)
    if args.command == "compare":
      return _compare(args)
    if args.command == "reproduce":
      return _reproduce(args)
    return _configs(args)
  except (ValueError, OSError) as e:   # ConfigError, DataError, ... are ValueErrors
    message = " ".join(str(e).split())
    print(f"neural: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
