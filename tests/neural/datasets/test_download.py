"""``neural data fetch``: checked, resumable, atomic downloads from a local server.

Every test serves files it makes from a threaded HTTP server on 127.0.0.1 (with HTTP
``Range``); no test reaches the internet.
"""

import gzip
import hashlib
import http.server
import io
import tarfile
import threading

import numpy as np
import pytest

import neural
from neural._src.cli import main
from neural._src.datasets import download
from neural._src.datasets.data import MNIST_FILES
from neural._src.datasets.download import Download
from neural._src.datasets.download import Remote


class _Server:
  """Serves ``files`` (name -> bytes) with Range support; records each request's Range."""

  def __init__(self, files):
    self.files = dict(files)
    self.ranges = []
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        if name not in server.files:
          self.send_error(404)
          return
        body = server.files[name]
        wanted = self.headers.get("Range")
        server.ranges.append(wanted)
        if wanted:
          start = int(wanted.removeprefix("bytes=").split("-")[0])
          if start >= len(body):
            self.send_error(416)
            return
          self.send_response(206)
          self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
          body = body[start:]
        else:
          self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

      def log_message(self, *args):
        pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data"
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


@pytest.fixture
def serve():
  servers = []

  def start(files):
    servers.append(_Server(files))
    return servers[-1]

  yield start
  for s in servers:
    s.close()


def _remote(name, blob):
  return Remote(name, len(blob), hashlib.sha256(blob).hexdigest())


def _idx(magic, dims, values):
  return (magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
          + np.asarray(values, np.uint8).tobytes())


def _mnist_files(n_train=6, n_test=4):
  rng = np.random.default_rng(0)
  blobs = {
      "x_train": _idx(0x803, (n_train, 28, 28), rng.integers(0, 256, n_train * 784)),
      "y_train": _idx(0x801, (n_train,), rng.integers(0, 10, n_train)),
      "x_test": _idx(0x803, (n_test, 28, 28), rng.integers(0, 256, n_test * 784)),
      "y_test": _idx(0x801, (n_test,), rng.integers(0, 10, n_test)),
  }
  return {f"{MNIST_FILES[k]}.gz": gzip.compress(v) for k, v in blobs.items()}


def test_mnist_through_the_command_then_load_dataset(serve, tmp_path, monkeypatch, capsys):
  files = _mnist_files()
  server = serve(files)
  table = {"mnist": Download("http://127.0.0.1:9/unused",
                             tuple(_remote(n, b) for n, b in files.items()))}
  monkeypatch.setattr(download, "DOWNLOADS", table)
  target = tmp_path / "mnist"
  assert main(["data", "fetch", "mnist", "--dir", str(target), "--base-url", server.url,
               "--no-progress"]) == 0
  assert f"pass --data-dir {target}" in capsys.readouterr().out
  data = neural.load_dataset("mnist", target)
  assert (data.num_train, data.num_test, data.input_shape) == (6, 4, (28, 28, 1))
  assert sorted(p.name for p in target.iterdir()) == sorted(files)   # no .part left
  requests = len(server.ranges)
  assert main(["data", "fetch", "mnist", "--dir", str(target), "--base-url", server.url,
               "--no-progress"]) == 0
  assert len(server.ranges) == requests   # present and checked: nothing fetched again


def test_a_cut_download_resumes_with_a_range_request(serve, tmp_path):
  blob = bytes(range(256)) * 40
  server = serve({"f.bin": blob})
  (tmp_path / "f.bin.part").write_bytes(blob[:1000])   # what a killed download left
  path = download.fetch_file(f"{server.url}/f.bin", _remote("f.bin", blob), tmp_path / "f.bin")
  assert server.ranges == ["bytes=1000-"]
  assert path.read_bytes() == blob and not (tmp_path / "f.bin.part").exists()


def test_a_server_that_ignores_range_sends_the_whole_file_again(tmp_path):
  blob = b"abcdefgh" * 100

  class Plain(http.server.BaseHTTPRequestHandler):   # answers 200 to a Range request
    def do_GET(self):
      self.send_response(200)
      self.send_header("Content-Length", str(len(blob)))
      self.end_headers()
      self.wfile.write(blob)

    def log_message(self, *args):
      pass

  (tmp_path / "f.bin.part").write_bytes(b"x" * 100)   # not even the right bytes
  plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Plain)
  threading.Thread(target=plain.serve_forever, daemon=True).start()
  try:
    url = f"http://127.0.0.1:{plain.server_address[1]}/f.bin"
    path = download.fetch_file(url, _remote("f.bin", blob), tmp_path / "f.bin")
    assert path.read_bytes() == blob
  finally:
    plain.shutdown()
    plain.server_close()


def test_a_wrong_checksum_is_refused_and_nothing_gets_the_name(serve, tmp_path):
  blob = b"the published file"
  server = serve({"f.bin": b"something else, same size"[:len(blob)]})
  with pytest.raises(neural.data.DataError, match="not the published one"):
    download.fetch_file(f"{server.url}/f.bin", _remote("f.bin", blob), tmp_path / "f.bin")
  assert list(tmp_path.iterdir()) == []   # neither the file nor a .part


