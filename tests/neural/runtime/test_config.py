"""The typed configs (``neural._src.runtime.config``): one coercer, RunConfig's shared fields,
seeds."""

import dataclasses
import json

import numpy as np
import pytest

import neural
from neural import training
from neural._src.datasets.run_data import load_run_data
from neural._src.jobs.specs import ConfigSpec
from neural._src.kd.experiment import build_learners
from neural._src.methods import mhd
from neural._src.runtime.config import ConfigError
from neural._src.runtime.config import ExperimentConfig
from neural._src.runtime.config import coerce
from neural._src.runtime.config import field_help


def test_json_round_trip_and_normalisation():
  config = ExperimentConfig(models="cnn,mlp", proportions=[0.7, 0.3], alpha=1, rounds=3)
  assert config.models == ("cnn", "mlp")
  assert config.proportions == (0.7, 0.3)
  assert isinstance(config.alpha, float)
  again = ExperimentConfig.from_json(config.to_json())
  assert again == config
  assert json.loads(config.to_json())["models"] == ["cnn", "mlp"]
  assert config.agent_models == ("cnn", "mlp")
  assert ExperimentConfig(agents=3).agent_models == ("cnn",) * 3


def test_partition_params_follow_the_partition():
  assert ExperimentConfig(partition="label-split", alpha=0.1).partition_params == {"alpha": 0.1}
  assert ExperimentConfig(proportions=(0.7, 0.3)).partition_params == {"proportions": (0.7, 0.3)}
  assert ExperimentConfig().partition_params == {}
  assert ExperimentConfig(partition="dirichlet-clients", beta=0.5,
                          alpha=0.3).partition_params == {"beta": 0.5}


@pytest.mark.parametrize("changes, field", [
    (dict(dataset="imagenet"), "dataset"),
    (dict(partition="random"), "partition"),
    (dict(protocol="fedprox"), "protocol"),
    (dict(agents=1), "agents"),
    (dict(agents=2.0), "agents"),
    (dict(rounds=0), "rounds"),
    (dict(epochs=True), "epochs"),
    (dict(loss="hinge"), "loss"),
    (dict(learning_rate=0), "learning_rate"),
    (dict(weight_decay=-1e-4), "weight_decay"),
    (dict(start=2), "start"),
    (dict(models=("cnn", "mlp", "cnn")), "models"),
    (dict(models=("cnn", "transformer")), "models"),
    (dict(models=()), "models"),
    (dict(protocol="fedavg", models=("cnn", "mlp")), "models"),
    (dict(protocol="fedavg", models=("forest",)), "models"),
    (dict(partition="label-split"), "alpha"),
    (dict(partition="label-split", alpha=1.5), "alpha"),
    (dict(partition="dirichlet-classes"), "beta"),
    (dict(proportions=(0.5, 0.4)), "proportions"),
    (dict(proportions=(1.0,)), "proportions"),
    (dict(train_subset=1), "train_subset"),
    (dict(seed="0"), "seed"),
    (dict(tiny=1), "tiny"),
    (dict(width=0), "width"),
    (dict(width=(8, 512, 3)), "width"),
    (dict(protocol="avgkd", agent_weights=(0.5, 0.5)), "agent_weights"),
    (dict(protocol="weighted-avgkd", agent_weights=(0.5, 0.4)), "agent_weights"),
    (dict(protocol="weighted-avgkd", agent_weights=(1.0,)), "agent_weights"),
    (dict(protocol="weighted-avgkd", agent_weights=(1.5, -0.5)), "agent_weights"),
    (dict(protocol="weighted-avgkd", agent_weights=(1e308, 1e308)), "agent_weights"),
])
def test_bad_values_name_the_field(changes, field):
  with pytest.raises(ConfigError, match=rf"^{field}: expected"):
    ExperimentConfig(**changes)


def test_one_width_for_all_agents_or_one_per_agent():
  assert ExperimentConfig(models=("cnn", "mlp")).agent_widths == (None, None)
  assert ExperimentConfig(models=("cnn", "mlp"), width=8).agent_widths == (8, 8)
  both = ExperimentConfig(models=("cnn", "mlp"), width=[8, 512])
  assert both.agent_widths == (8, 512)
  assert ExperimentConfig.from_json(both.to_json()) == both


