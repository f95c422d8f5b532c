"""The README's Python examples run as written."""

from pathlib import Path
import re
import subprocess
import sys

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_examples():
  assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_python_block_runs(index):
  """Each block runs alone in a fresh interpreter, as a reader would paste it (it sets
  JAX's global float64 flag, which must not leak into the suite's process)."""
  out = subprocess.run([sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip()   # it prints what it computed
