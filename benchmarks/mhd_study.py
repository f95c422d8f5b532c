"""Which claims of Zhmoginov et al. (2023), multi-headed distillation, reproduce at CPU scale.

    python benchmarks/mhd_study.py --study table1 --seeds 0,1,2      # mhd_small
    python benchmarks/mhd_study.py --study ablation --seeds 0,1,2    # mhd_ablation_small
    python benchmarks/mhd_study.py --study topology --seeds 0,1,2    # mhd_topology_small

Runs every run of the study's shipped config once per seed (``--seeds``: the
config's ``seed``, which sets the data split and the initialisations), in
``WORKDIR/CONFIG/seed=S/RUN`` when ``--workdir`` is given (a finished run is read
back, an interrupted one resumes), else in a temporary directory. Then decides
each of the paper's claims that the study tests with ``neural.evidence.judge``
(docs/reproduce.md, "How a statement is decided"): a claim is one or more
effects, a statistic per seed that it says is positive, most often a difference
of two accuracies after the last round (mean over the clients); each gets the 95%
t-interval over the seeds with the test set's binomial error, and the claim is
"reproduced", "not reproduced", "no difference" or "inconclusive" (a claim of
several effects holds when all hold). It prints the verdicts with
``neural.evidence.judgement_table`` and, per claim, the quantities compared (mean +- sd
over the seeds).

The quantities: ``shared[h]`` is head h's accuracy on the test set (the shared,
uniform label distribution: the paper's beta_sh; h = 0 the main head, h = m the
last aux head); ``private[h]`` its beta_priv; ``hop d, head h`` the mean of head h's
accuracy on the private distribution of a client whose knowledge is d teacher
hops away (d = 1: a direct teacher, the paper's "Cycle-1"; d = -1: another island).

The binomial error's n (:func:`count_test_points`): a shared accuracy is a mean over
the clients of accuracies on the same test set, so n is the test set's size (360
digits in the small configs). beta_priv is not measured on test points of its
own: it is the shared test set's per-class accuracy weighted by the client's
label distribution p, ``sum_c p_c acc_c`` (``neural.methods.mhd.private_accuracy``),
whose binomial variance is about ``a (1 - a) sum_c p_c^2 / n_c`` (n_c: the test
points of class c). Its n is the effective size ``1 / sum_c p_c^2 / n_c``, taken
over the clients so that its variance is the clients' mean variance (about a third
of the test set when a client's labels are three primary digits at s = 100; the
whole test set at s = 0). A peer accuracy by hop uses the same n.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
from pathlib import Path
import tempfile
import time
from typing import NamedTuple

import numpy as np

import neural

STUDIES = {"table1": "mhd_small", "ablation": "mhd_ablation_small",
           "topology": "mhd_topology_small"}

Summary = dict[str, dict]   # run name -> {"shared", "private", "reported", "hops", "points"}
# A quantity of one seed's summary: its value and the test points it is measured on.
Quantity = Callable[[Summary], tuple[float, int]]


def summarise(rows: list[dict], points: dict[str, int]) -> dict:
  """Head accuracies after the last round, mean over clients; peer accuracy by hop.

  ``points`` (:func:`count_test_points`) is kept beside them as ``"points"``.
  """
  last = max(r["round"] for r in rows)
  final = [r for r in rows if r["round"] == last]
  out = {"shared": np.mean([r["head_accuracies"] for r in final], axis=0),
         "private": np.mean([r["private_accuracies"] for r in final], axis=0),
         "reported": float(np.mean([r["test_accuracy"] for r in final])), "hops": {},
         "points": dict(points)}
  if final[0].get("peer_hops") is not None:
    by_hop: dict[int, list] = {}
    for r in final:
      peers = np.asarray(r["peer_accuracies"])          # (heads, K)
      for j, d in enumerate(r["peer_hops"]):
        if d != 0:
          by_hop.setdefault(int(d), []).append(peers[:, j])
    out["hops"] = {d: np.mean(v, axis=0) for d, v in by_hop.items()}
  return out


def count_test_points(config: neural.methods.mhd.Config) -> dict[str, int]:
  """The n of the binomial error: ``shared``, the test set's size; ``private``, the
  effective size of beta_priv over the clients, ``K / sum_i sum_c p_ic^2 / n_c``
  (module docstring)."""
  data = neural.methods.mhd.load_data(config)
  per_class = np.bincount(data.y_test, minlength=data.num_classes)
  variance = np.sum(data.label_dist ** 2 / np.maximum(per_class, 1), axis=1)   # (K,)
  return {"shared": int(len(data.y_test)), "private": int(round(1.0 / float(np.mean(variance))))}


def run_study(config_name: str, seeds: list[int], workdir: Path) -> dict[int, Summary]:
  """Runs (or reads back) every run of the config for every seed."""
  out = {}
  for seed in seeds:
    out[seed] = {}
    for name, config in neural.load_spec(config_name).expand({"seed": seed}):
      if not isinstance(config, neural.methods.mhd.Config):
        raise TypeError(f"config: expected an MHD config in {config_name}, got {config!r}")
      start = time.time()
      run_dir = workdir / config_name / f"seed={seed}" / name
      neural.methods.run_method(config, run_dir)
      rows = neural.read_run(run_dir).rows   # the one reader: refuses an unfinished run
      out[seed][name] = summarise(rows, count_test_points(config))
      print(f"  seed {seed} {name}: {time.time() - start:.0f} s", flush=True)
  return out


class Measured(NamedTuple):
  """A quantity over the seeds: its values (one per seed) and the fewest test points."""

  values: np.ndarray
  n: int


Effects = Callable[[dict[str, Measured]], list[neural.evidence.Effect]]


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim of the paper, the quantities it compares and the effects it says are > 0."""

  text: str
  paper: str
  quantities: dict[str, Quantity]
  effects: Effects


