"""Bounded reading: sizes checked before data, nesting bounded, one-line errors naming the file
and the field; outputs checked before any work and written as sets."""

import json
import os
import struct
import subprocess
import sys
import threading
import zipfile

import jax
import numpy as np
import pytest

import fedkrr
from fedkrr._src.cli import main
from fedkrr._src.io import files
from fedkrr.io import NpzError
from fedkrr.io import ReadError


def _npy(shape, dtype="<f8", data=b""):
  """An .npy member: its header declares ``shape`` of ``dtype``; ``data`` follows it."""
  header = repr({"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
  header = header.encode("latin1")
  pad = 64 - (10 + len(header) + 1) % 64
  header += b" " * pad + b"\n"
  return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


def _zip(path, members, compress=zipfile.ZIP_STORED):
  with zipfile.ZipFile(path, "w", compress) as zf:
    for name, blob in members.items():
      zf.writestr(name, blob)
  return path


# ---------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("text, message", [
    ("[" * 5000 + "]" * 5000, "nested more than 64 levels"),
    ('{"a": ' * 3000 + "1" + "}" * 3000, "nested more than 64 levels"),
    ('{"lr": NaN}', "NaN is not a finite number"),
    ('{"lr": Infinity}', "Infinity is not a finite number"),
    ('{"lr": 1e999}', "1e999 is not a finite number"),
    ('{"lr": 1', "not valid JSON"),
    ('{"rounds": 1, "rounds": 2}', "the key 'rounds' is given twice in one object"),
    ('{"base": {"a": {"x": 1, "x": 1}}}', "the key 'x' is given twice"),
])
def test_json_is_bounded_and_finite(text, message):
  with pytest.raises(ReadError, match=message) as info:
    fedkrr.io.parse_json(text, "config.json")
  assert str(info.value).startswith("config.json: ") and "\n" not in str(info.value)


def test_brackets_inside_strings_do_not_count_as_nesting():
  text = json.dumps({"note": "[" * 500, "x": [[1]]})
  assert fedkrr.io.parse_json(text, "f")["x"] == [[1]]


def test_only_regular_files_are_read(tmp_path):
  fifo = tmp_path / "config.json"
  os.mkfifo(fifo)   # opening it for reading would wait for a writer forever
  result = []
  reader = threading.Thread(target=lambda: result.append(
      pytest.raises(ReadError, fedkrr.io.read_json, fifo)), daemon=True)
  reader.start()
  reader.join(timeout=10)
  assert result and "a FIFO, not a regular file" in str(result[0].value)
  with pytest.raises(ReadError, match="a character device"):
    fedkrr.io.read_bytes("/dev/zero", 10)
  with pytest.raises(ReadError, match="a directory"):
    fedkrr.io.read_json(tmp_path)
  with pytest.raises(ReadError, match="no such file"):
    fedkrr.io.read_json(tmp_path / "missing.json")
  loop = tmp_path / "loop"
  loop.symlink_to(loop)
  with pytest.raises(ReadError, match="symbolic link loop"):
    fedkrr.io.read_json(loop)


def test_a_file_over_its_limit_is_refused_unread(tmp_path):
  big = tmp_path / "big.json"
  big.write_text("[" + "0," * 1000 + "0]")
  with pytest.raises(ReadError, match="more than the 100 B"):
    fedkrr.io.read_json(big, limit=100)


# ---------------------------------------------------------------------------- .npz


def test_npz_round_trip_keeps_arrays(tmp_path):
  arrays = {"a": np.arange(6.0).reshape(2, 3), "b": np.asfortranarray(np.ones((3, 2), np.int32)),
            "s": np.asarray('{"name": "rbf"}'), "e": np.zeros((0, 4))}
  np.savez_compressed(tmp_path / "x.npz", **arrays)
  back = fedkrr.io.read_npz(tmp_path / "x.npz")
  assert set(back) == set(arrays)
  for k, v in arrays.items():
    assert back[k].dtype == v.dtype and back[k].shape == v.shape
    np.testing.assert_array_equal(back[k], v)


def test_a_member_declaring_more_than_it_holds_is_refused_before_its_data(tmp_path):
  """The header says 10^12 x 10 float64 (80 TB): refused from the header, no allocation."""
  path = _zip(tmp_path / "p.npz", {"x_0.npy": _npy((10**12, 10), data=b"\0" * 80)})
  with pytest.raises(NpzError, match=r"x_0: its header declares shape \(1000000000000, 10\)"):
    fedkrr.io.read_npz(path)


