"""Table 1 and Fig. 3 of Berdoz (2022) from finished sweeps of the shipped repshare configs.

    for s in 0 1 2; do
      neural run --config repshare_small --workdir runs/repshare/seed=$s --set seed=$s
    done
    python benchmarks/repshare_table.py --workdir runs/repshare
    neural run --config repshare_lambdas_small --workdir runs/repshare_lambdas
    python benchmarks/repshare_table.py --workdir runs/repshare_lambdas

Reads every run of the sweep (``WORKDIR/RUN``, or one sweep per seed,
``WORKDIR/seed=S/RUN`` with S an integer) with ``neural.runs.read_seeds``, which refuses
an unfinished run and a run whose seeds have different rounds (exit status 2); runs
are named ``[DATASET__]cl`` and ``[DATASET__]nN_METHOD`` as in the shipped configs. It
prints, per dataset, the
clients' mean test accuracy after the last round (Table 1: CL, then a row per method
and a column per number of clients N; mean ± sd over the seeds), and the first round
at which that mean reaches ``--reach``, per seed (how fast each method converges:
Fig. 4 compares the curves). For the ablation sweep (runs named
``lambda_kd=A__lambda_disc=B``) it prints Fig. 3's grid: each pair's final mean
accuracy minus that of lambda_KD = lambda_disc = 0 (independent learning).

It then decides the thesis's statements about these numbers (Table 1 of MNIST/LeNet-5,
Sec. 5; Fig. 3) with ``evidence.judge`` (the t-interval over the seeds with the binomial
error of ``--test-points``, the minimum effect; docs/reproduce.md): see
:func:`table1_claims` and :func:`lambda_claims`. With one seed the intervals hold the
test set's noise only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
import re

import numpy as np

import neural
from neural import evidence

ORDER = ("ours", "ours_code", "fd", "fd_code", "fedavg", "il")
SIZES = (2, 5, 10)
# Table 1, MNIST/LeNet-5 (r = 100), the clients' mean test accuracy in percent.
PAPER = {("cl", 1): 94.00,
         **{("fedavg", n): a for n, a in zip(SIZES, (92.64, 86.79, 70.06))},
         **{("il", n): a for n, a in zip(SIZES, (91.46, 85.26, 72.86))},
         **{("fd", n): a for n, a in zip(SIZES, (94.45, 90.55, 77.90))},
         **{("ours", n): a for n, a in zip(SIZES, (94.19, 90.63, 82.07))}}
# The round (0-based, as the reach table counts) at which "converges more slowly" is
# decided: a tenth of the 100 rounds, where Fig. 4's curves still rise.
EARLY_ROUND = 10
# "Does not improve" in the rules of docs/reproduce.md: a gain of at most 3 points.
NO_GAIN = 0.03

Rows = list[tuple[str, str, evidence.Judgement]]


def mean_curve(rows) -> np.ndarray:
  """The clients' mean test accuracy per round."""
  last = max(r["round"] for r in rows)
  return np.array([np.mean([r["test_accuracy"] for r in rows if r["round"] == t])
                   for t in range(last + 1)])


def read_curves(workdir: Path) -> tuple[list[str], dict[str, np.ndarray]]:
  """``(seeds, {run: mean curves (seeds, rounds)})`` of the runs every seed has, read with
  ``neural.runs.read_seeds`` (only folders named exactly ``seed=S`` are seeds).

  Raises:
    neural.ExperimentError: no runs there, an unfinished run, or a run whose seeds have
      different rounds (one line naming the folder).
  """
  per_seed = {s: {name: mean_curve(record.rows) for name, record in runs.items()}
              for s, runs in neural.runs.read_seeds(workdir).items()}
  seeds = list(per_seed)
  names = sorted(set.intersection(*(set(runs) for runs in per_seed.values())))
  missing = sorted(set.union(*(set(runs) for runs in per_seed.values())) - set(names))
  if missing:
    print(f"left out (not in every seed): {', '.join(missing)}")
  out = {}
  for name in names:
    lengths = {len(per_seed[s][name]) for s in seeds}
    if len(lengths) > 1:
      raise neural.ExperimentError(f"{name}: the seeds have {sorted(lengths)} rounds")
    out[name] = np.stack([per_seed[s][name] for s in seeds])
  return seeds, out


def _paper_gap(a: str, b: str, sizes: Sequence[int] = SIZES) -> str:
  gaps = " / ".join(f"{PAPER[a, n] - PAPER[b, n]:+.2f}" for n in sizes)
  return f"{gaps} points (N = {' / '.join(map(str, sizes))})"


