"""The main job's closed forms (``neural demo``): every protocol, closed form vs literal rounds."""

from __future__ import annotations

import json
import os
import time

import numpy as np

from fedkrr._src import closed_form
from fedkrr._src import kernels as kernels_lib
from fedkrr._src import protocols
from fedkrr._src.io.files import atomic_savefig
from fedkrr._src.io.files import atomic_savez
from fedkrr._src.io.files import atomic_write
from fedkrr._src.io.synthetic import synthetic_regression
from fedkrr._src.learner import krr_learners
from fedkrr._src.metrics import mean_squared_error as _mse
from fedkrr._src.names import PROTOCOLS
from fedkrr._src.problem import make_problem
from fedkrr._src.problem_io import save_problem


def closed_form_demo(out_dir: str, rounds: int = 40, seed: int = 0) -> int:
  """Every protocol on an embedded synthetic problem: closed form against the literal rounds.

  Two agents (120 and 80 points of :func:`fedkrr.synthetic_regression`, RBF and
  Laplace kernels, ridge 1e-3). Prints a line per protocol and the summary table.

  Args:
    out_dir: the output directory (created if missing). Receives problem.npz,
      trajectory_<protocol>.npz (``closed_form`` and ``simulated``, every round's
      predictions at the test points), summary.json, summary.md and test_mse.png.
    rounds: rounds per protocol (at least 1).
    seed: the seed of the synthetic problem.

  Returns:
    0 (the exit status of the command line).

  Raises:
    ValueError: ``rounds`` is below 1.
  """
  if rounds < 1:
    raise ValueError(f"--rounds: expected an integer >= 1, got {rounds}")
  os.makedirs(out_dir, exist_ok=True)
  data = synthetic_regression(seed, sizes=(120, 80), dim=2, heterogeneity=2.0)
  kernels = (kernels_lib.RBF(gamma=0.5), kernels_lib.Laplace(gamma=0.7))
  problem = make_problem(data.xs, data.ys, kernels, ridge=1e-3)
  save_problem(os.path.join(out_dir, "problem.npz"), problem, data.x_test)
  print(f"problem: {problem.num_agents} agents with {problem.sizes} points, kernels "
        f"{[k.to_dict()['name'] for k in kernels]}, ridge {float(problem.ridge):g}, "
        f"{rounds} rounds", flush=True)

  learners = krr_learners(problem)
  rows, curves = [], {}
  for name in PROTOCOLS:
    t0 = time.perf_counter()
    exact = np.asarray(closed_form.trajectory(problem, name, rounds, data.x_test))
    t1 = time.perf_counter()
    simulated = np.asarray(protocols.simulate(name, learners, problem.xs, problem.ys, rounds,
                                              data.x_test))
    t2 = time.perf_counter()
    lim = closed_form.limit(problem, name, data.x_test)
    gap = float(np.max(np.abs(exact - simulated)) / max(np.max(np.abs(simulated)), 1e-300))
    mse = _mse(exact, data.y_test)  # (T,) or (T, M)
    curves[name] = mse
    limit_mse = np.asarray(_mse(np.asarray(lim.predictions), data.y_test)).tolist() \
        if lim.converges else None
    rows.append({
        "protocol": name, "closed_form_s": t1 - t0, "simulate_s": t2 - t1,
        "max_rel_gap": gap, "mse_round0": np.asarray(mse[0]).tolist(),
        "mse_last": np.asarray(mse[-1]).tolist(), "spectral_radius": float(lim.spectral_radius),
        "limit_mse": limit_mse})
    print(f"  {name:15s} closed form {t1 - t0:6.2f}s  simulated {t2 - t1:6.2f}s  "
          f"max relative gap {gap:.1e}", flush=True)
    atomic_savez(os.path.join(out_dir, f"trajectory_{name}.npz"), closed_form=exact,
                 simulated=simulated)

  central = _mse(np.asarray(closed_form.central(problem, data.x_test)), data.y_test).tolist()
  local = _mse(np.asarray(closed_form.local(problem, data.x_test)), data.y_test).tolist()
  summary = {"sizes": problem.sizes, "ridge": float(problem.ridge), "rounds": rounds,
             "seed": seed, "central_mse": central, "local_mse": local, "protocols": rows}
  atomic_write(os.path.join(out_dir, "summary.json"), json.dumps(summary, indent=2))
  table = _table(summary)
  atomic_write(os.path.join(out_dir, "summary.md"), table)
  print(table)
  _plot(os.path.join(out_dir, "test_mse.png"), curves, central, local)
  worst = max(r["max_rel_gap"] for r in rows)
  print(f"closed forms agree with the literal runners to {worst:.1e} (relative); "
        f"wrote {out_dir}/")
  return 0


