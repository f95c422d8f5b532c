"""The ``fedkrr`` command line: ``run`` on problem files, ``verify``, ``search``, ``toy``.

``fedkrr demo`` only points to ``neural demo``: the main job trains networks, and fedkrr
never imports the network package.

The entry point enables float64 (theory needs it) unless ``--float32`` is given;
importing the library never does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import sys
import textwrap

from fedkrr._src import names
from fedkrr._src.io.files import printing_failed
from fedkrr._src.io.files import stdout_failure
from fedkrr._src.io.interrupts import exits_on_signals
from fedkrr._src.platform.distributed import distributed_settings
from fedkrr._src.platform.distributed import initialize_distributed
from fedkrr._src.platform.xla_env import avoid_cpu_eigh_deadlock
from fedkrr._src.version import installed_version


def _parser() -> argparse.ArgumentParser:
  from fedkrr._src.paper.search_claims import (
    BY_ID,  # deferred: the choices (JAX), once a command is parsed
  )
  from fedkrr._src.paper.verify import CHECKS  # deferred: as above

  parser = argparse.ArgumentParser(
      prog="fedkrr",
      description="Exact federated kernel ridge regression by knowledge distillation.")
  parser.add_argument("--version", action="version",
                      version=f"%(prog)s {installed_version()}")
  sub = parser.add_subparsers(dest="command", required=True)

  run = sub.add_parser(
      "run", help="run a protocol on a problem file and write its predictions",
      description="Runs a protocol on P.npz (x_0..x_{M-1}, y_0..y_{M-1}, kernel_0..kernel_{M-1} "
                  "as JSON strings, ridge, x_eval) and writes OUT.npz with `predictions` "
                  "evaluated at x_eval (and `limit` with --limit, where it exists).")
  run.add_argument("--problem", required=True, metavar="P.npz", help="the problem file")
  run.add_argument("--protocol", required=True, choices=names.PROTOCOLS + names.BASELINES)
  run.add_argument("--rounds", type=int, metavar="T",
                   help="number of rounds (required except for central and local)")
  run.add_argument("--start", type=int, default=0, metavar="S",
                   help="starting agent of AKD (default 0)")
  run.add_argument("--weights", metavar="W1,W2,...",
                   help="weighted AvgKD's agent weights, one per agent, each in (0, 1], "
                        "summing to 1 (default: 1/M each)")
  run.add_argument("--method", choices=names.RUN_METHODS, default="closed-form",
                   help="closed form (default), literal round-by-round simulation, the "
                        "matrix-free path (rounds by conjugate gradients, no N x N matrix; "
                        "ridge > 0), sharded (each agent on its own device, across "
                        "processes with --coordinator; every round, no --limit), or auto: "
                        "closed form if it fits in half the memory, else matrix-free, and "
                        "the literal rounds where the closed form would couple too many "
                        "agents (fedkrr.scale.choose_method)")
  run.add_argument("--limit", action="store_true",
                   help="also write the t -> infinity limit where it exists")
  run.add_argument("--every", type=int, default=1, metavar="K",
                   help="keep only every K-th round (rounds 0, K, 2K, ...; for AKD a multiple "
                        "of the number of agents): the memory of long runs")
  run.add_argument("--out", required=True, metavar="OUT.npz",
                   help="the output file (written as named, atomically)")
  run.add_argument("--float32", action="store_true", help="compute in float32 (default float64)")
  run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="a progress bar over the rounds of --method simulate and matfree "
                        "(default on)")
  group = run.add_argument_group(
      "across hosts (--method sharded; docs/scale.md)",
      "one process per host, each started with the same command but its own --process-id; "
      "unset flags read $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID. "
      "Process 0 writes --out")
  group.add_argument("--coordinator", metavar="HOST:PORT",
                     help="address of process 0, where it listens (the same for every process)")
  group.add_argument("--num-processes", type=int, metavar="N", help="the number of processes")
  group.add_argument("--process-id", type=int, metavar="I", help="this process: 0 .. N - 1")

  # The main job moved to `neural demo` (it trains networks); the old command says so.
  sub.add_parser("demo", help="moved: the main job is `neural demo --out DIR`", add_help=False,
                 description="Moved: the main job trains networks, so it is `neural demo --out "
                             "DIR` (the same flags); `fedkrr demo ...` prints that line and "
                             "exits with status 2.")
  verify = sub.add_parser(
      "verify", help="check the paper's statements numerically and print a table",
      description="Runs every check of the paper's propositions on seeded random instances of "
                  "several sizes and prints a table (statement, source, max residual, "
                  "tolerance, holds). Exits with status 1 if an identity the toolkit relies "
                  "on fails; a paper claim that does not hold is a finding, not an error. "
                  "Cost: the default two seeds take longest (docs/benchmarks.md); --seeds 1 "
                  "about half of that, --only PREFIX a few checks.")
  verify.add_argument("--json", metavar="FILE", help="also write the rows as a JSON list")
  verify.add_argument("--only", metavar="PREFIX", help="run the checks whose id starts so")
  verify.add_argument("--seeds", type=int, default=2, metavar="S",
                      help="seeds per size (default 2)")
  sources = {c.id: c.source for c in CHECKS}
  search = sub.add_parser(
      "search", help="search for instances where the paper's claims break",
      # Raw: the claim ids below, one per line (argparse would break them at their hyphens).
      formatter_class=argparse.RawDescriptionHelpFormatter,
      description=textwrap.fill(
          "Searches the instances a statement of the paper allows (kernel pairs from the "
          "catalogue, bandwidths and ridges over decades, 1 to 20 dimensions, shared to "
          "disjoint data, M agents where the statement is about M) for one where it fails: "
          "random batches plus gradient ascent on the violation, in float64. A counterexample "
          "is shrunk, replayed by literal rounds and saved as DIR/ID.npz (a problem file for "
          "`fedkrr run --problem`); DIR/ID.json says what was found. A finding is not an "
          "error: the exit status is 0.", 79, break_on_hyphens=False),
      epilog="claim ids (--claim ID; `fedkrr verify` lists the statements):\n" + "\n".join(
          f"  {claim:26s} {sources.get(claim, '')}" for claim in BY_ID))
  which = search.add_mutually_exclusive_group(required=True)
  which.add_argument("--claim", metavar="ID",
                     help="the `fedkrr verify` id of the statement (listed below)")
  which.add_argument("--all", action="store_true",
                     help="every claim, the budget split evenly (also writes DIR/summary.json)")
  search.add_argument("--budget-seconds", type=float, required=True, metavar="S",
                      help="time for the search (shrinking and replaying a counterexample "
                           "take up to a minute more per claim)")
  search.add_argument("--seed", type=_seed, default=0, help="the seed of the draws (default 0)")
  search.add_argument("--max-instances", type=int, metavar="N",
                      help="also stop after N instances per claim")
  search.add_argument("--out", required=True, metavar="DIR", help="output directory")
  search.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                      help="a progress bar with the worst residual so far (default on)")
  toy = sub.add_parser(
      "toy", help="the toy experiment of Fig. 3: linear regression, AKD / AvgKD / EKD",
      description="Runs the toy experiment of the paper's Fig. 3 (App. A): linear regression "
                  "A x* = b, d = 100, n = 150, split 0.6 / 0.4 at random or after sorting by b, "
                  "AKD, AvgKD and EKD against centralised and local training, plus the "
                  "strong-regularisation panel; writes toy.png, toy.pdf, toy.csv and "
                  "toy_config.json to OUT.")
  toy.add_argument("--out", required=True, metavar="DIR", help="output directory")
  toy.add_argument("--seed", type=_seed, default=0, help="the PRNG seed (default 0)")
  toy.add_argument("--rounds", type=int, default=250, metavar="T",
                   help="rounds of every protocol (default 250)")
  return parser


def _seed(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
  if not 0 <= value < 2**32:
    raise argparse.ArgumentTypeError(f"expected an integer in 0..2^32 - 1, got {value}")
  return value


def _demo_moved(rest: Sequence[str]) -> int:
  print("fedkrr: error: the main job is `neural demo` now, with the same flags: "
        f"neural demo {' '.join(rest) or '--out DIR'} (it trains networks, and fedkrr "
        "never imports them)", file=sys.stderr)
  return 2


def _connect(args: argparse.Namespace) -> None:
  """``fedkrr run --method sharded`` across processes: connects them (``jax.distributed``)."""
  if args.command != "run":
    return
  try:
    settings = distributed_settings(args.coordinator, args.num_processes, args.process_id)
  except ValueError as e:   # fedkrr names the argument; the flag is that name
    name, _, rest = str(e).partition(":")
    raise ValueError(f"--{name.replace('_', '-')}:{rest}") from None
  if settings is None:
    return
  if args.method != "sharded":
    raise ValueError(f"--coordinator: only --method sharded runs across processes, not "
                     f"--method {args.method} (or unset $JAX_COORDINATOR_ADDRESS, "
                     f"$JAX_NUM_PROCESSES and $JAX_PROCESS_ID)")
  initialize_distributed(*settings)


def _enable_x64(float32: bool) -> None:
  import jax
  jax.config.update("jax_enable_x64", not float32)


@exits_on_signals("fedkrr", {"search": "the claims searched before it keep their files"},
                  default="nothing was written")
def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ["demo"]:
    return _demo_moved(argv[1:])
  parser = _parser()
  args = parser.parse_args(argv)
  avoid_cpu_eigh_deadlock()   # XLA's flags before its backend starts (connecting starts it)
  try:
    _connect(args)   # before any JAX computation
  except ValueError as e:
    print(f"fedkrr: error: {e}", file=sys.stderr)
    return 2
  _enable_x64(getattr(args, "float32", False))
  from fedkrr._src import commands  # deferred: JAX and the mathematics, once a command runs

  handlers = {"run": commands.run_command, "verify": commands.verify_command,
              "toy": commands.toy_command, "search": commands.search_command}
  try:
    code = handlers[args.command](args)
  except commands.ERRORS as e:
    message = " ".join(str(e).split())
    if printing_failed(e):   # a print to a full disk or a closed pipe
      message = f"cannot write the standard output ({getattr(e, 'strerror', e)})"
    print(f"fedkrr: error: {message}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("fedkrr: interrupted (nothing was written)", file=sys.stderr)
    return 130
  except Exception as e:   # XLA's out-of-memory and other runtime errors: one line, no traceback
    if "RESOURCE_EXHAUSTED" not in str(e) and "out of memory" not in str(e).lower():
      raise
    print(f"fedkrr: error: out of memory ({' '.join(str(e).split())[:200]}); the estimate that "
          f"let it start was too low: keep fewer rounds (--every K) or use fewer points",
          file=sys.stderr)
    return 2
  failure = stdout_failure()   # `> /dev/full`: said, naming the standard output
  if failure is not None:
    print(f"fedkrr: error: cannot write the standard output ({failure})", file=sys.stderr)
    return 2
  return code


if __name__ == "__main__":
  sys.exit(main())

