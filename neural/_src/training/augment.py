"""Data augmentation inside the compiled training step: random flip and padded crop.

The authors' CIFAR-10 recipe (Afonin & Karimireddy's public code) trains on
torchvision's ``RandomHorizontalFlip()`` then ``RandomCrop(32, padding=4)`` of
each image, padding with black before the images are standardised. Here the
inputs are already standardised, so :class:`Augment` pads with ``fill``, the
standardised value of black (``neural``'s run data knows it). A fresh draw is
made for every example at every step, from the step's key, so the augmented
batches are part of the seeded run and the teachers of a distillation step can
be evaluated on exactly the images the student sees.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

Array = jax.Array



@dataclasses.dataclass(frozen=True)
class Augment:
  """Random horizontal flip (probability 1/2), then a random crop of the image padded by ``pad``.

  Attributes:
    pad: pixels of padding on each side before cropping back to the image's size
      (4 in the authors' recipe; 0: no crop).
    fill: the padded pixels' value per input channel (or one value for all).
    flip: flip half of the images horizontally (the authors' recipe).
  """

  pad: int = 4
  fill: tuple[float, ...] = (0.0,)
  flip: bool = True

  def __post_init__(self):
    if int(self.pad) < 0:
      raise ValueError(f"pad: expected an int >= 0, got {self.pad!r}")
    object.__setattr__(self, "fill", tuple(float(v) for v in self.fill))

  def __call__(self, key: Array, x: Array) -> Array:
    """The batch ``x`` (B, H, W, C), each image flipped and cropped by its own draw from ``key``."""
    b, h, w, c = x.shape
    flip_key, crop_key = jax.random.split(key)
    if self.flip:
      flip = jax.random.bernoulli(flip_key, 0.5, (b,))
      x = jnp.where(flip[:, None, None, None], x[:, :, ::-1, :], x)
    p = int(self.pad)
    if p == 0:
      return x
    fill = jnp.broadcast_to(jnp.asarray(self.fill, x.dtype), (c,))
    canvas = jnp.broadcast_to(fill, (b, h + 2 * p, w + 2 * p, c))
    canvas = canvas.at[:, p:p + h, p:p + w, :].set(x)
    offsets = jax.random.randint(crop_key, (b, 2), 0, 2 * p + 1)
    crop = lambda image, o: jax.lax.dynamic_slice(image, (o[0], o[1], 0), (h, w, c))
    return jax.vmap(crop)(canvas, offsets)