def table1_claims(final: Mapping[tuple[str, int], Sequence[float]],
                  early: Mapping[tuple[str, int], Sequence[float]], n: int) -> Rows:
  """The thesis's statements about Table 1 (MNIST/LeNet-5) and Fig. 4, decided.

  Args:
    final: ``{(method, N): the clients' mean test accuracy after the last round, per
      seed}`` (``("cl", 1)`` for CL; methods as in ``ORDER``).
    early: the same at round ``EARLY_ROUND``.
    n: the test points each client's accuracy is measured on.

  Returns:
    ``(statement, the thesis's numbers, judgement)`` per statement whose runs are all
    in ``final``: "ours beats X" at every N (all three effects must hold); the gap over
    IL grows with N (its ends, N = 2 and 10); FL below IL at N = 10; ours above CL at
    N = 2; at N = 2 and at N = 5, where the thesis calls FD close, the difference
    ours - FD as "ours above FD" (close would be "no difference": the interval within ±
    the minimum effect); ours above FD at N = 10; FD converges more slowly (Fig. 4,
    N = 5): ours above FD at round ``EARLY_ROUND``. Ours is the thesis's code
    (``ours_code``) unless the statement names the text's variant (``ours``).
  """
  rows: Rows = []

  def add(statement: str, paper: str, build: Callable[[], list[evidence.Effect]]) -> None:
    try:
      effects = build()
    except KeyError:   # a run the statement compares is not in the sweep
      return
    rows.append((statement, paper, evidence.judge(effects)))

  def diff(a: str, b: str, size: int, b_size: int | None = None, source=final, when=""):
    b_size = size if b_size is None else b_size
    return evidence.difference(f"{a} - {b}{when} N={size}", source[a, size],
                             source[b, b_size], n)

  for ours in ("ours_code", "ours"):
    for other, name in (("il", "IL"), ("fedavg", "FedAvg")):
      add(f"`{ours}` beats {name} at N = 2, 5 and 10", _paper_gap("ours", other),
          lambda ours=ours, other=other: [diff(ours, other, s) for s in SIZES])
  add("the gain of `ours_code` over IL grows with N (N = 10 minus N = 2)",
      f"{PAPER['ours', 2] - PAPER['il', 2]:+.2f} -> {PAPER['ours', 10] - PAPER['il', 10]:+.2f}"
      " points",
      lambda: [evidence.Effect(
          "(ours_code - il) N=10 - N=2",
          np.subtract(final["ours_code", 10], final["il", 10])
          - np.subtract(final["ours_code", 2], final["il", 2]),
          np.concatenate([final[m, s] for m in ("ours_code", "il") for s in (2, 10)]), n)])
  add("FL (FedAvg) below IL at N = 10", _paper_gap("il", "fedavg", (10,)),
      lambda: [diff("il", "fedavg", 10)])
  add("`ours_code` (N = 2) beats CL", f"{PAPER['ours', 2] - PAPER['cl', 1]:+.2f} points",
      lambda: [diff("ours_code", "cl", 2, 1)])
  for fd, name in (("fd", "Jeong's FD (`fd`)"), ("fd_code", "the code's FD (`fd_code`)")):
    for size in (2, 5):
      add(f"`ours_code` above {name} at N = {size} (the thesis: close)",
          _paper_gap("ours", "fd", (size,)), lambda fd=fd, size=size: [diff("ours_code", fd, size)])
    add(f"`ours_code` beats {name} at N = 10", _paper_gap("ours", "fd", (10,)),
        lambda fd=fd: [diff("ours_code", fd, 10)])
    add(f"{name} converges more slowly (N = 5): `ours_code` above it at round {EARLY_ROUND}",
        "Fig. 4c, d (curves)",
        lambda fd=fd: [diff("ours_code", fd, 5, source=early, when=f" r{EARLY_ROUND}")])
  return rows


def lambda_claims(final: Mapping[tuple[float, float], Sequence[float]], n: int) -> Rows:
  """The thesis's statements about Fig. 3 (5 clients), decided.

  Args:
    final: ``{(lambda_KD, lambda_disc): the clients' mean test accuracy after the last
      round, per seed}``; ``(0, 0)`` is IL.
    n: the test points each client's accuracy is measured on.

  Returns:
    ``(statement, the thesis's words, judgement)`` per statement whose runs are in
    ``final``: the chosen (10, 1) beats IL; L_KD alone (10, 0) beats IL; adding L_disc
    to L_KD, (10, 1) over (10, 0), improves; L_disc alone does not help: its gain over
    IL at every lambda_disc > 0 of the grid is at most 0.03 (the rules' "does not
    improve", ``NO_GAIN``).
  """
  rows: Rows = []
  il = (0.0, 0.0)

  def diff(a, b):
    return evidence.difference(f"({a[0]:g}, {a[1]:g}) - ({b[0]:g}, {b[1]:g})", final[a], final[b],
                               n)

  for a, b, statement, paper in (
      ((10.0, 1.0), il, "lambda_KD = 10, lambda_disc = 1 beats IL",
       "chosen from Fig. 3 (no numbers in the text)"),
      ((10.0, 0.0), il, "L_KD alone (lambda_KD = 10) beats IL",
       "\"L_KD can be used without L_disc\""),
      ((10.0, 1.0), (10.0, 0.0), "adding L_disc (lambda_disc = 1) to L_KD improves",
       "\"can still improve the test accuracy significantly if tuned properly\"")):
    if a in final and b in final:
      rows.append((statement, paper, evidence.judge(diff(a, b))))
  alone = [k for k in sorted(final) if k[0] == 0 and k[1] > 0]
  if alone and il in final:
    effects = [diff(k, il)._replace(theta=NO_GAIN, above=False) for k in alone]
    rows.append((f"L_disc alone does not help: its gain over IL <= {NO_GAIN:g}",
                 "\"the reciprocal is not true\"", evidence.judge(effects)))
  return rows


