"""The client models of representation sharing (Berdoz, 2022): extractor ``phi_u`` + head ``tau_u``.

Sec. 4 of the thesis: "a simple convolutional neural network (CNN) similar to
LeNet5 (~30K parameters)" for MNIST, "ResNet9 (~2,4M parameters)" for
Fashion-MNIST and "ResNet18 (~11.3M parameters)" for CIFAR-10, with feature
dimensions d' = 84, 128 and 256. The text gives no layers; the thesis's code
(github.com/fberdoz/MIT-master-thesis, ``models.py``; the same in the fork
jingax/Multi-Fed) does, and its layer plans are the ones built here:

* LeNet-5 (:class:`LeNet5Trunk`): ``conv5x5(6) - ReLU - maxpool2 - conv5x5(16) -
  ReLU - maxpool2 - conv3x3(120) - ReLU - global average``, then ``dense(d') -
  tanh``: 30,986 parameters with the head on one-channel images, C = 10, d' = 84
  (the count does not depend on the image size);
* ResNet-9 (:class:`ResNet9Trunk`): ``conv(64) - conv(128) - pool - block(128) -
  conv(256) - pool - conv(256) - pool - block(256) - pool - global average``
  (3x3 convolutions without bias, each followed by a norm and ReLU), then
  ``dense(d') - tanh``: 2,470,730 parameters on one channel, d' = 128;
* ResNet-18: ``neural.get_model("resnet18", 0)`` (stem and eight basic blocks),
  then ``dense(d') - tanh``: 11,302,730 parameters on three channels, d' = 256.

Differences from the thesis's code, all without effect on the parameter counts:
GroupNorm where it has BatchNorm (the toolkit's models carry no batch statistics,
so clients can be vmapped); 'SAME' padding in the pools (a 28x28 image reaches
ResNet-9's global average as 2x2 instead of 1x1, and 8x8 digits survive its four
halvings); ResNet-18's blocks add the shortcut before their last ReLU (the
thesis's code adds it after).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from neural._src.models.models import _norm
from neural._src.models.models import get_model

BACKBONES = ("lenet5", "mlp", "resnet9", "resnet18")


class RepShareError(ValueError):
  """A bad argument of the representation-sharing functions (named in the message)."""


class LeNet5Trunk(nn.Module):
  """The thesis's LeNet-5 extractor before its feature layer: (B, H, W, C) -> (B, 20 w).

  ``conv5x5(w) - ReLU - maxpool2 - conv5x5(16 w / 6) - ReLU - maxpool2 -
  conv3x3(20 w) - ReLU - global average`` ('SAME' convolutions, as the code's
  padding 2 and 1): (6, 16, 120) channels at the default w = 6.

  Attributes:
    width: channels of the first convolution.
  """

  width: int = 6

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    for channels in (self.width, max(1, round(16 * self.width / 6))):
      x = nn.Conv(channels, (5, 5), padding="SAME")(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2), padding="SAME")
    x = nn.relu(nn.Conv(20 * self.width, (3, 3), padding="SAME")(x))
    return jnp.mean(x, axis=(1, 2))


def _conv_norm_relu(x, channels: int):
  """``relu(norm(conv3x3(x)))``, the thesis's ResNet-9 layer (call inside a compact module)."""
  x = nn.Conv(channels, (3, 3), padding="SAME", use_bias=False)(x)
  return nn.relu(_norm("group", channels)(x))


class _ThesisBlock(nn.Module):
  """The residual block of the thesis's ResNet-9: ``x + relu(norm(conv(relu(norm(conv(x))))))``."""

  channels: int

  @nn.compact
  def __call__(self, x):
    return x + _conv_norm_relu(_conv_norm_relu(x, self.channels), self.channels)


class ResNet9Trunk(nn.Module):
  """The thesis's ResNet-9 extractor before its feature layer: (B, H, W, C) -> (B, 4 w).

  Seven 3x3 convolutions with norm and ReLU, two of them in residual blocks:
  ``conv(w) - conv(2w) - pool - block(2w) - conv(4w) - pool - conv(4w) - pool -
  block(4w) - pool - global average``, 2x2 max-pools; (64, 128, 256) channels at
  the default w = 64.

  Attributes:
    width: channels of the first convolution.
  """

  width: int = 64

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    pool = lambda h: nn.max_pool(h, (2, 2), strides=(2, 2), padding="SAME")
    conv = _conv_norm_relu
    w = self.width
    x = pool(conv(conv(x, w), 2 * w))
    x = _ThesisBlock(2 * w)(x)
    x = pool(conv(pool(conv(x, 4 * w)), 4 * w))
    x = pool(_ThesisBlock(4 * w)(x))
    return jnp.mean(x, axis=(1, 2))


