"""Per-image outcomes (``record_outcomes``): written with the rows, read into the curves."""

import json

import numpy as np
import pytest

from neural._src.evidence.paper_units import BEST
from neural._src.figures.reproduce_curves import paper_curves
from neural._src.jobs.specs import load_spec
from neural._src.jobs.specs import shipped_configs
from neural._src.kd.experiment import train_and_evaluate
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.outcomes import OUTCOMES_FILE
from neural._src.runtime.outcomes import outcome_line
from neural._src.runtime.outcomes import pack
from neural._src.runtime.outcomes import read_outcomes
from neural._src.runtime.outcomes import row_key
from neural._src.runtime.outcomes import unpack
from neural._src.runtime.rundir import METRICS_FILE

# Tiny runs on the 8x8 digits: a 32-unit MLP, two epochs (so the best epoch may not be the
# last) on 120 points, scored on 60 test images.
TINY = dict(dataset="digits", train_subset=120, test_subset=60, models=("mlp",), tiny=True,
            epochs=2, batch_size=32, epoch_eval=True, record_outcomes=True)
# Logged rounds giving two paper rounds each (AKD: M steps a round; EKD: its even sums).
ROUNDS = {"akd": 4, "avgkd": 2, "pkd-mean": 2, "ekd": 3, "fedavg": 2}


class Interrupt(Exception):
  pass


def _config(protocol, **changes):
  return ExperimentConfig(**{**TINY, "protocol": protocol, "rounds": ROUNDS[protocol],
                             **changes})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Each protocol's run with outcomes recorded: (config, workdir, rows)."""
  out = {}
  for protocol in ROUNDS:
    config = _config(protocol)
    workdir = tmp_path_factory.mktemp(protocol)
    out[protocol] = config, workdir, train_and_evaluate(config, workdir)
  return out


def test_pack_and_unpack_are_inverse():
  right = np.random.default_rng(0).random(13) < 0.5
  assert np.array_equal(unpack(pack(right), 13), right)
  with pytest.raises(ValueError):
    unpack(pack(right), 17)   # 2 bytes hold 16 bits


@pytest.mark.parametrize("protocol", list(ROUNDS))
def test_every_row_has_its_line_whose_bits_give_its_accuracy(runs, protocol):
  config, workdir, rows = runs[protocol]
  lines = read_outcomes(workdir)
  assert sorted(lines, key=str) == sorted((row_key(r) for r in rows), key=str)
  assert len(lines) == len((workdir / OUTCOMES_FILE).read_text().splitlines())
  for row in rows:
    line = lines[row_key(row)]
    assert line["count"] == 60
    assert np.mean(unpack(line["right"], 60)) == row["test_accuracy"]
    assert ("best" in line) == (BEST in row)
    if BEST in row:
      assert np.mean(unpack(line["best"], 60)) == row[BEST]


@pytest.mark.parametrize("protocol", list(ROUNDS))
def test_each_curves_outcomes_average_to_its_values(runs, protocol):
  config, workdir, rows = runs[protocol]
  curves = paper_curves({"run": rows}, {"run": config}, {"run": read_outcomes(workdir)})
  expected = {"ekd": {"run", "run:akd-from-agent1", "run:akd-from-agent2"},
              "fedavg": {"run", "run:server"}}.get(protocol, {"run"})
  assert set(curves) == expected
  for curve in curves.values():
    outcomes = curve.outcome_array()
    assert outcomes is not None and outcomes.shape == (1, curve.done, 60), curve.name
    assert curve.done == (1 if ":akd" in curve.name else 2)   # EKD's 3 steps: 1 AKD round
    np.testing.assert_allclose(outcomes.mean(axis=2), curve.array(), atol=1e-6, rtol=0)
    first = curve.cut(1).outcome_array()
    assert first is not None and first.shape == (1, 1, 60)
  # without the lines, or with one missing, no outcomes (never inconsistent ones)
  assert all(c.outcomes == () for c in paper_curves({"run": rows}, {"run": config}).values())
  lines = read_outcomes(workdir)
  lines.pop(row_key(rows[0]))
  partial = paper_curves({"run": rows}, {"run": config}, {"run": lines})
  assert any(c.outcomes == () for c in partial.values())


def test_metrics_are_the_same_bytes_with_outcomes_off(runs, tmp_path):
  config, workdir, rows = runs["ekd"]
  off = config.replace(record_outcomes=False)
  assert train_and_evaluate(off, tmp_path) == rows
  assert (tmp_path / METRICS_FILE).read_bytes() == (workdir / METRICS_FILE).read_bytes()
  assert not (tmp_path / OUTCOMES_FILE).exists()


def test_a_killed_and_resumed_run_holds_each_rows_outcomes_once(runs, tmp_path):
  """Killed after round 1's rows and outcomes but before its checkpoint, resumed: the same
  files as the uninterrupted run's; likewise a run stopped by max_rounds."""
  config, workdir, rows = runs["avgkd"]
  config = config.replace(rounds=3)
  full = train_and_evaluate(config, tmp_path / "full")

  def interrupt(t):
    if t == 1:
      raise Interrupt

  with pytest.raises(Interrupt):
    train_and_evaluate(config, tmp_path / "cut", on_round_end=interrupt)
  cut = [json.loads(s) for s in (tmp_path / "cut" / OUTCOMES_FILE).read_text().splitlines()]
  assert max(line["round"] for line in cut) == 1   # written, not committed
  assert train_and_evaluate(config, tmp_path / "cut") == full
  train_and_evaluate(config, tmp_path / "parts", max_rounds=2)
  train_and_evaluate(config, tmp_path / "parts")
  want = (tmp_path / "full" / OUTCOMES_FILE).read_bytes()
  for name in ("cut", "parts"):
    assert (tmp_path / name / OUTCOMES_FILE).read_bytes() == want, name
  assert len(want.splitlines()) == len(full) == len(read_outcomes(tmp_path / "cut"))


def test_a_damaged_outcomes_file_keeps_only_the_finished_rows_lines(runs, tmp_path):
  config, _, rows = runs["akd"]
  config = config.replace(rounds=2)
  full = train_and_evaluate(config, tmp_path, max_rounds=1)
  path = tmp_path / OUTCOMES_FILE
  good = path.read_text()
  stray = json.dumps(outcome_line(1, 0, np.ones(60, bool)))   # a round not committed
  path.write_text(good + good + "not json\n" + stray + "\n")
  train_and_evaluate(config, tmp_path)
  lines = path.read_text().splitlines()
  assert [row_key(json.loads(s)) for s in lines] == [(0, 0), (1, 1)]
  assert lines[0] + "\n" == good and len(full) == 1


def test_the_paper_scale_figure_configs_record_outcomes():
  for name in shipped_configs():
    if name.startswith("fig"):
      paper = not name.endswith("_small")
      configs = [c for _, c in load_spec(name).expand()]
      assert all(isinstance(c, ExperimentConfig) and c.record_outcomes == paper
                 for c in configs), name
