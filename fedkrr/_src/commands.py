"""What the ``fedkrr`` commands do once their flags are parsed: check, compute, print, write.

The parsers and ``main`` are in ``cli`` (which imports this module only when a
command runs, so that ``fedkrr --help`` starts at once). ``fedkrr run`` is the
library's :func:`fedkrr.run` on a problem file, with a memory plan whose hints
name the command's flags.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src import runner
from fedkrr._src.io.files import atomic_savez
from fedkrr._src.io.files import check_output
from fedkrr._src.kernels import KernelError
from fedkrr._src.names import BASELINES
from fedkrr._src.names import PROTOCOLS
from fedkrr._src.names import ProtocolParams
from fedkrr._src.names import protocol_info
from fedkrr._src.paper import search
from fedkrr._src.paper import toy
from fedkrr._src.paper import verify
from fedkrr._src.platform.memory import SizeError
from fedkrr._src.platform.memory import check_memory
from fedkrr._src.platform.memory import format_bytes
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import ProblemError
from fedkrr._src.problem_io import load_problem
from fedkrr._src.scale.matfree import ConvergenceError

# The errors a command reports as one line (exit status 2).
ERRORS = (ProblemError, KernelError, ValueError, OSError, ConvergenceError)


def toy_command(args: argparse.Namespace) -> int:
  """``fedkrr toy``: the paper's toy experiment (Fig. 1-3) into ``--out``."""
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


def verify_command(args: argparse.Namespace) -> int:
  """``fedkrr verify``: the paper's statements and the identities, checked on seeded instances."""
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


def search_command(args: argparse.Namespace) -> int:
  """``fedkrr search``: counterexamples to the paper's claims, searched for a time budget."""
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


def _check_out(out: str, problem: str) -> None:
  """--out must be a file name in a writable directory (created if missing), not the input."""
  if out.endswith(os.sep):
    raise ValueError(f"--out: expected a file name, got the directory {out!r}")
  check_output(out, "--out", inputs=[problem], create=False)


def _check_plan_fits(problem: FederatedProblem, plan: runner.RunPlan, float32: bool) -> None:
  """Raises ``SizeError`` if ``plan``'s path does not fit in memory, with only the changes
  (flags) that would fit; the plan's own estimate (``runner.plan_run``), others only
  for the hint."""
  method, need, limit, kept = plan.method, plan.need, plan.available, plan.kept
  baseline = plan.row is None
  if method == "matfree" and need["matfree"] is None:
    return   # refused with its own reason (c = 0, --limit) by the caller or the library
  here = need[method] or 0
  if here <= limit:
    return

  def estimate(kept: int, itemsize: int) -> int:
    return runner.method_bytes(problem, plan.protocol, plan.n_eval, kept, itemsize,
                               plan.limit)[method] or 0

  options = []
  if not baseline and kept > 1:
    one = estimate(1, plan.itemsize)
    slope = estimate(2, plan.itemsize) - one
    if one <= limit and slope > 0:
      most = 1 + (limit - one) // slope
      if most < kept:
        every = -(-(plan.rounds or 0) // most)
        if plan.row is not None and plan.row.one_fit_per_round:   # a multiple of the agents
          every = -(-every // problem.num_agents) * problem.num_agents
        options.append(f"keep at most {most} rounds (--every {every}, or fewer --rounds)")
  if not float32 and estimate(kept, 4) <= limit:
    options.append("--float32")
  for other in ("closed-form", "matfree"):
    size = need[other]
    if other != method and size is not None and size <= limit:
      options.append(f"--method {other} (about {format_bytes(size)})")
  hint = ("; ".join(options) if options else
          "nothing the command offers fits: use a machine with more memory, or fewer points")
  what = (f"{plan.protocol} by {method} on {problem.num_points} points"
          + ("" if baseline else f" with {plan.rounds} rounds ({kept} kept)")
          + f" and {plan.n_eval} evaluation points")
  raise SizeError(f"{what} needs about {format_bytes(here)}, more than the "
                  f"{format_bytes(limit)} this machine has free; {hint}")


def _refuse_unless_read(parameter: str, protocol: str, lacks: str, verb: str,
                        given: str) -> None:
  """A ``ValueError`` naming ``--PARAMETER`` unless ``protocol`` reads that parameter,
  with the protocols that do."""
  if protocol in BASELINES or parameter not in protocol_info(protocol).parameters:
    takes = ", ".join(p for p in PROTOCOLS if parameter in protocol_info(p).parameters)
    raise ValueError(f"--{parameter}: protocol {protocol} {lacks} (only {takes} {verb}), got "
                     f"{given}; leave it out")


def _parse_weights(text: str | None, protocol: str) -> tuple[float, ...] | None:
  """``--weights W1,W2,...`` as numbers (``None`` if not given); their values are the
  library's to check (``fedkrr.ProtocolParams(weights=...)``)."""
  if text is None:
    return None
  _refuse_unless_read("weights", protocol, "takes no weights", "does", repr(text))
  try:
    return tuple(float(w) for w in text.split(","))
  except ValueError:
    raise ValueError(f"--weights: expected numbers separated by commas (one per agent), "
                     f"got {text!r}") from None


def run_command(args: argparse.Namespace) -> int:
  """``fedkrr run``: :func:`fedkrr.run` on ``--problem``, its predictions into ``--out``."""
  baseline = args.protocol in BASELINES
  _check_out(args.out, args.problem)
  if args.start != 0:
    _refuse_unless_read("start", args.protocol, "has no starting agent", "takes --start",
                        str(args.start))
  weights = _parse_weights(args.weights, args.protocol)
  dtype = jnp.float32 if args.float32 else jnp.float64
  problem, x_eval = load_problem(args.problem, dtype=dtype)
  try:
    plan = runner.plan_run(problem, args.protocol, args.rounds, x_eval.shape[0],
                           method=args.method, every=args.every, limit=args.limit,
                           params=ProtocolParams(start=args.start, weights=weights))
  except ProblemError:   # --method matfree with c = 0: the problem's own message
    raise
  except ValueError as e:   # the library names its argument; the flag is that name
    raise ValueError(f"--{e}") from None
  if args.method == "auto":
    print(f"fedkrr: --method auto: {plan.method}", file=sys.stderr)
  _check_plan_fits(problem, plan, args.float32)   # at least runner.check_fits's estimate
  result = runner.execute(problem, plan, x_eval, progress=args.progress)
  for note in result.notes:
    print(f"fedkrr: note: {note}", file=sys.stderr)
  out: dict[str, np.ndarray] = {}
  if result.spectral_radius is not None:
    out["spectral_radius"] = result.spectral_radius
  if result.limit is not None:
    out["limit"] = result.limit
  out["predictions"] = result.predictions
  if jax.process_index() > 0:   # --method sharded across processes: process 0 writes
    print(f"process {jax.process_index()}: predictions {out['predictions'].shape} computed; "
          f"process 0 writes {args.out}")
    return 0
  atomic_savez(args.out, **out)
  print(f"wrote {args.out}: predictions {out['predictions'].shape}"
        + (f" (rounds 0, {args.every}, {2 * args.every}, ...)" if args.every > 1 and not baseline
           else "")
        + (", limit" if "limit" in out else ""))
  return 0