def test_unknown_field_and_bad_json():
  with pytest.raises(ConfigError, match="^epoch: not a field of the KD experiment config"):
    ExperimentConfig.from_dict({"epoch": 3})
  with pytest.raises(ConfigError, match="not valid JSON"):
    ExperimentConfig.from_json("{rounds: 3")


@pytest.mark.parametrize("kind, value, expected", [
    (float, 3, 3.0),
    (int | None, None, None),
    (tuple[float, ...], [1, 0.5], (1.0, 0.5)),
    (tuple[str, ...], "mlp, cnn", ("mlp", "cnn")),
    (tuple[int, ...], (2, 3), (2, 3)),
    (tuple[int, ...], 8, (8,)),
    (tuple[float, ...], 0.5, (0.5,)),
])
def test_coerce_canonical_forms(kind, value, expected):
  got = coerce("field", kind, value)
  assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("kind, value, words", [
    (int, True, "an integer"), (int, 1.5, "an integer"), (float, "1", "a number"),
    (bool, 1, "true or false"), (str, 3, "a string"), (tuple[float, ...], [], "non-empty"),
    (tuple[int, ...], [1, "a"], "list of integers"),
])
def test_coerce_names_the_field_and_what_was_expected(kind, value, words):
  with pytest.raises(ConfigError, match=f"^field: expected .*{words}"):
    coerce("field", kind, value)


@dataclasses.dataclass(frozen=True)
class _ToyConfig(neural.RunConfig):
  """A config with one field of its own.

  Attributes:
    gamma: the toy's
      step size.
  """

  gamma: float = 1.0

  def validate(self) -> None:
    super().validate()
    self.need(self.gamma > 0, "gamma", "a number > 0")


def test_a_new_field_is_declared_once():
  """The annotation is the type check, the docstring the help; RunConfig's fields come along."""
  assert _ToyConfig(gamma=2).gamma == 2.0 and isinstance(_ToyConfig(gamma=2).gamma, float)
  with pytest.raises(ConfigError, match="^gamma: expected a number"):
    _ToyConfig(gamma="fast")
  with pytest.raises(ConfigError, match="^gamma: expected a number > 0"):
    _ToyConfig(gamma=-1)
  with pytest.raises(ConfigError, match="^agents: expected an integer >= 2"):
    _ToyConfig(agents=1)
  help_text = field_help(_ToyConfig)
  assert help_text["gamma"] == "the toy's step size."
  assert help_text["agents"].startswith("number of agents")


def test_every_field_of_every_config_has_a_description():
  shipped = [c for c in neural.methods.method_configs().values()
             if c.__module__.startswith("neural.")]   # not the tests' own toy methods
  classes = [ExperimentConfig, *shipped]
  for cls in classes:
    missing = [f.name for f in dataclasses.fields(cls) if not field_help(cls).get(f.name)]
    assert not missing, f"{cls.__name__}: no description for {missing}"


def test_seed_sets_both_seeds_unless_they_are_named():
  c = ExperimentConfig(seed=3)
  assert (c.data_seed, c.init_seed) == (3, 3)
  assert (c.replace(seed=5).data_seed, c.replace(seed=5).init_seed) == (5, 5)
  d = c.replace(init_seed=7)
  assert (d.seed, d.data_seed, d.init_seed) == (3, 3, 7)
  assert (d.replace(seed=4).data_seed, d.replace(seed=4).init_seed) == (4, 4)
  assert ExperimentConfig(seed=3, data_seed=1).init_seed == 3
  with pytest.raises(ConfigError, match="^init_seed: expected an integer in 0..2"):
    ExperimentConfig(init_seed=-1)


def test_a_config_saved_with_one_seed_reads_as_the_same_config():
  """Run directories written before data_seed/init_seed existed still resume."""
  old = {k: v for k, v in ExperimentConfig(seed=9).to_dict().items()
         if k not in ("data_seed", "init_seed")}
  assert ExperimentConfig.from_dict(old) == ExperimentConfig(seed=9)
  assert ExperimentConfig.from_json(json.dumps(old)).to_dict()["init_seed"] == 9


