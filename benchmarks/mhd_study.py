"""Which claims of Zhmoginov et al. (2023), multi-headed distillation, reproduce at CPU scale.

    python benchmarks/mhd_study.py --study table1 --seeds 0,1,2      # mhd_small
    python benchmarks/mhd_study.py --study ablation --seeds 0,1      # mhd_ablation_small
    python benchmarks/mhd_study.py --study topology --seeds 0,1,2    # mhd_topology_small

Runs every run of the study's shipped config once per seed (``--seeds``: the
config's ``seed``, which sets the data split and the initialisations), in
``WORKDIR/CONFIG/seed=S/RUN`` when ``--workdir`` is given (a finished run is read
back, an interrupted one resumes), else in a temporary directory. Then prints,
for each of the paper's claims that the study tests, the quantities it compares
(after the last round, mean over the clients, then mean and standard deviation
over the seeds), how many seeds satisfy the claim, and a verdict: "yes" when the
seed means and every seed satisfy it, "unclear" when the means do but some seed
does not (a difference within the seed-to-seed spread), "no" when the means do not.

The quantities: ``shared[h]`` is head h's accuracy on the test set (the shared,
uniform label distribution: the paper's beta_sh; h = 0 the main head, h = m the
last aux head); ``private[h]`` its beta_priv; ``hop d, head h`` the mean of head h's
accuracy on the private distribution of a client whose knowledge is d teacher
hops away (d = 1: a direct teacher, the paper's "Cycle-1"; d = -1: another island).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import dataclasses
from pathlib import Path
import tempfile
import time

import numpy as np

import neural

STUDIES = {"table1": "mhd_small", "ablation": "mhd_ablation_small",
           "topology": "mhd_topology_small"}

Summary = dict[str, dict]   # run name -> {"shared", "private", "hops"}


def summarise(rows: list[dict]) -> dict:
  """Head accuracies after the last round, mean over clients; peer accuracy by hop."""
  last = max(r["round"] for r in rows)
  final = [r for r in rows if r["round"] == last]
  out = {"shared": np.mean([r["head_accuracies"] for r in final], axis=0),
         "private": np.mean([r["private_accuracies"] for r in final], axis=0),
         "reported": float(np.mean([r["test_accuracy"] for r in final])), "hops": {}}
  if final[0].get("peer_hops") is not None:
    by_hop: dict[int, list] = {}
    for r in final:
      peers = np.asarray(r["peer_accuracies"])          # (heads, K)
      for j, d in enumerate(r["peer_hops"]):
        if d != 0:
          by_hop.setdefault(int(d), []).append(peers[:, j])
    out["hops"] = {d: np.mean(v, axis=0) for d, v in by_hop.items()}
  return out


def run_study(config_name: str, seeds: list[int], workdir: Path) -> dict[int, Summary]:
  """Runs (or reads back) every run of the config for every seed."""
  out = {}
  for seed in seeds:
    out[seed] = {}
    for name, config in neural.load_spec(config_name).expand({"seed": seed}):
      if not isinstance(config, neural.methods.MethodConfig):
        raise TypeError(f"config: expected a method config in {config_name}, got {config!r}")
      start = time.time()
      rows = neural.methods.run_method(config, workdir / config_name / f"seed={seed}" / name)
      out[seed][name] = summarise(rows)
      print(f"  seed {seed} {name}: {time.time() - start:.0f} s", flush=True)
  return out


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim of the paper, the quantities it compares and the comparison."""

  text: str
  paper: str
  quantities: dict[str, Callable[[Summary], float]]
  holds: Callable[[dict[str, float]], bool]


def _last(run: str, kind: str = "shared") -> Callable[[Summary], float]:
  return lambda s: float(s[run][kind][-1])


def _head(run: str, h: int, kind: str = "shared") -> Callable[[Summary], float]:
  return lambda s: float(s[run][kind][h])


def _reported(run: str) -> Callable[[Summary], float]:
  return lambda s: s[run]["reported"]


def _max_aux_private(run: str) -> Callable[[Summary], float]:
  return lambda s: float(np.max(s[run]["private"][1:]))


def _hop(run: str, d: int, h: int) -> Callable[[Summary], float]:
  return lambda s: float(s[run]["hops"][d][h])


