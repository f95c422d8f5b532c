"""fedkrr's file and process helpers: atomic writes, bounded readers, signal exits, cores.

Everything ``fedkrr`` and ``neural`` write goes through :func:`atomic_write` and its
kin (a temporary file, then a rename; nothing half-written after a signal), and
everything they read through the bounded readers (:func:`read_json`, :func:`read_npz`:
no pickle, sizes checked before reading). Commands exit on SIGINT/SIGTERM after the
write they are committing (:func:`exits_on_signals`). Processes started side by side
take their own share of the CPU cores (:func:`core_shares`, :func:`use_cores`).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from fedkrr._src.io.files import WriteError
  from fedkrr._src.io.files import append_file
  from fedkrr._src.io.files import atomic_savefig
  from fedkrr._src.io.files import atomic_savez
  from fedkrr._src.io.files import atomic_write
  from fedkrr._src.io.files import check_output
  from fedkrr._src.io.files import figure_bytes
  from fedkrr._src.io.files import printing_failed
  from fedkrr._src.io.files import remove_staging
  from fedkrr._src.io.files import savez_bytes
  from fedkrr._src.io.files import stdout_failure
  from fedkrr._src.io.files import write_files
  from fedkrr._src.io.interrupts import before_exit
  from fedkrr._src.io.interrupts import commit
  from fedkrr._src.io.interrupts import end_process
  from fedkrr._src.io.interrupts import exits_on_signals
  from fedkrr._src.io.interrupts import signals_exit
  from fedkrr._src.io.reading import NOT_JSON
  from fedkrr._src.io.reading import DiskReadError
  from fedkrr._src.io.reading import NpzError
  from fedkrr._src.io.reading import ReadError
  from fedkrr._src.io.reading import available_memory
  from fedkrr._src.io.reading import format_size
  from fedkrr._src.io.reading import inflation_bound
  from fedkrr._src.io.reading import open_regular
  from fedkrr._src.io.reading import parse_json
  from fedkrr._src.io.reading import read_bytes
  from fedkrr._src.io.reading import read_json
  from fedkrr._src.io.reading import read_json_lines
  from fedkrr._src.io.reading import read_npz
  from fedkrr._src.platform.cores import allowed_cores
  from fedkrr._src.platform.cores import core_shares
  from fedkrr._src.platform.cores import use_cores
else:
  from fedkrr._src.lazy import lazy_exports as _lazy_exports
  __getattr__, __dir__ = _lazy_exports(__name__, __file__)