def test_a_sweep_over_seed_moves_both_and_over_init_seed_only_the_initialisation():
  runs = ConfigSpec(base={"data_seed": 4}, grid=({"seed": [0, 1]},)).expand()
  assert [(c.data_seed, c.init_seed) for _, c in runs] == [(0, 0), (1, 1)]
  runs = ConfigSpec(base={"seed": 4}, grid=({"init_seed": [0, 1]},)).expand({"tiny": True})
  assert [(c.data_seed, c.init_seed) for _, c in runs] == [(4, 0), (4, 1)]


def test_init_seed_varies_the_initialisation_with_the_split_held_fixed():
  base = ExperimentConfig(models=("mlp",), tiny=True, train_subset=120, test_subset=30,
                          partition="label-split", alpha=0.3, seed=1)
  other_init, other_data = base.replace(init_seed=2), base.replace(data_seed=2)
  split = load_run_data(base)
  for a in range(base.agents):
    np.testing.assert_array_equal(load_run_data(other_init).labels[a], split.labels[a])
  assert any(not np.array_equal(load_run_data(other_data).xs[a], split.xs[a])
             for a in range(base.agents))
  keys = [np.asarray(build_learners(c, (8, 8, 1), 10)[0].key) for c in (base, other_init,
                                                                         other_data)]
  assert not np.array_equal(keys[0], keys[1]) and np.array_equal(keys[0], keys[2])


def test_method_configs_share_the_run_fields_and_the_seeds():
  c = mhd.MHDConfig(method="mhd", labels_per_client=3, seed=2, init_seed=5)
  assert (c.data_seed, c.init_seed) == (2, 5)
  assert set(neural.RunConfig.field_names()) <= set(c.field_names())


@pytest.mark.parametrize("field, value, message", [
    ("epochs", 10**18, r"epochs: expected integers of at most 2\^31 - 1"),
    ("epochs", 100_001, r"epochs: expected an integer in 1\.\.100000"),
    ("rounds", 10**9, r"rounds: expected an integer in 1\.\.100000"),
    ("batch_size", 10**18, r"batch_size: expected integers of at most 2\^31 - 1"),
    ("train_subset", 2**31, r"train_subset: expected integers of at most 2\^31 - 1"),
    ("forest_trees", 10**18, r"forest_trees: expected integers of at most 2\^31 - 1"),
])
def test_integers_that_size_work_are_bounded_naming_the_field(field, value, message):
  """Sizes past XLA's 32-bit indexes aborted the process inside XLA; now a ConfigError."""
  with pytest.raises(ConfigError, match=message):
    ExperimentConfig(**{field: value})


def test_the_methods_configs_bound_their_integers_too():
  from neural._src.methods.registry import method_configs

  checked = 0
  for name, cls in method_configs().items():   # other tests may register methods of their own
    if "batch_size" in cls.field_names():
      checked += 1
      with pytest.raises(ConfigError, match="batch_size: expected integers of at most"):
        cls(method=name, batch_size=10**18)
    if "epochs" in cls.field_names():
      with pytest.raises(ConfigError, match=r"epochs: expected an integer in 1\.\.100000"):
        cls(method=name, epochs=10**6)
  assert checked >= 4   # the four papers' methods at least


# ---------------------------------------------------------------------------
# Training settings: declared, checked and converted once (training.TrainingSettings)

from neural._src.methods import feddkc  # noqa: E402
from neural._src.methods import representation_sharing  # noqa: E402

_TRAINING_CONFIGS = [ExperimentConfig, training.TrainConfig, feddkc.FedDKCConfig, mhd.MHDConfig,
                     representation_sharing.RepShareConfig]
_VALID = {mhd.MHDConfig: dict(method="mhd", labels_per_client=3)}   # what else a config needs