def table1_claims() -> list[Claim]:
  iid, skew = "skew=0.0__method=", "skew=100.0__method="
  return [
      Claim("MHD's last aux head beats isolated training on the shared set, skewed labels",
            "s=100: 54.5% vs 25.1% (Table 1)",
            {"mhd last aux": _last(skew + "mhd"), "isolated": _head(skew + "mhd-isolated", 0)},
            lambda v: v["mhd last aux"] > v["isolated"]),
      Claim("... and with iid labels", "s=0: 59.9% vs 46.3% (Table 1)",
            {"mhd last aux": _last(iid + "mhd"), "isolated": _head(iid + "mhd-isolated", 0)},
            lambda v: v["mhd last aux"] > v["isolated"]),
      Claim("FedAvg every S_P steps beats MHD (an upper bound), skewed labels",
            "s=100: 68.0% vs 54.5% (Table 1)",
            {"fedavg": _head(skew + "mhd-fedavg", 0), "mhd last aux": _last(skew + "mhd")},
            lambda v: v["fedavg"] > v["mhd last aux"]),
      Claim("... and with iid labels", "s=0: 70.5% vs 59.9% (Table 1)",
            {"fedavg": _head(iid + "mhd-fedavg", 0), "mhd last aux": _last(iid + "mhd")},
            lambda v: v["fedavg"] > v["mhd last aux"]),
      Claim("MHD gains more over isolated training with skewed labels than with iid ones",
            "+29.4 points at s=100, +13.6 at s=0 (Table 1)",
            {"gain s=100": lambda s: _last(skew + "mhd")(s) - _head(skew + "mhd-isolated", 0)(s),
             "gain s=0": lambda s: _last(iid + "mhd")(s) - _head(iid + "mhd-isolated", 0)(s)},
            lambda v: v["gain s=100"] > v["gain s=0"]),
      Claim("With iid labels the aux head beats the main head on shared and private accuracy",
            "Fig. 3, s=0 (no numbers in the text)",
            {"last aux shared": _last(iid + "mhd"), "main shared": _head(iid + "mhd", 0),
             "last aux private": _last(iid + "mhd", "private"),
             "main private": _head(iid + "mhd", 0, "private")},
            lambda v: v["last aux shared"] > v["main shared"]
            and v["last aux private"] > v["main private"]),
      Claim("With skewed labels the aux heads win on the shared set, the main head keeps the "
            "best private accuracy", "Fig. 3, Fig. 4, s=100 (no numbers in the text)",
            {"last aux shared": _last(skew + "mhd"), "main shared": _head(skew + "mhd", 0),
             "best aux private": _max_aux_private(skew + "mhd"),
             "main private": _head(skew + "mhd", 0, "private")},
            lambda v: v["last aux shared"] > v["main shared"]
            and v["main private"] >= v["best aux private"]),
  ]


def ablation_claims() -> list[Claim]:
  return [
      Claim("More aux heads raise the last aux head's shared accuracy with skewed labels",
            "Fig. 4, s=100: 'a very profound positive effect' (no numbers in the text)",
            {"1 head": _last("heads=1"), "2 heads": _last("reference"),
             "4 heads": _last("heads=4")},
            lambda v: v["1 head"] < v["2 heads"] < v["4 heads"]),
      Claim("The most confident target beats a random one (last aux head, shared set)",
            "s=100, 4 aux heads: 54.5% vs 49% (Sec. 4.2.2)",
            {"confident": _last("reference"), "random": _last("random_target")},
            lambda v: v["confident"] > v["random"]),
      Claim("Random targets lower the main head's private accuracy",
            "s=100: 72.1% vs 71.3% (Sec. 4.2.2)",
            {"confident": _head("reference", 0, "private"),
             "random": _head("random_target", 0, "private")},
            lambda v: v["confident"] > v["random"]),
      Claim("Prediction distillation alone helps more than embedding distillation alone",
            "Fig. 3 (no numbers in the text)",
            {"prediction only": _reported("prediction_only"),
             "embedding only": _reported("embedding_only")},
            lambda v: v["prediction only"] > v["embedding only"]),
      Claim("Both losses together beat either alone", "Fig. 3 (no numbers in the text)",
            {"both": _reported("reference"), "prediction only": _reported("prediction_only"),
             "embedding only": _reported("embedding_only")},
            lambda v: v["both"] > max(v["prediction only"], v["embedding only"])),
      Claim("More teachers per step (Delta = 3 vs 1) raise the last aux head's shared accuracy",
            "s=100, 4 aux heads: 54.5% -> 56.4% (Sec. 4.2.2)",
            {"Delta=1": _last("reference"), "Delta=3": _last("delta=3")},
            lambda v: v["Delta=3"] > v["Delta=1"]),
  ]