def _fmt(v) -> str:
  if v is None:
    return "no limit"
  if isinstance(v, list):
    return " / ".join(f"{x:.4f}" for x in v)
  return f"{v:.4f}"


def _table(summary: dict) -> str:
  lines = ["| protocol | test MSE round 0 | test MSE last round | limit | "
           "spectral radius per round |",
           "| --- | --- | --- | --- | --- |"]
  for r in summary["protocols"]:
    lines.append(f"| {r['protocol']} | {_fmt(r['mse_round0'])} | {_fmt(r['mse_last'])} | "
                 f"{_fmt(r['limit_mse'])} | {r['spectral_radius']:.4f} |")
  lines.append(f"| central (agent 0 / 1) | {_fmt(summary['central_mse'])} | | | |")
  lines.append(f"| local (agent 0 / 1) | {_fmt(summary['local_mse'])} | | | |")
  return "\n".join(lines) + "\n"


# One colour per protocol, one line style per agent (solid: agent 0, dashed: agent 1, ...):
# pkd and pkd-mean, the two agents of a protocol, and the baselines of the two agents each
# keep their own line and legend entry.
_COLORS = {"akd": "tab:red", "avgkd": "tab:blue", "pkd": "tab:orange", "pkd-mean": "tab:purple",
           "ekd": "black", "backfit-gs": "tab:olive", "backfit-jacobi": "tab:cyan"}
_AGENT_STYLES = ("-", "--", ":", "-.")
_MARKERS = {"pkd": "o", "pkd-mean": "s"}


def mse_figure(curves: dict, central: list, local: list):
  """The ``matplotlib.figure.Figure`` of ``test_mse.png``: every protocol's test MSE per round.

  Args:
    curves: protocol name -> (T,) or (T, M) test MSE per round.
    central: the centralised model's test MSE of each agent's kernel.
    local: each agent's local model's test MSE.

  Returns:
    The figure (made without pyplot); one legend entry per line, outside the axes.
  """
  from matplotlib.figure import Figure  # no pyplot: no backend switch, no global state

  fig = Figure(figsize=(9.5, 4.8), layout="constrained")
  ax = fig.subplots()
  for name, mse in curves.items():
    mse = np.asarray(mse)
    color = _COLORS.get(name, "gray")
    marker = _MARKERS.get(name)
    if mse.ndim == 2:
      for a in range(mse.shape[1]):
        ax.plot(mse[:, a], label=f"{name}, agent {a}", color=color, lw=1.3,
                ls=_AGENT_STYLES[a % len(_AGENT_STYLES)], marker=marker, markersize=3.5,
                markevery=(a + (3 if name == "pkd-mean" else 0), 6))
    elif name == "ekd":   # EKD and Jacobi backfitting coincide for two agents: EKD wide below
      ax.plot(mse, label=name, color=color, lw=4, alpha=0.35)
    elif name == "backfit-jacobi":
      ax.plot(mse, label=f"{name} (= ekd for 2 agents)", color=color, lw=1.2, ls="--")
    else:
      ax.plot(mse, label=name, color=color, lw=1.5)
  for kind, values, color in (("central", central, "tab:green"), ("local", local, "gray")):
    for a, v in enumerate(values):
      ax.axhline(v, color=color, lw=0.9, ls=_AGENT_STYLES[(a + 1) % len(_AGENT_STYLES)],
                 label=f"{kind}, agent {a}'s kernel" if kind == "central" else
                 f"{kind}, agent {a}")
  ax.set_yscale("log")
  ax.set_xlabel("round (0: local training on the labels)")
  ax.set_ylabel("test MSE")
  ax.set_title("Federated KRR by distillation (closed forms)")
  fig.legend(fontsize=8, loc="outside right center")
  return fig


def _plot(path: str, curves: dict, central: list, local: list) -> None:
  atomic_savefig(mse_figure(curves, central, local), path, dpi=120)
