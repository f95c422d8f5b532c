"""The local pool of worker processes (neural/_src/jobs/workers.py): every GPU of the
machine, each worker on its own share of the CPU cores, the same numbers."""

from __future__ import annotations

import subprocess

import pytest

from fedkrr.io import core_shares
from neural._src.jobs import workers
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.rundir import ExperimentError

TINY = dict(dataset="digits", rounds=1, epochs=1, train_subset=60, test_subset=30,
            batch_size=32, tiny=True, models=("mlp",), protocol="avgkd")


def test_the_gpus_are_those_cuda_shows_or_those_jax_sees(monkeypatch):
  monkeypatch.setattr(workers, "on_gpu", lambda: False)
  assert workers.gpu_ids() == []
  monkeypatch.setattr(workers, "on_gpu", lambda: True)
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5")
  assert workers.gpu_ids() == ["3", "5"]


def test_auto_jobs_counts_every_gpu(monkeypatch):
  monkeypatch.setattr(workers, "gpu_ids", lambda: ["0", "1", "2", "3"])
  assert workers.auto_jobs() == 4 * workers.AUTO_JOBS_GPU
  monkeypatch.setattr(workers, "gpu_ids", lambda: [])
  assert 1 <= workers.auto_jobs() <= workers.AUTO_JOBS_CPU


def test_workers_use_every_core_unless_told_to_keep_to_their_own(monkeypatch):
  monkeypatch.delenv("NEURAL_WORKER_CORES", raising=False)
  assert workers.worker_cores(2) == [[], []]
  monkeypatch.setenv("NEURAL_WORKER_CORES", "own")
  assert workers.worker_cores(3) == core_shares(3)
  monkeypatch.setenv("NEURAL_WORKER_CORES", "half")
  with pytest.raises(ExperimentError, match="NEURAL_WORKER_CORES"):
    workers.worker_cores(2)


def test_workers_take_the_gpus_in_turn_and_their_own_cores(monkeypatch, tmp_path):
  """Three workers on a machine of two GPUs: GPU 0, 1, 0, each worker its share of the
  cores (``NEURAL_WORKER_CORES=own``); the runs' rows (an MLP's: a dense network's numbers
  do not depend on the cores) are those of the runs in this process."""
  started = []
  real = subprocess.Popen

  def spy(args, **kwargs):
    started.append((args[-1], kwargs["env"].get("CUDA_VISIBLE_DEVICES")))
    return real(args, **kwargs)

  monkeypatch.setattr(workers, "gpu_ids", lambda: ["0", "1"])
  monkeypatch.setenv("NEURAL_WORKER_CORES", "own")
  monkeypatch.setattr(workers.subprocess, "Popen", spy)
  configs = [ExperimentConfig(**TINY, seed=s) for s in range(3)]
  tasks = [(f"seed={s}", c, tmp_path / f"w{s}") for s, c in enumerate(configs)]
  rows = workers.run_in_workers(tasks, 3)
  shares = [",".join(map(str, share)) for share in core_shares(3)]
  assert started == [(shares[0], "0"), (shares[1], "1"), (shares[2], "0")]
  from neural._src.jobs.runs import run_one

  monkeypatch.setattr(workers.subprocess, "Popen", real)
  for (_, config, _), got, s in zip(tasks, rows, range(3), strict=True):
    assert got == run_one(config, tmp_path / f"here{s}")


def test_cpu_workers_are_at_most_one_per_core(monkeypatch, tmp_path):
  """--jobs 50 on a CPU of two cores starts two workers, not one per run."""
  counts = []

  class Stop(Exception):
    pass

  def shares(count):
    counts.append(count)
    raise Stop   # before any worker starts

  monkeypatch.setattr(workers, "gpu_ids", lambda: [])
  monkeypatch.setattr(workers, "allowed_cores", lambda: [0, 1])
  monkeypatch.setattr(workers, "worker_cores", shares)
  tasks = [(f"seed={s}", ExperimentConfig(**TINY, seed=s), tmp_path / f"w{s}")
           for s in range(8)]
  for jobs, expected in ((50, 2), (2, 2), (1, 1)):
    try:
      workers.run_in_workers(tasks, jobs)
    except Stop:
      pass
    assert counts[-1] == expected, jobs
  monkeypatch.setattr(workers, "gpu_ids", lambda: ["0"])   # GPUs: as many as asked
  try:
    workers.run_in_workers(tasks, 5)
  except Stop:
    pass
  assert counts[-1] == 5
