"""FedDKC's claims (Wu et al. 2023, Sec. 4.2) at CPU scale: KKR and SKR against FedGKT.

    python benchmarks/feddkc_claims.py --config feddkc_small --seeds 0 1 2
    python benchmarks/feddkc_claims.py --config feddkc_mnist_small --seeds 0 1 2

Runs every run of a shipped FedDKC config (its grid: Dirichlet beta x {kkr, skr,
fedgkt}) once per seed (``seed``, ``data_seed`` and ``init_seed`` all set to it),
in one process so that XLA compiles each program once, into ``--workdir`` (a
temporary directory by default; a run already finished there is read back, not
run again). It then prints, per non-iid level, the clients' mean Top-1 and Top-5
test accuracy after the last round (the paper's "average" rows of Tables 5-7),
mean and sample standard deviation over the seeds, and decides each of the paper's
claims with ``evidence.judge`` (docs/reproduce.md, "How a statement is decided": the
95% t-interval over the seeds with the test set's binomial error, the minimum
effect of one point, and the verdicts "reproduced", "not reproduced", "no
difference", "inconclusive"; a claim of several effects holds when all hold).
Each claim's effects, per seed, in points of accuracy (``scale=100``):

- KKR beats FedGKT in average Top-1, averaged over the levels (paper: +1.31,
  +1.03, +1.29 points on MNIST, CIFAR-10, CINIC-10), and in Top-5 (+3.72, +3.88,
  +3.41): the gain over FedGKT of the clients' mean accuracy, mean over the levels;
- SKR likewise (Top-1 +0.99, +1.05, +1.30; Top-5 +1.45, +1.86, +1.88);
- FedDKC beats FedGKT at every level, the most heterogeneous included (Fig. 4):
  one Top-1 gain per level, each of which must hold;
- the gain grows with heterogeneity: the Top-1 gain at the config's most
  heterogeneous level minus that at its least (derived from the average rows of
  Tables 5-7, averaged over the datasets: KKR +1.02 at alpha 3.0, +1.47 at 0.5,
  +1.52 at 0.1; SKR +0.52, +1.52, +1.59);
- FedDKC improves most clients' Top-1 (55 and 57 of 60 groups): the fraction of
  (client, level) groups whose Top-1 beats FedGKT's, minus 1/2. A fraction of
  clients, not an accuracy: no binomial term (n = 0); each seed redraws the
  Dirichlet split and the initialisations, so the seeds' spread holds the groups'
  variability.

The binomial error's n (:func:`count_test_points`): every client is scored on the same
test set, the config's ``test_subset`` of the dataset's test split (300 points in
the small configs), so a mean over the clients is an accuracy on that many points.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
from pathlib import Path
import tempfile
import time

import jax
import numpy as np

import fedkrr
import neural
from neural import data
from neural import evidence

VARIANTS = ("fedgkt", "kkr", "skr")
# Sec. 4.2's average gains over FedGKT in points (MNIST, CIFAR-10, CINIC-10).
# Tables 5-7's average Top-1 gain over FedGKT per alpha, averaged over the three datasets.
PAPER_GAIN_BY_ALPHA = {"kkr": {3.0: 1.02, 1.0: 0.81, 0.5: 1.47, 0.1: 1.52},
                       "skr": {3.0: 0.52, 1.0: 0.81, 0.5: 1.52, 0.1: 1.59}}
PAPER_GAINS = {("kkr", 1): "+1.31 / +1.03 / +1.29", ("kkr", 5): "+3.72 / +3.88 / +3.41",
               ("skr", 1): "+0.99 / +1.05 / +1.30", ("skr", 5): "+1.45 / +1.86 / +1.88"}
PAPER_CLIENTS = {"kkr": "55 of 60 (client, alpha, dataset) groups",
                 "skr": "57 of 60 (client, alpha, dataset) groups"}

# One seed's results: (beta, variant) -> {k: the clients' Top-k test accuracies (%)}.
Summary = dict[tuple[float, str], dict[int, np.ndarray]]


def final_client_rows(rows):
  """The client rows of the last round (the server row left out), in the clients' order."""
  last = max(r["round"] for r in rows)
  return sorted((r for r in rows if r["round"] == last and r["agent"] != "server"),
                key=lambda r: int(r["agent"]))


