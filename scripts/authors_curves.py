"""Derives ``neural/_src/data/authors_curves.json`` from the authors' public logs.

Afonin & Karimireddy published the per-round test accuracies behind their Figs. 6,
8, 9 and 10 with their code (github.com/AfoninAndrei/ICLR2022, ``config/``, JSON
files of numbers). Their repository has no licence, so the project carries the
numbers only (facts), not their files; this script reads a checkout and writes the
numbers in the curve format of ``neural.evidence.check_claims``:

    git clone https://github.com/AfoninAndrei/ICLR2022 /tmp/ICLR2022
    python scripts/authors_curves.py /tmp/ICLR2022 [--out neural/_src/data/authors_curves.json]

Which log feeds which curve (``<D>`` is ``config/data-heterog/MNIST/2 agents`` for
Figs. 6 and 8, ``config/data-heterog/CIFAR10/2 agents`` for Figs. 9 and 10; ``<a>``
the Alpha as the file names write it, 0, 0.01, 0.1, 1; ``<m>`` is "" for the same
model (Figs. 6, 9) and "_Diff" for different models (Figs. 8, 10)):

- ``avgkd``: ``<D>/AvgKD/result_<a><m>.json``, ``{round: {agent: {"Test_acc": ...}}}``,
  20 rounds, both agents (the mean is the paper's curve);
- ``pkd`` and ``pkd-mean``: ``<D>/PKD/result_<a><m>.json`` (the authors' PKD is the
  ``pkd-mean`` of this project; the paper draws it as PKD);
- ``fedavg`` (same model only): ``<D>/FedAvg/result_<a>.json``;
- ``ekd``: ``<D>/EKD/result_<a><m>.json``, ``{step: {"Test_acc": ...}}`` over 40 steps:
  the ensemble's partial sums; the paper's curve is the even ones (steps 0, 2, ...);
  its ``local`` are the agents' round-1 models of the AvgKD log (the same local training);
- ``ekd:akd-from-agent1``: ``<D>/AKD/result_<a><m>.json``, ``{round: {agent: ...}}``
  (a round is two steps, agent 1 then agent 2);
- ``ekd:akd-from-agent2`` (CIFAR-10 only): ``<D>/EKD/result_2_<a><m>.json``;
- ``central``: ``config/data-heterog/<MNIST|CIFAR10>/Centralized/result.json`` (one value).

Settings are named as the figure configs name them (``alpha=0.0``, ...), so the
same claims run on these curves and on ``neural reproduce``'s. Both test sets have
10,000 images. The logs of the 7:3 split (``config/data-heterog-partit``) and the
cross-entropy / MSE variants of Figs. 11-12 are not used (no figure of the paper's
claims reads them).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import subprocess
import tempfile

ALPHAS = {"alpha=0.0": "0", "alpha=0.01": "0.01", "alpha=0.1": "0.1", "alpha=1.0": "1"}
FIGURES = {"Fig. 6": ("MNIST", "mnist", ""), "Fig. 8": ("MNIST", "mnist", "_Diff"),
           "Fig. 9": ("CIFAR10", "cifar10", ""), "Fig. 10": ("CIFAR10", "cifar10", "_Diff")}
DIGITS = 6


def _read(root: Path, relative: str) -> dict:
  with open(root / relative) as f:
    return json.load(f)


def _num(x: float) -> float:
  return round(float(x), DIGITS)


def _per_agent(log: dict) -> list[list[float]]:
  """``agents[a][r]`` from ``{round: {agent: {"Test_acc": ...}}}``."""
  rounds = sorted(log, key=int)
  agents = sorted(log[rounds[0]], key=int)
  return [[_num(log[r][a]["Test_acc"]) for r in rounds] for a in agents]


def _curve(agents: list[list[float]], source: str) -> dict:
  mean = [_num(sum(v) / len(v)) for v in zip(*agents)]
  return {"mean": [mean], "agents": [agents], "source": source}


def figure_curves(root: Path, figure: str) -> dict:
  """The curves of one figure, by setting and run variant."""
  data, dataset, model = FIGURES[figure]
  base = f"config/data-heterog/{data}/2 agents"
  central = _read(root, f"config/data-heterog/{data}/Centralized/result.json")["Test_acc"]
  settings = {}
  for setting, a in ALPHAS.items():
    runs = {}
    avgkd = f"{base}/AvgKD/result_{a}{model}.json"
    local_models = [v[0] for v in _per_agent(_read(root, avgkd))]
    runs["avgkd"] = _curve(_per_agent(_read(root, avgkd)), avgkd)
    pkd = f"{base}/PKD/result_{a}{model}.json"
    runs["pkd"] = runs["pkd-mean"] = _curve(_per_agent(_read(root, pkd)), pkd)
    if not model:
      fedavg = f"{base}/FedAvg/result_{a}.json"
      runs["fedavg"] = _curve(_per_agent(_read(root, fedavg)), fedavg)
    ekd = f"{base}/EKD/result_{a}{model}.json"
    steps = _read(root, ekd)
    even = [_num(steps[t]["Test_acc"]) for t in sorted(steps, key=int) if int(t) % 2 == 0]
    runs["ekd"] = {"mean": [even], "local": [local_models], "source": ekd}
    akd = f"{base}/AKD/result_{a}{model}.json"
    runs["ekd:akd-from-agent1"] = _curve(_per_agent(_read(root, akd)), akd)
    second = f"{base}/EKD/result_2_{a}{model}.json"
    if (root / second).is_file():
      runs["ekd:akd-from-agent2"] = _curve(_per_agent(_read(root, second)), second)
    runs["central"] = {"mean": [[_num(central)]], "source":
                       f"config/data-heterog/{data}/Centralized/result.json"}
    settings[setting] = runs
  return {"dataset": dataset, "test_points": 10000, "curves": settings}


def _dumps(value, indent: str = "") -> str:
  """JSON with objects indented and each list of numbers on one line."""
  if isinstance(value, dict):
    inner = indent + "  "
    items = [f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"
  if isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
    inner = indent + "  "
    return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + "\n" + indent + "]"
  return json.dumps(value)


def commit_of(root: Path) -> str:
  try:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("checkout", type=Path, help="a checkout of AfoninAndrei/ICLR2022")
  parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent
                      / "neural" / "_src" / "data" / "authors_curves.json")
  args = parser.parse_args()
  table = {
      "source": "github.com/AfoninAndrei/ICLR2022, config/ (per-round test accuracy logs); "
                f"commit {commit_of(args.checkout)}; derived by scripts/authors_curves.py",
      "accuracy": "best",
      "figures": {figure: figure_curves(args.checkout, figure) for figure in FIGURES}}
  text = _dumps(table) + "\n"
  fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".authors_curves.")
  with os.fdopen(fd, "w") as f:
    f.write(text)
  os.chmod(tmp, 0o644)
  os.replace(tmp, args.out)
  print(f"wrote {args.out} ({len(text):,} bytes)")


if __name__ == "__main__":
  main()
