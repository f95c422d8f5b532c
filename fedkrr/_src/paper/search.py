"""Searching for instances where the paper's statements break (``fedkrr search``).

For one statement (a :class:`~fedkrr._src.paper.search_claims.ClaimSearch`) the
search repeats, within its time budget:

1. draw a family of instances from the statement's space (sizes, dimension,
   kernels, c > 0 or c = 0), and compile its residual once, vmapped;
2. draw batches of instances of that family and evaluate them in one call;
3. from the family's worst instance, climb the residual by normalised gradient
   ascent (``jax.value_and_grad`` in float64, with a step that grows on
   success and halves on failure) in the inputs, labels, evaluation points,
   log-bandwidths and log-ridge.

When an instance's residual exceeds the tolerance, the search shrinks it (a
point, an agent or a dimension fewer while it stays a clear violation),
replays it by the statement's independent route (literal rounds through
:func:`fedkrr.simulate`) and, if the replay confirms it, saves it as a problem
file in the ``fedkrr run --problem`` layout. A violation the replay does not
confirm is counted as rejected, and the search goes on.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedkrr._src.io.files import atomic_write
from fedkrr._src.io.files import savez_bytes
from fedkrr._src.io.files import write_files
from fedkrr._src.paper import search_space as space_lib
from fedkrr._src.paper.search_claims import BY_ID
from fedkrr._src.paper.search_claims import SEARCHES
from fedkrr._src.paper.search_claims import ClaimSearch
from fedkrr._src.paper.shipped_findings import FINDINGS_DIR
from fedkrr._src.paper.shipped_findings import SearchResult
from fedkrr._src.paper.shipped_findings import findings_dir  # noqa: F401 (re-exported)
from fedkrr._src.paper.shipped_findings import findings_table  # noqa: F401 (re-exported)
from fedkrr._src.paper.shipped_findings import known_findings  # noqa: F401 (re-exported)
from fedkrr._src.paper.shipped_findings import search_note  # noqa: F401 (re-exported)
from fedkrr._src.paper.verify import CHECKS
from fedkrr._src.problem_io import load_problem
from fedkrr._src.problem_io import problem_arrays

BATCH = 32               # instances per vmapped call
BATCHES_PER_FAMILY = 4   # calls per compiled family before the gradient ascent
ASCENT_STEPS = 25
SHRINK_SECONDS = 60.0    # shrinking and replaying may take this long beyond the budget


_COMPILED: dict[tuple[str, space_lib.Family], tuple[Any, Any]] = {}
MAX_COMPILED = 32   # compiled families kept; more would exhaust the CPU's code memory


def _clear_compiled() -> None:
  _COMPILED.clear()
  jax.clear_caches()


def _compiled(spec: ClaimSearch, family: space_lib.Family):
  """The family's vmapped residual and its single-instance value-and-gradient, jitted once."""
  key = (spec.id, family)
  if key not in _COMPILED:
    if len(_COMPILED) >= MAX_COMPILED:
      _clear_compiled()
    def one(params):
      problem = family.problem(params)
      value = spec.residual(problem, params["x_eval"])
      ok = jnp.isfinite(value)
      fixed = jax.lax.stop_gradient(problem)   # conditions are tests, not directions to climb
      if family.zero_ridge:
        ok = ok & space_lib.conditioned(family, fixed, spec.space.well_conditioned)
      if spec.valid is not None:
        ok = ok & spec.valid(fixed)
      return jnp.where(ok, value, -jnp.inf)
    _COMPILED[key] = (jax.jit(jax.vmap(one)), jax.jit(jax.value_and_grad(one)))
  return _COMPILED[key]


def _value(spec: ClaimSearch, family: space_lib.Family, params) -> float:
  batched = jax.tree_util.tree_map(lambda v: np.asarray(v)[None], params)
  return float(_compiled(spec, family)[0](batched)[0])


def _ascend(grad_fn, params, value: float, steps: int, deadline: float):
  """Normalised gradient ascent with an adaptive step; returns (params, value, evaluations)."""
  lr, evaluations = 0.05, 0
  v, g = grad_fn(params)
  for _ in range(steps):
    if time.monotonic() > deadline:
      break
    leaves = jax.tree_util.tree_leaves(g)
    norm = math.sqrt(sum(float(jnp.sum(jnp.square(leaf))) for leaf in leaves))
    if not math.isfinite(norm) or norm == 0.0:
      break
    step = lr / norm
    cand = jax.tree_util.tree_map(lambda p, d, step=step: np.asarray(p) + step * np.asarray(d),
                                  params, g)
    cv, cg = grad_fn(cand)
    evaluations += 1
    if math.isfinite(float(cv)) and float(cv) > value:
      params, value, g, lr = cand, float(cv), cg, min(lr * 1.5, 1.0)
    else:
      lr *= 0.5
      if lr < 1e-6:
        break
  return params, value, evaluations


