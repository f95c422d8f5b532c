"""neural's runs on disk: checkpoints, the seeds of a sweep and their folders.

:func:`neural.run_configs`, :func:`neural.read_run` and :func:`neural.read_metrics` (at
the top) run and read whole runs; the checkpoints that make a killed run resumable to
the same numbers (:func:`save_checkpoint`, :func:`restore_checkpoint`) and the seed
folders of a sweep are here.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from neural._src.jobs.readback import read_seeds
  from neural._src.jobs.readback import seed_folders
  from neural._src.runtime.checkpoint import CheckpointError
  from neural._src.runtime.checkpoint import ModelSlot
  from neural._src.runtime.checkpoint import load_checkpoint
  from neural._src.runtime.checkpoint import read_checkpoint
  from neural._src.runtime.checkpoint import restore_checkpoint
  from neural._src.runtime.checkpoint import save_checkpoint
else:
  from fedkrr import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
