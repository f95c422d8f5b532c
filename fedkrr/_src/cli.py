"""The ``fedkrr`` command line: ``run`` on problem files, ``verify``, ``search``, ``toy``.

``fedkrr demo`` only points to ``neural demo``: the main job trains networks, and fedkrr
never imports the network package.

The entry point enables float64 (theory needs it) unless ``--float32`` is given;
importing the library never does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import os
import sys
import textwrap

import numpy as np

from fedkrr._src.files import atomic_savez
from fedkrr._src.files import check_output
from fedkrr._src.interrupts import exits_on_signals
from fedkrr._src.version import installed_version

METHODS = ("closed-form", "simulate", "matfree", "auto")


def _parser() -> argparse.ArgumentParser:
  from fedkrr._src.protocols import BASELINES
  from fedkrr._src.protocols import PROTOCOLS
  from fedkrr._src.search_claims import BY_ID
  from fedkrr._src.verify import CHECKS

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
  run.add_argument("--protocol", required=True, choices=PROTOCOLS + BASELINES)
  run.add_argument("--rounds", type=int, metavar="T",
                   help="number of rounds (required except for central and local)")
  run.add_argument("--start", type=int, default=0, metavar="S",
                   help="starting agent of AKD (default 0)")
  run.add_argument("--method", choices=METHODS, default="closed-form",
                   help="closed form (default), literal round-by-round simulation, the "
                        "matrix-free path (rounds by conjugate gradients, no N x N matrix; "
                        "ridge > 0), or auto: closed form if it fits in half the memory, "
                        "else matrix-free (fedkrr.choose_path)")
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
                  "Time: about 350 s of CPU time with the default two seeds (measured on a "
                  "2-core machine, where beside other work, at load average 14-19, it took "
                  "34 minutes of wall time); --seeds 1 about half of that, --only PREFIX a "
                  "few checks in seconds.")
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


def _toy(args: argparse.Namespace) -> int:
  import jax

  from fedkrr._src import toy
  from fedkrr._src.memory import check_memory

  if args.rounds < 1:
    raise ValueError(f"--rounds: expected an integer >= 1, got {args.rounds}")
  check_output(args.out, "--out", directory=True)
  # Per round and panel: about a dozen vectors of the n points (coefficients, predictions).
  config = toy.ToyConfig(rounds=args.rounds)
  check_memory(args.rounds * 16 * config.num_points * 8,
               f"the toy experiment with {args.rounds} rounds",
               "use fewer --rounds (the paper: 250)")
  result = toy.toy_experiment(jax.random.key(args.seed), config, progress=True)
  paths = toy.write_toy(result, args.out, seed=args.seed)
  print(f"wrote {', '.join(paths.values())}")
  for line in toy.toy_summary(result):
    print(line)
  return 0


def _verify(args: argparse.Namespace) -> int:
  from fedkrr._src import verify

  if args.seeds < 1:
    raise ValueError(f"--seeds: expected an integer >= 1, got {args.seeds}")
  if args.json:
    check_output(args.json, "--json")
  rows = verify.run_checks(seeds=tuple(range(args.seeds)), only=args.only, progress=True)
  print(verify.checks_table(rows))
  if args.json:
    verify.write_checks(rows, args.json)
    print(f"wrote {args.json}")
  findings = [r for r in rows if r.kind == "claim" and not r.holds]
  failed = verify.failed_checks(rows)
  print(f"{len(rows)} checks: {len(rows) - len(findings) - len(failed)} hold, "
        f"{len(findings)} paper claims do not hold as stated (findings), "
        f"{len(failed)} identities failed")
  return 1 if failed else 0


def _search(args: argparse.Namespace) -> int:
  from fedkrr._src import search

  check_output(args.out, "--out", directory=True)
  if args.max_instances is not None and args.max_instances < 1:
    raise ValueError(f"--max-instances: expected an integer >= 1, got {args.max_instances}")
  if not args.budget_seconds > 0:
    raise ValueError(f"--budget-seconds: expected a number of seconds > 0, "
                     f"got {args.budget_seconds}")
  if args.all:
    results = search.search_all(args.budget_seconds, args.seed, args.out, args.progress,
                                args.max_instances)
  else:
    if args.claim not in search.BY_ID:
      raise ValueError(f"--claim: unknown id {args.claim!r}; expected one of "
                       f"{', '.join(search.BY_ID)}")
    results = [search.search_claim(args.claim, args.budget_seconds, args.seed, args.out,
                                   args.progress, args.max_instances)]
  print(search.findings_table(results))
  broken = [r for r in results if not r.holds]
  print(f"{len(results)} searched: {len(results) - len(broken)} held on every instance "
        f"searched, {len(broken)} broken (counterexamples in {args.out})")
  return 0


def _demo_moved(rest: Sequence[str]) -> int:
  print("fedkrr: error: the main job is `neural demo` now, with the same flags: "
        f"neural demo {' '.join(rest) or '--out DIR'} (it trains networks, and fedkrr "
        "never imports them)", file=sys.stderr)
  return 2


def _enable_x64(float32: bool) -> None:
  from fedkrr._src.xla_env import avoid_cpu_eigh_deadlock
  avoid_cpu_eigh_deadlock()
  import jax
  jax.config.update("jax_enable_x64", not float32)


def _check_out(out: str, problem: str) -> None:
  """--out must be a file name in a writable directory (created if missing), not the input."""
  if out.endswith(os.sep):
    raise ValueError(f"--out: expected a file name, got the directory {out!r}")
  check_output(out, "--out", inputs=[problem], create=False)


def _check_finite(problem, preds: np.ndarray, what: str) -> None:
  """Non-finite results are an error that says where they start and the likely cause."""
  bad = ~np.isfinite(preds)
  if not bad.any():
    return
  first = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1))) if preds.ndim > 1 else 0
  causes = []
  for a, x in enumerate(problem.xs):
    gram = np.asarray(problem.gram(a, x, x))
    if not np.all(np.isfinite(gram)):
      causes.append(f"kernel_{a} ({problem.kernels[a].to_dict().get('name', '?')}) is not finite "
                    f"on x_{a} (largest |x| = {float(np.max(np.abs(np.asarray(x)))):.3g}): "
                    f"rescale the inputs or change the kernel's parameters")
  if not causes:
    biggest = max(float(np.max(np.abs(np.asarray(y)))) for y in problem.ys)
    causes.append(f"the values overflow {np.asarray(preds).dtype} (largest |y| = {biggest:.3g}); "
                  f"rescale the labels or drop --float32")
  raise ValueError(f"{what} are not finite (NaN or inf) from round {first} on: {causes[0]}")


def _estimates(problem, args: argparse.Namespace, n_eval: int, kept: int, itemsize: int
               ) -> dict[str, int | None]:
  """The peak memory each method would need for this run (``None``: it cannot run it)."""
  from fedkrr._src import memory
  from fedkrr._src import protocols

  baseline = args.protocol in protocols.BASELINES
  sizes, n = problem.sizes, problem.num_points
  outputs = int(np.prod(problem.ys[0].shape[1:], dtype=np.int64))
  dim = int(problem.xs[0].shape[1])
  trajectory = memory.trajectory_bytes(args.protocol, n, problem.num_agents, outputs, n_eval,
                                       kept, itemsize) if not baseline else 0
  if baseline:
    exact = memory.baseline_bytes(args.protocol, sizes, outputs, n_eval, itemsize)
  else:
    exact = memory.exact_bytes(args.protocol, sizes, outputs, n_eval, kept, itemsize)
    if args.limit:   # one solve with the N x N recurrence matrix
      exact += 3 * n * n * itemsize
  matfree = None
  if float(problem.ridge) > 0 and (baseline or not args.limit):
    matfree = memory.matfree_bytes(args.protocol, sizes, dim, outputs, n_eval, kept, itemsize)
  simulate = None if baseline else 2 * max(sizes) ** 2 * itemsize + trajectory
  return {"closed-form": exact, "matfree": matfree, "simulate": simulate}


def _plan_memory(problem, args: argparse.Namespace, n_eval: int, float32: bool) -> str:
  """The method for ``args.method`` ("auto": fedkrr.choose_path's rule), after a check that
  it fits in memory; a ``SizeError`` with only the changes that would fit otherwise."""
  from fedkrr._src import protocols
  from fedkrr._src.memory import SizeError
  from fedkrr._src.memory import format_bytes
  from fedkrr._src.memory import memory_limit

  baseline = args.protocol in protocols.BASELINES
  itemsize = 4 if float32 else 8
  kept = 1 if baseline else -(-args.rounds // args.every)
  need = _estimates(problem, args, n_eval, kept, itemsize)
  limit = memory_limit()
  method = args.method
  if method == "auto":
    exact = need["closed-form"] or 0
    method = "matfree" if need["matfree"] is not None and exact > limit // 2 else "closed-form"
    print(f"fedkrr: --method auto: {method}", file=sys.stderr)
  if method == "matfree" and need["matfree"] is None:
    return method   # refused with its own reason (c = 0, --limit) by the caller or the library
  here = need[method] or 0
  if here <= limit:
    return method
  options = []
  if not baseline and kept > 1:
    one = _estimates(problem, args, n_eval, 1, itemsize)[method] or 0
    slope = ((_estimates(problem, args, n_eval, 2, itemsize)[method] or 0) - one)
    if one <= limit and slope > 0:
      most = 1 + (limit - one) // slope
      if most < kept:
        every = -(-args.rounds // most)
        if args.protocol == "akd":   # a multiple of the number of agents
          every = -(-every // problem.num_agents) * problem.num_agents
        options.append(f"keep at most {most} rounds (--every {every}, or fewer --rounds)")
  if not float32 and (_estimates(problem, args, n_eval, kept, 4)[method] or 0) <= limit:
    options.append("--float32")
  for other in ("closed-form", "matfree"):
    size = need[other]
    if other != method and size is not None and size <= limit:
      options.append(f"--method {other} (about {format_bytes(size)})")
  hint = ("; ".join(options) if options else
          "nothing the command offers fits: use a machine with more memory, or fewer points")
  what = (f"{args.protocol} by {method} on {problem.num_points} points"
          + ("" if baseline else f" with {args.rounds} rounds ({kept} kept)")
          + f" and {n_eval} evaluation points")
  raise SizeError(f"{what} needs about {format_bytes(here)}, more than the "
                  f"{format_bytes(limit)} this machine has free; {hint}")


def _run(args: argparse.Namespace) -> int:
  import jax.numpy as jnp

  from fedkrr._src import closed_form
  from fedkrr._src import matfree
  from fedkrr._src import protocols
  from fedkrr._src.learner import krr_learners
  from fedkrr._src.problem_io import load_problem

  baseline = args.protocol in protocols.BASELINES
  if not baseline and (args.rounds is None or args.rounds < 1):
    raise ValueError(f"--rounds: protocol {args.protocol} needs a number of rounds >= 1")
  _check_out(args.out, args.problem)
  dtype = jnp.float32 if args.float32 else jnp.float64
  problem, x_eval = load_problem(args.problem, dtype=dtype)
  if not 0 <= args.start < problem.num_agents:
    raise ValueError(f"--start: expected an agent index in 0..{problem.num_agents - 1}, "
                     f"got {args.start}")
  if not baseline:
    try:
      closed_form.check_every(args.every, args.protocol, problem.num_agents)
    except ValueError as e:
      raise ValueError(f"--{e}") from None
  if args.method == "matfree" and args.limit and not baseline:
    raise ValueError("--limit: the limit is one solve with the N x N recurrence matrix, which "
                     "the matrix-free path never forms; drop --limit, or use --method "
                     "closed-form")
  if args.method == "matfree":
    matfree.check_matfree_problem(problem)   # c > 0, before the estimate
  method = _plan_memory(problem, args, x_eval.shape[0], args.float32)
  out: dict[str, np.ndarray] = {}
  if baseline:
    if method == "closed-form":
      fn = closed_form.central if args.protocol == "central" else closed_form.local
      preds = fn(problem, x_eval)
    else:
      fit = protocols.central_models if args.protocol == "central" else protocols.local_models
      learners = matfree.matfree_learners(problem) if method == "matfree" else krr_learners(
          problem)
      models = fit(learners, problem.xs, problem.ys)
      preds = jnp.stack([m.predict(x_eval) for m in models])
    if args.limit:
      print(f"fedkrr: note: {args.protocol} has no rounds, so no limit was written",
            file=sys.stderr)
  else:
    if method == "closed-form":
      preds = closed_form.trajectory(problem, args.protocol, args.rounds, x_eval,
                                     start=args.start, every=args.every)
    elif method == "matfree":
      preds = matfree.matfree_trajectory(problem, args.protocol, args.rounds, x_eval,
                                         start=args.start, every=args.every,
                                         progress=args.progress)
    else:
      preds = protocols.simulate(args.protocol, krr_learners(problem), problem.xs, problem.ys,
                                 args.rounds, x_eval, start=args.start, progress=args.progress,
                                 every=args.every)
    if args.limit:
      lim = closed_form.limit(problem, args.protocol, x_eval, start=args.start)
      out["spectral_radius"] = np.asarray(lim.spectral_radius)
      if lim.converges:
        out["limit"] = np.asarray(lim.predictions)
        _check_finite(problem, out["limit"][None], "the limit's predictions")
      else:
        print(f"fedkrr: note: {args.protocol} does not converge (spectral radius "
              f"{float(lim.spectral_radius):.6g} >= 1), so no limit was written", file=sys.stderr)
  out["predictions"] = np.asarray(preds)
  _check_finite(problem, out["predictions"] if not baseline else out["predictions"][None],
                "the predictions")
  atomic_savez(args.out, **out)
  print(f"wrote {args.out}: predictions {out['predictions'].shape}"
        + (f" (rounds 0, {args.every}, {2 * args.every}, ...)" if args.every > 1 and not baseline
           else "")
        + (", limit" if "limit" in out else ""))
  return 0


@exits_on_signals("fedkrr", {"search": "the claims searched before it keep their files"},
                  default="nothing was written")
def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ["demo"]:
    return _demo_moved(argv[1:])
  parser = _parser()
  args = parser.parse_args(argv)
  _enable_x64(getattr(args, "float32", False))
  from fedkrr._src.kernels import KernelError
  from fedkrr._src.matfree import ConvergenceError
  from fedkrr._src.problem import ProblemError
  try:
    if args.command == "run":
      return _run(args)
    if args.command == "verify":
      return _verify(args)
    if args.command == "toy":
      return _toy(args)
    return _search(args)
  except (ProblemError, KernelError, ValueError, OSError, ConvergenceError) as e:
    print(f"fedkrr: error: {' '.join(str(e).split())}", file=sys.stderr)
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


if __name__ == "__main__":
  sys.exit(main())