def run_all(config_name: str, seeds, workdir: Path):
  """``{(beta, variant, seed): final client rows}`` of every run of the config."""
  out = {}
  runs = neural.load_spec(config_name).expand()
  for seed in seeds:
    for name, config in runs:
      variant = name.rpartition("__")[2]
      if not isinstance(config, neural.methods.feddkc.FedDKCConfig):
        raise SystemExit(f"{config_name}: expected a FedDKC config, run {name} is not one")
      config = config.replace(seed=seed, data_seed=seed, init_seed=seed)
      start = time.perf_counter()
      run_dir = workdir / config_name / f"seed={seed}" / name
      neural.methods.run_method(config, run_dir)
      rows = neural.read_run(run_dir).rows   # the one reader: refuses an unfinished run
      out[config.beta, variant, seed] = final_client_rows(rows)
      print(f"  {config_name} seed={seed} {name}: {time.perf_counter() - start:.0f} s",
            flush=True)
  return out


def count_test_points(config: neural.methods.feddkc.FedDKCConfig) -> int:
  """The test points every client is scored on (the config's test subset of the split)."""
  return int(len(data.load_train_test(config)[3]))


def client_accuracies(rows, k: int) -> np.ndarray:
  """Each client's Top-k accuracy (k = 1 or 5) in percent, in the rows' order."""
  key = "test_accuracy" if k == 1 else f"test_top{k}_accuracy"
  return 100.0 * np.array([r[key] for r in rows], dtype=float)


def summarise(results, seeds: Sequence[int]) -> list[Summary]:
  """One :data:`Summary` per seed of :func:`run_all`'s results."""
  return [{(b, v): {k: client_accuracies(rows, k) for k in (1, 5)}
           for (b, v, s), rows in results.items() if s == seed} for seed in seeds]


def _levels(summaries: Sequence[Summary]) -> list[float]:
  """The config's betas, least heterogeneous (largest) first."""
  return sorted({b for b, _ in summaries[0]}, reverse=True)


def _means(summaries: Sequence[Summary], beta: float, variant: str, k: int) -> np.ndarray:
  """The clients' mean Top-k (%) per seed."""
  return np.array([s[beta, variant][k].mean() for s in summaries])