@pytest.mark.parametrize("cls", _TRAINING_CONFIGS)
def test_every_config_that_trains_holds_the_one_settings_type(cls):
  assert issubclass(cls, training.TrainingSettings)
  names = {f.name for f in dataclasses.fields(cls)}
  assert {"batch_size", "learning_rate", "weight_decay"} <= names   # flat, as in config.json
  help_text = field_help(cls)
  assert all(help_text.get(name) for name in ("batch_size", "learning_rate", "weight_decay"))


@pytest.mark.parametrize("cls", _TRAINING_CONFIGS)
@pytest.mark.parametrize("changes, field", [
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(weight_decay=-1e-4), "weight_decay"),
    (dict(batch_size=0), "batch_size"),
])
def test_bad_training_settings_are_named_by_every_config(cls, changes, field):
  error = training.TrainError if cls is training.TrainConfig else ConfigError
  with pytest.raises(error, match=f"^{field}: expected"):
    cls(**_VALID.get(cls, {}), **changes)


@pytest.mark.parametrize("cls", [training.TrainConfig, feddkc.FedDKCConfig, mhd.MHDConfig])
def test_the_rule_and_momentum_are_checked_where_a_config_chooses_them(cls):
  with pytest.raises((ConfigError, training.TrainError), match="^optimizer: expected"):
    cls(**_VALID.get(cls, {}), optimizer="rmsprop")
  with pytest.raises((ConfigError, training.TrainError), match="^momentum: expected"):
    cls(**_VALID.get(cls, {}), momentum=1.0)


def test_one_conversion_gives_each_config_its_optimiser():
  convert = training.optimizer_config
  assert convert(ExperimentConfig(learning_rate=0.01, weight_decay=0.0)) == \
      training.OptimizerConfig("adam", 0.01, 0.0)
  assert convert(training.TrainConfig(optimizer="sgd", momentum=0.5)) == \
      training.OptimizerConfig("sgd", 1e-3, 3e-4, 0.5)
  assert convert(feddkc.FedDKCConfig()) == training.OptimizerConfig("sgd", 0.03, 5e-4, 0.9)
  assert convert(representation_sharing.RepShareConfig()) == \
      training.OptimizerConfig("adam", 1e-3, 0.0)
  assert convert(mhd.MHDConfig(rounds=3, steps_per_round=5, **_VALID[mhd.MHDConfig])) == \
      training.OptimizerConfig("sgd", 0.1, 0.0, 0.9, schedule="cosine", decay_steps=15)
  assert convert(mhd.MHDConfig(cosine=False, **_VALID[mhd.MHDConfig])).schedule == "constant"
  settings = ExperimentConfig(batch_size=8, learning_rate=0.1).training_settings()
  assert training.TrainConfig(**settings) == training.TrainConfig(batch_size=8, learning_rate=0.1)


def test_a_config_json_of_the_old_field_order_reads_back_equal():
  config = ExperimentConfig(learning_rate=0.01, batch_size=32)
  values = config.to_dict()
  first = ("batch_size", "learning_rate", "weight_decay")
  old_order = {k: v for k, v in values.items() if k not in first} | {k: values[k] for k in first}
  assert ExperimentConfig.from_dict(old_order) == config
  assert json.loads(json.dumps(old_order)) == json.loads(config.to_json())   # the resume check


@pytest.mark.parametrize("cls, bad", [(ExperimentConfig, 0), (ExperimentConfig, 100_001),
                                      (representation_sharing.RepShareConfig, 0),
                                      (training.TrainConfig, -1)])
def test_epochs_are_declared_and_checked_once_too(cls, bad):
  assert issubclass(cls, training.EpochSettings)
  error = training.TrainError if cls is training.TrainConfig else ConfigError
  with pytest.raises(error, match="^epochs: expected an integer"):
    cls(epochs=bad)
  assert training.TrainConfig(epochs=0).epochs == 0   # 0 epochs (no training) stays allowed


def test_agent_weights_travel_as_the_protocol_params():
  config = ExperimentConfig(protocol="weighted-avgkd", agent_weights=(0.25, 0.75))
  assert config.protocol_params.weights == (0.25, 0.75)
  assert ExperimentConfig(protocol="akd", start=1).protocol_params.start == 1
  assert ExperimentConfig(protocol="weighted-avgkd").protocol_params.weights is None