def _cell(values: np.ndarray, sign: str = "") -> str:
  """Mean ± sd over the seeds (one seed: the value, in the width of one seed's table)."""
  if values.size == 1:
    return f"{values[0]:>{sign}8.3f}"
  return f"{values.mean():>{sign}8.3f} ±{values.std(ddof=1):>5.3f}"


def print_lambdas(final: Mapping[tuple[float, float], np.ndarray]) -> None:
  kds, discs = sorted({k for k, _ in final}), sorted({d for _, d in final})
  base = final.get((0.0, 0.0))
  if base is None:
    return
  width = 8 if base.size == 1 else 14
  print(f"final mean test accuracy minus lambda_KD = lambda_disc = 0 ({_cell(base).strip()}),"
        f" rows lambda_KD, columns lambda_disc")
  print(f"{'':<8}" + "".join(f"{d:>{width}g}" for d in discs))
  for k in kds:
    print(f"{k:<8g}" + "".join(_cell(final[k, d] - base, "+") if (k, d) in final
                               else f"{'-':>{width}}" for d in discs))


def print_table(label: str, table: Mapping[tuple[str, int], np.ndarray], reach: float) -> None:
  sizes = sorted({n for _, n in table if n > 1})
  methods = [m for m in ORDER if any((m, n) in table for n in sizes)]
  seeds = len(next(iter(table.values())))
  width = 8 if seeds == 1 else 14

  def cell(key, kind):
    if key not in table:
      return f"{'-':>{width}}"
    curves = table[key]
    if kind == "acc":
      return _cell(curves[:, -1])
    hits = [np.flatnonzero(c >= reach) for c in curves]
    never = "never" if seeds == 1 else "-"
    return f"{'/'.join(str(int(h[0])) if h.size else never for h in hits):>{width}}"

  for kind, title in (("acc", "mean test accuracy after the last round"),
                      ("reach", f"first round with mean test accuracy >= {reach}"
                       + (", per seed ('-': never)" if seeds > 1 else ""))):
    print(f"{label}: {title}")
    print(f"{'':<11}" + "".join(f"{'N=' + str(n):>{width}}" for n in sizes))
    if ("cl", 1) in table:
      print(f"{'cl (N=1)':<11}{cell(('cl', 1), kind)}")
    for m in methods:
      print(f"{m:<11}" + "".join(cell((m, n), kind) for n in sizes))
    print()


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--workdir", required=True, type=Path,
                      help="a sweep's workdir, or a folder of them named seed=S")
  parser.add_argument("--reach", type=float, default=0.9)
  parser.add_argument("--test-points", type=int, default=360,
                      help="test points each client is scored on (the embedded digits: 360)")
  args = parser.parse_args()
  try:
    seeds, curves = read_curves(args.workdir)
  except neural.ExperimentError as e:   # an unfinished or missing run: no verdict
    parser.exit(2, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
  print(f"seeds: {', '.join(seeds)}; mean ± sd over the seeds\n" if seeds != [""] else
        "one seed (no seed=S folders)\n")
  grid = {}
  for name, c in curves.items():
    match = re.fullmatch(r"lambda_kd=([\d.]+)__lambda_disc=([\d.]+)", name)
    if match:
      grid[float(match.group(1)), float(match.group(2))] = c[:, -1]
  if grid:
    print_lambdas(grid)
    rows = lambda_claims(grid, args.test_points)
  else:
    tables: dict[str, dict[tuple[str, int], np.ndarray]] = {}
    for name, c in curves.items():
      dataset, _, run = name.rpartition("__")
      match = re.fullmatch(r"n(\d+)_(\w+)", run)
      key = ("cl", 1) if run == "cl" else (match.group(2), int(match.group(1))) if match else None
      if key is not None:
        tables.setdefault(dataset, {})[key] = c
    rows = []
    for dataset, table in tables.items():
      print_table(dataset or args.workdir.name, table, args.reach)
      if dataset and not dataset.startswith("mnist"):
        continue   # the statements are about Table 1's MNIST/LeNet-5 rows
      final = {k: c[:, -1] for k, c in table.items()}
      early = {k: c[:, EARLY_ROUND] for k, c in table.items() if c.shape[1] > EARLY_ROUND}
      rows += table1_claims(final, early, args.test_points)
  if rows:
    print(f"\nthe thesis's statements, decided over {len(seeds)} seed(s) "
          f"(n = {args.test_points} test points; docs/reproduce.md):\n")
    print(evidence.judgement_table(rows))


if __name__ == "__main__":
  main()
