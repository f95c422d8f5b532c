"""A protocol of one's own, registered from this file only: ``fedkrr.run`` runs it by its
literal rounds and by its closed form, and the two agree (docs/adding_a_protocol.md).

The toy protocol, "half-AvgKD": every agent refits on half its labels plus the others'
predictions on its inputs, shared out over the M - 1 others,

    tau_i(t + 1) = y_i / 2 + sum_{j != i} g_j(t)(X_i) / (2 (M - 1)),

from its labels in round 0. In targets (``closed_form``'s module docstring) its
recurrence is ``tau(t + 1) = sum_j block(i, j) tau_j / (2 (M - 1)) + y / 2``.
"""

from typing import NamedTuple

import numpy as np
import pytest

import fedkrr

NAME = "half-avgkd"
ROW = fedkrr.ProtocolInfo(NAME, "half-AvgKD", "averaged", "labels", "per-agent",
                          "fixed-point", sharded=False)

RNG = np.random.default_rng(5)
XS = [RNG.normal(size=(7, 2)), RNG.normal(size=(6, 2)) + 0.5, RNG.normal(size=(5, 2)) - 0.5]
YS = [RNG.normal(size=7), RNG.normal(size=6), RNG.normal(size=5)]
X_EVAL = RNG.normal(size=(4, 2))


class HalfState(NamedTuple):
  round: int
  targets: tuple


def half_avgkd(params: fedkrr.ProtocolParams) -> fedkrr.protocols.Protocol:
  """The literal rounds: fit, then the next targets from the labels and the others' models."""

  def init(ys):
    return HalfState(0, tuple(ys))

  def step(state, learners, xs, ys):
    m = len(xs)
    models = fedkrr.learners.fit_all(learners, xs, state.targets)
    targets = tuple(ys[i] / 2 + sum(models[j].predict(xs[i]) for j in range(m) if j != i)
                    / (2 * (m - 1)) for i in range(m))
    output = fedkrr.protocols.RoundOutput(models, tuple(range(m)), None)
    return HalfState(state.round + 1, targets), output

  return fedkrr.protocols.Protocol(NAME, init, step)


def half_recurrence(problem, params, fs, block, own):
  """Its closed form: ``x(t + 1) = sum_{j != i} block(i, j) x_j / (2 (M - 1)) + own / 2``."""
  m = problem.num_agents
  blocks = {(i, j): block(i, j) / (2 * (m - 1)) for i in range(m) for j in range(m) if i != j}
  return fedkrr.protocols.Recurrence(blocks, 0.0, own / 2, own)


@pytest.fixture
def registered():
  fedkrr.protocols.register_protocol(ROW, rounds=half_avgkd, recurrence=half_recurrence)
  yield NAME
  fedkrr.protocols.unregister_protocol(NAME)


def test_a_registered_protocol_runs_by_its_rounds_and_its_closed_form(x64, registered,
                                                                       assert_close):
  problem = fedkrr.make_problem(XS, YS, fedkrr.RBF(0.7), 0.05)
  simulated = fedkrr.run(problem, registered, 5, X_EVAL, method="simulate")
  closed = fedkrr.run(problem, registered, 5, X_EVAL, method="closed-form", limit=True)
  assert simulated.method == "simulate" and closed.method == "closed-form"
  assert closed.predictions.shape == (5, 3, 4)
  assert_close(simulated.predictions, closed.predictions)
  # A contraction (half of AvgKD's map): the rounds approach the limit.
  assert closed.spectral_radius is not None and closed.spectral_radius < 1
  assert closed.limit is not None
  far = fedkrr.run(problem, registered, 200, X_EVAL, method="closed-form", every=199)
  assert_close(far.predictions[-1], closed.limit)


def test_registering_is_undone_and_names_are_not_taken_twice(registered):
  with pytest.raises(ValueError, match="already a protocol"):
    fedkrr.protocols.register_protocol(ROW, rounds=half_avgkd, recurrence=half_recurrence)
  with pytest.raises(ValueError, match="already a protocol"):
    fedkrr.protocols.register_protocol(fedkrr.protocol_info("avgkd"), rounds=half_avgkd,
                             recurrence=half_recurrence)
  with pytest.raises(ValueError, match="PROTOCOLS"):
    fedkrr.protocols.unregister_protocol("avgkd")
  fedkrr.protocols.unregister_protocol(NAME)
  with pytest.raises(ValueError, match="protocol: expected one of"):
    fedkrr.protocol_info(NAME)
  # for teardown
  fedkrr.protocols.register_protocol(ROW, rounds=half_avgkd, recurrence=half_recurrence)
