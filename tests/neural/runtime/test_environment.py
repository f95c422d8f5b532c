"""What a result was computed on (``reproduce.json``'s environment) and its one-line form."""

import json
import os
import re

import jax

from neural._src.runtime.environment import describe
from neural._src.runtime.environment import environment


def test_the_environment_is_this_process_as_plain_json():
  env = environment()
  assert json.loads(json.dumps(env)) == env
  assert env["packages"]["jax"] == jax.__version__
  assert env["device"] == {"backend": jax.default_backend(),
                           "kind": jax.devices()[0].device_kind, "count": len(jax.devices())}
  assert env["x64"] == jax.config.read("jax_enable_x64")
  assert env["xla_flags"] == os.environ.get("XLA_FLAGS", "")
  assert 1 <= env["cpu"]["cores"] <= (os.cpu_count() or 1)
  assert re.fullmatch(r"([0-9a-f]{40}(\+changes)?)?", env["commit"]), env["commit"]


CPU_ENV = {"python": "3.11.7", "packages": {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"},
           "device": {"backend": "cpu", "kind": "cpu", "count": 1},
           "cpu": {"model": "Some CPU", "cores": 2, "flags": ["avx", "avx2", "fma"]},
           "xla_flags": "", "commit": "2a21d537b1b2" + "0" * 28 + "+changes"}


def test_describe_says_it_in_one_line():
  assert describe(CPU_ENV) == ("Python 3.11.7, jax 0.10.2 / jaxlib 0.10.2, flax 0.12.8; "
                               "CPU Some CPU (2 cores; avx avx2 fma); XLA_FLAGS none; "
                               "commit 2a21d537b1b2+changes")


def test_describe_names_a_gpu_by_its_kind_and_says_what_is_missing():
  gpu = CPU_ENV | {"device": {"backend": "gpu", "kind": "NVIDIA H100", "count": 1},
                   "xla_flags": "--xla_foo=1", "commit": ""}
  line = describe(gpu)
  assert "; NVIDIA H100; XLA_FLAGS --xla_foo=1; commit not a checkout" in line
  assert "CPU" not in line
  assert describe({}) == ("Python ?, jax ? / jaxlib ?, flax ?; ?; XLA_FLAGS none; "
                          "commit not a checkout")
