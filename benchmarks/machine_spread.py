"""How far the same figure's statistics move between two machines (or two settings of one).

Float32 training is not bit-reproducible across machines: the cores a process may use,
the SIMD width and the XLA version change the order of reductions, and ten epochs of
training carry such differences into the test accuracies. This script takes two
reproductions of one figure with the same seeds (their ``reproduce.json``, or their work
directories), decides every check on each and compares, statistic by statistic, the
numbers the verdicts rest on (each rule's effect, in accuracy units or the units of a
relative drop), and the verdicts.

    python benchmarks/machine_spread.py A/reproduce.json B/reproduce.json [--seeds K]

``--seeds K`` uses the first K seeds of both (e.g. a one-seed rerun against seed 0 of a
three-seed one). It prints the quantiles of |A - B| and the verdicts that differ;
``rules.MACHINE_SPREAD`` (the margin under which a verdict is "near the threshold") is
set from the 90th percentile of such a comparison (docs/reproduce.md says which).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import re
import sys

import numpy as np

import neural

_EFFECT = re.compile(r"([+-]\d+\.\d+) ± ")


def _mappings(path: str, seeds: int | None) -> tuple[str, list[dict]]:
  """(the figure's number, each config's curves in check_claims' format)."""
  file = Path(path)
  file = file / "reproduce.json" if file.is_dir() else file
  data = json.loads(file.read_text())
  out = []
  for config in data["configs"]:
    curves = config["curves"]
    if seeds is not None:
      curves = {setting: {variant: {k: (v[:seeds] if k in ("mean", "agents", "local",
                                                               "test_sets") else v)
                                    for k, v in entry.items()}
                          for variant, entry in runs.items()}
                for setting, runs in curves.items()}
    out.append(curves)
  return str(data["figure"]).split()[-1], out


def _effects(figure: str, mappings: list[dict]) -> dict[str, tuple[str, list[float]]]:
  """By check (statement [setting]): its verdict and the effects its rule decided on
  (``Check.evidence``: ``effect ± half-width`` per statistic)."""
  out: dict[str, tuple[str, list[float]]] = {}
  for curves in mappings:
    for check in neural.evidence.check_claims(figure, curves):
      if check.verdict == "not testable here":
        continue
      out[f"{check.statement} [{check.setting}]"] = (
          check.verdict, [float(x) for x in _EFFECT.findall(check.evidence)])
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("a")
  parser.add_argument("b")
  parser.add_argument("--seeds", type=int, default=None)
  args = parser.parse_args(argv)
  figure_a, curves_a = _mappings(args.a, args.seeds)
  figure_b, curves_b = _mappings(args.b, args.seeds)
  if figure_a != figure_b:
    print(f"machine_spread: {args.a} is Fig. {figure_a}, {args.b} is Fig. {figure_b}",
          file=sys.stderr)
    return 2
  a, b = _effects(figure_a, curves_a), _effects(figure_b, curves_b)
  gaps, differ = [], []
  for key in a.keys() & b.keys():
    (va, ea), (vb, eb) = a[key], b[key]
    if len(ea) == len(eb):
      gaps += [abs(x - y) for x, y in zip(ea, eb) if np.isfinite(x) and np.isfinite(y)]
    if va != vb:
      differ.append(f"  {key}: {va} / {vb}")
  gaps_array = np.asarray(gaps)
  print(f"Fig. {figure_a}: {len(a.keys() & b.keys())} checks, {len(gaps)} statistics compared"
        + (f" (first {args.seeds} seed(s))" if args.seeds else ""))
  if gaps:
    q = np.quantile(gaps_array, [0.5, 0.9, 0.95, 1.0])
    print(f"|A - B| of the statistics: median {q[0]:.4f}, 90th percentile {q[1]:.4f}, "
          f"95th {q[2]:.4f}, max {q[3]:.4f}")
  print(f"verdicts that differ: {len(differ)}")
  print("\n".join(sorted(differ)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
