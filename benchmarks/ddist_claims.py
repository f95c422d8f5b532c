"""D-Distillation's claims (Bistritz, Mann & Bambos 2020) at CPU scale, decided over seeds.

    for s in 0 1 2; do
      neural run --config ddist_small --workdir runs/ddist/seed=$s --set seed=$s
      neural run --config ddist_fig3_small --workdir runs/ddist_fig3/seed=$s --set seed=$s
    done
    python benchmarks/ddist_claims.py --workdir runs/ddist --fig3-workdir runs/ddist_fig3

Reads finished sweeps (``neural.runs.read_seeds``: an unfinished run, or a run whose seeds
have different rounds, is refused, exit status 2) of ``ddist_small`` (runs
``method=M`` for M in d-distillation, d-sgd, silo-sgd) and of ``ddist_fig3_small``
(``two_models__method=M``, ``four_models__method=M``), one per seed
(``WORKDIR/seed=S/RUN``, S an integer; a workdir without ``seed=S`` folders is one
seed), and prints the mean device test
accuracy at the last round (the paper's metric: the ``agent: "mean"`` row), mean ± sd
over the seeds, per architecture for Fig. 3, the consensus error per round (Lemma 4)
and the numbers each device sent (exact counts, not decided). It then decides the
paper's statements with ``neural.evidence.judge`` (the t-interval over the seeds with the
binomial error of ``--test-points``, the minimum effect; docs/reproduce.md): see
:func:`fig2_claims` and :func:`fig3_claims`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

import neural

METHODS = ("d-distillation", "d-sgd", "silo-sgd")
PANELS = ("two_models", "four_models")

Rows = list[tuple[str, str, neural.evidence.Judgement]]


class RunResult(NamedTuple):
  """What the claims use of one run (one seed).

  Attributes:
    accuracy: the mean device test accuracy at the last round.
    by_model: ``{architecture: its devices' mean test accuracy}`` at the last round.
    consensus: the consensus error (Lemma 4) per round (empty without gossip of z).
    comm_total: the numbers each device sent in the run, averaged over the devices.
  """

  accuracy: float
  by_model: dict[str, float]
  consensus: tuple[float, ...]
  comm_total: float


def run_result(rows: Sequence[Mapping]) -> RunResult:
  """A run's :class:`RunResult` from its metric rows (``neural.read_metrics``)."""
  last = max(r["round"] for r in rows)
  devices = [r for r in rows if r["round"] == last and r["agent"] != "mean"]
  means = {r["round"]: r for r in rows if r["agent"] == "mean"}
  mean = means.get(last)
  accuracy = mean["test_accuracy"] if mean else float(np.mean([r["test_accuracy"]
                                                               for r in devices]))
  models = dict.fromkeys(r["model"] for r in devices)
  by_model = {m: float(np.mean([r["test_accuracy"] for r in devices if r["model"] == m]))
              for m in models}
  consensus = tuple(float(means[t]["consensus_error"]) for t in sorted(means)
                    if "consensus_error" in means[t])
  comm = float(np.mean([r.get("comm_floats_total", 0) for r in devices]))
  return RunResult(float(accuracy), by_model, consensus, comm)


def read_seeds(workdir: Path) -> dict[str, dict[str, RunResult]]:
  """``{seed: {run: RunResult}}`` of ``WORKDIR/seed=S/RUN`` (or ``{"": ...}`` for
  ``WORKDIR/RUN``), in the order of S, read with ``neural.runs.read_seeds``: only folders
  named exactly ``seed=S`` are seeds, and every run must be finished with the same
  rounds on every seed.

  Raises:
    neural.ExperimentError: no runs there, an unfinished run, a run whose seeds have
      different rounds (one line naming the folder).
  """
  return {s: {name: run_result(record.rows) for name, record in runs.items()}
          for s, runs in neural.runs.read_seeds(workdir).items()}


def seeds_of(results: Mapping[str, Mapping[str, RunResult]], run: str) -> list[RunResult]:
  """A run's :class:`RunResult` per seed.

  Raises:
    neural.ExperimentError: a seed lacks the run.
  """
  missing = [s or "the workdir" for s, runs in results.items() if run not in runs]
  if missing:
    raise neural.ExperimentError(f"{run}: no finished run in {', '.join(missing)}")
  return [runs[run] for runs in results.values()]


def fig2_claims(accuracy: Mapping[str, Sequence[float]], consensus_first: Sequence[float],
                consensus_last: Sequence[float], n: int) -> Rows:
  """The statements of Fig. 2 and Lemma 4 (16 devices, one architecture), decided.

  Args:
    accuracy: ``{method: the mean device test accuracy at the last round, per seed}``
      for the three ``METHODS``.
    consensus_first, consensus_last: D-Distillation's consensus error at round 0 and at
      the last round, per seed.
    n: the test points each device's accuracy is measured on.

  Returns:
    ``(statement, the paper's words, judgement)``: D-Distillation beats Silo-SGD; its
    difference from D-SGD, where the paper says "comparable", as "D-Distillation above
    D-SGD" (comparable would be "no difference": the interval within ± the minimum
    effect); Lemma 4's consensus error falls: the
    relative drop (first - last) / first per seed, a fraction of round 0's error (no
    test points: n = 0), above 0.
  """
  dd, dsgd, silo = (np.asarray(accuracy[m], dtype=float) for m in METHODS)
  first = np.asarray(consensus_first, dtype=float)
  drop = (first - np.asarray(consensus_last, dtype=float)) / first
  return [
      ("D-Distillation beats Silo-SGD (Fig. 2)",
       "\"significant performance gains over Silo-SGD\"",
       neural.evidence.judge(neural.evidence.difference("d-distillation - silo-sgd", dd, silo, n))),
      ("D-Distillation above D-SGD (Fig. 2; the paper: comparable)",
       "\"comparable accuracy to D-SGD\"",
       neural.evidence.judge(neural.evidence.difference("d-distillation - d-sgd", dd, dsgd, n))),
      ("Lemma 4: the consensus error of z falls (relative drop from round 0 to the last)",
       "consensus as t -> infinity",
       neural.evidence.judge(neural.evidence.Effect("relative drop of consensus_error", drop))),
  ]


def fig3_claims(accuracy: Mapping[tuple[str, str], Sequence[float]], n: int) -> Rows:
  """The statements of Fig. 3 (8 devices, mixed architectures), decided.

  Args:
    accuracy: ``{(panel, method): the mean device test accuracy at the last round, per
      seed}`` for both ``PANELS`` and the three ``METHODS``.
    n: the test points each device's accuracy is measured on.

  Returns:
    ``(statement, the paper's words, judgement)``: D-Distillation beats per-architecture
    D-SGD with two architectures (left) and with four (right); its gain over D-SGD is
    larger with four than with two (per seed: the right panel's difference minus the
    left's); it beats Silo-SGD in both panels.
  """
  acc = {k: np.asarray(v, dtype=float) for k, v in accuracy.items()}

  def diff(panel, a, b):
    return neural.evidence.difference(f"{panel}: {a} - {b}", acc[panel, a], acc[panel, b], n)

  gain = {p: acc[p, "d-distillation"] - acc[p, "d-sgd"] for p in PANELS}
  more = neural.evidence.Effect("(d-distillation - d-sgd) four_models - two_models",
                       gain["four_models"] - gain["two_models"],
                       np.concatenate([acc[p, m] for p in PANELS
                                       for m in ("d-distillation", "d-sgd")]), n)
  return [
      ("Fig. 3 left (4 LeNet-5 + 4 ResNet-8): D-Distillation beats per-architecture D-SGD",
       "\"even by joining just two subsets ... outperforms D-SGD\"",
       neural.evidence.judge(diff("two_models", "d-distillation", "d-sgd"))),
      ("Fig. 3 right (2 each of four models): D-Distillation beats per-architecture D-SGD",
       "\"outperform the accuracy of D-SGD\"",
       neural.evidence.judge(diff("four_models", "d-distillation", "d-sgd"))),
      ("Fig. 3: the gain over D-SGD is larger with four architectures than with two",
       "\"further increases its performance over D-SGD when there are four subsets\"",
       neural.evidence.judge(more)),
      ("Fig. 3: D-Distillation beats Silo-SGD in both panels",
       "\"significant performance gains over Silo-SGD\" (Sec. 6)",
       neural.evidence.judge([diff(p, "d-distillation", "silo-sgd") for p in PANELS])),
  ]


def _cell(values: np.ndarray) -> str:
  values = np.asarray(values, dtype=float)
  sd = f" ± {values.std(ddof=1):.3f}" if values.size > 1 else ""
  return f"{values.mean():.3f}{sd}"


def report_fig2(results: Mapping[str, Mapping[str, RunResult]], n: int) -> Rows:
  runs = {m: f"method={m}" for m in METHODS}
  accuracy = {m: np.array([r.accuracy for r in seeds_of(results, run)])
              for m, run in runs.items()}
  print("ddist_small: mean device test accuracy at the last round")
  for m in METHODS:
    print(f"  {m:<16}{_cell(accuracy[m])}")
  consensus = [r.consensus for r in seeds_of(results, runs["d-distillation"])]
  if not all(consensus) or len({len(c) for c in consensus}) > 1:
    raise neural.ExperimentError("method=d-distillation: its seeds' mean rows lack "
                                 "consensus_error or have different numbers of rounds")
  curves = np.array(consensus)
  print("d-distillation: consensus error per round (mean over the seeds)")
  print("  " + ", ".join(f"{v:.4f}" for v in curves.mean(axis=0)))
  comm = {m: np.mean([r.comm_total for r in seeds_of(results, runs[m])])
          for m in ("d-distillation", "d-sgd")}
  print(f"numbers sent per device in the run: d-distillation {comm['d-distillation']:,.0f}, "
        f"d-sgd {comm['d-sgd']:,.0f} ({comm['d-sgd'] / comm['d-distillation']:.1f}x)\n")
  return fig2_claims(accuracy, curves[:, 0], curves[:, -1], n)


def report_fig3(results: Mapping[str, Mapping[str, RunResult]], n: int) -> Rows:
  accuracy = {(p, m): np.array([r.accuracy for r in seeds_of(results, f"{p}__method={m}")])
              for p in PANELS for m in METHODS}
  print("ddist_fig3_small: mean device test accuracy at the last round (all devices; "
        "per architecture)")
  for p in PANELS:
    for m in METHODS:
      by_model = [r.by_model for r in seeds_of(results, f"{p}__method={m}")]
      models = ", ".join(f"{k} {np.mean([b[k] for b in by_model]):.3f}" for k in by_model[0])
      print(f"  {p:<12}{m:<16}{_cell(accuracy[p, m]):<16}{models}")
  print()
  return fig3_claims(accuracy, n)


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--workdir", type=Path, help="ddist_small's workdir (or seed=S folders)")
  parser.add_argument("--fig3-workdir", type=Path,
                      help="ddist_fig3_small's workdir (or seed=S folders)")
  parser.add_argument("--test-points", type=int, default=360,
                      help="test points each device is scored on (the embedded digits: 360)")
  args = parser.parse_args()
  if args.workdir is None and args.fig3_workdir is None:
    parser.error("give --workdir, --fig3-workdir or both")
  try:
    rows: Rows = []
    seeds = set()
    for workdir, report in ((args.workdir, report_fig2), (args.fig3_workdir, report_fig3)):
      if workdir is not None:
        results = read_seeds(workdir)
        seeds.add(len(results))
        print(f"{workdir}: seeds {', '.join(results) if list(results) != [''] else 'one'}")
        rows += report(results, args.test_points)
  except neural.ExperimentError as e:   # an unfinished or missing run: no verdict
    parser.exit(2, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
  print(f"the paper's statements, decided over {'/'.join(map(str, sorted(seeds)))} seed(s) "
        f"(n = {args.test_points} test points; docs/reproduce.md):\n")
  print(neural.evidence.judgement_table(rows))

if __name__ == "__main__":
  main()
