"""pyright (basic mode, configured in pyproject.toml) reports no errors in fedkrr and neural."""

from pathlib import Path
import re
import subprocess
import sys

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_pyright_reports_no_errors():
  pytest.importorskip("pyright", reason="pyright is not installed (pip install pyright)")
  proc = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
  output = proc.stdout + proc.stderr
  summary = re.search(r"^(\d+) errors?, ", output, re.MULTILINE)
  assert proc.returncode == 0 and summary is not None and summary.group(1) == "0", (
      f"pyright found errors (exit status {proc.returncode}):\n{output}")
