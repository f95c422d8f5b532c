"""neural's models: the Flax networks (MLP, CNN, LeNet-5, VGG, ResNets) and their pieces.

:func:`neural.get_model` (at the top) builds one by name; the classes, the split ResNets
of representation sharing and the convolution of the CPU-friendly layers are here.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from neural._src.choices import SPLIT_RESNETS
  from neural._src.models.conv import Conv
  from neural._src.models.conv import ConvError
  from neural._src.models.conv import conv2d
  from neural._src.models.conv import max_pool
  from neural._src.models.models import CNN
  from neural._src.models.models import MLP
  from neural._src.models.models import VGG
  from neural._src.models.models import ConvStem
  from neural._src.models.models import LeNet5
  from neural._src.models.models import ModelError
  from neural._src.models.models import ResNet
  from neural._src.models.models import ResNetHead
  from neural._src.models.models import SplitResNet
  from neural._src.models.models import get_head
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
