"""A reproduced figure drawn as the paper draws it (``reproduce.png``): its panels, lines,
seed bands, legend and title, read from the Figure before it is written."""

import numpy as np
import pytest

import fedkrr
from neural._src.evidence.curves import Curve
from neural._src.figures import reproduce_plot

CURVES = {
    "alpha=0.1__avgkd": Curve("alpha=0.1__avgkd", "avgkd", ((0.5, 0.6, 0.7), (0.52, 0.62, 0.72)),
                              agents=(((0.4, 0.5, 0.6), (0.6, 0.7, 0.8)),
                                      ((0.42, 0.52, 0.62), (0.62, 0.72, 0.82)))),
    "alpha=0.1__pkd": Curve("alpha=0.1__pkd", "pkd", ((0.5, 0.55, 0.58),)),
    "alpha=0.1__central": Curve("alpha=0.1__central", "central", ((0.9,),)),
    "alpha=1__avgkd": Curve("alpha=1__avgkd", "avgkd", ((0.6, 0.7, 0.75),)),
}


@pytest.fixture
def drawn(monkeypatch, tmp_path):
  """Draws into a list of Figures instead of PNG files."""
  figures = []
  monkeypatch.setattr(reproduce_plot, "atomic_savefig",
                      lambda fig, path, **kwargs: figures.append(fig))
  return figures


def _visible(fig):
  return [ax for ax in fig.axes if ax.get_visible()]


def test_one_panel_per_setting_with_the_seeds_mean_band_and_baseline(drawn, tmp_path):
  reproduce_plot.plot_reproduction("Fig. 6", CURVES, tmp_path / "r.png")
  (fig,) = drawn
  first, second = _visible(fig)
  assert [first.get_title(), second.get_title()] == ["alpha=0.1", "alpha=1"]
  avgkd_name = fedkrr.display_name("avgkd")
  lines = {line.get_label(): line for line in first.get_lines()}
  assert set(lines) == {avgkd_name, fedkrr.display_name("pkd")}
  np.testing.assert_allclose(lines[avgkd_name].get_ydata(), [0.51, 0.61, 0.71])
  np.testing.assert_allclose(lines[avgkd_name].get_xdata(), [1, 2, 3])   # the paper's rounds
  labels = [c.get_label() for c in first.collections]
  assert "centralised" in labels                      # the baseline, dashed
  assert len(first.collections) == 2                  # and avgkd's band (two seeds); pkd: one
  assert fig.get_suptitle() == "Fig. 6"
  assert first.get_ylabel() == "test accuracy (end of local training)"
  assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == sorted(
      [avgkd_name, fedkrr.display_name("pkd"), "centralised"])


def test_per_agent_draws_a_panel_per_run_and_a_line_per_agent(drawn, tmp_path):
  reproduce_plot.plot_reproduction("Fig. 5", CURVES, tmp_path / "r.png", title="T",
                                   per_agent=True)
  (fig,) = drawn
  titles = [ax.get_title() for ax in _visible(fig)]
  assert titles == ["alpha=0.1: avgkd", "alpha=0.1: pkd", "alpha=1"]
  agents = {line.get_label(): line for line in _visible(fig)[0].get_lines()}
  assert set(agents) == {"agent 1", "agent 2"}
  np.testing.assert_allclose(agents["agent 2"].get_ydata(), [0.61, 0.71, 0.81])
  assert fig.get_suptitle() == "T"


def test_the_png_is_written(tmp_path):
  path = tmp_path / "reproduce.png"
  reproduce_plot.plot_reproduction("Fig. 6", CURVES, path)
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
