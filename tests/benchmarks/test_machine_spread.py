"""benchmarks/machine_spread.py: two reproductions of one figure compared statistic by
statistic; a known shift of one run shows up as that shift, and nothing else moves."""

import importlib.util
import json
from pathlib import Path
import sys

import neural
from neural import evidence
from neural._src.figures.reproduce_curves import curves_to_mapping

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
  spec = importlib.util.spec_from_file_location("benchmark_machine_spread",
                                                BENCHMARKS / "machine_spread.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


def _write(path, curves):
  path.write_text(json.dumps({"figure": "Fig. 6", "configs": [
      {"curves": curves_to_mapping(curves)}]}))
  return str(path)


def test_a_shift_of_one_run_is_the_spread_it_reports(tmp_path, capsys):
  curves = {n: c for n, c in evidence.authors_curves("Fig. 6").items() if "/" not in n}
  shifted = dict(curves)
  run = shifted["alpha=1.0__avgkd"]
  shifted["alpha=1.0__avgkd"] = run._replace(
      values=((run.values[0][0] + 0.02,) + run.values[0][1:],))   # its round 1 only
  module = _load()
  assert module.main([_write(tmp_path / "a.json", curves),
                      _write(tmp_path / "b.json", curves)]) == 0
  same = capsys.readouterr().out
  assert "max 0.0000" in same and "verdicts that differ: 0" in same
  assert module.main([_write(tmp_path / "a.json", curves),
                      _write(tmp_path / "c.json", shifted)]) == 0
  out = capsys.readouterr().out
  # Round 1 enters the gain (end - round 1) and the peak of AvgKD at Alpha 1: moved by 0.02.
  assert "max 0.0200" in out and "median 0.0000" in out


def test_the_docs_sections_come_from_a_reproduce_json(tmp_path, capsys):
  """scripts/reproduce_docs.py prints a figure's headline, where it ran and its counted
  checks (with the control's two columns) from the reproduce.json a run wrote."""
  spec = importlib.util.spec_from_file_location(
      "reproduce_docs", BENCHMARKS.parent / "scripts" / "reproduce_docs.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  horizons = {name: 5 for name in evidence.authors_curves("Fig. 6")}
  checks = tuple(evidence.control_checks("Fig. 6", horizons))
  control = {(c.statement, c.setting): c for c in checks}
  curves = {n: c for n, c in evidence.authors_curves("Fig. 6").items() if "/" not in n}
  result = neural.Reproduction("Fig. 6", "small", {}, (0, 1, 2), (evidence.ConfigReproduction(
      "fig06", "", "w", curves, checks, control, "w/reproduce.png", control),),
      {"md": "", "json": ""}, 60.0, 600.0, 2, {"python": "3.11.7", "packages": {"jax": "0.1"},
                                              "device": {"backend": "cpu"}, "cpu": {"cores": 2}})
  (tmp_path / "fig6").mkdir()
  (tmp_path / "fig6" / "reproduce.json").write_text(json.dumps(result.to_dict()))
  assert module.main(["--workdir", str(tmp_path), "--figures", "6"]) == 0
  out = capsys.readouterr().out
  counted = result.counted
  assert out.startswith("### Fig. 6 at small scale, 3 seeds")
  assert "(3 seeds; 10.0 min over 2 calls; Python 3.11.7, jax 0.1" in out
  assert f"**5 sentences, {len(counted)} checks: " in out
  rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
  assert len(rows) == len(counted) + 1   # the header
  assert module.main(["--workdir", str(tmp_path), "--figures", "8"]) == 2