def _shrink(spec: ClaimSearch, family, params, value: float, deadline: float):
  """Removes points, agents and dimensions while the instance stays a clear violation."""
  need = spec.tolerance + 0.25 * (value - spec.tolerance)
  changed = True
  while changed and time.monotonic() < deadline:
    changed = False
    for fam, par in space_lib.shrink_candidates(family, params, spec.space):
      if time.monotonic() > deadline:
        break
      v = _value(spec, fam, par)
      if math.isfinite(v) and v >= need:
        family, params, value, changed = fam, par, v, True
        break
  return family, params, value


def confirms(value: float, replayed: float, tolerance: float) -> bool:
  """A violation stands if the independent route also exceeds the tolerance, and the two
  routes agree to a tenth of the violation's margin ``value - tolerance``.

  Routes that disagree by more are dominated by rounding (an ill-conditioned
  instance, or a spectral radius within rounding of 1), not by the statement.
  """
  return (math.isfinite(replayed) and replayed > tolerance
          and abs(replayed - value) <= 0.1 * (value - tolerance))


def _kernel_text(kernel) -> str:
  spec = kernel.to_dict()
  name = spec.pop("name")
  args = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in spec.items() if v is not None and k != "parametrization")
  return f"{name}({args})" if args else name


def describe(family: space_lib.Family, params, value: float, spec: ClaimSearch) -> str:
  """One line: the instance's kernels, ridge, sizes and the violating number."""
  problem = family.problem(params)
  kernels = [_kernel_text(k) for k in problem.kernels[:len(family.kernels)]]
  kernel_text = (f"shared {kernels[0]}" if family.shared else " / ".join(kernels))
  ridge = float(problem.ridge)
  sizes = "x".join(str(n) for n in family.sizes)
  return (f"{kernel_text}, c = {ridge:.3g}, M = {family.num_agents}, points {sizes}"
          f"{' (same data)' if family.duplicate else ''}, d = {family.dim}: "
          f"{spec.measure} = {value:.6g} (tolerance {spec.tolerance:.3g})")


def _check_budget(budget_seconds: float, max_instances: int | None) -> None:
  if not (isinstance(budget_seconds, (int, float)) and math.isfinite(budget_seconds)
          and budget_seconds > 0):
    raise ValueError(f"budget_seconds: expected a number of seconds > 0, got {budget_seconds!r}")
  if max_instances is not None and max_instances < 1:
    raise ValueError(f"max_instances: expected an integer >= 1, got {max_instances!r}")


