"""The names a config chooses from, in a module that imports nothing.

The typed configs (:mod:`neural._src.runtime.config`) check their fields against these, and
the command line lists them, without importing JAX, Flax or Optax: ``neural --help``
and the rerun of a finished run stay fast. Each module that implements the choices
imports its names from here (models, augmentations, FedAvg's weightings, training's
loops).
"""

# Blocks per stage of the split ResNets. ResNet2 ... ResNet12 have (d - 2) / 2 basic blocks
# after their one-conv extractor and before their dense layer (the 6n + 2 count of He et al.);
# with width 16 on 32x32x3 inputs they have 634, 5,306, 19,994, 43,222 and 61,786 parameters:
# Table 3 of Wu et al. (2023) lists 0.63K, 5.31K, 19.99K, 43.23K, 61.79K. ResNet20 has
# (d - 2) / 3 = 6 bottleneck blocks (three convs each, the block of FedGKT's server ResNets,
# which FedDKC's code base shares) in stages (2, 3, 1): 167,306 parameters, Table 3's 167.31K
# (the basic-block (3, 3, 3) ResNet-20 has 272K, and no other stage layout of either block
# gives 167.31K).
SPLIT_RESNETS = {
    "resnet2": (),
    "resnet4": (1,),
    "resnet6": (1, 1),
    "resnet10": (2, 2),
    "resnet12": (2, 3),
    "resnet20": (2, 3, 1),
}
MODELS = ("cnn", "mlp", "vgg", "vgg9", "resnet8", "resnet14", "resnet18", "lenet5") + tuple(
    SPLIT_RESNETS)
NORMS = ("group", "none")
AUGMENTS = ("none", "crop-flip")
# The main job's parts (`neural demo --parts`), in the order it runs them.
MAIN_JOB_PARTS = ("verify", "toy", "closed-forms", "mnist")
WEIGHTINGS = ("size", "equal")   # FedAvg's server average
STEP_LOOPS = ("auto", "scan", "python")
AGENT_BATCHING = ("auto", "vmap", "sequential")
LOSSES = ("mse", "ce")   # training's losses: squared error of the softmax, cross-entropy

# Trees of a random forest agent: far past the papers' 100, short of forests that
# would never finish growing (scikit-learn holds every tree in memory).
MAX_FOREST_TREES = 100_000