def measure(claim: Claim, summaries: Sequence[Summary]) -> dict[str, Measured]:
  """Each of the claim's quantities on every seed's summary."""
  out = {}
  for name, quantity in claim.quantities.items():
    values, points = zip(*(quantity(s) for s in summaries))
    out[name] = Measured(np.array(values, dtype=float), int(min(points)))
  return out


def judge_claim(claim: Claim, summaries: Sequence[Summary]) -> neural.evidence.Judgement:
  """The claim's verdict over the seeds' summaries (one :class:`Summary` per seed)."""
  return neural.evidence.judge(claim.effects(measure(claim, summaries)))


def _last(run: str, kind: str = "shared") -> Quantity:
  return lambda s: (float(s[run][kind][-1]), s[run]["points"][kind])


def _head(run: str, h: int, kind: str = "shared") -> Quantity:
  return lambda s: (float(s[run][kind][h]), s[run]["points"][kind])


def _reported(run: str) -> Quantity:
  return lambda s: (s[run]["reported"], s[run]["points"]["shared"])


def _hop(run: str, d: int, h: int) -> Quantity:
  return lambda s: (float(s[run]["hops"][d][h]), s[run]["points"]["private"])


def _effect(label: str, v: dict[str, Measured], names: Sequence[str],
            per_seed: Callable[..., np.ndarray]) -> neural.evidence.Effect:
  """``per_seed(*values of names)`` as an effect, with the binomial error of those accuracies."""
  parts = [v[name] for name in names]
  return neural.evidence.Effect(label, per_seed(*(p.values for p in parts)),
                       np.concatenate([p.values for p in parts]), min(p.n for p in parts))


def _diff(v: dict[str, Measured], a: str, b: str) -> neural.evidence.Effect:
  return neural.evidence.difference(f"{a} - {b}", v[a].values, v[b].values, min(v[a].n, v[b].n))


def _beats(*pairs: tuple[str, str]) -> Effects:
  """Every pair (a, b): a > b."""
  return lambda v: [_diff(v, a, b) for a, b in pairs]


def _order(*names: str) -> Effects:
  """names[0] > names[1] > ...: each neighbour beats the next."""
  return _beats(*zip(names, names[1:]))


