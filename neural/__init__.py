"""neural: Flax/Optax replays of the distillation protocols (skeleton).

The protocols themselves live in ``fedkrr`` and are written against the
``fit``/``predict`` learner interface; this package will provide neural and
random-forest learners for them, data, partitions and experiments.
"""

__version__ = "0.1.0"
