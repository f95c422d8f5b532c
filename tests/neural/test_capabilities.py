"""The optional learner capabilities are declared Protocols, and the runs read them so."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import fedkrr
import neural
from neural._src.capabilities import ParameterLearner
from neural._src.capabilities import ReseedableLearner


def test_each_learner_declares_what_it_offers():
  flax = neural.FlaxLearner(neural.get_model("mlp", 10), (28, 28, 1), neural.TrainConfig(),
                            jax.random.PRNGKey(0))
  forest = neural.ForestLearner(n_estimators=2)
  problem = fedkrr.make_problem([np.zeros((3, 2))] * 2, [np.zeros(3)] * 2, fedkrr.RBF(1.0), 0.1)
  exact = fedkrr.krr_learners(problem)[0]
  matfree = fedkrr.matfree_learners(problem, landmarks=2)[0]
  kinds = (fedkrr.BatchLearner, fedkrr.WarmStartLearner, ReseedableLearner, ParameterLearner)
  offers = {name: tuple(isinstance(learner, kind) for kind in kinds)
            for name, learner in (("flax", flax), ("forest", forest), ("krr", exact),
                                  ("matfree", matfree))}
  assert offers == {"flax": (True, False, True, True), "forest": (False, False, True, False),
                    "krr": (False, False, False, False), "matfree": (False, True, False, False)}


@dataclasses.dataclass
class _KeyOnly:
  """Has a batch_key but no fit_batch: not a BatchLearner, so it is fitted alone."""
  shift: float
  batch_key: str = "same"

  def fit(self, x, targets):
    return fedkrr.KRRModel(fedkrr.RBF(1.0), jnp.asarray(x), jnp.asarray(targets) + self.shift,
                           jnp.asarray(1.0))


def test_fit_all_groups_only_batch_learners():
  x = jnp.ones((2, 1))
  models = fedkrr.fit_all([_KeyOnly(1.0), _KeyOnly(2.0)], [x, x], [jnp.zeros(2), jnp.zeros(2)])
  assert [float(m.alpha[0]) for m in models] == [1.0, 2.0]


def test_each_fitted_model_declares_its_variables_and_epoch_scores():
  from neural._src.capabilities import EpochScoredModel
  from neural._src.capabilities import ParameterModel

  rng = np.random.default_rng(0)
  x = rng.random((16, 4, 4, 1), dtype=np.float32)
  targets = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 16)]
  flax = neural.FlaxLearner(neural.get_model("mlp", 3, tiny=True), (4, 4, 1),
                            neural.TrainConfig(epochs=1, batch_size=8), jax.random.PRNGKey(0))
  network = flax.fit(x, targets)
  tree = neural.ForestLearner(n_estimators=2).fit(x, targets)
  assert isinstance(network, ParameterModel) and isinstance(network, EpochScoredModel)
  assert not isinstance(tree, ParameterModel) and not isinstance(tree, EpochScoredModel)
