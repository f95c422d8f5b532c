"""The ``neural`` command line: ``neural demo`` (the main job: theory and experiment in one
report), ``neural run`` (one run or a sweep), ``neural compare``, ``neural reproduce`` (a
figure of the paper, its statements checked), ``neural configs``, ``neural data fetch`` (the
paper-scale data sets).

Errors are one line on stderr (``neural: error: ...``) and exit code 2. The
networks compute in float32; ``neural run`` does not enable JAX's float64 mode,
``neural compare`` does (for the closed-form theory; the networks stay float32).

Each command's parser is built when the command is named, with the flags that
command accepts: ``neural run`` offers the fields of the config it runs (``--config``
or ``--method`` chooses it; the KD protocols' fields by default), ``neural compare``
and ``neural reproduce`` the KD experiment's. A command imports JAX's side only when
it runs, so ``neural --help`` and the rerun of a finished run start at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import dataclasses
import re
import sys
import textwrap
import typing
from typing import Any
from typing import cast
import warnings

from fedkrr import __version__
from fedkrr import avoid_cpu_eigh_deadlock
from fedkrr.io import ReadError
from fedkrr.io import check_output
from fedkrr.io import exits_on_signals
from fedkrr.io import parse_json
from fedkrr.io import printing_failed
from fedkrr.io import stdout_failure
from neural._src.choices import MAIN_JOB_PARTS
from neural._src.datasets.download import DOWNLOADS
from neural._src.datasets.download import fetch_dataset
from neural._src.evidence.paper_units import UNITS
from neural._src.evidence.paper_units import default_accuracy
from neural._src.evidence.paper_units import paper_rounds
from neural._src.evidence.paper_units import unfinished_steps
from neural._src.jobs.runs import run_configs
from neural._src.jobs.specs import ConfigSpec
from neural._src.jobs.specs import describe
from neural._src.jobs.specs import load_spec
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import RunConfig
from neural._src.runtime.config import describe_type
from neural._src.runtime.config import field_help
from neural._src.runtime.config import field_type
from neural._src.runtime.config import optional_inner
from neural._src.runtime.rundir import process_workdir
from neural._src.runtime.rundir import show_warning
from neural._src.runtime.tensorboard import require_tensorboard

DESCRIPTION = ("Model-agnostic federated learning by knowledge distillation with neural "
               "networks and random forests (Afonin & Karimireddy, Sec. 6, App. H), and the "
               "federated distillation methods of four other papers.")
COMMANDS = {
    "demo": "the main job: theory and experiment side by side in DIR/report.md",
    "run": "run (or resume) an experiment or a sweep of experiments",
    "compare": "a KD run beside its closed-form kernel twin (fedkrr)",
    "reproduce": "run a figure of the paper and check its statements",
    "configs": "list the shipped paper configs, or the fields of a config",
    "data": "download MNIST, CIFAR-10 or CINIC-10 for the paper-scale configs",
}
# What `neural reproduce` costs (measured with `time neural reproduce --figure 4` on a 2-core
# machine): printed in its --help.
REPRODUCE_TIME = ("Cost: at --scale small each figure runs 3 seeds (10 with --jobs auto on a "
                  "GPU), and --jobs 2 runs two runs at a time; docs/benchmarks.md and "
                  "docs/reproduce.md list what each figure took and where. --scale paper wants "
                  "a GPU; --seeds 1 --rounds 2 --epochs 1 gives a quick look.")


def _plain(text: str) -> str:
  """Docstring text as help prints it: Sphinx roles and double backquotes dropped."""
  text = re.sub(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`]+)`", r"\1", text)
  return text.replace("``", "")


# ---------------------------------------------------------------------------
# Parsers


def top_parser() -> argparse.ArgumentParser:
  """``neural``: the commands and ``--version`` (each command's flags are its own parser's)."""
  parser = argparse.ArgumentParser(
      prog="neural", description=DESCRIPTION,
      epilog="`neural COMMAND --help` shows a command's flags; `neural run --config NAME "
             "--help` those of a config.")
  parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  for name, text in COMMANDS.items():
    sub.add_parser(name, help=text, add_help=False)
  return parser


# Flag spellings beyond --field-name, and metavars, for some fields.
_ALIASES = {"learning_rate": ("--lr",)}
_METAVARS = {"data_dir": "DIR", "train_subset": "N", "test_subset": "N", "agents": "M",
             "rounds": "R", "epochs": "E", "batch_size": "B", "seed": "S",
             "models": "M1,M2,...", "proportions": "P1,P2,...", "width": "W1,W2,...",
             "step_loop": "auto|scan|python", "agent_batching": "auto|vmap|sequential",
             "devices": "one|all"}


def _class_title(cls: type, methods: Sequence[str]) -> str:
  if cls is ExperimentConfig:
    return "fields of the KD protocols (ExperimentConfig)"
  return f"fields of the method{'s' if len(methods) > 1 else ''} {', '.join(methods)} " \
         f"({cls.__name__})"


def _parse_as(kind: Any) -> Any:
  """An argparse ``type`` for a field annotation (the config coerces and checks it after)."""
  kind = optional_inner(kind)[0]
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


def add_field_flags(parser: argparse.ArgumentParser,
                    classes: Sequence[tuple[type, Sequence[str]]]) -> tuple[str, ...]:
  """Adds ``--field-name`` for the fields of ``classes`` (``(config class, its method names)``).

  The fields every run has come first, then each class's own, grouped by class in
  ``--help`` with each field's description from the class's docstring; a flag that
  is not given leaves the field to the config file. The ``method`` field is not a
  flag here (``neural run --method`` chooses the class).

  Returns:
    The names of the fields that got a flag.
  """
  groups = [("fields of every run (RunConfig)", RunConfig, RunConfig.field_names())]
  seen = set(groups[0][2]) | {"method"}
  for cls, methods in classes:
    fields = tuple(f for f in cls.field_names() if f not in seen)
    seen.update(fields)
    if fields:
      groups.append((_class_title(cls, methods), cls, fields))
  for title, cls, fields in groups:
    group = parser.add_argument_group(title)
    help_text = field_help(cls)
    for name in fields:
      kind = field_type(cls, name)
      flags = ("--" + name.replace("_", "-"),) + _ALIASES.get(name, ())
      text = _plain(help_text.get(name, ""))
      if kind is bool:
        group.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=text)
      else:
        group.add_argument(*flags, dest=name, type=_parse_as(kind), default=argparse.SUPPRESS,
                           metavar=_METAVARS.get(name, name.upper()), help=text)
  return tuple(name for _, _, fields in groups for name in fields)


def _config_args(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--config", metavar="FILE|NAME",
                      help="config file or shipped config name (`neural configs`)")
  parser.add_argument("--workdir", required=True, metavar="DIR", help="the run directory")


def _set_arg(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                      help="set any config field; VALUE is JSON or a plain string, e.g. "
                           "--set topology=ring --set lambdas=[1,2]; repeatable")


def _progress_arg(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="what runs, how far, the time left: a line per run, bars over "
                           "rounds, agents and sweeps (default: on when the output is a "
                           "terminal)")
  parser.add_argument("--deterministic", action="store_true",
                      help="XLA's deterministic GPU operations: the same command gives the "
                           "same numbers run after run on a GPU too, at some cost in speed "
                           "(docs/devices.md); a CPU is deterministic already")


def _executor_args(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--executor", choices=("local", "ray"), default="local",
                      help="where the runs run: local (this machine; default) or ray (each "
                           "run a Ray task on a cluster, the workdir on storage every node "
                           "mounts; Ray is an optional extra: pip install \"fedkrr[ray]\")")
  parser.add_argument("--address", metavar="ADDR",
                      help="with --executor ray: the cluster's head, HOST:PORT or auto (the "
                           "cluster `ray start` made here); default: start Ray on this "
                           "machine")


def _check_executor(args: argparse.Namespace) -> None:
  if args.address is not None and args.executor != "ray":
    raise ValueError("--address: the Ray cluster to run on; add --executor ray")


def _max_rounds_arg(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--max-rounds", type=int, metavar="K",
                      help="stop after K rounds in this call (resume later)")


def _classes(methods: Sequence[str | None]) -> list[tuple[type, list[str]]]:
  """The config class of each method name (``None``: the KD protocols), with its names."""
  out: dict[type, list[str]] = {}
  for name in methods:
    if name is None:
      out.setdefault(ExperimentConfig, [])
    else:
      from neural._src.methods.registry import get_method  # deferred: JAX, the methods
      out.setdefault(get_method(name).config_cls, []).append(name)
  return list(out.items())


def _chosen_methods(argv: Sequence[str]) -> tuple[list[str | None], ConfigSpec | None]:
  """The methods ``neural run`` would run for ``argv`` (``None``: the KD protocols), and
  the loaded ``--config``: ``--method`` or ``--set method=NAME``, else the config's."""
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--config")
  pre.add_argument("--method")
  pre.add_argument("--set", action="append", default=[], dest="sets")
  known, _ = pre.parse_known_args(argv)
  method = known.method
  for item in known.sets:
    field, eq, value = item.partition("=")
    if eq and field.strip() == "method":
      method = value.strip().strip('"')
  spec = load_spec(known.config) if known.config else None
  if method is not None:
    return [method], spec
  return (list(spec.methods()) if spec else [None]), spec