def test_a_member_that_would_inflate_past_the_limit_is_refused_uninflated(tmp_path):
  """A 64 MiB member deflated to 64 KiB: its declared size is refused before it inflates."""
  n = 2**23   # float64 zeros: 64 MiB
  path = tmp_path / "bomb.npz"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
    with zf.open("x_0.npy", "w", force_zip64=True) as member:
      member.write(_npy((n,)))
      chunk = b"\0" * 2**24
      for _ in range(n * 8 // len(chunk)):
        member.write(chunk)
  assert path.stat().st_size < 2**20
  with pytest.raises(NpzError, match="more than the 16 MiB allowed"):
    fedkrr.io.read_npz(path, limit=16 * 2**20)

  def check(headers):
    shape, _ = headers["x_0"]
    raise ValueError(f"x_0: expected at most 10 points, got {shape[0]}")

  with pytest.raises(NpzError, match="bomb.npz: x_0: expected at most 10 points, got 8388608"):
    fedkrr.io.read_npz(path, check=check)


def test_a_member_holding_python_objects_or_another_format_is_refused(tmp_path):
  np.savez(tmp_path / "o.npz", a=np.array([{"x": 1}], dtype=object))
  with pytest.raises(NpzError, match="a holds Python objects"):
    fedkrr.io.read_npz(tmp_path / "o.npz")
  _zip(tmp_path / "t.npz", {"readme.txt": b"hello"})
  with pytest.raises(NpzError, match="is not a .npy array"):
    fedkrr.io.read_npz(tmp_path / "t.npz")
  (tmp_path / "cut.npz").write_bytes((tmp_path / "o.npz").read_bytes()[:50])
  with pytest.raises(NpzError, match="cut.npz: not an .npz archive"):
    fedkrr.io.read_npz(tmp_path / "cut.npz")


def test_a_problem_file_with_inconsistent_sizes_is_refused_from_its_headers(tmp_path, capsys):
  rng = np.random.default_rng(0)
  arrays = {"x_0": rng.normal(size=(5, 2)), "x_1": rng.normal(size=(4, 2)),
            "y_0": rng.normal(size=5), "y_1": np.zeros(10**6), "ridge": np.asarray(0.1),
            "kernel_0": np.asarray('{"name": "rbf"}'), "kernel_1": np.asarray('{"name": "rbf"}'),
            "x_eval": np.zeros((3, 2))}
  np.savez(tmp_path / "p.npz", **arrays)
  assert main(["run", "--problem", str(tmp_path / "p.npz"), "--protocol", "akd", "--rounds", "2",
               "--out", str(tmp_path / "o.npz")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "p.npz" in err and "ys[1]: expected shape (4,)" in err


def test_a_kernel_spec_nested_deep_is_one_error():
  with pytest.raises(fedkrr.KernelError, match="nested more than"):
    fedkrr.kernel_from_json('{"name": ' + "[" * 5000 + "]" * 5000 + "}")


# ---------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("kind, message", [("under a file", "which is a regular file"),
                                           ("dangling", "dangling symbolic link"),
                                           ("loop", "symbolic link loop")])
def test_outputs_are_checked_before_any_work(tmp_path, kind, message):
  if kind == "under a file":
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "out"
  else:
    out = tmp_path / "link"
    out.symlink_to(tmp_path / ("nowhere" if kind == "dangling" else "link"))
  with pytest.raises(fedkrr.io.WriteError, match=message):
    fedkrr.io.check_output(out, "--out", directory=True)


def test_search_out_under_a_regular_file_is_refused_at_once(tmp_path, capsys):
  (tmp_path / "file").write_text("x")
  assert main(["search", "--claim", "prop2-akd-to-zero", "--budget-seconds", "600",
               "--out", str(tmp_path / "file" / "found"), "--no-progress"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "which is a regular file" in err


def test_a_set_of_files_is_written_all_or_none(tmp_path, monkeypatch):
  (tmp_path / "a.txt").write_text("old a")
  (tmp_path / "b.txt").write_text("old b")
  real = files.os.fsync
  calls = []

  def full_disk(fd):
    calls.append(fd)
    if len(calls) == 2:
      raise OSError(28, "No space left on device")
    return real(fd)

  monkeypatch.setattr(files.os, "fsync", full_disk)
  with pytest.raises(fedkrr.io.WriteError, match=r"cannot write .*b\.txt: No space left"):
    fedkrr.io.write_files({tmp_path / "a.txt": "new a", tmp_path / "b.txt": "new b"})
  assert (tmp_path / "a.txt").read_text() == "old a" and (tmp_path / "b.txt").read_text() == "old b"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


_KILLED_MID_SET = """
import os, sys
from fedkrr._src.io import files
real, renames = os.replace, []
def replace(src, dst):
  if str(dst).endswith("b.txt"):
    os._exit(9)                    # killed between the set's renames (kill -9 leaves no trace)
  renames.append(dst)
  return real(src, dst)
files.os.replace = replace
files.write_files({sys.argv[1] + "/a.txt": "new a", sys.argv[1] + "/b.txt": "new b"})
"""


def test_a_set_killed_between_its_renames_is_rolled_forward_by_the_next_write(tmp_path):
  """kill -9 between two renames of a set leaves a mix (a new, b old); the journal written
  before the renames lets the next write in that folder complete it to the new set."""
  (tmp_path / "a.txt").write_text("old a")
  (tmp_path / "b.txt").write_text("old b")
  done = subprocess.run([sys.executable, "-c", _KILLED_MID_SET, str(tmp_path)],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 9, done.stderr
  assert (tmp_path / "a.txt").read_text() == "new a"
  assert (tmp_path / "b.txt").read_text() == "old b"          # the mix a kill leaves
  assert len(list(tmp_path.glob(".*.fedkrr-set.json"))) == 1
  fedkrr.io.write_files({tmp_path / "other.txt": "x"})        # any later write there
  assert (tmp_path / "a.txt").read_text() == "new a"
  assert (tmp_path / "b.txt").read_text() == "new b"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "other.txt"]


def test_a_journal_moves_only_the_sets_own_staged_files(tmp_path):
  """A journal naming files outside its folder, or not staged by write_files, is left
  alone: reading one cannot move other files."""
  from fedkrr._src.io.files import complete_writes

  (tmp_path / "secret").write_text("keep")
  (tmp_path / ".x.fedkrr-set.json").write_text(json.dumps(
      {"renames": [[str(tmp_path / "secret"), str(tmp_path / "x")]]}))
  (tmp_path / ".y.fedkrr-set.json").write_text(json.dumps(
      {"renames": [["/etc/.passwd.1.tmp", str(tmp_path / "passwd")]]}))
  (tmp_path / ".z.fedkrr-set.json").write_text("not json")
  assert complete_writes(tmp_path) == []
  assert (tmp_path / "secret").read_text() == "keep" and not (tmp_path / "x").exists()
  # A set whose writer is still alive (this test's own parent) is its writer's to end.
  (tmp_path / ".a.1.tmp").write_text("staged")
  (tmp_path / ".a.fedkrr-set.json").write_text(json.dumps(
      {"pid": os.getppid(), "renames": [[str(tmp_path / ".a.1.tmp"), str(tmp_path / "a")]]}))
  assert complete_writes(tmp_path) == [] and not (tmp_path / "a").exists()


def _central_offsets(data: bytes):
  """``{member name: the offset of its central directory entry}`` of a zip file's bytes."""
  out, at = {}, data.find(b"PK\x01\x02")
  while at >= 0:
    n = struct.unpack("<H", data[at + 28:at + 30])[0]
    out[data[at + 46:at + 46 + n].decode()] = at
    at = data.find(b"PK\x01\x02", at + 46 + n)
  return out


def _damaged(path, how):
  """The archive with its zip directory damaged: one flipped bit in a local header offset,
  two entries that overlap, a member declaring more than its stored bytes can hold, or
  a deflate stream that is garbage."""
  data = bytearray(path.read_bytes())
  entries = _central_offsets(bytes(data))
  first, second = (entries[k] for k in sorted(entries)[:2])
  if how == "offset bit":
    data[second + 42] ^= 0x04
  elif how == "overlap":
    data[second + 42:second + 46] = data[first + 42:first + 46]
  elif how == "declared size":
    data[second + 24:second + 28] = struct.pack("<I", 2**32 - 1)
  elif how == "stream":
    local = struct.unpack("<I", data[second + 42:second + 46])[0]
    start = local + 30 + struct.unpack("<H", data[local + 26:local + 28])[0] + \
        struct.unpack("<H", data[local + 28:local + 30])[0]
    data[start:start + 8] = b"\xff" * 8
  path.write_bytes(bytes(data))
  return path


DAMAGES = ["offset bit", "overlap", "declared size", "stream"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_zip_directory_is_one_unusable_error(tmp_path, how):
  path = tmp_path / "d.npz"
  np.savez_compressed(path, a=np.arange(300.0), b=np.arange(200.0))
  _damaged(path, how)
  with pytest.raises(NpzError, match="unusable") as info:
    fedkrr.io.read_npz(path)
  assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_problem_or_checkpoint_is_one_line(tmp_path, how, capsys):
  import neural

  rng = np.random.default_rng(0)
  arrays = {"x_0": rng.normal(size=(50, 2)), "x_1": rng.normal(size=(40, 2)),
            "y_0": rng.normal(size=50), "y_1": rng.normal(size=40), "ridge": np.asarray(0.1),
            "kernel_0": np.asarray('{"name": "rbf"}'), "kernel_1": np.asarray('{"name": "rbf"}'),
            "x_eval": np.zeros((3, 2))}
  np.savez_compressed(tmp_path / "p.npz", **arrays)
  _damaged(tmp_path / "p.npz", how)
  assert main(["run", "--problem", str(tmp_path / "p.npz"), "--protocol", "akd", "--rounds", "2",
               "--out", str(tmp_path / "o.npz")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "p.npz" in err and "unusable" in err
  neural.runs.save_checkpoint(tmp_path / "c.npz", {"a": np.arange(300.0), "b": np.arange(200.0)})
  _damaged(tmp_path / "c.npz", how)
  with pytest.raises(neural.runs.CheckpointError, match="unusable") as info:
    neural.runs.read_checkpoint(tmp_path / "c.npz")
  assert "\n" not in str(info.value)


def test_a_problem_is_refused_from_its_headers_before_anything_inflates(tmp_path, monkeypatch,
                                                                         capsys):
  """Consistent arrays that need more memory than is free (here: 1 MiB free), declared in
  a small deflated file: refused from the headers, no array inflated."""
  from fedkrr._src import problem_io
  from fedkrr._src.io import reading

  arrays = {"x_0": np.zeros((20_000, 4)), "x_1": np.zeros((20_000, 4)),
            "y_0": np.zeros(20_000), "y_1": np.zeros(20_000), "ridge": np.asarray(0.1),
            "kernel_0": np.asarray('{"name": "rbf"}'), "kernel_1": np.asarray('{"name": "rbf"}'),
            "x_eval": np.zeros((3, 4))}
  np.savez_compressed(tmp_path / "p.npz", **arrays)
  assert (tmp_path / "p.npz").stat().st_size < 2**16

  def inflate(*args):
    raise AssertionError("an array was inflated")

  monkeypatch.setattr(problem_io, "available_memory", lambda: 2**20)
  monkeypatch.setattr(reading, "_member_data", inflate)
  # 1.53 MiB as stored (float64), plus their copy in the run's dtype: float64 or float32.
  need = r"3\.\d*" if jax.config.read("jax_enable_x64") else r"2\.\d*"
  with pytest.raises(fedkrr.ProblemError, match=rf"its arrays need about {need} MiB once loaded"):
    fedkrr.load_problem(tmp_path / "p.npz")


def test_json_lines_give_each_line_its_number_and_mark_the_cut_ones(tmp_path):
  path = tmp_path / "rows.jsonl"
  path.write_text('{"a": 1}\n\n[2, 3]\n{"cut\n')
  assert fedkrr.io.read_json_lines(path) == [(1, {"a": 1}), (3, [2, 3]), (4, fedkrr.io.NOT_JSON)]
  with pytest.raises(fedkrr.io.ReadError, match="more than"):
    fedkrr.io.read_json_lines(path, limit=4)


def test_a_journal_that_is_a_fifo_is_skipped_without_blocking(tmp_path):
  from fedkrr._src.io.files import complete_writes

  os.mkfifo(tmp_path / ".a.fedkrr-set.json")
  assert complete_writes(tmp_path) == []