def test_a_server_error_is_one_clear_line(serve, tmp_path, monkeypatch, capsys):
  server = serve({})
  table = {"mnist": Download(server.url, (Remote("missing.gz", 3, "00"),))}
  monkeypatch.setattr(download, "DOWNLOADS", table)
  assert main(["data", "fetch", "mnist", "--dir", str(tmp_path), "--no-progress"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "404" in err[0] and "missing.gz" in err[0]


def _tarball(members):
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
    for name, data in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buffer.getvalue()


def test_an_archive_is_unpacked_checked_and_renamed_into_place(serve, tmp_path):
  members = {f"cifar-10-batches-py/{n}": n.encode() for n in ("data_batch_1", "test_batch")}
  blob = _tarball(members)
  server = serve({"c.tar.gz": blob})
  spec = Download(server.url, (_remote("c.tar.gz", blob),),
                  unpack=("cifar-10-batches-py", (("data_batch_1", 0), ("test_batch", 0))))
  paths = download.fetch_dataset("c", tmp_path, downloads={"c": spec})
  assert paths == [tmp_path / "cifar-10-batches-py"]
  assert (tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes() == b"test_batch"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-batches-py"]   # archive gone
  short = Download(server.url, (_remote("c.tar.gz", blob),),
                   unpack=("cifar-10-batches-py", (("data_batch_2", 0),)))
  with pytest.raises(neural.data.DataError, match="lacks"):
    download.fetch_dataset("c", tmp_path / "other", downloads={"c": short})
  assert not (tmp_path / "other" / "cifar-10-batches-py").exists()   # nothing half-unpacked


def test_an_archive_member_outside_the_directory_is_refused(serve, tmp_path):
  blob = _tarball({"../evil": b"x"})
  server = serve({"e.tar.gz": blob})
  spec = Download(server.url, (_remote("e.tar.gz", blob),), unpack=("e", ()))
  with pytest.raises(neural.data.DataError, match="not a plain file or folder inside it"):
    download.fetch_dataset("e", tmp_path / "d", downloads={"e": spec})
  assert not (tmp_path / "evil").exists()


def test_the_published_table_and_the_missing_data_error_name_the_command(tmp_path):
  assert set(download.DOWNLOADS) == {"mnist", "cifar10", "cinic10"}
  for spec in download.DOWNLOADS.values():
    for remote in spec.files:
      assert remote.size > 0 and len(remote.digest) == {"sha256": 64, "md5": 32}[
          remote.algorithm]
  for name in ("mnist", "cifar10", "cinic10"):
    with pytest.raises(neural.data.DataError, match=f"neural data fetch {name} --dir {tmp_path}"):
      neural.load_dataset(name, tmp_path)


class _Misbehaving:
  """A raw TCP server on 127.0.0.1 that answers every request with ``reply(range)``: bytes
  as they come, then it closes the connection (cut bodies, bad status lines, ...)."""

  def __init__(self, reply):
    import socket
    self.requests = []
    self.sock = socket.socket()
    self.sock.bind(("127.0.0.1", 0))
    self.sock.listen(8)
    self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/data"
    self.reply = reply
    threading.Thread(target=self._serve, daemon=True).start()

  def _serve(self):
    while True:
      try:
        conn, _ = self.sock.accept()
      except OSError:
        return
      with conn:
        head = b""
        while b"\r\n\r\n" not in head:
          chunk = conn.recv(4096)
          if not chunk:
            break
          head += chunk
        wanted = [line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                  if line.lower().startswith(b"range:")]
        self.requests.append(wanted[0] if wanted else None)
        try:
          conn.sendall(self.reply(wanted[0] if wanted else None))
        except OSError:
          pass

  def close(self):
    self.sock.close()


@pytest.fixture
def misbehave():
  servers = []

  def start(reply):
    servers.append(_Misbehaving(reply))
    return servers[-1]

  yield start
  for s in servers:
    s.close()


def _response(status, body, total=None, extra=b""):
  length = len(body) if total is None else total
  return (f"HTTP/1.1 {status}\r\nContent-Length: {length}\r\n".encode() + extra + b"\r\n"
          + body)


def test_a_dropped_connection_keeps_the_partial_file_and_the_next_try_resumes(misbehave,
                                                                             tmp_path):
  blob = bytes(range(256)) * 40
  remote = _remote("f.bin", blob)

  def reply(wanted):
    if wanted is None:   # half the file, then the connection drops
      return _response("200 OK", blob[:4000], total=len(blob))
    start = int(wanted.removeprefix("bytes=").split("-")[0])
    return _response("206 Partial Content", blob[start:])
  server = misbehave(reply)
  part = tmp_path / "f.bin.part"
  with pytest.raises(neural.data.DataError, match="run the command again to resume"):
    download.fetch_file(f"{server.url}/f.bin", remote, tmp_path / "f.bin")
  assert part.read_bytes() == blob[:4000]   # kept, not deleted
  path = download.fetch_file(f"{server.url}/f.bin", remote, tmp_path / "f.bin")
  assert path.read_bytes() == blob and server.requests == [None, "bytes=4000-"]
  assert not part.exists()


def test_a_server_sending_more_than_the_published_size_is_cut_there(misbehave, tmp_path):
  blob = b"the published file" * 100
  server = misbehave(lambda wanted: _response("200 OK", blob + b"\0" * 300_000))
  path = download.fetch_file(f"{server.url}/f.bin", _remote("f.bin", blob), tmp_path / "f.bin")
  assert path.read_bytes() == blob   # what follows the published size is never written


@pytest.mark.parametrize("reply, message", [
    (lambda wanted: b"garbage\r\n\r\n", "download failed"),                      # status line
    (lambda wanted: b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "download failed"),
    (lambda wanted: b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 200 + b"\r\n", "download failed"),
    (lambda wanted: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc",
     "download failed"),                                                       # cut chunked
])
def test_a_misbehaving_server_is_one_line_through_the_command(misbehave, tmp_path, capsys,
                                                             monkeypatch, reply, message):
  server = misbehave(reply)
  blob = b"x" * 1000
  monkeypatch.setitem(download.DOWNLOADS, "mnist",
                      Download(server.url, (_remote("f.bin", blob),)))
  assert main(["data", "fetch", "mnist", "--dir", str(tmp_path / "d"), "--no-progress"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and message in err[0], err
  assert not (tmp_path / "d" / "f.bin").exists()


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:abc/x", "http://127.0.0.1:1/a b",
                                      "gopher://127.0.0.1/x"])
def test_a_malformed_url_is_one_line(tmp_path, capsys, base_url):
  assert main(["data", "fetch", "mnist", "--dir", str(tmp_path / "d"), "--base-url",
               base_url]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "not a URL this command can fetch" in err[0], err


def test_a_part_file_that_is_a_link_is_refused_and_its_target_untouched(serve, tmp_path):
  blob = b"data" * 100
  server = serve({"f.bin": blob})
  elsewhere = tmp_path / "elsewhere"
  elsewhere.write_bytes(b"keep me")
  (tmp_path / "f.bin.part").symlink_to(elsewhere)
  with pytest.raises(neural.data.DataError, match="f.bin.part: expected a partial download"):
    download.fetch_file(f"{server.url}/f.bin", _remote("f.bin", blob), tmp_path / "f.bin")
  assert elsewhere.read_bytes() == b"keep me" and not (tmp_path / "f.bin").exists()


@pytest.mark.parametrize("have", [0, 7])
def test_a_part_file_hard_linked_elsewhere_is_neither_truncated_nor_written(serve, tmp_path,
                                                                            have):
  """The opened NAME.part is checked (one link) before a byte is truncated or written."""
  blob = b"data" * 100
  server = serve({"f.bin": blob})
  elsewhere = tmp_path / "elsewhere"
  elsewhere.write_bytes(b"keep me"[:have] if have else b"keep me too, all of it")
  before = elsewhere.read_bytes()
  (tmp_path / "f.bin.part").hardlink_to(elsewhere)
  with pytest.raises(neural.data.DataError, match="f.bin.part: expected a partial download .* "
                                             "2 hard links") as info:
    download.fetch_file(f"{server.url}/f.bin", _remote("f.bin", blob), tmp_path / "f.bin")
  assert "\n" not in str(info.value)
  assert elsewhere.read_bytes() == before and not (tmp_path / "f.bin").exists()


def test_a_206_from_another_offset_is_refused(tmp_path):
  """A server answering 206 with bytes from another place than asked is not appended."""
  blob = b"abcdefgh" * 100

  class Wrong(http.server.BaseHTTPRequestHandler):   # 206, but always from byte 0
    def do_GET(self):
      self.send_response(206)
      self.send_header("Content-Range", f"bytes 0-{len(blob) - 1}/{len(blob)}")
      self.send_header("Content-Length", str(len(blob)))
      self.end_headers()
      self.wfile.write(blob)

    def log_message(self, *args):
      pass

  (tmp_path / "f.bin.part").write_bytes(blob[:100])
  wrong = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wrong)
  threading.Thread(target=wrong.serve_forever, daemon=True).start()
  try:
    url = f"http://127.0.0.1:{wrong.server_address[1]}/f.bin"
    with pytest.raises(neural.data.DataError, match="Content-Range 'bytes 0-799/800'"):
      download.fetch_file(url, _remote("f.bin", blob), tmp_path / "f.bin")
    assert (tmp_path / "f.bin.part").read_bytes() == blob[:100]
  finally:
    wrong.shutdown()
    wrong.server_close()


@pytest.mark.parametrize("base_url", ["", "   "])
def test_an_empty_base_url_is_refused_not_replaced_by_the_default(tmp_path, capsys, base_url):
  assert main(["data", "fetch", "mnist", "--dir", str(tmp_path / "d"), "--base-url",
               base_url]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--base-url: expected a URL" in err[0], err