def _all_config_classes():
  from neural._src.methods.registry import method_configs
  return [ExperimentConfig, *method_configs().values()]


def _bad_values(kind):
  """Values of the wrong type for a field of annotation ``kind``: JSON null (unless the
  field is optional), a list where a scalar belongs, a float for an integer, an integer
  of 401 digits for a number, a lone surrogate in a name."""
  from neural._src.runtime.config import optional_inner
  inner, optional = optional_inner(kind)
  out = [] if optional else [None]
  if inner is int:
    out += [[1], 1.9, True, "1"]
  elif inner is float:
    out += [[1.0], 10**400, -10**400, True, "1.0"]
  elif inner is str:
    out += [["a"], 1, "\udc80", "a\udc80b"]
  elif inner is bool:
    out += [[True], 1, "true"]
  elif str(inner).startswith("tuple"):
    out += [[None], [[1]], "\udc80" if "str" in str(inner) else [10**400]]
  return out


@pytest.mark.parametrize("cls", _all_config_classes(), ids=lambda c: c.__name__)
def test_every_field_of_every_config_refuses_values_of_the_wrong_type(cls):
  """One line naming the field, never a TypeError or OverflowError."""
  from neural._src.runtime.config import field_type
  base = cls(**{k: v for k, v in _VALID.get(cls, {}).items()
                if k in cls.field_names()}) if cls is not ExperimentConfig else cls()
  values = base.to_dict()
  for f in dataclasses.fields(cls):
    for bad in _bad_values(field_type(cls, f.name)):
      if f.name == "method":
        continue   # the registry's key, checked below
      with pytest.raises(ConfigError, match=f"^{f.name}: expected") as info:
        cls.from_dict({**values, f.name: bad})
      assert "\n" not in str(info.value) and len(str(info.value)) < 400, (f.name, bad)


@pytest.mark.parametrize("method", [["mhd"], {"a": 1}, 1, None])
def test_a_method_that_is_not_a_name_is_one_line(method):
  from neural._src.jobs.specs import config_from_dict
  for spec in (ConfigSpec(base={"method": method}),
               ConfigSpec(base={}, grid=({"method": [method]},))):
    if method is None:
      continue   # no method: the KD experiment
    with pytest.raises(ConfigError, match="^method: expected"):
      spec.methods()
  with pytest.raises(ConfigError, match="^method: expected"):
    config_from_dict({"method": method})


@pytest.mark.parametrize("seed", [None, [1], 1.9, True, "1"])
def test_reproduce_refuses_a_seed_that_is_not_an_integer_before_any_run(seed, tmp_path):
  with pytest.raises(ConfigError, match="^seed: expected an integer"):
    neural.reproduce(4, tmp_path / "r", overrides={"seed": seed})
  assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("changes, field", [
    (dict(learning_rate=10**400), "learning_rate"), (dict(learning_rate=float("nan")),
                                                     "learning_rate"),
    (dict(learning_rate=None), "learning_rate"), (dict(weight_decay=float("inf")),
                                                  "weight_decay"),
    (dict(momentum=None), "momentum"), (dict(momentum=True), "momentum"),
    (dict(name=["adam"]), "name"), (dict(schedule=["cosine"]), "schedule"),
    (dict(schedule="cosine", decay_steps=1.5), "decay_steps"),
    (dict(schedule="polynomial", power=10**400), "power"), (dict(t0=float("nan")), "t0"),
])
def test_the_optimizer_config_checks_every_argument(changes, field):
  with pytest.raises(training.OptimizerError, match=f"^{field}: expected") as info:
    training.OptimizerConfig(**changes)
  assert len(str(info.value)) < 200


def test_paper_rounds_past_the_limit_name_the_flag_not_the_field(tmp_path):
  with pytest.raises(ConfigError, match=r"^paper_rounds \(--paper-rounds\): 100001 paper "
                                        r"rounds are 200002 logged rounds") as info:
    neural.reproduce(4, tmp_path / "r", paper_rounds=100_001)
  assert "\n" not in str(info.value)
  assert not (tmp_path / "r").exists()
