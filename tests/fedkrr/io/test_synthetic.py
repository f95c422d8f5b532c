"""Seeded synthetic federated regression problems (``fedkrr.synthetic_regression``)."""

import numpy as np
import pytest

from fedkrr import synthetic_regression


def test_shapes_follow_the_sizes_the_dimension_and_the_outputs():
  data = synthetic_regression(0, sizes=(30, 20, 10), dim=3, n_test=50)
  assert [x.shape for x in data.xs] == [(30, 3), (20, 3), (10, 3)]
  assert [y.shape for y in data.ys] == [(30,), (20,), (10,)]
  assert data.x_test.shape == (50, 3) and data.y_test.shape == (50,)
  matrix = synthetic_regression(0, sizes=(30, 20), dim=3, outputs=4, n_test=50)
  assert [y.shape for y in matrix.ys] == [(30, 4), (20, 4)]
  assert matrix.y_test.shape == (50, 4)


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
  a, b, c = synthetic_regression(7), synthetic_regression(7), synthetic_regression(8)
  for one, two in zip([*a.xs, *a.ys, a.x_test, a.y_test], [*b.xs, *b.ys, b.x_test, b.y_test]):
    np.testing.assert_array_equal(one, two)
  assert not np.array_equal(a.xs[0], c.xs[0])


def test_heterogeneity_spreads_the_agents_input_means_along_the_first_axis():
  """Agent a's inputs are N(mu_a, I), mu_a = (a - (M - 1) / 2) * heterogeneity on axis 0."""
  sizes = (4000, 4000, 4000)
  data = synthetic_regression(1, sizes=sizes, dim=2, heterogeneity=3.0)
  means = np.array([x.mean(axis=0) for x in data.xs])
  # 4000 draws of unit variance: the means are within 5 standard errors (5 / sqrt(4000)).
  np.testing.assert_allclose(means[:, 0], [-3.0, 0.0, 3.0], atol=0.08)
  np.testing.assert_allclose(means[:, 1], 0.0, atol=0.08)
  iid = synthetic_regression(1, sizes=sizes, dim=2, heterogeneity=0.0)
  np.testing.assert_allclose([x[:, 0].mean() for x in iid.xs], 0.0, atol=0.08)


def test_the_noise_is_added_to_the_labels_with_its_standard_deviation():
  """The same seed draws the same inputs and noise: the labels differ by noise * N(0, 1)."""
  clean = synthetic_regression(2, sizes=(3000, 3000), noise=0.0)
  noisy = synthetic_regression(2, sizes=(3000, 3000), noise=0.25)
  np.testing.assert_array_equal(clean.xs[0], noisy.xs[0])
  np.testing.assert_array_equal(clean.y_test, noisy.y_test)   # test targets are noiseless
  difference = np.concatenate([n - c for n, c in zip(noisy.ys, clean.ys)])
  assert abs(difference.std() - 0.25) < 0.01
  assert abs(difference.mean()) < 0.015


@pytest.mark.parametrize("sizes", [(10,), (10, 0)])
def test_fewer_than_two_agents_or_an_empty_one_is_refused(sizes):
  with pytest.raises(ValueError, match="at least 2 positive agent sizes"):
    synthetic_regression(0, sizes=sizes)