class FeatureClassifier(nn.Module):
  """``f_u = tau_u o phi_u``: a feature extractor and a linear head (Sec. 3, Preamble).

  The extractor ``phi_u`` is ``backbone`` followed, when ``feature_dim`` is set,
  by a learned feature layer ``dense(d') - activation`` (the thesis's models end
  their extractor with ``dense(d') - tanh``). ``__call__(x, train=False)``
  returns the logits ``z = W phi(x) + b`` (B, C), so the module works wherever a
  classifier does; :meth:`features_logits` returns ``(s, z)`` and
  :meth:`classify` applies ``tau_u`` to given features (e.g. another client's
  class means), shape (..., d') -> (..., C). The extractor runs in inference
  mode (no dropout), as the paper's models have none.

  Attributes:
    backbone: the module whose output ``phi_u`` reads ((B, H, W, C) -> (B, D)).
    num_classes: C.
    feature_dim: d' of the feature layer, or ``None`` for the backbone's D outputs.
    activation: of the feature layer, "relu" or "tanh".
  """

  backbone: nn.Module
  num_classes: int
  feature_dim: int | None = None
  activation: str = "relu"

  def setup(self):
    if self.feature_dim is not None:
      self.projection = nn.Dense(self.feature_dim)
    self.head = nn.Dense(self.num_classes)

  def features(self, x):
    """The representation ``s = phi_u(x)`` (after the feature layer when there is one)."""
    s = self.backbone(x)
    if self.feature_dim is None:
      return s
    s = self.projection(s)
    return jnp.tanh(s) if self.activation == "tanh" else nn.relu(s)

  def __call__(self, x, train: bool = False):
    del train
    return self.head(self.features(x))

  def features_logits(self, x):
    """The representation and the logits of ``x``, as ``(s, tau_u(s))``."""
    s = self.features(x)
    return s, self.head(s)

  def classify(self, s):
    """The logits ``tau_u(s)`` of given representations ``s``."""
    return self.head(s)


# Each backbone: (default width, its trunk at width w and the trunk's number of outputs, the
# activation of its feature layer, whether that layer is always there). The thesis's three
# models always have their dense(d') - tanh; the MLP (not in the thesis, a small CPU stand-in)
# gets a dense(d') - ReLU only when its width is not d'.
_BACKBONES = {
    "lenet5": (6, lambda w: LeNet5Trunk(w), "tanh", True),
    "mlp": (32, lambda w: get_model("mlp", 0, width=w), "relu", False),
    "resnet9": (64, lambda w: ResNet9Trunk(w), "tanh", True),
    "resnet18": (64, lambda w: get_model("resnet18", 0, width=w), "tanh", True),
}
_TRUNK_OUTPUTS = {"lenet5": lambda w: 20 * w, "mlp": lambda w: w,
                  "resnet9": lambda w: 4 * w, "resnet18": lambda w: 8 * w}


def make_client_model(backbone: str, num_classes: int, feature_dim: int,
                      width: int | None = None) -> FeatureClassifier:
  """A client model: the extractor ``backbone`` (one of :data:`BACKBONES`) and a linear head.

  "lenet5", "resnet9" and "resnet18" are the thesis's models (their trunk, then
  ``dense(d') - tanh``, then the head; see the module docstring for the layers
  and parameter counts). "mlp" is ``neural.get_model("mlp", 0, width=w)`` (two
  hidden layers of w units, no dropout at inference), followed by ``dense(d') -
  ReLU`` when w is not d'.

  Args:
    backbone: "lenet5", "mlp", "resnet9" or "resnet18".
    num_classes: C.
    feature_dim: d' (84 for LeNet-5, 128 for ResNet-9, 256 for ResNet-18 in the paper).
    width: first-layer width (default 6, 32, 64, 64).

  Raises:
    RepShareError: unknown backbone, or a size out of range.

  Example:
    >>> model = make_client_model("lenet5", 10, 84)
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))["params"]
    >>> sum(a.size for a in jax.tree_util.tree_leaves(params))
    30986
  """
  if backbone not in BACKBONES:
    raise RepShareError(f"backbone: expected one of {BACKBONES}, got {backbone!r}")
  if int(num_classes) < 2 or int(feature_dim) < 1 or (width is not None and int(width) < 1):
    raise RepShareError(f"num_classes >= 2, feature_dim >= 1, width >= 1 expected, got "
                             f"{num_classes}, {feature_dim}, {width}")
  default_width, trunk, activation, always = _BACKBONES[backbone]
  width = int(width or default_width)
  project = always or _TRUNK_OUTPUTS[backbone](width) != int(feature_dim)
  return FeatureClassifier(trunk(width), int(num_classes),
                           int(feature_dim) if project else None, activation)
