"""Flax models of the neural experiments: input (B, H, W, C) float32 -> logits (B, classes).

Afonin & Karimireddy, Sec. 6 and App. A, H: a small CNN and an MLP on MNIST, VGG16
on CIFAR-10; ResNet-8 / ResNet-18 are added for the methods of the other papers.
Every model is a ``flax.linen.Module`` whose ``__call__(x, train=False)`` returns
logits; dropout (MLP only) is active when ``train=True`` and then needs a
``"dropout"`` rng. There is no mutable state: normalisation is GroupNorm (or none),
never BatchNorm, so a model's variables are ``{"params": ...}`` only and training
can be vmapped over agents without threading batch statistics.

Each model has a width setting (channels of the first layer, or hidden units of
the MLP) and a ``tiny=True`` variant for tests (smaller width and, for VGG and
the ResNets, fewer layers).
"""

from __future__ import annotations

from collections.abc import Sequence
import math

import flax.linen as nn
import jax.numpy as jnp

MODELS = ("cnn", "mlp", "vgg", "resnet8", "resnet18")
NORMS = ("group", "none")


class ModelError(ValueError):
  """A bad model name, width or normalisation."""


class CNN(nn.Module):
  """The paper's CNN: two 5x5 conv layers (16, 32 channels) with ReLU and 2x2 max-pool.

  ``conv5x5(width) - ReLU - maxpool2 - conv5x5(2 width) - ReLU - maxpool2 -
  flatten - dense(num_classes)``, 'SAME' padding (28x28 -> 7x7x32). The paper
  (App. A, H) names the two conv layers and their channels but not the head; we
  use a single dense layer, as the classic MNIST ConvNet does.

  Attributes:
    num_classes: size of the logits.
    width: channels of the first conv layer (16 in the paper); the second has 2 width.
  """

  num_classes: int
  width: int = 16

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    for channels in (self.width, 2 * self.width):
      x = nn.Conv(channels, (5, 5), padding="SAME")(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(self.num_classes)(x)


class MLP(nn.Module):
  """``flatten - [dense(width) - ReLU - dropout]^depth - dense(num_classes)``.

  The paper's agent-2 model (Sec. 6): two hidden layers of 512 units, dropout 0.2.

  Attributes:
    num_classes: size of the logits.
    width: hidden units per layer.
    depth: number of hidden layers.
    dropout: dropout rate after each hidden ReLU (active only with ``train=True``).
  """

  num_classes: int
  width: int = 512
  depth: int = 2
  dropout: float = 0.2

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = x.reshape((x.shape[0], -1))
    for _ in range(self.depth):
      x = nn.relu(nn.Dense(self.width)(x))
      x = nn.Dropout(self.dropout, deterministic=not train)(x)
    return nn.Dense(self.num_classes)(x)


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


class VGG(nn.Module):
  """VGG-style net: 3x3 conv - norm - ReLU blocks with max-pools, global average, dense.

  The default plan is VGG16's 13 conv layers (Simonyan & Zisserman; the paper's
  CIFAR-10 model, App. A) with channels ``width * (1, 2, 4, 8, 8)``. Pools use
  'SAME' padding so that 28x28 inputs survive the five halvings; the features
  are averaged over what is left of the image and fed to one dense layer (the
  usual CIFAR head).

  Attributes:
    num_classes: size of the logits.
    width: channels of the first block (64 for VGG16).
    plan: channel multipliers and "M" for max-pool.
    norm: "group" (GroupNorm after each conv) or "none".
  """

  num_classes: int
  width: int = 64
  plan: Sequence[int | str] = _VGG16
  norm: str = "group"

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    for item in self.plan:
      if item == "M":
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
      else:
        channels = int(item) * self.width
        x = nn.Conv(channels, (3, 3), padding="SAME", use_bias=self.norm == "none")(x)
        x = nn.relu(_norm(self.norm, channels)(x))
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


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
    if x.shape[-1] != self.channels or self.strides != 1:
      x = nn.Conv(self.channels, (1, 1), s, use_bias=bias)(x)
      x = _norm(self.norm, self.channels)(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet: 3x3 stem, stages of basic blocks, global average, dense.

  Stage i has ``blocks[i]`` blocks with ``width * 2^i`` channels, stride 2 from
  the second stage on. ResNet-18: blocks (2, 2, 2, 2), width 64; ResNet-8:
  blocks (1, 1, 1), width 16 (the 6n + 2 family with n = 1).

  Attributes:
    num_classes: size of the logits.
    blocks: blocks per stage.
    width: channels of the stem and the first stage.
    norm: "group" (GroupNorm) or "none".
  """

  num_classes: int
  blocks: Sequence[int] = (2, 2, 2, 2)
  width: int = 64
  norm: str = "group"

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    x = nn.Conv(self.width, (3, 3), padding="SAME", use_bias=self.norm == "none")(x)
    x = nn.relu(_norm(self.norm, self.width)(x))
    for i, num_blocks in enumerate(self.blocks):
      for b in range(num_blocks):
        strides = 2 if i > 0 and b == 0 else 1
        x = BasicBlock(self.width * 2**i, strides, self.norm)(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


_DEFAULT_WIDTH = {"cnn": 16, "mlp": 512, "vgg": 64, "resnet8": 16, "resnet18": 64}
_TINY_WIDTH = {"cnn": 4, "mlp": 32, "vgg": 4, "resnet8": 4, "resnet18": 4}


def get_model(name: str, num_classes: int, *, width: int | None = None, tiny: bool = False,
              norm: str = "group") -> nn.Module:
  """The model called ``name`` (one of :data:`MODELS`).

  Args:
    name: "cnn", "mlp", "vgg", "resnet8" or "resnet18".
    num_classes: size of the logits.
    width: channels of the first layer (hidden units for the MLP); ``None`` for
      the default (16, 512, 64, 16, 64), or a small one if ``tiny``.
    tiny: a small variant for tests (small width; VGG with three conv layers,
      ResNet-18 with one block per stage).
    norm: "group" or "none" (VGG and ResNets; the CNN and the MLP have no norm).

  Returns:
    A module mapping (B, H, W, C) float32 images to (B, num_classes) logits.

  Raises:
    ModelError: for an unknown name or norm, or a width or num_classes < 1.

  Example:
    >>> model = get_model("cnn", 10)
  """
  if name not in MODELS:
    raise ModelError(f"name: expected one of {MODELS}, got {name!r}")
  if norm not in NORMS:
    raise ModelError(f"norm: expected one of {NORMS}, got {norm!r}")
  if int(num_classes) < 1:
    raise ModelError(f"num_classes: expected a positive int, got {num_classes}")
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
  if name == "resnet8":
    return ResNet(num_classes, (1, 1, 1), width, norm)
  return ResNet(num_classes, (1, 1, 1, 1) if tiny else (2, 2, 2, 2), width, norm)
