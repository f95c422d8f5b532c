"""What a result was computed on: the versions, the device, the CPU and XLA's settings.

Float32 training is not bit-reproducible across machines (the order of a reduction
changes with the cores, the SIMD width and the XLA version), so a report says where
its numbers came from: :func:`environment` is written into ``reproduce.json``.
"""

from __future__ import annotations

from importlib import metadata
import os
from pathlib import Path
import platform
import subprocess
import sys
from typing import Any

# The CPU features that change which kernels XLA's CPU backend picks.
_CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "neon",
              "asimd", "sve")
_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "scipy", "fedkrr")


def _version(package: str) -> str:
  try:
    return metadata.version(package)
  except metadata.PackageNotFoundError:
    return ""


def _cpu() -> dict[str, Any]:
  """The CPU's model and its SIMD features (from /proc/cpuinfo where there is one)."""
  model, flags = platform.processor() or platform.machine(), set()
  try:
    text = Path("/proc/cpuinfo").read_text(errors="replace")
  except OSError:
    text = ""
  for line in text.splitlines():
    key, _, value = line.partition(":")
    key = key.strip()
    if key in ("model name", "Model") and value.strip():
      model = value.strip()
    elif key in ("flags", "Features"):
      flags |= set(value.split())
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return {"model": model, "machine": platform.machine(), "cores": cores,
          "flags": [f for f in _CPU_FLAGS if f in flags]}


def _commit() -> str:
  """The project's git commit (with "+changes" where the tree differs), or ""."""
  root = Path(__file__).resolve().parents[3]
  if not (root / ".git").exists():
    return ""
  try:
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, timeout=10, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True, timeout=10,
                           check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return ""
  return head + ("+changes" if dirty else "")


def environment() -> dict[str, Any]:
  """The environment of this process, as plain JSON values.

  Returns:
    ``python``, ``platform``, ``packages`` (versions of jax, jaxlib, flax, optax, numpy,
    scipy, fedkrr), ``device`` (JAX's backend, device kind and count), ``cpu`` (model,
    cores this process may use, SIMD flags), ``xla_flags`` (the ``XLA_FLAGS`` variable)
    and ``commit`` (the project's git commit where it runs from a checkout).
  """
  import jax  # the devices: after any platform setting the caller made

  devices = jax.devices()
  return {
      "python": platform.python_version(), "implementation": sys.implementation.name,
      "platform": platform.platform(),
      "packages": {p: _version(p) for p in _PACKAGES},
      "device": {"backend": jax.default_backend(), "kind": devices[0].device_kind,
                 "count": len(devices)},
      "cpu": _cpu(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "x64": bool(jax.config.read("jax_enable_x64")), "commit": _commit(),
  }


def describe(env: dict[str, Any]) -> str:
  """One line: ``Python 3.11.7, jax 0.10.2 / jaxlib 0.10.2, flax 0.12.8; CPU <model> (2 cores;
  avx avx2 fma); XLA_FLAGS none; commit 2a21d537b1b2`` (a GPU: its device kind)."""
  packages = env.get("packages", {})
  device = env.get("device", {})
  cpu = env.get("cpu", {})
  where = (f"{device.get('kind', '?')}" if device.get("backend") != "cpu" else
           f"CPU {cpu.get('model', '?')} ({cpu.get('cores', '?')} cores; "
           f"{' '.join(cpu.get('flags', [])) or 'no SIMD flags read'})")
  flags = env.get("xla_flags") or "none"
  commit = env.get("commit") or ""
  short = (commit[:12] + ("+changes" if commit.endswith("+changes") else "") if commit
           else "not a checkout")
  return (f"Python {env.get('python', '?')}, jax {packages.get('jax', '?')} / jaxlib "
          f"{packages.get('jaxlib', '?')}, flax {packages.get('flax', '?')}; {where}; "
          f"XLA_FLAGS {flags}; commit {short}")
