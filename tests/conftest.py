"""Test configuration: float64 on (as every entry point does), strict rank promotion.

Set ``JAX_ENABLE_X64=0`` in the environment to run the suite in float32 mode;
tests that need float64 are then skipped. Tolerances are keyed by dtype in
:func:`tolerance`; looser ones are stated inline with their reason.
"""

import gc
import os
import tempfile

# The suite runs in two pytest-xdist workers (pyproject.toml): on a GPU, let each worker
# allocate as it needs instead of both reserving most of the memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# JAX's persistent compilation cache, shared by the workers, the notebooks' kernels and the
# command lines the tests start (all inherit this environment): the suite compiles the same
# programs in many processes and again after each file's cache release (below), and XLA:CPU
# spends most of the suite's time compiling. Keyed by the program, the JAX version and
# the backend, so an entry is only ever reused for the same computation. Set
# JAX_COMPILATION_CACHE_DIR yourself to use another folder, or to "" for none.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"fedkrr-tests-xla-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
# XLA:CPU's LLVM at optimisation level 0 in the tests (and the processes they start): most
# of the suite's programs are small and run once, so compiling them dominates; level 0
# compiles them in about 40% less time (four of the slowest files: 7.5 -> 4.1 minutes), and
# the results agree within the tests' tolerances. Name the flag in XLA_FLAGS yourself to
# test at another level.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_backend_optimization_level=0").strip()

from fedkrr import avoid_cpu_eigh_deadlock  # noqa: E402

avoid_cpu_eigh_deadlock()  # before the first computation (importing fedkrr runs none)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

if os.environ.get("JAX_ENABLE_X64", "1").lower() not in ("0", "false"):
  jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
# On a GPU, JAX's default float32 matrix products and convolutions run in TF32 (about three
# decimal digits; docs/devices.md), and fedkrr's documented float32 use there is full
# precision. The suite's float32 tolerances are IEEE float32's, as on a CPU (where the
# setting changes nothing), so on an accelerator it asks for full precision, in this
# process and (through the environment) in the processes the tests start.
if jax.default_backend() != "cpu":
  jax.config.update("jax_default_matmul_precision", "highest")
  os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")

# Relative tolerances for comparisons of two exact computations (closed form vs
# literal simulation, vs a NumPy reference) in each dtype.
_TOLERANCES = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-3}


@pytest.fixture(autouse=True)
def _keep_the_suites_precision():
  """Restores the suite's precision (``jax_enable_x64``, float64 unless JAX_ENABLE_X64=0)
  after each test.

  The command lines' ``main`` set ``jax_enable_x64`` for the process, as an entry point
  should (``fedkrr run`` to float64, ``--float32`` to float32). Called in-process by a
  test, that setting outlived the test: in the float32 suite of CI
  (``JAX_ENABLE_X64=0``) every later test of the same worker ran in float64, so how many
  tests ran in float32 depended on the workers' schedule (328 passed and 350 skipped in
  one run, 402 and 276 in the next, of code that differed only in a benchmark).
  """
  mode = jax.config.read("jax_enable_x64")
  yield
  if jax.config.read("jax_enable_x64") != mode:
    jax.config.update("jax_enable_x64", mode)


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_code():
  """Drops JAX's compiled programs after each test file.

  XLA's CPU backend maps each compiled kernel into memory of its own, and one
  worker of the suite compiles tens of thousands of programs: kept for the whole
  session, they reached Linux's limit of 65,530 memory maps per process
  (``vm.max_map_count``) near the end of the suite, and the next compilation died
  with a segmentation fault. Files share few programs, so recompiling those
  costs little.
  """
  yield
  jax.clear_caches()
  gc.collect()


def tolerance(dtype) -> float:
  return _TOLERANCES[np.dtype(dtype)]


def relative_error(a, b) -> float:
  """max |a - b| / max |b| (the error measure of every exact comparison)."""
  a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.fixture
def assert_close():
  def check(actual, expected, rtol=None, dtype=np.float64):
    rtol = tolerance(dtype) if rtol is None else rtol
    assert np.shape(actual) == np.shape(expected), (np.shape(actual), np.shape(expected))
    assert np.all(np.isfinite(np.asarray(actual, dtype=np.float64)))
    err = relative_error(actual, expected)
    assert err <= rtol, f"relative error {err:.3g} > {rtol:.1g}"
  return check


@pytest.fixture
def x64():
  if not jax.config.read("jax_enable_x64"):
    pytest.skip("needs float64 (JAX_ENABLE_X64=0)")
  return jnp.float64
