"""The optional learner capabilities are declared Protocols, and the runs read them so,
the same on every Python (3.12 stopped seeing what ``__getattr__`` forwards)."""

import ast
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedkrr
import neural
from neural import training
from neural._src.capabilities import EpochScoredModel
from neural._src.capabilities import ParameterLearner
from neural._src.capabilities import ParameterModel
from neural._src.capabilities import ReseedableLearner
from neural._src.kd import experiment
from neural._src.learners.fedavg import check_same_architecture
from neural._src.runtime.checkpoint import ModelSlot
from neural._src.training.soft_targets import Teacher

ROOT = Path(__file__).resolve().parents[2]
CAPABILITIES = (fedkrr.learners.BatchLearner, fedkrr.learners.WarmStartLearner, ReseedableLearner,
                ParameterLearner)


def _learners():
  """One learner of each kind a run can hold, by name."""
  flax = neural.FlaxLearner(neural.get_model("mlp", 10), (28, 28, 1),
                            training.TrainConfig(warm_start=True), jax.random.PRNGKey(0))
  forest = neural.ForestLearner(n_estimators=2)
  problem = fedkrr.make_problem([np.zeros((3, 2))] * 2, [np.zeros(3)] * 2, fedkrr.RBF(1.0), 0.1)
  exact = fedkrr.krr_learners(problem)[0]
  matfree = fedkrr.scale.matfree_learners(problem, landmarks=2)[0]
  return {"flax": flax, "forest": forest, "krr": exact, "matfree": matfree}


def test_each_learner_declares_what_it_offers():
  offers = {name: tuple(fedkrr.learners.has_capability(learner, kind) for kind in CAPABILITIES)
            for name, learner in _learners().items()}
  assert offers == {"flax": (True, False, True, True), "forest": (False, False, True, False),
                    "krr": (False, False, False, False), "matfree": (False, True, False, False)}
  # The raw learners declare their members, so isinstance agrees on every Python.
  for name, learner in _learners().items():
    assert offers[name] == tuple(isinstance(learner, kind) for kind in CAPABILITIES)


def _wrappers(learner):
  """The learner wrapped as the experiment tooling wraps it: counted for a progress bar
  (plain models, or Teachers under augmentation) and as a replay's stand-in."""
  slot = ModelSlot(None, None, 10)
  return {"counted": experiment._Counted(learner, bar=None),
          "counted-deferred": experiment._Counted(learner, bar=None, defer=True),
          "stand-in": experiment._StandIn(learner, slot, defer=False)}


def test_wrapped_learners_have_exactly_the_wrapped_learners_capabilities():
  forwarded = (fedkrr.learners.WarmStartLearner, ParameterLearner)
  for name, learner in _learners().items():
    for kind, wrapper in _wrappers(learner).items():
      for capability in forwarded:
        assert (fedkrr.learners.has_capability(wrapper, capability)
                == fedkrr.learners.has_capability(learner, capability)), (name, kind, capability)
      if fedkrr.learners.has_capability(learner, ParameterLearner):
        assert wrapper.model is learner.model and wrapper.config is learner.config
        assert wrapper.input_shape == learner.input_shape
        # FedAvg's check reads exactly these members through the wrapper.
        check_same_architecture([wrapper, wrapper])
      else:
        with pytest.raises(training.FedAvgError, match="FedAvg needs Flax learners"):
          check_same_architecture([wrapper])
  # A counted learner is batched exactly when the wrapped one is; a stand-in never.
  for learner in _learners().values():
    counted = _wrappers(learner)["counted"]
    assert fedkrr.learners.has_capability(counted, fedkrr.learners.BatchLearner)
    assert (counted.batch_key is None) == (not fedkrr.learners.has_capability(
        learner, fedkrr.learners.BatchLearner))
    assert not fedkrr.learners.has_capability(_wrappers(learner)["stand-in"],
                                              fedkrr.learners.BatchLearner)


def test_wrapped_learners_forward_warm_starts_and_inits_inside_the_wrapper():
  learners = _learners()
  flax, matfree = learners["flax"], learners["matfree"]
  variables = {"params": {"w": np.ones(2, np.float32)}}
  counted = _wrappers(flax)["counted"]
  again = counted.with_init(variables)
  assert type(again) is experiment._Counted and again.learner.init is variables
  assert again.bar is counted.bar and again.defer == counted.defer
  stand_in = _wrappers(flax)["stand-in"]
  assert stand_in.with_init(variables) is stand_in

  x = np.linspace(0.0, 1.0, 6)[:, None]
  model = matfree.fit(x, np.sin(x[:, 0]))
  for kind in ("counted", "counted-deferred"):
    wrapper = _wrappers(matfree)[kind]
    fitted = Teacher(model) if wrapper.defer else model
    warmed = wrapper.warm_start_from(fitted)
    assert type(warmed) is experiment._Counted and warmed.defer == wrapper.defer
    np.testing.assert_array_equal(warmed.learner.initial[0], model.alpha)
  assert _wrappers(matfree)["stand-in"].warm_start_from(model).learner is matfree