def search_claim(claim: str, budget_seconds: float, seed: int = 0,
                 out: str | os.PathLike | None = None, progress: bool = False,
                 max_instances: int | None = None) -> SearchResult:
  """Searches one statement for a counterexample (module docstring).

  Needs float64 (``jax.config.update("jax_enable_x64", True)``). From a script
  on a small CPU, call :func:`fedkrr.avoid_cpu_eigh_deadlock` first, as for any
  fedkrr computation: the search's many small eigen-solves otherwise can hang.

  Args:
    claim: a ``fedkrr verify`` id with a search (:func:`search_ids` lists the
      claims; the identities ``prop4-rate-cos2`` and ``prop5-recurrence`` can be
      searched too, as controls).
    budget_seconds: the time for the search; shrinking and replaying a
      counterexample take up to ``SHRINK_SECONDS`` more. One family of instances is
      searched however short it is.
    seed: the seed of the random draws.
    out: a directory: writes ``out/ID.json`` and, when a counterexample is
      found, ``out/ID.npz`` (a problem file for ``fedkrr run --problem``).
    progress: show a progress bar with the worst residual so far.
    max_instances: also stop after this many instances (a budget that does
      not depend on the machine's speed).

  Returns:
    The :class:`SearchResult`.

  Raises:
    ValueError: an unknown claim, a budget that is not > 0, or float64 disabled.
  """
  if claim not in BY_ID:
    raise ValueError(f"claim: unknown id {claim!r}; expected one of {', '.join(BY_ID)}")
  _check_budget(budget_seconds, max_instances)
  spec = BY_ID[claim]
  if not jax.config.read("jax_enable_x64"):
    raise ValueError("fedkrr search needs float64: call "
                     "jax.config.update('jax_enable_x64', True) first")
  check = next(c for c in CHECKS if c.id == spec.id)
  _clear_compiled()
  start = time.monotonic()
  deadline = start + budget_seconds
  rng = np.random.default_rng(seed)
  searched, rejected, worst = 0, 0, -math.inf
  found = None
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=round(budget_seconds), desc=spec.id, unit="s",
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total}s {postfix}")

  def tick():
    if bar is not None:
      bar.n = min(bar.total, time.monotonic() - start)
      bar.set_postfix_str(f"searched {searched}, worst residual {worst:.4g} "
                          f"(tolerance {spec.tolerance:.3g})")

  # at least one family, however short the budget: a result always rests on instances
  # (a budget of 1e-6 s once reported "holds" after none, its worst residual -inf)
  first = True
  while first or (time.monotonic() < deadline and found is None
                  and (max_instances is None or searched < max_instances)):
    first = False
    family, kernel_values = space_lib.draw_family(spec.space, rng)
    batch_fn, grad_fn = _compiled(spec, family)
    best_v, best_p = -math.inf, None
    for _ in range(BATCHES_PER_FAMILY):
      params = space_lib.draw_params(family, kernel_values, rng, BATCH)
      values = np.asarray(batch_fn(params))
      valid = np.isfinite(values)
      searched += int(valid.sum())
      if valid.any():
        i = int(np.argmax(np.where(valid, values, -np.inf)))
        if values[i] > best_v:
          best_v, best_p = float(values[i]), space_lib.take(params, i)
    if best_p is not None and best_v <= spec.tolerance:
      best_p, best_v, steps = _ascend(grad_fn, best_p, best_v, ASCENT_STEPS, deadline)
      searched += steps
    if best_p is not None and best_v > spec.tolerance:
      shrink_deadline = time.monotonic() + SHRINK_SECONDS
      fam, par, value = _shrink(spec, family, best_p, best_v, shrink_deadline)
      problem = fam.problem(par)
      replayed = float(spec.replay(problem, np.asarray(par["x_eval"])))
      if confirms(value, replayed, spec.tolerance):
        found = (fam, par, value, replayed)
        worst = max(worst, best_v, value)
      else:
        rejected += 1   # rounding, not the statement: the worst residual leaves it out
    else:
      worst = max(worst, best_v)
    tick()
  if bar is not None:
    tick()
    bar.close()

  name, description, value, replayed = None, "", None, None
  files: dict[str | os.PathLike, bytes | str] = {}
  if found is not None:
    fam, par, value, replayed = found
    description = (describe(fam, par, value, spec) + f"; replayed by {spec.route}: "
                   f"{replayed:.6g}")
    if out is not None:
      name = f"{spec.id}.npz"
      files[os.path.join(out, name)] = savez_bytes(**problem_arrays(fam.problem(par),
                                                                    par["x_eval"]))
  else:
    description = (f"no violation in {searched} instances ({spec.space.agents} "
                   f"agents, kernels {spec.space.kernels} from {', '.join(spec.space.kinds)}, "
                   f"c {spec.space.ridge}, data {spec.space.data}); worst {spec.measure} = "
                   f"{worst:.6g} (tolerance {spec.tolerance:.3g})"
                   + (f"; {rejected} violation(s) rejected: the independent route disagreed "
                      f"(rounding on an ill-conditioned instance)" if rejected else ""))
  command = None
  if found is not None and spec.command:
    command = f"fedkrr run --problem {spec.id}.npz {spec.command} --out {spec.id}_replay.npz"
  result = SearchResult(
      claim=spec.id, statement=check.statement, source=check.source, kind=check.kind,
      measure=spec.measure, tolerance=spec.tolerance, holds=found is None, searched=searched,
      worst_residual=float(worst), counterexample=name, description=description,
      counterexample_residual=value, replay_residual=replayed, replay_route=spec.route,
      replay_command=command, rejected=rejected, space=spec.space.describe(), seed=seed,
      budget_seconds=float(budget_seconds), elapsed_seconds=round(time.monotonic() - start, 2))
  if out is not None:   # the counterexample and its description: one set
    os.makedirs(out, exist_ok=True)
    files[os.path.join(out, f"{spec.id}.json")] = json.dumps(result.as_dict(), indent=1)
    write_files(files)
  return result


def search_ids() -> tuple[str, ...]:
  """The ids of the paper's claims that have a search (``fedkrr search --all`` runs these)."""
  kinds = {c.id: c.kind for c in CHECKS}
  return tuple(s.id for s in SEARCHES if kinds[s.id] == "claim")


def search_all(budget_seconds: float, seed: int = 0, out: str | os.PathLike | None = None,
               progress: bool = False, max_instances: int | None = None) -> list[SearchResult]:
  """:func:`search_claim` over every claim, the budget split evenly.

  Also writes ``out/summary.json`` (every result, the layout :func:`known_findings` reads).
  """
  ids = search_ids()
  _check_budget(budget_seconds, max_instances)
  results = [search_claim(i, budget_seconds / len(ids), seed, out, progress, max_instances)
             for i in ids]
  if out is not None:
    atomic_write(os.path.join(out, "summary.json"),
                 json.dumps([r.as_dict() for r in results], indent=1))
  return results


def recheck_finding(result: SearchResult) -> float:
  """A shipped counterexample's residual, recomputed now from its problem file.

  Raises:
    ValueError: ``result`` has no counterexample.
  """
  if result.counterexample is None:
    raise ValueError(f"result: {result.claim} has no counterexample to recheck")
  problem, x_eval = load_problem(FINDINGS_DIR / result.counterexample)
  return float(BY_ID[result.claim].residual(problem, x_eval))
