"""Validation of federated problems: every bad input names its argument."""

import numpy as np
import pytest

import fedkrr

RNG = np.random.default_rng(1)
XS = [RNG.normal(size=(6, 2)), RNG.normal(size=(4, 2))]
YS = [RNG.normal(size=6), RNG.normal(size=4)]


def test_valid_problem_has_the_conventions(x64):
  p = fedkrr.make_problem(XS, YS, fedkrr.RBF(0.5), 0.1)
  assert p.num_agents == 2 and p.sizes == (6, 4) and p.num_points == 10
  assert p.offsets == (0, 6)
  np.testing.assert_allclose(p.gram(1, p.xs[0], p.xs[1]),
                             np.asarray(fedkrr.RBF(0.5)(p.xs[0], p.xs[1])) / 10)
  assert p.ridge.dtype == np.float64


def _with(index, value, seq):
  seq = list(seq)
  seq[index] = value
  return seq


@pytest.mark.parametrize("kwargs, match", [
    (dict(xs=XS[:1], ys=YS[:1]), "xs: a federated problem needs at least 2 agents, got 1"),
    (dict(ys=YS[:1]), "ys: expected one label array per agent \\(2\\), got 1"),
    (dict(xs=_with(1, RNG.normal(size=(4, 3)), XS)),
     "xs\\[1\\]: expected 2 features like xs\\[0\\], got 3"),
    (dict(xs=_with(0, RNG.normal(size=6), XS)), "xs\\[0\\]: expected shape \\(N_0, d\\).*reshape"),
    (dict(xs=_with(1, np.zeros((0, 2)), XS), ys=_with(1, np.zeros(0), YS)),
     "xs\\[1\\]: agent 1 has no points"),
    (dict(ys=_with(1, RNG.normal(size=5), YS)), "ys\\[1\\]: expected shape \\(4,\\) or \\(4, C\\)"),
    (dict(ys=_with(1, RNG.normal(size=(4, 2)), YS)),
     "ys\\[1\\]: expected trailing shape \\(\\) like ys\\[0\\]"),
    (dict(ys=_with(0, np.r_[np.nan, YS[0][1:]], YS)), "ys\\[0\\]: contains 1 NaN or infinite"),
    (dict(xs=_with(1, np.full((4, 2), np.inf), XS)), "xs\\[1\\]: contains 8 NaN or infinite"),
    (dict(xs=_with(0, [["a", "b"]] * 6, XS)), "xs\\[0\\]: expected a numeric array"),
    (dict(ridge=-1e-3), "ridge: expected a finite number >= 0, got -0.001"),
    (dict(ridge=float("nan")), "ridge: expected a finite number >= 0"),
    (dict(ridge="big"), "ridge: expected a number >= 0"),
    (dict(kernels=[fedkrr.RBF(1.0)] * 3), "kernels: expected one kernel per agent \\(2\\), got 3"),
    (dict(xs=np.zeros((2, 6, 2))), "xs, ys: expected a list with one array per agent"),
])
def test_bad_input_names_the_argument(kwargs, match):
  args = dict(xs=XS, ys=YS, kernels=fedkrr.RBF(0.5), ridge=0.1) | kwargs
  with pytest.raises(fedkrr.ProblemError, match=match):
    fedkrr.make_problem(**args)


@pytest.mark.parametrize("kernel, match", [
    (fedkrr.RBF(-1.0), "kernels\\[0\\]: gamma must be a finite number > 0"),
    (fedkrr.Polynomial(degree=0), "degree must be an integer >= 1"),
    (fedkrr.Polynomial(coef0=-2.0), "coef0 must be a finite number >= 0"),
    ("rbf", "expected a kernel"),
    (lambda a, b: a @ b.T - 10.0, "not a kernel: .* not positive semi-definite"),
    (lambda a, b: a[:, :1] @ b[:, 1:].T, "not a kernel: .* not symmetric"),
    (lambda a, b: np.ones((a.shape[0], b.shape[0] + 1)), "must have shape \\(6, 6\\)"),
])
def test_a_kernel_that_is_not_a_kernel_is_refused(kernel, match):
  kernels = [kernel, fedkrr.RBF(0.5)]
  with pytest.raises(fedkrr.KernelError, match=match):
    fedkrr.make_problem(XS, YS, kernels, 0.1)


def test_custom_callable_kernel_is_accepted_and_jittable(x64, assert_close):
  custom = fedkrr.make_problem(XS, YS, [lambda a, b: a @ b.T, fedkrr.Linear()], 0.1)
  builtin = fedkrr.make_problem(XS, YS, fedkrr.Linear(), 0.1)
  x_eval = RNG.normal(size=(3, 2))
  assert_close(fedkrr.trajectory(custom, "avgkd", 3, x_eval),
               fedkrr.trajectory(builtin, "avgkd", 3, x_eval))


def test_matrix_labels_and_float32_are_kept(x64):
  ys = [RNG.normal(size=(6, 3)), RNG.normal(size=(4, 3))]
  p = fedkrr.make_problem(XS, ys, fedkrr.RBF(0.5), 0.1, dtype=np.float32)
  assert p.ys[1].shape == (4, 3) and p.ys[1].dtype == np.float32 and p.ridge.dtype == np.float32
