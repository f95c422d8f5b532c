"""Flax models of the neural experiments: input (B, H, W, C) float32 -> logits (B, classes).

Afonin & Karimireddy, Sec. 6 and App. A, H: a small CNN and an MLP on MNIST, VGG16
on CIFAR-10 as the text says ("vgg"); the authors' code uses a VGG-9 without
normalisation ("vgg9" with ``norm="none"``) and a ResNet-8 partner ("resnet8", with
GroupNorm here where theirs has BatchNorm). ResNet-18 and the rest serve the
methods of the other papers.
Every model is a ``flax.linen.Module`` whose ``__call__(x, train=False)`` returns
logits; dropout (MLP only) is active when ``train=True`` and then needs a
``"dropout"`` rng. There is no mutable state: normalisation is GroupNorm (or none),
never BatchNorm, so a model's variables are ``{"params": ...}`` only and training
can be vmapped over agents without threading batch statistics.

Each model has a width setting (channels of the first layer, or hidden units of
the MLP) and a ``tiny=True`` variant for tests (smaller width and, for VGG and
ResNet-18, fewer layers).

Heterogeneous clients of the feature-sharing methods (Wu et al. 2023, FedDKC;
Berdoz et al. 2022): a LeNet-5 style net ("lenet5") and the split ResNets
"resnet2" ... "resnet20" (:class:`SplitResNet`: a shared-architecture
feature extractor, :class:`ConvStem`, followed by a predictor of depth-dependent
size, :class:`ResNetHead`).

One feature convention serves every method that needs more than logits: each
model's *features* are the input of its last dense layer (CNN, MLP, VGG, ResNet,
LeNet-5) or the extractor's feature map (the split ResNets, whose
``features``/``head`` methods split the forward pass). ``return_features=True``
returns ``(logits, features)``, and a model built with ``num_classes=0`` has no
last layer and returns its features alone: it is the feature extractor (the
backbone) that multi-headed distillation and representation sharing put their
own heads on, without a copy of the architecture.
"""

from __future__ import annotations

from collections.abc import Sequence
import math

import flax.linen as nn
import jax.numpy as jnp

from neural._src.choices import MODELS
from neural._src.choices import NORMS
from neural._src.choices import SPLIT_RESNETS
from neural._src.models.conv import Conv
from neural._src.models.conv import max_pool

# The block of each split ResNet that does not use BasicBlock (see RESNET_BLOCKS).
_SPLIT_RESNET_BLOCK = {"resnet20": "bottleneck"}
RESNET_BLOCKS = ("basic", "bottleneck")


class ModelError(ValueError):
  """A bad model name, width or normalisation."""


class CNN(nn.Module):
  """The paper's CNN: two 5x5 conv layers (16, 32 channels) with ReLU and 2x2 max-pool.

  ``conv5x5(width) - ReLU - maxpool2 - conv5x5(2 width) - ReLU - maxpool2 -
  flatten - dense(num_classes)``, 'SAME' padding (28x28 -> 7x7x32). The paper
  (App. A, H) names the two conv layers and their channels but not the head; we
  use a single dense layer, as the classic MNIST ConvNet does.

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    width: channels of the first conv layer (16 in the paper); the second has 2 width.
  """

  num_classes: int
  width: int = 16

  @nn.compact
  def __call__(self, x, train: bool = False, return_features: bool = False):
    del train
    for channels in (self.width, 2 * self.width):
      x = Conv(channels, (5, 5), padding="SAME")(x)
      x = max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    return _head(self.num_classes, x, return_features)


class MLP(nn.Module):
  """``flatten - [dense(width) - ReLU - dropout]^depth - dense(num_classes)``.

  The paper's agent-2 model (Sec. 6): two hidden layers of 512 units, dropout 0.2.

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    width: hidden units per layer.
    depth: number of hidden layers.
    dropout: dropout rate after each hidden ReLU (active only with ``train=True``).
  """

  num_classes: int
  width: int = 512
  depth: int = 2
  dropout: float = 0.2

  @nn.compact
  def __call__(self, x, train: bool = False, return_features: bool = False):
    x = x.reshape((x.shape[0], -1))
    for _ in range(self.depth):
      x = nn.relu(nn.Dense(self.width)(x))
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return _head(self.num_classes, x, return_features)


