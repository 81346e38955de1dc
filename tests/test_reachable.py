"""`make setup` passes PyTorch's CPU index to pip only when it answers in time (tools/reachable.py):
an index that answers is used, one that hangs or does not exist costs seconds, not pip's retries."""

import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from conventions import ROOT


def probe(url, seconds="1"):
    start = time.monotonic()
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "reachable.py"), url, seconds],
                         capture_output=True, text=True, timeout=30)
    return run.stdout.strip(), time.monotonic() - start


class Index(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def log_message(self, *args):
        pass


def test_an_index_that_answers_is_printed():
    server = HTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/whl/cpu"
        assert probe(url)[0] == url
    finally:
        server.shutdown()


def test_an_index_that_never_answers_is_given_up_after_the_time_limit():
    silent = socket.socket()  # accepts the connection (the kernel does), never sends a byte
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        out, seconds = probe(f"http://127.0.0.1:{silent.getsockname()[1]}/", "1")
    finally:
        silent.close()
    assert out == "" and seconds < 1 + 5


def test_a_closed_port_is_given_up_at_once():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the connection is refused
    out, seconds = probe(f"http://127.0.0.1:{port}/", "20")
    assert out == "" and seconds < 10


def test_the_makefile_probes_pytorchs_cpu_index_the_binder_file_names():
    makefile = (ROOT / "Makefile").read_text()
    binder = (ROOT / "binder" / "requirements.txt").read_text()
    index = re.search(r"^TORCH_INDEX \?= (\S+)$", makefile, re.MULTILINE).group(1)
    assert f"--extra-index-url {index}\n" in binder
    assert "tools/reachable.py $(TORCH_INDEX)" in makefile
    assert "--extra-index-url $$index" in makefile