def table1_claims() -> list[Claim]:
  iid, skew = "skew=0.0__method=", "skew=100.0__method="
  return [
      Claim("MHD's last aux head beats isolated training on the shared set, skewed labels",
            "s=100: 54.5% vs 25.1% (Table 1)",
            {"mhd last aux": _last(skew + "mhd"), "isolated": _head(skew + "mhd-isolated", 0)},
            _beats(("mhd last aux", "isolated"))),
      Claim("... and with iid labels", "s=0: 59.9% vs 46.3% (Table 1)",
            {"mhd last aux": _last(iid + "mhd"), "isolated": _head(iid + "mhd-isolated", 0)},
            _beats(("mhd last aux", "isolated"))),
      Claim("FedAvg every S_P steps beats MHD (an upper bound), skewed labels",
            "s=100: 68.0% vs 54.5% (Table 1)",
            {"fedavg": _head(skew + "mhd-fedavg", 0), "mhd last aux": _last(skew + "mhd")},
            _beats(("fedavg", "mhd last aux"))),
      Claim("... and with iid labels", "s=0: 70.5% vs 59.9% (Table 1)",
            {"fedavg": _head(iid + "mhd-fedavg", 0), "mhd last aux": _last(iid + "mhd")},
            _beats(("fedavg", "mhd last aux"))),
      Claim("MHD gains more over isolated training with skewed labels than with iid ones",
            "+29.4 points at s=100, +13.6 at s=0 (Table 1)",
            {"mhd s=100": _last(skew + "mhd"), "isolated s=100": _head(skew + "mhd-isolated", 0),
             "mhd s=0": _last(iid + "mhd"), "isolated s=0": _head(iid + "mhd-isolated", 0)},
            lambda v: [_effect("gain s=100 - gain s=0", v, ("mhd s=100", "isolated s=100",
                                                            "mhd s=0", "isolated s=0"),
                               lambda a, b, c, d: (a - b) - (c - d))]),
      Claim("With iid labels the aux head beats the main head on shared and private accuracy",
            "Fig. 3, s=0 (no numbers in the text)",
            {"last aux shared": _last(iid + "mhd"), "main shared": _head(iid + "mhd", 0),
             "last aux private": _last(iid + "mhd", "private"),
             "main private": _head(iid + "mhd", 0, "private")},
            _beats(("last aux shared", "main shared"), ("last aux private", "main private"))),
      # mhd_small's 2 aux heads: the main head keeps the best private accuracy when it
      # beats each of them
      Claim("With skewed labels the aux heads win on the shared set, the main head keeps the "
            "best private accuracy", "Fig. 3, Fig. 4, s=100 (no numbers in the text)",
            {"last aux shared": _last(skew + "mhd"), "main shared": _head(skew + "mhd", 0),
             "main private": _head(skew + "mhd", 0, "private"),
             "aux 1 private": _head(skew + "mhd", 1, "private"),
             "aux 2 private": _head(skew + "mhd", 2, "private")},
            _beats(("last aux shared", "main shared"), ("main private", "aux 1 private"),
                   ("main private", "aux 2 private"))),
  ]


def ablation_claims() -> list[Claim]:
  return [
      Claim("More aux heads raise the last aux head's shared accuracy with skewed labels",
            "Fig. 4, s=100: 'a very profound positive effect' (no numbers in the text)",
            {"1 head": _last("heads=1"), "2 heads": _last("reference"),
             "4 heads": _last("heads=4")},
            _order("4 heads", "2 heads", "1 head")),
      Claim("The most confident target beats a random one (last aux head, shared set)",
            "s=100, 4 aux heads: 54.5% vs 49% (Sec. 4.2.2)",
            {"confident": _last("reference"), "random": _last("random_target")},
            _beats(("confident", "random"))),
      Claim("Random targets lower the main head's private accuracy",
            "s=100: 72.1% vs 71.3% (Sec. 4.2.2)",
            {"confident": _head("reference", 0, "private"),
             "random": _head("random_target", 0, "private")},
            _beats(("confident", "random"))),
      Claim("Prediction distillation alone helps more than embedding distillation alone",
            "Fig. 3 (no numbers in the text)",
            {"prediction only": _reported("prediction_only"),
             "embedding only": _reported("embedding_only")},
            _beats(("prediction only", "embedding only"))),
      Claim("Both losses together beat either alone", "Fig. 3 (no numbers in the text)",
            {"both": _reported("reference"), "prediction only": _reported("prediction_only"),
             "embedding only": _reported("embedding_only")},
            _beats(("both", "prediction only"), ("both", "embedding only"))),
      Claim("More teachers per step (Delta = 3 vs 1) raise the last aux head's shared accuracy",
            "s=100, 4 aux heads: 54.5% -> 56.4% (Sec. 4.2.2)",
            {"Delta=1": _last("reference"), "Delta=3": _last("delta=3")},
            _beats(("Delta=3", "Delta=1"))),
  ]


