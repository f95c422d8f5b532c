"""benchmarks/machine_spread.py: two reproductions of one figure compared statistic by
statistic; a known shift of one run shows up as that shift, and nothing else moves."""

import importlib.util
import json
from pathlib import Path
import sys

import neural
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
  curves = {n: c for n, c in neural.authors_curves("Fig. 6").items() if "/" not in n}
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
