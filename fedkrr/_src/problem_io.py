"""Reading and writing federated problems as ``.npz`` files.

A problem file holds ``x_0 .. x_{M-1}`` (N_a, d), ``y_0 .. y_{M-1}`` (N_a,) or
(N_a, C), ``kernel_0 .. kernel_{M-1}`` (JSON strings such as
``{"name": "rbf", "gamma": 0.5}``), ``ridge`` (a scalar) and ``x_eval`` (n, d),
so that the toolkit can be driven from any language.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import jax
import numpy as np

from fedkrr._src import kernels as kernels_lib
from fedkrr._src.io.files import atomic_savez
from fedkrr._src.io.reading import NpzError
from fedkrr._src.io.reading import available_memory
from fedkrr._src.io.reading import format_size
from fedkrr._src.io.reading import read_npz
from fedkrr._src.problem import FederatedProblem
from fedkrr._src.problem import ProblemError
from fedkrr._src.problem import check_eval_points
from fedkrr._src.problem import make_problem

Array = jax.Array

_LAYOUT = "x_0..x_{M-1}, y_0..y_{M-1}, kernel_0..kernel_{M-1}, ridge and x_eval"


def problem_arrays(problem: FederatedProblem, x_eval: Any) -> dict[str, np.ndarray]:
  """The arrays of a problem file (the layout :func:`load_problem` reads), by name."""
  arrays: dict[str, Any] = {"ridge": np.asarray(problem.ridge), "x_eval": np.asarray(x_eval)}
  for a in range(problem.num_agents):
    kernel = problem.kernels[a]
    if isinstance(kernel, kernels_lib.CustomKernel):
      raise ProblemError(f"kernels[{a}]: a custom callable kernel cannot be written to a file")
    arrays[f"x_{a}"] = np.asarray(problem.xs[a])
    arrays[f"y_{a}"] = np.asarray(problem.ys[a])
    arrays[f"kernel_{a}"] = np.asarray(json.dumps(kernel.to_dict()))
  return arrays


def save_problem(path: str | os.PathLike, problem: FederatedProblem, x_eval: Any) -> None:
  """Writes ``problem`` and ``x_eval`` in the layout :func:`load_problem` reads."""
  atomic_savez(path, **problem_arrays(problem, x_eval))


_MAX_KERNEL_JSON = 2**20   # bytes of one kernel's JSON string


def _is_problem_array(name: str) -> bool:
  return re.fullmatch(r"(x|y|kernel)_\d+|ridge|x_eval", name) is not None


def _check_headers(headers) -> None:
  """The sizes the archive declares, checked against each other before any data is read."""
  x_shapes = {}
  for name, (shape, dtype) in headers.items():
    if m := re.fullmatch(r"(x|y)_(\d+)", name):
      if len(shape) not in (1, 2) or dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected a 2-D array of numbers, got shape {shape} of {dtype}")
      if m.group(1) == "x":
        x_shapes[m.group(2)] = shape
    elif re.fullmatch(r"kernel_\d+", name):
      if shape != () or dtype.kind not in "US" or dtype.itemsize > _MAX_KERNEL_JSON:
        raise ValueError(f"{name} must be a JSON string (of at most {_MAX_KERNEL_JSON} bytes), "
                         f"got an array of shape {shape} and dtype {dtype}")
    elif name == "ridge" and (len(shape) > 1 or int(np.prod(shape)) != 1):
      raise ValueError(f"ridge: expected a scalar, got shape {shape}")
  for name, (shape, _) in headers.items():
    if (m := re.fullmatch(r"y_(\d+)", name)) and m.group(1) in x_shapes:
      x_shape = x_shapes[m.group(1)]
      if len(shape) >= 1 and len(x_shape) >= 1 and shape[0] != x_shape[0]:
        raise ValueError(f"ys[{m.group(1)}]: expected shape ({x_shape[0]},) or "
                         f"({x_shape[0]}, C) like x_{m.group(1)}, got {shape}")
  if "x_eval" in headers and "0" in x_shapes:
    shape, dtype = headers["x_eval"]
    if dtype.kind not in "biuf" or len(shape) != 2 or len(x_shapes["0"]) != 2 \
        or shape[1] != x_shapes["0"][1]:
      raise ValueError(f"x_eval: expected shape (n, {x_shapes['0'][-1]}), got {shape} "
                       f"(of {dtype})")


def _check_memory(headers, itemsize: int) -> None:
  """The memory the problem takes once loaded, decided from the headers before any array
  is inflated: each array as stored and its copy in the run's dtype (``itemsize``)."""
  need = sum(math.prod(shape) * (dtype.itemsize + itemsize)
             for name, (shape, dtype) in headers.items()
             if _is_problem_array(name) and not name.startswith("kernel_"))
  free = available_memory()
  if need > free:
    raise ValueError(f"its arrays need about {format_size(need)} once loaded (as stored and "
                     f"in the run's dtype), more than the {format_size(free)} free on this "
                     f"machine")


