"""The closed-forms demo's figure (the whole demo runs in tests/neural/figures/test_report.py)."""

import os
import subprocess
import sys

# Draws the figure in a fresh process whose backend is "pdf" (not the Agg it used to force).
_DRAW = """
import sys
import numpy as np
from fedkrr._src.paper import demo
curves = {"akd": np.linspace(1.0, 0.1, 5), "avgkd": np.full((5, 2), 0.5), "ekd": np.ones(5)}
demo._plot(sys.argv[1], curves, [0.2, 0.3], [0.4, 0.5])
print("matplotlib.pyplot" in sys.modules)
import matplotlib
print(matplotlib.get_backend())
"""


def test_the_figure_leaves_the_backend_alone_and_imports_no_pyplot(tmp_path):
  path = tmp_path / "test_mse.png"
  out = subprocess.run([sys.executable, "-c", _DRAW, str(path)], capture_output=True, text=True,
                       check=True, env={**os.environ, "MPLBACKEND": "pdf"})
  assert out.stdout.split() == ["False", "pdf"]
  assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