def run_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural run``'s parser, with the fields of the config that ``argv`` chooses.

  ``--method NAME`` (or ``--set method=NAME``) chooses a method of the other papers,
  ``--config`` the classes of its runs; neither: the KD protocols.
  """
  methods, _ = _chosen_methods(argv)
  classes = _classes(methods)
  shown = ", ".join(_class_title(cls, names).removeprefix("fields of ") for cls, names in classes)
  parser = argparse.ArgumentParser(
      prog="neural run",
      usage="neural run [-h] [--config FILE|NAME] [--method NAME] --workdir DIR "
            "[--FIELD VALUE ...] [--set FIELD=VALUE] [--max-rounds K] [--batch B] "
            "[--executor local|ray] [--address ADDR] [--progress | --no-progress] "
            "[--coordinator HOST:PORT --num-processes N --process-id I]",
      description="Runs an experiment into --workdir (config.json, metrics.jsonl, "
                  "checkpoint.npz, accuracy.png). Started again with the same command, a "
                  "killed run resumes after its last finished round, and a finished one is "
                  "read back at once. --config takes a JSON file or the name of a shipped "
                  "config (`neural configs`); flags override its values (and those of every "
                  f"run of a sweep). The field flags below are those of {shown}.",
      epilog="A method of the other papers has fields of its own: `neural run --method NAME "
             "--help` (or `--config NAME --help`) lists them; `neural configs --fields` "
             "names the methods.")
  _config_args(parser)
  parser.add_argument("--method", metavar="NAME",
                      help="run a method of the other papers (its config's fields become "
                           "flags; default: a KD protocol, --protocol)")
  fields = add_field_flags(parser, classes)
  _set_arg(parser)
  if any(cls is ExperimentConfig for cls, _ in classes):   # the methods have no paper units
    parser.add_argument("--units", choices=UNITS, default="paper",
                        help="rounds of accuracy.png and of the summary: paper (the paper's "
                             "figures: an AKD round is M steps, the mean of the agents, EKD's "
                             "even partial sums; default) or steps (every logged step and "
                             "agent)")
  else:
    parser.set_defaults(units="steps")
  _max_rounds_arg(parser)
  _executor_args(parser)
  _batch_arg(parser)
  _progress_arg(parser)
  _distributed_args(parser)
  parser.set_defaults(fields=fields)
  return parser


def _distributed_args(parser: argparse.ArgumentParser) -> None:
  group = parser.add_argument_group(
      "across hosts (jax.distributed; docs/devices.md)",
      "one process per host, each started with the same command but its own --process-id; "
      "unset flags read $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID. "
      "Process 0 writes --workdir, process I > 0 the sibling WORKDIR.process-I")
  group.add_argument("--coordinator", metavar="HOST:PORT",
                     help="address of process 0, where it listens (the same for every process)")
  group.add_argument("--num-processes", type=int, metavar="N", help="the number of processes")
  group.add_argument("--process-id", type=int, metavar="I", help="this process: 0 .. N - 1")


def _connect(args: argparse.Namespace) -> str:
  """Connects the processes of a run across hosts (if asked); this process's workdir."""
  from fedkrr.scale import initialize_distributed  # deferred: JAX, only when a run starts

  try:
    connected = initialize_distributed(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:   # fedkrr names the argument; the flag is that name
    name, _, rest = str(e).partition(":")
    raise ValueError(f"--{name.replace('_', '-')}:{rest}") from None
  if not connected:
    return args.workdir
  import jax  # deferred: as above

  return str(process_workdir(args.workdir, jax.process_index()))


def compare_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural compare``'s parser: the KD experiment's fields and the theory's options."""
  parser = argparse.ArgumentParser(
      prog="neural compare",
      description="Runs (or resumes) a KD experiment (akd, avgkd, pkd, pkd-mean, ekd, "
                  "backfit-*) into --workdir, computes the fedkrr closed form of the same "
                  "protocol on the same data with each agent's kernel (empirical NTK at "
                  "initialisation by default) and the ridge matched to the weight decay, and "
                  "writes compare.json, compare.md and compare.png there (one round "
                  "numbering throughout: round 0 is local training on the labels).")
  _config_args(parser)
  fields = add_field_flags(parser, [(ExperimentConfig, [])])
  _set_arg(parser)
  _progress_arg(parser)
  parser.add_argument("--kernel", default="ntk",
                      help="ntk (empirical NTK at initialisation; default), nngp or relu-ntk "
                           "(infinite-width ReLU MLP), rbf (cheap stand-in)")
  parser.add_argument("--ridge", type=float, metavar="C",
                      help="the ridge c (default: matched to the weight decay, C wd / 2)")
  parser.add_argument("--max-points", type=int, default=5000, metavar="N",
                      help="refuse runs with more training plus test points (default 5000: "
                           "the whole embedded MNIST subset)")
  parser.set_defaults(fields=fields)
  return parser


def reproduce_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural reproduce``'s parser: the fields of the figures' configs (the KD protocols)."""
  parser = argparse.ArgumentParser(
      prog="neural reproduce",
      usage="neural reproduce [-h] --figure N [--scale small|paper] --workdir DIR "
            "[--seeds K] [--with DIR] [--jobs J|auto] [--paper-rounds K] [--FIELD VALUE ...] "
            "[--set FIELD=VALUE] [--max-rounds K] [--batch B] [--executor local|ray] "
            "[--address ADDR] [--progress | --no-progress]",
      description="Runs (or resumes) every run of the shipped config(s) of Fig. N (small: "
                  "the *_small config, embedded data, a CPU; paper: the full-size config, "
                  "and for Figs. 9-10 the *_text variant too, with the MNIST / CIFAR-10 "
                  "files in --data-dir: `neural data fetch`), draws the figure like the paper "
                  "(reproduce.png) and writes reproduce.md and reproduce.json: round 1, best "
                  "and last round of every run (mean and spread over the seeds), and each "
                  "statement the paper makes about the figure decided against the noise "
                  "(reproduced / not reproduced / inconclusive / not testable here), beside "
                  "the same rule on the authors' own logged curves (Figs. 6, 8-10). Started "
                  "again, finished runs are read and the others resume. Flags and --set "
                  "override fields in every run. " + REPRODUCE_TIME)
  parser.add_argument("--figure", required=True, metavar="N",
                      help="the figure's number (4, 5, 6, 8-15; `neural configs` lists them)")
  parser.add_argument("--scale", choices=("small", "paper"), default="small",
                      help="small (CPU, embedded data; default) or paper (full size, a GPU, "
                           "--data-dir)")
  parser.add_argument("--workdir", required=True, metavar="DIR", help="the run directory")
  parser.add_argument("--seeds", type=int, metavar="K",
                      help="run every run with K seeds: seed, seed + 1, ... (default: 3 at "
                           "small scale, 10 there with --jobs auto on a GPU, 1 at paper scale)")
  parser.add_argument("--with", dest="others", action="append", default=[], metavar="DIR",
                      help="another figure's reproduction (its workdir or reproduce.json) "
                           "for the statements that compare figures (Fig. 8 with Fig. 6)")
  parser.add_argument("--jobs", type=_jobs, default=1, metavar="J",
                      help="run J runs at a time in worker processes, with the same numbers "
                           "(default 1; on a 2-core CPU 2 does 1.25-1.4x the runs per hour; at "
                           "most one per core without GPUs); with several GPUs the workers "
                           "take the GPUs in turn; 'auto': 3 per GPU, 2 on a CPU of 2 cores "
                           "or more (the measured best), 1 otherwise")
  parser.add_argument("--paper-rounds", type=_count(1), metavar="K",
                      help="give every run K paper rounds, keeping its steps per paper round "
                           "(AKD M, EKD 2): the small configs have 5; 20, the paper's, "
                           "decides the statements about the long run (a GPU's work; "
                           "use a new --workdir)")
  fields = add_field_flags(parser, [(ExperimentConfig, [])])
  _set_arg(parser)
  _max_rounds_arg(parser)
  _executor_args(parser)
  _batch_arg(parser)
  _progress_arg(parser)
  parser.set_defaults(fields=fields)
  return parser


def _batch_arg(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--batch", type=_jobs, default=1, metavar="B",
                      help="train up to B runs that share a protocol and shapes (seeds, "
                           "Alphas, learning rates, weight decays) as one program, each in "
                           "its own directory, with the same numbers up to float32 rounding "
                           "(docs/devices.md, 'Batched runs'); with --jobs each worker takes "
                           "a batch. 'auto': 32 on a GPU, 1 on a CPU (measured no faster "
                           "there). Default 1")


def _parts(text: str) -> tuple[str, ...]:
  parts = tuple(p.strip() for p in text.split(",") if p.strip())
  unknown = [p for p in parts if p not in MAIN_JOB_PARTS]
  if unknown or not parts:
    raise argparse.ArgumentTypeError(f"expected names from {', '.join(MAIN_JOB_PARTS)}, got "
                                     f"{', '.join(unknown) or 'nothing'}")
  return parts


def _jobs(text: str) -> int | str:
  return "auto" if text == "auto" else _count(1)(text)


def _count(least: int, most: int | None = None) -> Callable[[str], int]:
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < least or (most is not None and value > most):
      span = f">= {least}" if most is None else f"in {least}..{most}"
      raise argparse.ArgumentTypeError(f"expected an integer {span}, got {value}")
    return value
  return parse


def demo_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural demo``'s parser (the main job)."""
  parser = argparse.ArgumentParser(
      prog="neural demo",
      description="The main job, on embedded data and the CPU (it prints what it cost at "
                  "its end; docs/benchmarks.md): checks the "
                  "paper's propositions (smallest instances), reproduces the toy experiment "
                  "of Fig. 3, runs every protocol by closed form and by literal simulation on "
                  "a synthetic problem, and replays AKD / AvgKD / EKD with neural networks on "
                  "the embedded MNIST subset next to their closed-form twins (the networks' "
                  "neural tangent kernels). Writes DIR/report.md with PNG figures; each part "
                  "keeps its files in its own subdirectory. The theory runs in float64, the "
                  "networks in float32.")
  parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
  parser.add_argument("--parts", type=_parts, default=MAIN_JOB_PARTS, metavar="P1,P2",
                      help=f"which parts to run, of {', '.join(MAIN_JOB_PARTS)} (default: all "
                           f"{len(MAIN_JOB_PARTS)})")
  parser.add_argument("--rounds", type=_count(1), default=40, metavar="T",
                      help="rounds of the synthetic closed-form part (default 40)")
  parser.add_argument("--seed", type=_count(0, 2**32 - 1), default=0, metavar="S",
                      help="the seed of every part (default 0)")
  _progress_arg(parser)
  return parser


def configs_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural configs``'s parser."""
  parser = argparse.ArgumentParser(
      prog="neural configs",
      description="Lists the configs shipped with the package (paper figures at paper scale "
                  "and as small CPU versions): name, number of runs, description. With "
                  "--fields NAME, lists the fields of a method's config (NAME: a method such "
                  "as mhd, or kd for the KD protocols) with their types and defaults; "
                  "--fields alone names the methods.")
  parser.add_argument("--fields", metavar="NAME", nargs="?", const="",
                      help="list the fields of method NAME's config (kd: the KD protocols)")
  return parser


_FETCH = ("Downloads the files of a data set from its source (or a mirror) into DIR, "
          "checks each against its published size and checksum, resumes a cut download "
          "(HTTP Range) and gives each file its name only once it is whole and checked (an "
          "archive: once unpacked and its files counted). Files already in DIR are checked, "
          "not fetched again. Then pass --data-dir DIR to `neural run` or `neural "
          "reproduce`. Sizes: MNIST 11 MB, CIFAR-10 163 MB, CINIC-10 656 MB (1.7 GB "
          "unpacked). Sources and checksums: docs/neural_data.md.")


def _fetch_args(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("name", choices=tuple(DOWNLOADS), help="the data set")
  parser.add_argument("--dir", required=True, metavar="DIR",
                      help="the directory to put the files in (created)")
  parser.add_argument("--base-url", metavar="URL",
                      help="fetch from this URL instead of the default source (a mirror: the "
                           "same file names under it)")
  parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="a progress bar per file (default: on when the output is a "
                           "terminal)")


def data_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
  """``neural data``'s parser (``neural data fetch NAME --dir DIR``)."""
  parser = argparse.ArgumentParser(
      prog="neural data",
      description="The data sets of the paper-scale configs, which are not embedded: "
                  "`neural data fetch NAME --dir DIR` downloads one into DIR.")
  sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
  _fetch_args(sub.add_parser("fetch", help="download a data set into a directory, checked",
                             description=_FETCH))
  return parser


def fetch_parser() -> argparse.ArgumentParser:
  """``neural data fetch``'s parser, alone (the reference pages print its help)."""
  parser = argparse.ArgumentParser(prog="neural data fetch", description=_FETCH)
  _fetch_args(parser)
  return parser


_PARSERS: dict[str, Callable[[Sequence[str]], argparse.ArgumentParser]] = {
    "demo": demo_parser, "run": run_parser, "compare": compare_parser,
    "reproduce": reproduce_parser, "configs": configs_parser, "data": data_parser}


def command_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
  """``(command line, parser)`` of ``neural`` and each command, for the reference pages:
  ``neural run`` once per config class (the KD protocols, then each method's)."""
  from neural._src.methods.registry import method_configs  # deferred: JAX, the methods

  yield "neural", top_parser()
  yield "neural demo", demo_parser()
  yield "neural run", run_parser()
  firsts: dict[type, str] = {}
  for name, cls in method_configs().items():
    firsts.setdefault(cls, name)
  for name in firsts.values():
    yield f"neural run --method {name}", run_parser(["--method", name])
  for command in ("compare", "reproduce", "configs"):
    yield f"neural {command}", _PARSERS[command](())
  yield "neural data", data_parser()
  yield "neural data fetch", fetch_parser()


# ---------------------------------------------------------------------------
# Commands


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields set on the command line (field flags, ``--method``, then ``--set``)."""
  fields: set[str] = set(getattr(args, "fields", ()))
  out: dict[str, Any] = {name: value for name, value in vars(args).items() if name in fields}
  if getattr(args, "method", None) is not None:
    out["method"] = args.method
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
  from neural._src.methods.registry import get_method  # deferred: JAX, the methods
  from neural._src.methods.registry import method_configs  # deferred: JAX, the methods

  if not name:
    print("kd: the KD protocols (ExperimentConfig)")
    for method, cls in method_configs().items():
      print(f"{method}: {get_method(method).description or cls.__name__} ({cls.__name__})")
    return 0
  cls = ExperimentConfig if name in ("kd", "experiment") else get_method(name).config_cls
  help_text = field_help(cls)
  print(f"{cls.__name__} ({'KD protocols' if cls is ExperimentConfig else 'method ' + name}):")
  for f in dataclasses.fields(cls):
    default = f.default if f.default is not dataclasses.MISSING else None
    kind = describe_type(field_type(cls, f.name))
    print(f"  --{f.name.replace('_', '-'):22s} {kind}; default {default!r}")
    if help_text.get(f.name):
      print(textwrap.fill(_plain(help_text[f.name]), width=96, initial_indent=" " * 6,
                          subsequent_indent=" " * 6))
  return 0


def _run(args: argparse.Namespace) -> int:
  args.workdir = _connect(args)   # first: before any JAX computation
  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  _check_tensorboard(config for _, config in runs)
  if args.max_rounds is not None and args.max_rounds < 1:
    raise ValueError(f"--max-rounds: expected an integer >= 1, got {args.max_rounds}")
  _check_executor(args)
  results = run_configs(runs, args.workdir, progress=args.progress,
                        description=spec.description, max_rounds=args.max_rounds,
                        units=args.units, done=_sweep(args, runs, spec.description))
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
      left = unfinished_steps(rows)
      if left:
        print(f"  round{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} "
              f"{'are' if len(left) > 1 else 'is'} not in the paper's rounds: a paper round "
              f"begun but not finished (AKD: M steps each)")
  return 0


def _check_tensorboard(configs: Iterable[Any]) -> None:
  """``--tensorboard`` without the extra: one line naming it, before any run starts."""
  if any(getattr(config, "tensorboard", False) for config in configs):
    require_tensorboard()


def _sweep(args: argparse.Namespace, runs: Sequence[tuple[str, RunConfig]],
           description: str) -> dict[str, list[dict[str, Any]]] | None:
  """``neural run --batch B`` / ``--executor ray``: the sweep's runs (their rows by name),
  or ``None`` (one run after another in this process)."""
  from neural._src.jobs.batched import batch_size  # deferred: the runs' side
  from neural._src.jobs.executors import run_sweep  # deferred: the runs' side
  from neural._src.jobs.workers import on_gpu  # deferred: the runs' side

  return run_sweep(runs, args.workdir, description=description,
                   batch=batch_size(args.batch, on_gpu), executor=args.executor,
                   address=args.address, max_rounds=args.max_rounds, progress=args.progress,
                   units=args.units)


def _demo(args: argparse.Namespace) -> int:
  import jax

  from neural._src.figures.report import MainJobSettings  # deferred: JAX, Flax, closed forms
  from neural._src.figures.report import run_main_job  # deferred: as above

  check_output(args.out, "--out", directory=True)
  avoid_cpu_eigh_deadlock()   # fedkrr's closed forms: vmapped eigh can stall XLA's CPU pool
  jax.config.update("jax_enable_x64", True)   # the theory in float64; networks stay float32
  run_main_job(args.out, MainJobSettings(parts=args.parts, rounds=args.rounds, seed=args.seed),
               progress=args.progress)
  return 0


def _compare(args: argparse.Namespace) -> int:
  import jax

  from neural._src.kd.compare import compare  # deferred: JAX, Flax, fedkrr's closed forms

  avoid_cpu_eigh_deadlock()   # fedkrr's closed forms: vmapped eigh can stall XLA's CPU pool
  jax.config.update("jax_enable_x64", True)   # the theory in float64; networks stay float32
  spec = load_spec(args.config) if args.config else ConfigSpec(base={})
  runs = spec.expand(overrides_from_args(args))
  _check_tensorboard(config for _, config in runs)
  if len(runs) != 1:
    raise ValueError(f"--config: compare takes one run, the config is a sweep of {len(runs)} "
                     f"(pick one with flags, or write a config without a grid)")
  # compare raises CompareError unless the config is an ExperimentConfig.
  result = compare(cast(ExperimentConfig, runs[0][1]), args.workdir, kernel=args.kernel,
                   progress=args.progress, ridge=args.ridge, max_points=args.max_points)
  print(f"{args.workdir}: {result.kernel} kernel, ridge c = {result.ridge:.4g}, spectral "
        f"radius {result.spectral_radius_per_round:.4f} per round"
        + (f" (AKD degradation rate {result.degradation_rate_per_cycle:.4f} per cycle of "
           f"{result.config.agents} rounds)" if result.degradation_rate_per_cycle is not None
           else ""))
  for series in result.rates:
    last = [r for r in result.rows if r["series"] == series][-1]
    net = last["network_accuracy"]
    print(f"  {series}: round {last['round']} test accuracy theory "
          f"{last['theory_accuracy']:.3f}, network {'-' if net is None else f'{net:.3f}'}")
  print(f"  wrote {', '.join(result.paths.values())}")
  return 0


def _reproduce(args: argparse.Namespace) -> int:
  from neural._src.figures.reproduce import reproduce  # deferred: JAX, Flax, the runs

  _check_executor(args)
  if overrides_from_args(args).get("tensorboard"):
    require_tensorboard()
  result = reproduce(args.figure, args.workdir, scale=args.scale,
                     overrides=overrides_from_args(args), seeds=args.seeds,
                     others=args.others, progress=args.progress, max_rounds=args.max_rounds,
                     jobs=args.jobs, paper_rounds=args.paper_rounds, executor=args.executor,
                     address=args.address, batch=args.batch)
  counts = result.counts()
  apart = ", ".join(f"{len(checks)} {standing}" for standing, checks in result.apart().items()
                    if checks) or "none"
  total = (f" ({result.seconds_total / 60:.1f} min over {result.calls} calls)"
           if result.calls > 1 else "")
  print(f"{result.paths['md']}: {result.figure} at {result.scale} scale, "
        f"{len(result.seeds)} seed(s), {result.seconds / 60:.1f} min{total}: "
        f"{result.sentences} sentences, {len(result.counted)} checks: "
        f"{counts['reproduced']} reproduced, "
        f"{counts['not reproduced']} not reproduced, {counts['no difference']} no difference, "
        f"{counts['inconclusive']} inconclusive, {counts['not testable here']} not testable "
        f"here; apart, not counted: {apart}")
  for check in result.checks:
    where = f" [{check.setting}]" if check.setting else ""
    aside = "" if check.standing == "in scope" else f" ({check.standing}: not counted)"
    near = " (near the threshold)" if check.near_threshold and check.numbers else ""
    print(f"  {check.verdict:17s} {check.statement}{where}{aside}{near}: {check.numbers}")
  return 0


def _agent(agent: Any) -> str:
  return f"agent {agent}" if isinstance(agent, int) else str(agent)


def _configs(args: argparse.Namespace) -> int:
  if args.fields is not None:
    return _fields(args.fields)
  for line in describe():
    print(line)
  return 0


def _data(args: argparse.Namespace) -> int:
  paths = fetch_dataset(args.name, args.dir, base_url=args.base_url, progress=args.progress)
  print(f"{args.dir}: {args.name}: {len(paths)} files, checked; pass --data-dir {args.dir}")
  return 0


def _not_accepted(command: str, extras: Sequence[str]) -> str:
  """Why ``neural COMMAND`` refuses ``extras``: a field of another config names its method."""
  flag = next((e for e in extras if e.startswith("--")), extras[0])
  field = flag.removeprefix("--").partition("=")[0].replace("-", "_")
  owners = []
  if flag.startswith("--"):
    from neural._src.methods.registry import method_configs  # deferred: JAX, the methods

    owners = [name for name, cls in method_configs().items() if field in cls.field_names()]
  if not owners:
    return f"unrecognized arguments: {' '.join(extras)} (see `neural {command} --help`)"
  where = ("; add --method NAME (one of " + ", ".join(owners) + ") to run such a method"
           if command == "run" else f"; `neural {command}` runs the KD protocols only")
  return (f"{flag.partition('=')[0]}: not a field of the config run here; a field of the "
          f"method{'s' if len(owners) > 1 else ''} {', '.join(owners)}{where}")


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _demo, "run": _run, "compare": _compare, "reproduce": _reproduce, "configs": _configs,
    "data": _data}


@exits_on_signals("neural", dict.fromkeys(("run", "reproduce", "compare"),
                                           "run the same command again to resume"))
def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] not in COMMANDS:
    top_parser().parse_args(argv)   # --help, --version, or an error naming the commands
    return 2
  command, rest = argv[0], argv[1:]
  try:
    parser = _PARSERS[command](rest)
    args, extras = parser.parse_known_args(rest)
    if extras:
      raise ValueError(_not_accepted(command, extras))
    if getattr(args, "progress", False) is None:   # quiet in logs and pipes
      args.progress = sys.stdout.isatty()
    if getattr(args, "deterministic", False):
      from fedkrr import deterministic_ops  # deferred: only when asked (imports no JAX)
      deterministic_ops()
    with warnings.catch_warnings():
      warnings.showwarning = show_warning
      code = _HANDLERS[command](args)
    failure = stdout_failure()   # `> /dev/full`: said, naming the standard output
    if failure is not None:
      raise OSError(f"cannot write the standard output ({failure})")
    return code
  except (ValueError, OSError) as e:   # ConfigError, DataError, ... are ValueErrors
    message = " ".join(str(e).split())
    if printing_failed(e):   # a print to a full disk or a closed pipe
      message = f"cannot write the standard output ({getattr(e, 'strerror', e)})"
    print(f"neural: error: {message}", file=sys.stderr)
    return 2
  except Exception as e:   # out of memory, on the host or in XLA: one line, not a traceback
    if not _out_of_memory(e):
      raise
    message = " ".join(str(e).split())[:300]
    print(f"neural: error: out of memory ({type(e).__name__}: {message or 'no details'}); "
          f"use a smaller --width, --batch-size or data subset, or a machine with more "
          f"memory", file=sys.stderr)
    return 2


def _out_of_memory(e: BaseException) -> bool:
  """A host ``MemoryError``, or XLA's RESOURCE_EXHAUSTED (``XlaRuntimeError`` or
  ``JaxRuntimeError``, by version) from an allocation the sizes asked for."""
  return isinstance(e, MemoryError) or (
      type(e).__name__ in ("XlaRuntimeError", "JaxRuntimeError")
      and "RESOURCE_EXHAUSTED" in str(e))


if __name__ == "__main__":
  sys.exit(main())