def _head(num_classes: int, features, return_features: bool):
  """The last dense layer on ``features``: logits, or ``(logits, features)``.

  With ``num_classes == 0`` there is no last layer and the features come back alone.
  """
  if num_classes == 0:
    return features
  logits = nn.Dense(num_classes)(features)
  return (logits, features) if return_features else logits


def _num_groups(channels: int) -> int:
  """GroupNorm groups: up to 32, each of at least 2 channels, dividing ``channels``."""
  return math.gcd(channels, max(1, min(32, channels // 2)))


def _norm(kind: str, channels: int):
  if kind == "group":
    return nn.GroupNorm(num_groups=_num_groups(channels))
  return lambda x: x


# VGG16's layer plan ("M" = 2x2 max-pool); channels relative to the first (64).
_VGG16 = (1, 1, "M", 2, 2, "M", 4, 4, 4, "M", 8, 8, 8, "M", 8, 8, 8, "M")
_VGG_TINY = (1, "M", 2, "M", 4, "M")
# The authors' CIFAR-10 "VGG-9" (public code of Afonin & Karimireddy): 8 convs 32-64-128-128-
# 256-256-256-256 with 5 pools and one dense layer, 2,308,810 parameters at width 32.
_VGG9 = (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M")
# Kaiming normal on fan-out (std sqrt(2 / (9 out))), untruncated, for the VGG-9's convs.
_CONV_INITS = {"lecun": nn.initializers.lecun_normal(),
               "he-fan-out": nn.initializers.variance_scaling(2.0, "fan_out", "normal")}


class VGG(nn.Module):
  """VGG-style net: 3x3 conv - norm - ReLU blocks with max-pools, global average, dense.

  The default plan is VGG16's 13 conv layers (Simonyan & Zisserman; the paper's
  CIFAR-10 model, App. A) with channels ``width * (1, 2, 4, 8, 8)``. Pools use
  'SAME' padding so that 28x28 inputs survive the five halvings; the features
  are averaged over what is left of the image and fed to one dense layer (the
  usual CIFAR head).

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    width: channels of the first block (64 for VGG16).
    plan: channel multipliers and "M" for max-pool.
    norm: "group" (GroupNorm after each conv) or "none".
    conv_init: the convolutions' kernel initialiser: "lecun" (Flax's default) or
      "he-fan-out" (the authors' VGG-9: normal with std sqrt(2 / (9 channels)),
      biases 0).
  """

  num_classes: int
  width: int = 64
  plan: Sequence[int | str] = _VGG16
  norm: str = "group"
  conv_init: str = "lecun"

  @nn.compact
  def __call__(self, x, train: bool = False, return_features: bool = False):
    del train
    for item in self.plan:
      if item == "M":
        x = max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
      else:
        channels = int(item) * self.width
        x = nn.Conv(channels, (3, 3), padding="SAME", use_bias=self.norm == "none",
                    kernel_init=_CONV_INITS[self.conv_init])(x)
        x = nn.relu(_norm(self.norm, channels)(x))
    x = jnp.mean(x, axis=(1, 2))
    return _head(self.num_classes, x, return_features)


def _add_shortcut(x, y, strides: int, norm: str):
  """ReLU of a residual block's branch ``y`` plus its shortcut: ``x`` itself, or, where
  the channels or the stride change, a 1x1 conv (that stride) of ``x`` with norm.

  Called inside a block's compact ``__call__``: the conv and norm it creates are the
  block's own, named after the branch's layers.
  """
  channels = y.shape[-1]
  if x.shape[-1] != channels or strides != 1:
    x = nn.Conv(channels, (1, 1), (strides, strides), use_bias=norm == "none")(x)
    x = _norm(norm, channels)(x)
  return nn.relu(x + y)


class BasicBlock(nn.Module):
  """ResNet basic block: two 3x3 convs with norm, identity or 1x1-conv shortcut."""

  channels: int
  strides: int = 1
  norm: str = "group"

  @nn.compact
  def __call__(self, x):
    bias = self.norm == "none"
    s = (self.strides, self.strides)
    y = nn.Conv(self.channels, (3, 3), s, padding="SAME", use_bias=bias)(x)
    y = nn.relu(_norm(self.norm, self.channels)(y))
    y = nn.Conv(self.channels, (3, 3), padding="SAME", use_bias=bias)(y)
    y = _norm(self.norm, self.channels)(y)
    return _add_shortcut(x, y, self.strides, self.norm)


class Bottleneck(nn.Module):
  """ResNet bottleneck block (He et al. 2016): 1x1 conv (channels) - 3x3 conv (channels,
  stride) - 1x1 conv (4 channels), each with norm, ReLU after the first two; the shortcut is
  the identity or a 1x1 conv (4 channels, stride) with norm; ReLU after the sum."""

  channels: int
  strides: int = 1
  norm: str = "group"

  @nn.compact
  def __call__(self, x):
    bias = self.norm == "none"
    s = (self.strides, self.strides)
    out = 4 * self.channels
    y = nn.Conv(self.channels, (1, 1), use_bias=bias)(x)
    y = nn.relu(_norm(self.norm, self.channels)(y))
    y = nn.Conv(self.channels, (3, 3), s, padding="SAME", use_bias=bias)(y)
    y = nn.relu(_norm(self.norm, self.channels)(y))
    y = nn.Conv(out, (1, 1), use_bias=bias)(y)
    y = _norm(self.norm, out)(y)
    return _add_shortcut(x, y, self.strides, self.norm)


class ResNet(nn.Module):
  """CIFAR-style ResNet: 3x3 stem, stages of basic blocks, global average, dense.

  Stage i has ``blocks[i]`` blocks with ``width * 2^i`` channels, stride 2 from
  the second stage on. ResNet-18: blocks (2, 2, 2, 2), width 64; ResNet-8 and
  ResNet-14: blocks (1, 1, 1) and (2, 2, 2), width 16 (the 6n + 2 family with n = 1, 2).

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    blocks: blocks per stage.
    width: channels of the stem and the first stage.
    norm: "group" (GroupNorm) or "none".
  """

  num_classes: int
  blocks: Sequence[int] = (2, 2, 2, 2)
  width: int = 64
  norm: str = "group"

  @nn.compact
  def __call__(self, x, train: bool = False, return_features: bool = False):
    del train
    x = nn.Conv(self.width, (3, 3), padding="SAME", use_bias=self.norm == "none")(x)
    x = nn.relu(_norm(self.norm, self.width)(x))
    for i, num_blocks in enumerate(self.blocks):
      for b in range(num_blocks):
        strides = 2 if i > 0 and b == 0 else 1
        x = BasicBlock(self.width * 2**i, strides, self.norm)(x)
    x = jnp.mean(x, axis=(1, 2))
    return _head(self.num_classes, x, return_features)


class LeNet5(nn.Module):
  """LeNet-5 style net: two 5x5 conv + ReLU + 2x2 max-pool layers, then dense 120 - 84 - C.

  LeCun et al. (1998) with ReLU and max-pool in place of tanh and subsampling,
  and 'SAME' padding so that any image size works (8x8 digits included). With
  ``width`` w the convs have w and round(16 w / 6) channels and the hidden dense
  layers 20 w and 14 w units: (6, 16, 120, 84) at the default w = 6. The
  features (``return_features=True``) are the 14 w units before the last layer.

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    width: channels of the first conv layer (6 in LeNet-5).
  """

  num_classes: int
  width: int = 6

  @nn.compact
  def __call__(self, x, train: bool = False, return_features: bool = False):
    del train
    for channels in (self.width, max(1, round(16 * self.width / 6))):
      x = Conv(channels, (5, 5), padding="SAME")(x)
      x = max_pool(nn.relu(x), (2, 2), strides=(2, 2), padding="SAME")
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(20 * self.width)(x))
    x = nn.relu(nn.Dense(14 * self.width)(x))
    return _head(self.num_classes, x, return_features)


class ConvStem(nn.Module):
  """Feature extractor of the split ResNets: 3x3 conv - norm - ReLU - 2x2 max-pool.

  FedDKC's client extractor, "the foremost Conv+Batch+ReLU+MaxPool layers" (Wu
  et al. 2023, Sec. 4.1), with GroupNorm (or none) for BatchNorm:
  (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), width).
  """

  width: int = 16
  norm: str = "group"

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(self.width, (3, 3), padding="SAME", use_bias=self.norm == "none")(x)
    x = nn.relu(_norm(self.norm, self.width)(x))
    return max_pool(x, (2, 2), strides=(2, 2), padding="SAME")


class ResNetHead(nn.Module):
  """Predictor on a feature map: stages of residual blocks, global average, dense.

  Stage i has ``blocks[i]`` blocks of ``width * 2^i`` channels (a bottleneck
  block outputs 4 times that), stride 2 from the second stage on; no blocks
  gives ``average - dense``. It is the predictor of a client's
  :class:`SplitResNet` and, on its own, FedDKC's server model, which reads the
  clients' features (ResNet20: bottleneck blocks (2, 3, 1)).

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    blocks: blocks per stage (may be empty).
    width: channels of the first stage.
    norm: "group" or "none".
    block: "basic" (:class:`BasicBlock`) or "bottleneck" (:class:`Bottleneck`).
  """

  num_classes: int
  blocks: Sequence[int] = (3, 3, 3)
  width: int = 16
  norm: str = "group"
  block: str = "basic"

  @nn.compact
  def __call__(self, h, train: bool = False, return_features: bool = False):
    del train
    if self.block not in RESNET_BLOCKS:
      raise ModelError(f"block: expected one of {RESNET_BLOCKS}, got {self.block!r}")
    block = Bottleneck if self.block == "bottleneck" else BasicBlock
    for i, num_blocks in enumerate(self.blocks):
      for b in range(num_blocks):
        strides = 2 if i > 0 and b == 0 else 1
        h = block(self.width * 2**i, strides, self.norm)(h)
    h = jnp.mean(h, axis=(1, 2))
    return _head(self.num_classes, h, return_features)


class SplitResNet(nn.Module):
  """ResNet-d as a feature extractor (:class:`ConvStem`) plus a predictor (:class:`ResNetHead`).

  FedDKC's clients (Wu et al. 2023, Sec. 4.1, Table 3: ResNet2, 4, 6, 10, 12
  and a ResNet20 server) share the extractor's architecture and differ in the
  predictor: ResNet2 ... ResNet12 have (d - 2) / 2 basic blocks, ResNet20 six
  bottleneck blocks (see ``SPLIT_RESNETS``).
  The paper gives neither widths nor the block layout; these are our choice.
  Variables: ``{"params": {"extractor": ..., "predictor": ...}}``.

  ``model.apply(v, x)`` gives logits; ``model.apply(v, x, return_features=True)``
  gives ``(logits, H)`` with H the extractor's feature map;
  ``model.apply(v, x, method="features")`` gives H and
  ``model.apply(v, H, method="head")`` the logits from H.

  Attributes:
    num_classes: size of the logits (0: no last layer, the features are returned).
    blocks: blocks per stage of the predictor.
    width: channels of the extractor and of the first stage.
    norm: "group" or "none".
    block: the predictor's block, "basic" or "bottleneck".
  """

  num_classes: int
  blocks: Sequence[int] = (3, 3, 3)
  width: int = 16
  norm: str = "group"
  block: str = "basic"

  def setup(self):
    self.extractor = ConvStem(self.width, self.norm)
    self.predictor = ResNetHead(self.num_classes, tuple(self.blocks), self.width, self.norm,
                                self.block)

  def features(self, x):
    """The extractor's output: the features the client uploads."""
    return self.extractor(x)

  def head(self, h, train: bool = False):
    """The server-side predictor's logits from the features ``h``."""
    return self.predictor(h, train)

  def __call__(self, x, train: bool = False, return_features: bool = False):
    h = self.extractor(x)
    if self.num_classes == 0:
      return h
    logits = self.predictor(h, train)
    return (logits, h) if return_features else logits


_DEFAULT_WIDTH = {"cnn": 16, "mlp": 512, "vgg": 64, "vgg9": 32, "resnet8": 16, "resnet14": 16,
                  "resnet18": 64}
_TINY_WIDTH = {"cnn": 4, "mlp": 32, "vgg": 4, "vgg9": 4, "resnet8": 4, "resnet14": 4,
               "resnet18": 4}
_DEFAULT_WIDTH.update({"lenet5": 6, **{name: 16 for name in SPLIT_RESNETS}})
_TINY_WIDTH.update({"lenet5": 2, **{name: 4 for name in SPLIT_RESNETS}})


def get_model(name: str, num_classes: int, *, width: int | None = None, tiny: bool = False,
              norm: str = "group") -> nn.Module:
  """The model called ``name`` (one of :data:`MODELS`).

  Args:
    name: "cnn", "mlp", "vgg" (VGG16), "vgg9" (the authors' CIFAR-10 VGG-9: pass
      ``norm="none"`` for theirs), "resnet8", "resnet14", "resnet18", "lenet5" or a split ResNet
      "resnet2", "resnet4", "resnet6", "resnet10", "resnet12", "resnet20".
    num_classes: size of the logits; 0 builds the model without its last dense
      layer, returning its features (B, D) (the feature map for split ResNets).
    width: channels of the first layer (hidden units for the MLP); ``None`` for
      the default (16, 512, 64, 32, 16, 16, 64, 6, and 16 for the split ResNets), or a
      small one if ``tiny``.
    tiny: a small variant for tests (small width; VGG with three conv layers,
      ResNet-18 with one block per stage; the split ResNets keep their depth).
    norm: "group" or "none" (VGG and ResNets; the CNN and the MLP have no norm).

  Returns:
    A module mapping (B, H, W, C) float32 images to (B, num_classes) logits
    (``return_features=True``: ``(logits, features)``; ``num_classes=0``: features).

  Raises:
    ModelError: for an unknown name or norm, a width < 1 or num_classes < 0.

  Example:
    >>> model = neural.get_model("cnn", 10)
    >>> variables = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
    >>> model.apply(variables, jnp.zeros((4, 28, 28, 1))).shape
    (4, 10)
  """
  if name not in MODELS:
    raise ModelError(f"name: expected one of {MODELS}, got {name!r}")
  if norm not in NORMS:
    raise ModelError(f"norm: expected one of {NORMS}, got {norm!r}")
  if int(num_classes) < 0:
    raise ModelError(f"num_classes: expected an int >= 0 (0: no output layer, the model "
                     f"returns its features), got {num_classes}")
  if width is None:
    width = (_TINY_WIDTH if tiny else _DEFAULT_WIDTH)[name]
  if int(width) < 1:
    raise ModelError(f"width: expected a positive int, got {width}")
  width, num_classes = int(width), int(num_classes)
  if name == "cnn":
    return CNN(num_classes, width)
  if name == "mlp":
    return MLP(num_classes, width)
  if name == "vgg":
    return VGG(num_classes, width, _VGG_TINY if tiny else _VGG16, norm)
  if name == "vgg9":
    return VGG(num_classes, width, _VGG_TINY if tiny else _VGG9, norm, "he-fan-out")
  if name == "resnet8":
    return ResNet(num_classes, (1, 1, 1), width, norm)
  if name == "resnet14":
    return ResNet(num_classes, (2, 2, 2), width, norm)
  if name == "resnet18":
    return ResNet(num_classes, (1, 1, 1, 1) if tiny else (2, 2, 2, 2), width, norm)
  if name == "lenet5":
    return LeNet5(num_classes, width)
  return SplitResNet(num_classes, SPLIT_RESNETS[name], width, norm,
                     _SPLIT_RESNET_BLOCK.get(name, "basic"))


def get_head(name: str, num_classes: int, *, width: int | None = None, tiny: bool = False,
             norm: str = "group") -> ResNetHead:
  """The predictor of the split ResNet ``name`` alone (FedDKC's server model reads features).

  Args:
    name: a key of ``SPLIT_RESNETS`` ("resnet2" ... "resnet20").
    num_classes: as in :func:`get_model`.
    width: as in :func:`get_model`.
    tiny: as in :func:`get_model`.
    norm: as in :func:`get_model`.

  Returns:
    A :class:`ResNetHead` mapping feature maps (B, h, w, c) to (B, num_classes) logits.

  Raises:
    ModelError: ``name`` is not a split ResNet, or a bad width, norm or num_classes.
  """
  if name not in SPLIT_RESNETS:
    raise ModelError(f"name: expected a split ResNet, one of {tuple(SPLIT_RESNETS)}, "
                     f"got {name!r}")
  model = get_model(name, num_classes, width=width, tiny=tiny, norm=norm)
  return ResNetHead(model.num_classes, model.blocks, model.width, model.norm, model.block)