def topology_claims() -> list[Claim]:
  isl, cyc, full = "graph=islands", "graph=directed-ring", "graph=complete"
  return [
      Claim("Cycle beats islands on the shared set (last aux head)", "Fig. 6 (no numbers)",
            {"cycle": _last(cyc), "islands": _last(isl)}, lambda v: v["cycle"] > v["islands"]),
      Claim("The baseline (complete graph) matches the cycle closely (closer than islands)",
            "Fig. 6 (no numbers)",
            {"complete": _last(full), "cycle": _last(cyc), "islands": _last(isl)},
            lambda v: abs(v["complete"] - v["cycle"]) < abs(v["complete"] - v["islands"])),
      Claim("The topology effect is on the aux heads, not the main head",
            "Sec. 4.4 (no numbers)",
            {"main: cycle - islands": lambda s: _head(cyc, 0)(s) - _head(isl, 0)(s),
             "last aux: cycle - islands": lambda s: _last(cyc)(s) - _last(isl)(s)},
            lambda v: abs(v["main: cycle - islands"]) < v["last aux: cycle - islands"]),
      Claim("Islands: good on the in-island peer, poor on the other island (last aux head)",
            "Fig. 6 (no numbers)",
            {"in-island": _hop(isl, 1, -1), "other island": _hop(isl, -1, -1)},
            lambda v: v["in-island"] > v["other island"]),
      Claim("Cycle: best on the direct teacher (Cycle-1), then Cycle-2, then Cycle-3 "
            "(last aux head)", "Fig. 6 (no numbers)",
            {"Cycle-1": _hop(cyc, 1, -1), "Cycle-2": _hop(cyc, 2, -1),
             "Cycle-3": _hop(cyc, 3, -1)},
            lambda v: v["Cycle-1"] > v["Cycle-2"] > v["Cycle-3"]),
      Claim("Cycle: aux heads 2 and 3 do well on Cycle-2 (the teacher's teacher), the main "
            "head and aux head 1 do not", "Fig. 6 (no numbers)",
            {f"Cycle-2, head {h}": _hop(cyc, 2, h) for h in range(4)},
            lambda v: min(v["Cycle-2, head 2"], v["Cycle-2, head 3"])
            > max(v["Cycle-2, head 0"], v["Cycle-2, head 1"])),
      Claim("Cycle: aux head 3 improves markedly on Cycle-3 (two teachers removed)",
            "Fig. 6 (no numbers)",
            {f"Cycle-3, head {h}": _hop(cyc, 3, h) for h in range(4)},
            lambda v: v["Cycle-3, head 3"] > max(v[f"Cycle-3, head {h}"] for h in range(3))),
  ]


CLAIMS = {"table1": table1_claims, "ablation": ablation_claims, "topology": topology_claims}


def claims_table(claims: list[Claim], results: dict[int, Summary]) -> str:
  """A markdown table: claim, paper, measured (mean +- sd over seeds), seeds, reproduces."""
  lines = ["| claim | paper | measured (mean +- sd over seeds) | seeds that agree | reproduces |",
           "| --- | --- | --- | --- | --- |"]
  for claim in claims:
    per_seed = [{k: f(s) for k, f in claim.quantities.items()} for s in results.values()]
    means = {k: float(np.mean([v[k] for v in per_seed])) for k in claim.quantities}
    sds = {k: float(np.std([v[k] for v in per_seed])) for k in claim.quantities}
    measured = ", ".join(f"{k} {means[k]:.3f} +- {sds[k]:.3f}" for k in claim.quantities)
    agree = sum(bool(claim.holds(v)) for v in per_seed)
    verdict = ("no" if not claim.holds(means) else
               "yes" if agree == len(per_seed) else "unclear")
    lines.append(f"| {claim.text} | {claim.paper} | {measured} | {agree}/{len(per_seed)} "
                 f"| {verdict} |")
  return "\n".join(lines)


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
    results = run_study(config_name, seeds, args.workdir or Path(tmp))
  print(f"{config_name}, seeds {seeds}, {time.time() - start:.0f} s\n")
  print(claims_table(CLAIMS[args.study](), results))


if __name__ == "__main__":
  main()
