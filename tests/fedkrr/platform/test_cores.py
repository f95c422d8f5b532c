"""Shares of the CPU cores for processes side by side (fedkrr/_src/platform/cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedkrr.io import allowed_cores
from fedkrr.io import core_shares
from fedkrr.io import use_cores


@pytest.mark.parametrize(("cores", "count", "expected"), [
    ([0, 1], 1, [[0, 1]]),
    ([0, 1], 2, [[0], [1]]),
    ([0, 1, 2, 3, 4], 2, [[0, 1, 2], [3, 4]]),
    ([4, 2, 6], 3, [[2], [4], [6]]),
    ([0, 1], 5, [[0], [1], [0], [1], [0]]),
    ([7], 3, [[7], [7], [7]]),
])
def test_each_process_gets_its_own_cores_while_there_are_enough(cores, count, expected):
  shares = core_shares(count, cores)
  assert shares == expected
  if count <= len(cores):   # disjoint, and every core used
    assert sorted(c for share in shares for c in share) == sorted(cores)


def test_the_default_shares_are_of_the_cores_this_process_may_use():
  shares = core_shares(1)
  assert shares == [allowed_cores()]


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_a_bad_count_is_named(count):
  with pytest.raises(ValueError, match="count"):
    core_shares(count, [0, 1])


def test_no_cores_is_an_error():
  with pytest.raises(ValueError, match="cores"):
    core_shares(1, [])


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_process_keeps_to_its_cores_and_its_children_inherit_them():
  core = allowed_cores()[-1]
  code = ("import os, subprocess, sys\n"
          "from fedkrr.io import use_cores\n"
          f"assert use_cores([{core}])\n"
          "print(sorted(os.sched_getaffinity(0)))\n"
          "sys.stdout.flush()\n"
          "subprocess.run([sys.executable, '-c', "
          "'import os; print(sorted(os.sched_getaffinity(0)))'], check=True)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True)
  assert out.stdout.split("\n")[:2] == [f"[{core}]", f"[{core}]"]


def test_no_cores_changes_nothing():
  assert use_cores([]) is False
