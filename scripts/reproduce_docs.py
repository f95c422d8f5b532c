"""The small-scale sections of docs/reproduce.md, from runs made by the committed code.

    python scripts/reproduce_docs.py --workdir runs --run       # run (or resume) and print
    python scripts/reproduce_docs.py --workdir runs > sections.md   # print from finished runs

With ``--run`` it runs (or resumes) ``neural reproduce`` for Figs. 6, 8 (with Fig. 6's
workdir, for the statements comparing the two), 5 and 4 at small scale into
``WORKDIR/figN`` (``--jobs auto``: two runs at a time on a 2-core CPU; a GPU runs 10 seeds
instead of 3). Either way it reads each ``reproduce.json`` and prints, per figure, the
headline (sentences and checks counted once, the checks apart), where and how long it ran,
and a table of the counted checks: the statistics each verdict rests on, the verdict
(near the threshold where marked), the power of an inconclusive one, and the control's
two columns. The prose around the tables in docs/reproduce.md is written by hand.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import subprocess
import sys
from typing import Any

from neural._src.runtime.environment import describe

FIGURES = (6, 8, 5, 4)


def _run(workdir: Path, figure: int) -> None:
  command = [sys.executable, "-m", "neural", "reproduce", "--figure", str(figure),
             "--workdir", str(workdir / f"fig{figure}"), "--jobs", "auto", "--no-progress"]
  if figure == 8:
    command += ["--with", str(workdir / "fig6")]
  subprocess.run(command, check=True)


def _minutes(seconds: float) -> str:
  return f"{seconds / 60:.1f} min"


def _power(s: dict[str, Any]) -> str:
  if s["verdict"] != "inconclusive" or s.get("detectable") is None:
    return ""
  needed = s.get("seeds_needed", 0)
  return (f"±{s['detectable']:.3f}; " + ("no number of seeds" if needed < 0 else
                                          f"{needed} seeds"))


def _cell(text: Any) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def section(report: dict[str, Any]) -> str:
  """One figure's section: headline, where it ran, the counted checks."""
  statements = [s for c in report["configs"] for s in c["statements"]]
  counted = [s for s in statements if s["standing"] == "in scope"]
  counts = report["counts"]
  apart = ", ".join(f"{n} {standing}" for standing, n in report["apart"].items() if n)
  near = sum(s["near_threshold"] and s["verdict"] != "not testable here" for s in counted)
  seeds = len(report["seeds"])
  controlled = [s for s in counted if s.get("control")]
  lines = [
      f"### {report['figure']} at small scale, {seeds} seeds", "",
      f"`neural reproduce --figure {report['figure'].split()[-1]} --jobs auto` "
      f"({seeds} seeds; {_minutes(report['seconds_total'])} over {report['calls']} "
      f"call{'s' if report['calls'] > 1 else ''}; {describe(report['environment'])}): "
      f"**{report['sentences']} sentences, {len(counted)} checks: "
      f"{counts['reproduced']} reproduced, {counts['not reproduced']} not reproduced, "
      f"{counts['no difference']} no difference, {counts['inconclusive']} inconclusive"
      + (f" ({near} near the threshold)" if near else "") + f"**; apart: {apart or 'none'}.",
      ""]
  if controlled:
    same = sum(s["control"] == s["verdict"] and s["verdict"] != "inconclusive"
               for s in controlled)
    neither = sum(s["control"] == "inconclusive" and s["verdict"] == "inconclusive"
                  for s in controlled)
    lines += [f"Of the {len(controlled)} counted checks the authors' runs control, {same} reach "
              f"the control's decided verdict and {neither} are decided on neither side.", ""]
  head = ("| statement | setting | effect ± 95% half-width | term | verdict | power (80%): "
          "decides; the effect needs |")
  rule = "| --- | --- | --- | --- | --- | --- |"
  if controlled:
    head += " authors' runs | at our noise |"
    rule += " --- | --- |"
  lines += [head, rule]
  for s in counted:
    verdict = s["verdict"] + (" (near the threshold)" if s["near_threshold"] else "")
    if s["verdict"] == "not reproduced":
      verdict = f"**{verdict}**"
    row = (f"| {_cell(s['statement'])} | {s['setting'] or 'all'} | {_cell(s['evidence'])} | "
           f"{s['term']} | {verdict} | {_power(s)} |")
    if controlled:
      row += f" {s.get('control') or 'no control'} | {s.get('control_at_our_noise') or ''} |"
    lines.append(row)
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", type=Path, required=True)
  parser.add_argument("--run", action="store_true", help="run (or resume) the figures first")
  parser.add_argument("--figures", type=int, nargs="*", default=list(FIGURES))
  args = parser.parse_args(argv)
  for figure in args.figures:
    if args.run:
      _run(args.workdir, figure)
    path = args.workdir / f"fig{figure}" / "reproduce.json"
    if not path.is_file():
      print(f"reproduce_docs: {path} is missing: run with --run", file=sys.stderr)
      return 2
    print(section(json.loads(path.read_text())))
  return 0


if __name__ == "__main__":
  sys.exit(main())