@dataclasses.dataclass(frozen=True)
class _Recording:
  """A kernel learner that records each warm start it is given."""
  inner: object
  log: list

  def fit(self, x, targets):
    return self.inner.fit(x, targets)

  def warm_start_from(self, model):
    self.log.append(model)
    return self


def test_iterate_warm_starts_learners_through_the_tooling_s_wrapper():
  rng = np.random.default_rng(0)
  xs = [rng.random((5, 2)), rng.random((6, 2))]
  ys = [rng.random(5), rng.random(6)]
  problem = fedkrr.make_problem(xs, ys, fedkrr.RBF(1.0), 0.1)
  log = []
  learners = [experiment._Counted(_Recording(k, log), bar=_NoBar())
              for k in fedkrr.krr_learners(problem)]
  rounds = list(fedkrr.protocols.iterate(fedkrr.protocols.avgkd(), learners, problem.xs,
                                         problem.ys, rounds=3))
  assert len(log) == 2 * 3   # every agent after every round: none skipped silently
  assert all(isinstance(m, fedkrr.learners.KRRModel) for m in log)
  assert len(rounds) == 3


class _NoBar:
  def update(self, n):
    del n


class _Forwarding:
  """A user's wrapper that forwards everything through __getattr__."""

  def __init__(self, learner):
    self._learner = learner

  def fit(self, x, targets):
    return self._learner.fit(x, targets)

  def __getattr__(self, name):
    return getattr(self._learner, name)


def test_a_capability_reached_only_through_getattr_is_an_error_on_every_python():
  learners = _learners()
  with pytest.raises(fedkrr.learners.CapabilityError, match=r"learners\[0\]: _Forwarding reaches "
                     r"warm_start_from of WarmStartLearner only through __getattr__"):
    fedkrr.learners.has_capability(_Forwarding(learners["matfree"]),
                                   fedkrr.learners.WarmStartLearner, "learners[0]")
  with pytest.raises(fedkrr.learners.CapabilityError, match="batch_key, fit_batch of BatchLearner"):
    fedkrr.learners.fit_all([_Forwarding(learners["flax"])], [np.zeros((1, 28, 28, 1))],
                            [np.zeros((1, 10))])
  # What the wrapped learner lacks is simply absent, not an error.
  assert not fedkrr.learners.has_capability(_Forwarding(learners["krr"]),
                                            fedkrr.learners.WarmStartLearner)


def test_the_packages_check_capabilities_only_through_has_capability():
  """``isinstance`` against a runtime Protocol answers differently on 3.11 and 3.12+ for
  wrappers; and no class of the packages forwards through ``__getattr__``."""
  protocols = {"BatchLearner", "WarmStartLearner", "ReseedableLearner", "ParameterLearner",
               "ParameterModel", "EpochScoredModel"}
  found = []
  for path in sorted([*(ROOT / "fedkrr").rglob("*.py"), *(ROOT / "neural").rglob("*.py")]):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
      if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
          and len(node.args) == 2):
        names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)
                 for n in ast.walk(node.args[1])}
        if names & protocols:
          found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
      if isinstance(node, ast.ClassDef):
        found += [f"{path.relative_to(ROOT)}:{f.lineno} __getattr__" for f in node.body
                  if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"]
  assert found == []


@dataclasses.dataclass
class _KeyOnly:
  """Has a batch_key but no fit_batch: not a BatchLearner, so it is fitted alone."""
  shift: float
  batch_key: str = "same"

  def fit(self, x, targets):
    return fedkrr.learners.KRRModel(fedkrr.RBF(1.0), jnp.asarray(x),
                                    jnp.asarray(targets) + self.shift, jnp.asarray(1.0))


def test_fit_all_groups_only_batch_learners():
  x = jnp.ones((2, 1))
  models = fedkrr.learners.fit_all([_KeyOnly(1.0), _KeyOnly(2.0)], [x, x],
                                  [jnp.zeros(2), jnp.zeros(2)])
  assert [float(m.alpha[0]) for m in models] == [1.0, 2.0]


def test_each_fitted_model_declares_its_variables_and_epoch_scores():
  rng = np.random.default_rng(0)
  x = rng.random((16, 4, 4, 1), dtype=np.float32)
  targets = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 16)]
  flax = neural.FlaxLearner(neural.get_model("mlp", 3, tiny=True), (4, 4, 1),
                            training.TrainConfig(epochs=1, batch_size=8), jax.random.PRNGKey(0))
  network = flax.fit(x, targets)
  tree = neural.ForestLearner(n_estimators=2).fit(x, targets)
  has = fedkrr.learners.has_capability
  assert has(network, ParameterModel) and has(network, EpochScoredModel)
  assert not has(tree, ParameterModel) and not has(tree, EpochScoredModel)
  # A Teacher (augmented KD) declares its network's variables; around a forest, none.
  assert has(Teacher(network), ParameterModel) and not has(Teacher(tree), ParameterModel)