Effects = Callable[[Sequence[Summary], int], list[evidence.Effect]]


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim of the paper, its numbers there, and the effects (per seed) it says are > 0."""

  text: str
  paper: str
  effects: Effects


def _average_gain(v: str, k: int) -> Effects:
  def effects(summaries, n):
    betas = _levels(summaries)
    mine = np.array([_means(summaries, b, v, k) for b in betas])        # (levels, seeds)
    base = np.array([_means(summaries, b, "fedgkt", k) for b in betas])
    return [evidence.Effect(f"{v.upper()} - FedGKT, Top-{k}, mean over the levels",
                          (mine - base).mean(axis=0), np.concatenate([mine, base]).ravel() / 100,
                          n, scale=100)]
  return effects


def _every_level(v: str) -> Effects:
  return lambda summaries, n: [
      evidence.difference(f"{v.upper()} - FedGKT, Top-1, beta {float(b)}",
                          _means(summaries, b, v, 1), _means(summaries, b, "fedgkt", 1), n,
                          scale=100)
      for b in _levels(summaries)]


def _gain_grows(v: str) -> Effects:
  def effects(summaries, n):
    low, high = _levels(summaries)[0], _levels(summaries)[-1]   # least, most heterogeneous
    acc = [_means(summaries, b, u, 1) for b in (high, low) for u in (v, "fedgkt")]
    return [evidence.Effect(f"gain at beta {float(high)} - gain at beta {float(low)}",
                          (acc[0] - acc[1]) - (acc[2] - acc[3]),
                          np.concatenate(acc) / 100, n, scale=100)]
  return effects


def _most_clients(v: str) -> Effects:
  def effects(summaries, n):
    del n   # a fraction of clients: no binomial term
    share = [np.mean(np.concatenate([s[b, v][1] > s[b, "fedgkt"][1] for b in _levels([s])]))
             for s in summaries]
    return [evidence.Effect("share of (client, beta) groups with a higher Top-1 - 1/2",
                          np.array(share) - 0.5)]
  return effects


def claims(betas: Sequence[float]) -> list[Claim]:
  """The paper's claims, KKR's then SKR's (``betas``: the config's levels)."""
  low, high = max(betas), min(betas)
  out = []
  for v in ("kkr", "skr"):
    name = v.upper()
    grows = " -> ".join(f"{PAPER_GAIN_BY_ALPHA[v].get(b, float('nan')):+.2f} at alpha {float(b)}"
                        for b in (low, high))
    out += [
        Claim(f"{name} beats FedGKT in average Top-1, averaged over the levels",
              f"{PAPER_GAINS[v, 1]} points (MNIST / CIFAR-10 / CINIC-10)", _average_gain(v, 1)),
        Claim(f"{name} beats FedGKT in average Top-5, averaged over the levels",
              f"{PAPER_GAINS[v, 5]} points", _average_gain(v, 5)),
        Claim(f"{name} beats FedGKT (Top-1) at every level, \"regardless of data "
              f"heterogeneity\" (Fig. 4)", "at all 4 alpha on all 3 datasets",
              _every_level(v)),
        Claim(f"{name}'s Top-1 gain grows with heterogeneity (beta {float(low)} -> {float(high)})",
              f"{grows} (Tables 5-7, mean over the datasets)", _gain_grows(v)),
        Claim(f"{name} improves most clients' Top-1", PAPER_CLIENTS[v], _most_clients(v)),
    ]
  return out


def judge_claims(summaries: Sequence[Summary], n: int) -> list[tuple[str, str, evidence.Judgement]]:
  """``(claim, paper, Judgement)`` for every claim, over the seeds' summaries."""
  return [(c.text, c.paper, evidence.judge(c.effects(summaries, n)))
          for c in claims(_levels(summaries))]


def report(config_name: str, results, seeds, n: int) -> None:
  summaries = summarise(results, seeds)
  betas = _levels(summaries)
  print(f"\n{config_name}: clients' mean test accuracy after the last round (%), "
        f"mean +- sample sd over seeds {list(seeds)}, {n} test points")
  print(f"{'beta':>6} {'top':>4}" + "".join(f"{v:>16}" for v in VARIANTS)
        + f"{'KKR-GKT':>10}{'SKR-GKT':>10}")
  for beta in betas:
    for k in (1, 5):
      acc = {v: _means(summaries, beta, v, k) for v in VARIANTS}
      line = f"{beta:>6g} {k:>4}" + "".join(
          f"{acc[v].mean():>10.2f} +-{_sd(acc[v]):>4.2f}" for v in VARIANTS)
      line += "".join(f"{(acc[v] - acc['fedgkt']).mean():>+10.2f}" for v in ("kkr", "skr"))
      print(line)
  print()
  print(evidence.judgement_table(judge_claims(summaries, n)))


def _sd(values: np.ndarray) -> float:
  return float(values.std(ddof=1)) if values.size > 1 else 0.0


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--config", default="feddkc_small",
                      help="a shipped FedDKC config (feddkc_small, feddkc_mnist_small)")
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--workdir", type=Path, default=None,
                      help="where the runs go (default: a temporary directory)")
  args = parser.parse_args()
  fedkrr.avoid_cpu_eigh_deadlock()
  jax.config.update("jax_enable_x64", True)   # as `neural run` does (the networks stay float32)
  start = time.perf_counter()
  with tempfile.TemporaryDirectory() as tmp:
    workdir = args.workdir if args.workdir is not None else Path(tmp)
    try:
      results = run_all(args.config, args.seeds, workdir)
    except neural.ExperimentError as e:   # a workdir holding other or unfinished runs
      parser.exit(2, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
  runs = neural.load_spec(args.config).expand()
  report(args.config, results, args.seeds, count_test_points(runs[0][1]))
  print(f"\n{time.perf_counter() - start:.0f} s wall, {time.process_time():.0f} s CPU in all")


if __name__ == "__main__":
  main()
