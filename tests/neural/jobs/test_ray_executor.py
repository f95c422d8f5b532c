"""The Ray executor (``--executor ray``): a sweep's runs as Ray tasks on a local cluster.

One cluster on this machine serves the module (a head without CPUs and a node of 2 CPUs,
no dashboard, every address 127.0.0.1, Ray's files in a directory of its own); the runs
are Fig. 5's six, shrunk, one seed, compared to the byte with the same runs done one after
another in this process.
"""

import importlib.util
import shutil
import socket
import sys
import tempfile
import threading
import time

import pytest

import neural
from neural._src.cli import main
from neural._src.jobs import ray_executor
from neural._src.jobs.specs import load_spec

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                       reason='Ray is not installed: the Ray executor is an optional extra '
                              '(pip install "fedkrr[ray]"; the test extra has it)'),
    # JAX's warning when Ray starts a node's processes (fork and exec) after JAX started.
    pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning"),
]

SHRINK = dict(dataset="digits", rounds=2, epochs=1, train_subset=120, test_subset=60,
              batch_size=32, tiny=True, models=["mlp"])
FLAGS = ["--dataset", "digits", "--rounds", "2", "--epochs", "1", "--train-subset", "120",
         "--test-subset", "60", "--batch-size", "32", "--tiny", "--models", "mlp"]
RUNS = [name for name, _ in load_spec("fig05_avgkd_small").expand(SHRINK)]
# A node found dead within about 2 seconds (Ray's default takes tens of seconds).
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                      "health_check_failure_threshold": 3}


@pytest.fixture(scope="module", autouse=True)
def ray_files_and_addresses():
  """Ray's files under a temporary directory of a short name (its sockets' paths must fit
  in 107 bytes: not under pytest's), and every node on 127.0.0.1; set before Ray is first
  imported, as Ray reads them then."""
  files = tempfile.mkdtemp(prefix="ray", dir="/tmp")
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("RAY_TMPDIR", files)
    patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    yield
  shutil.rmtree(files, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
  """A head of 0 CPUs and a node of 2 CPUs, without dashboard."""
  from ray.cluster_utils import Cluster

  cluster = Cluster(initialize_head=True, head_node_args={
      "num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS})
  cluster.add_node(num_cpus=2)
  yield cluster
  cluster.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The shrunk figure with ``jobs=1``: every run in this process, one after another."""
  workdir = tmp_path_factory.mktemp("jobs1")
  neural.reproduce(5, workdir, overrides=SHRINK, seeds=1)
  return workdir / "seed=0"


def _metrics(where, run):
  return (where / run / "metrics.jsonl").read_bytes()


def test_a_figure_as_ray_tasks_writes_the_numbers_of_one_process(cluster, reference, tmp_path):
  result = neural.reproduce(5, tmp_path, overrides=SHRINK, seeds=1, executor="ray",
                            address=cluster.address)
  assert {c.verdict for c in result.checks} and (tmp_path / "reproduce.md").is_file()
  for run in RUNS:
    assert _metrics(tmp_path / "seed=0", run) == _metrics(reference, run), run
  assert not list(tmp_path.rglob(f"{ray_executor.MARKER_PREFIX}*"))   # the marker is gone


def _runs_with_rows(workdir):
  return sum((workdir / run / "metrics.jsonl").is_file()
             and (workdir / run / "metrics.jsonl").stat().st_size > 0 for run in RUNS)


def _busy(cluster, node):
  """Whether ``node`` runs a task now (its CPU taken); ``None`` where Ray cannot say."""
  try:
    free = cluster.global_state.available_resources_per_node()
  except Exception:   # a private API of Ray's, which may change
    return None
  return free.get(node.node_id, {}).get("CPU", 0) == 0


def test_a_node_that_dies_mid_sweep_leaves_its_runs_to_the_others(cluster, reference,
                                                                   tmp_path):
  """``neural run --executor ray`` on a second node that is killed once the runs have
  started: its runs are retried on the first node and every run has the same numbers."""
  node = cluster.add_node(num_cpus=1)
  removed = threading.Event()
  busy = []

  def remove_once_runs_have_rounds():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        _runs_with_rows(tmp_path) >= 3 and _busy(cluster, node) is not False):
      time.sleep(0.1)
    busy.append(_busy(cluster, node))
    cluster.remove_node(node, allow_graceful=False)
    removed.set()

  killer = threading.Thread(target=remove_once_runs_have_rounds, daemon=True)
  killer.start()
  argv = ["run", "--config", "fig05_avgkd_small", "--workdir", str(tmp_path), *FLAGS,
          "--executor", "ray", "--address", cluster.address, "--no-progress"]
  assert main(argv) == 0
  killer.join(timeout=60)
  assert removed.is_set() and busy != [False]   # it died with a run on it
  assert _runs_with_rows(tmp_path) == len(RUNS)
  for run in RUNS:
    assert _metrics(tmp_path, run) == _metrics(reference, run), run
  assert (tmp_path / "sweep.json").is_file() and (tmp_path / "accuracy.png").is_file()


def test_a_node_that_cannot_see_the_workdir_is_one_line(cluster, tmp_path, monkeypatch,
                                                         capsys):
  """The marker the command writes is not there for the task (as on a node without the
  shared storage): one line naming the node and the workdir, exit 2, no run started."""
  monkeypatch.setattr(ray_executor, "atomic_write", lambda path, data: path)
  argv = ["run", "--workdir", str(tmp_path / "run"), *FLAGS, "--executor", "ray",
          "--address", cluster.address, "--no-progress"]
  assert main(argv) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and f"cannot see the workdir {tmp_path}" in err
  assert f"node {socket.gethostname()}" in err and "every node mounts" in err
  assert [p.name for p in (tmp_path / "run").iterdir()] == []   # no run, no marker left


def test_without_ray_the_executor_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` raises ImportError
  for command in (["run"], ["reproduce", "--figure", "5"]):
    assert main([*command, "--workdir", str(tmp_path / command[0]), *FLAGS,
                 "--executor", "ray"]) == 2
    err = capsys.readouterr().err
    assert err == 'neural: error: --executor ray needs Ray, an optional extra: pip install ' \
                  '"fedkrr[ray]"\n'
    assert not (tmp_path / command[0]).exists()


def test_an_address_that_does_not_answer_is_one_line_at_once(tmp_path, capsys):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]   # free once closed: nothing listens there
  started = time.monotonic()
  argv = ["run", "--workdir", str(tmp_path), *FLAGS, "--executor", "ray", "--address",
          f"127.0.0.1:{port}"]
  assert main(argv) == 2
  assert time.monotonic() - started < 10
  err = capsys.readouterr().err
  assert err.count("\n") == 1
  assert f"--address 127.0.0.1:{port}: no Ray cluster answers" in err


def test_an_address_needs_the_ray_executor_and_jobs_the_local_one(tmp_path, capsys):
  assert main(["run", "--workdir", str(tmp_path), "--address", "127.0.0.1:6379"]) == 2
  assert "--address: the Ray cluster to run on; add --executor ray" in capsys.readouterr().err
  with pytest.raises(neural.ConfigError, match="^jobs: .* executor 'ray'"):
    neural.reproduce(5, tmp_path, executor="ray", jobs=2)
  with pytest.raises(neural.ConfigError, match="^executor: expected one of local, ray"):
    neural.reproduce(5, tmp_path, executor="dask")