def load_problem(path: str | os.PathLike, dtype=None) -> tuple[FederatedProblem, Array]:
  """Reads and validates a problem file; returns ``(problem, x_eval)``.

  Raises:
    ProblemError: the file is missing, not an ``.npz`` archive, or lacks or
      mangles one of the arrays (the message names it).
    KernelError: a kernel string is not a valid kernel.
  """
  path = os.fspath(path)
  if not os.path.lexists(path):
    raise ProblemError(f"{path}: no such file (expected an .npz with {_LAYOUT})")
  try:
    itemsize = np.dtype(dtype if dtype is not None else
                        (np.float64 if jax.config.read("jax_enable_x64") else np.float32)).itemsize

    def check(headers) -> None:
      _check_headers(headers)
      _check_memory(headers, itemsize)

    arrays = read_npz(path, check=check, keep=_is_problem_array)
  except NpzError as e:
    raise ProblemError(f"{e}; expected {_LAYOUT}") from None

  agents = sorted(int(m.group(1)) for k in arrays if (m := re.fullmatch(r"x_(\d+)", k)))
  if not agents:
    raise ProblemError(f"{path}: no x_0 array (expected {_LAYOUT})")
  if agents != list(range(len(agents))):
    raise ProblemError(f"{path}: agents must be numbered x_0..x_{{M-1}} without gaps, "
                       f"got {[f'x_{a}' for a in agents]}")
  required = [f"{p}_{a}" for p in ("y", "kernel") for a in agents] + ["ridge", "x_eval"]
  missing = [k for k in required if k not in arrays]
  if missing:
    raise ProblemError(f"{path}: missing {', '.join(missing)} (expected {_LAYOUT})")

  kernels = []
  for a in agents:
    spec = arrays[f"kernel_{a}"]
    if spec.shape != () or spec.dtype.kind not in "US":
      raise ProblemError(f"{path}: kernel_{a} must be a JSON string, got an array of "
                         f"shape {spec.shape} and dtype {spec.dtype}")
    text = spec.item()
    if isinstance(text, bytes):   # a bytes string (numpy 'S'), e.g. from another language
      try:
        text = text.decode("utf-8")
      except UnicodeDecodeError:
        raise ProblemError(f"{path}: kernel_{a} is not UTF-8 text") from None
    kernels.append(kernels_lib.kernel_from_json(text, f"{path}: kernel_{a}"))
  ridge = arrays["ridge"]
  if ridge.size != 1:
    raise ProblemError(f"{path}: ridge must be a scalar, got shape {ridge.shape}")
  if ridge.dtype.kind not in "iuf":
    raise ProblemError(f"{path}: ridge must be a number, got an array of dtype {ridge.dtype} "
                       f"({str(ridge.reshape(()))[:40]!r})")
  for name, value in arrays.items():
    if name.startswith(("x_", "y_")) and value.dtype.kind not in "biuf":
      raise ProblemError(f"{path}: {name} must hold numbers, got dtype {value.dtype}")
  try:
    problem = make_problem([arrays[f"x_{a}"] for a in agents], [arrays[f"y_{a}"] for a in agents],
                           kernels, float(ridge.reshape(())), dtype=dtype)
    x_eval = check_eval_points(problem, arrays["x_eval"])
  except ProblemError as e:
    raise ProblemError(f"{path}: {e}") from None
  return problem, x_eval
