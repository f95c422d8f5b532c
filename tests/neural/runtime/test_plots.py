"""Plots that cannot be misread: labels from the rows, legends and titles outside the axes,
one round numbering, agents numbered as printed."""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
import numpy as np
import pytest

from fedkrr._src.paper import demo
from neural._src.evidence.paper_units import unfinished_steps
from neural._src.runtime import plots


def _feddkc_rows(refinement, rounds=3):
  rows = []
  for t in range(rounds):
    for k, model in enumerate(("resnet2", "resnet4")):
      rows.append({"round": t, "agent": k, "method": "feddkc", "model": model,
                   "refinement": refinement, "test_accuracy": 0.3 + 0.1 * t, "test_loss": 1.0})
    rows.append({"round": t, "agent": "server", "method": "feddkc", "model": "resnet20",
                 "refinement": refinement, "test_accuracy": 0.5, "test_loss": 1.0})
  return rows


def _kd_rows(protocol, steps, agents=2):
  rows = []
  for t in range(steps):
    for a in ([t % agents] if protocol == "akd" else range(agents)):
      rows.append({"round": t, "agent": a, "protocol": protocol, "model": "mlp",
                   "test_accuracy": 0.5 + 0.01 * t, "test_loss": 0.1})
  return rows


def _renderer(fig):
  """Lays the figure out as savefig does (an Agg canvas of its own: no backend switch)."""
  canvas = FigureCanvasAgg(fig)
  canvas.draw()
  return canvas.get_renderer()


def _inside(inner, outer, slack=1.0):
  return (inner.x0 >= outer.x0 - slack and inner.x1 <= outer.x1 + slack
          and inner.y0 >= outer.y0 - slack and inner.y1 <= outer.y1 + slack)


def _overlap(a, b):
  return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_a_server_is_named_by_the_rows_method_not_a_constant():
  label, _ = plots.curve_label({"agent": "server", "method": "feddkc", "model": "resnet20"})
  assert label == "feddkc server (resnet20)"
  label, _ = plots.curve_label({"agent": "server", "protocol": "fedavg", "model": "cnn"})
  assert label == "fedavg server (cnn)"
  fig = plots.sweep_figure({"beta=0.5__kkr": _feddkc_rows("kkr")}, units="paper")
  labels = [t.get_text() for t in fig.legends[0].get_texts()]
  assert "feddkc server (resnet20)" in labels and not any("FedAvg" in t for t in labels)


def test_agents_are_numbered_from_0_as_the_command_line_prints_them():
  assert plots.curve_label({"agent": 0, "model": "cnn"})[0] == "agent 0 (cnn)"
  assert plots.curve_label({"agent": 1, "start": 1, "model": "cnn"})[0] == "AKD from agent 1"


def test_the_round_axis_says_whose_rounds_it_counts():
  methods = plots.round_axis_label(_feddkc_rows("kkr"), "paper")
  assert "AKD" not in methods and "EKD" not in methods
  assert plots.round_axis_label(_kd_rows("avgkd", 3), "steps").startswith("round (0:")
  paper = plots.round_axis_label(_kd_rows("akd", 4), "paper")
  assert paper.startswith("paper round (1:") and "AKD" in paper and "EKD" not in paper


@pytest.mark.parametrize("make", [
    lambda: plots.sweep_figure({f"beta={b}__{r}": _feddkc_rows(r) for b in (3.0, 0.5)
                                for r in ("kkr", "skr", "fedgkt")},
                               title="FedDKC (KKR, SKR) vs FedGKT " * 8, units="paper"),
    lambda: plots.run_figure(_kd_rows("avgkd", 4), title="a long title " * 12, units="steps"),
    lambda: demo.mse_figure({"akd": np.linspace(1, 2, 5), "pkd": np.ones((5, 2)),
                             "pkd-mean": np.ones((5, 2))}, [0.1, 0.2], [0.3, 0.4]),
], ids=["sweep", "run", "closed-forms"])
def test_legends_and_titles_stay_outside_the_axes_and_inside_the_figure(make):
  fig = make()
  renderer = _renderer(fig)
  page = fig.bbox
  axes = [ax.get_window_extent(renderer) for ax in fig.axes if ax.get_visible()]
  for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
    box = legend.get_window_extent(renderer)
    assert _inside(box, page), "legend cut by the figure's edge"
    assert not any(_overlap(box, ax) for ax in axes), "legend over the data"
  titles = [c for c in fig.get_children() if isinstance(c, Text) and c.get_text()]
  titles += [ax.title for ax in fig.axes if ax.get_title()]
  assert titles
  for text in titles:
    assert _inside(text.get_window_extent(renderer), page), f"title cut: {text.get_text()}"


def test_the_closed_forms_figure_has_one_entry_per_line():
  fig = demo.mse_figure({"pkd": np.ones((5, 2)), "pkd-mean": np.ones((5, 2))},
                        [0.1, 0.2], [0.3, 0.4])
  labels = [t.get_text() for t in fig.legends[0].get_texts()]
  assert len(labels) == len(set(labels)) == 8   # 2 x 2 agents' curves, 2 central, 2 local
  lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
  pkd, mean = lines["pkd, agent 0"], lines["pkd-mean, agent 0"]
  assert (pkd.get_color(), pkd.get_marker()) != (mean.get_color(), mean.get_marker())


def test_one_curve_per_run_gets_a_colour_per_run_and_the_axis_starts_at_the_data():
  results = {"alpha=0__akd": _kd_rows("akd", 4), "alpha=0__avgkd": _kd_rows("avgkd", 3)}
  fig = plots.sweep_figure(results, units="paper")
  ax = fig.axes[0]
  colors = {line.get_color() for line in ax.get_lines()}
  assert len(colors) == 2   # not every curve black
  assert min(min(line.get_xdata()) for line in ax.get_lines()) == 1   # paper rounds from 1


def test_an_unfinished_akd_round_is_named_not_dropped_silently():
  rows = _kd_rows("akd", 5)   # 5 steps of 2 agents: paper rounds 1-2, step 4 left over
  assert unfinished_steps(rows) == [4]
  assert unfinished_steps(_kd_rows("akd", 4)) == [] and unfinished_steps(
      _kd_rows("avgkd", 5)) == []
  fig = plots.run_figure(rows, units="paper")
  assert "step 4" in fig.axes[0].get_xlabel()
  assert "step" not in plots.run_figure(rows, units="steps").axes[0].get_xlabel().split("\n")[0]


def test_a_png_records_its_units_and_a_rerun_keeps_a_current_figure(tmp_path):
  rows = _kd_rows("avgkd", 2)
  path = tmp_path / "accuracy.png"
  metrics = tmp_path / "metrics.jsonl"
  metrics.write_text("")
  plots.plot_run(rows, path, units="paper")
  assert plots.png_text(path)[plots.PLOT_INFO_KEY].endswith("units paper")
  assert plots.plot_is_current(path, "paper", metrics)
  assert not plots.plot_is_current(path, "steps", metrics)
  assert not plots.plot_is_current(tmp_path / "missing.png", "paper")