def topology_claims() -> list[Claim]:
  isl, cyc, full = "graph=islands", "graph=directed-ring", "graph=complete"
  heads = ("main", "aux 1", "aux 2", "aux 3")   # mhd_topology_small's 3 aux heads
  return [
      Claim("Cycle beats islands on the shared set (last aux head)", "Fig. 6 (no numbers)",
            {"cycle": _last(cyc), "islands": _last(isl)}, _beats(("cycle", "islands"))),
      Claim("The baseline (complete graph) matches the cycle closely (closer than islands)",
            "Fig. 6 (no numbers)",
            {"complete": _last(full), "cycle": _last(cyc), "islands": _last(isl)},
            lambda v: [_effect("abs(complete - islands) - abs(complete - cycle)", v,
                               ("complete", "cycle", "islands"),
                               lambda c, y, i: np.abs(c - i) - np.abs(c - y))]),
      Claim("The topology effect is on the aux heads, not the main head",
            "Sec. 4.4 (no numbers)",
            {"last aux cycle": _last(cyc), "last aux islands": _last(isl),
             "main cycle": _head(cyc, 0), "main islands": _head(isl, 0)},
            lambda v: [_effect("(last aux: cycle - islands) - abs(main: cycle - islands)", v,
                               ("last aux cycle", "last aux islands", "main cycle",
                                "main islands"),
                               lambda a, b, c, d: (a - b) - np.abs(c - d))]),
      Claim("Islands: good on the in-island peer, poor on the other island (last aux head)",
            "Fig. 6 (no numbers)",
            {"in-island": _hop(isl, 1, -1), "other island": _hop(isl, -1, -1)},
            _beats(("in-island", "other island"))),
      Claim("Cycle: best on the direct teacher (Cycle-1), then Cycle-2, then Cycle-3 "
            "(last aux head)", "Fig. 6 (no numbers)",
            {"Cycle-1": _hop(cyc, 1, -1), "Cycle-2": _hop(cyc, 2, -1),
             "Cycle-3": _hop(cyc, 3, -1)},
            _order("Cycle-1", "Cycle-2", "Cycle-3")),
      Claim("Cycle: aux heads 2 and 3 do well on Cycle-2 (the teacher's teacher), the main "
            "head and aux head 1 do not", "Fig. 6 (no numbers)",
            {head: _hop(cyc, 2, h) for h, head in enumerate(heads)},
            _beats(*((a, b) for a in ("aux 2", "aux 3") for b in ("main", "aux 1")))),
      Claim("Cycle: aux head 3 improves markedly on Cycle-3 (two teachers removed)",
            "Fig. 6 (no numbers)",
            {head: _hop(cyc, 3, h) for h, head in enumerate(heads)},
            _beats(*(("aux 3", b) for b in heads[:3]))),
  ]


CLAIMS = {"table1": table1_claims, "ablation": ablation_claims, "topology": topology_claims}


def claims_table(claims: list[Claim], results: dict[int, Summary]) -> str:
  """The verdicts (``neural.evidence.judgement_table``: statement, paper, each effect's mean +- 95%
  half-width, seeds, verdict, and the count of verdicts), then each claim's quantities
  (mean +- sample sd over the seeds)."""
  summaries = list(results.values())
  verdicts = neural.evidence.judgement_table([(c.text, c.paper, judge_claim(c, summaries))
                                     for c in claims])
  lines = ["| claim | quantities: mean +- sd over the seeds |", "| --- | --- |"]
  for claim in claims:
    measured = measure(claim, summaries)
    shown = ", ".join(f"{k} {m.values.mean():.3f} +- {_sd(m.values):.3f}"
                      for k, m in measured.items())
    lines.append(f"| {claim.text} | {shown} |")
  return verdicts + "\n\n" + "\n".join(lines)


def _sd(values: np.ndarray) -> float:
  return float(values.std(ddof=1)) if values.size > 1 else 0.0


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--study", required=True, choices=sorted(STUDIES))
  parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
  parser.add_argument("--workdir", type=Path, default=None,
                      help="keep the runs here (default: a temporary directory)")
  args = parser.parse_args()
  seeds = [int(s) for s in args.seeds.split(",")]
  config_name = STUDIES[args.study]
  start = time.time()
  with tempfile.TemporaryDirectory() as tmp:
    try:
      results = run_study(config_name, seeds, args.workdir or Path(tmp))
    except neural.ExperimentError as e:   # a workdir holding other or unfinished runs
      parser.exit(2, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
  print(f"{config_name}, seeds {seeds}, {time.time() - start:.0f} s\n")
  print(claims_table(CLAIMS[args.study](), results))


if __name__ == "__main__":
  main()
