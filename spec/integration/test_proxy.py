"""resp:proxy under `moonflow serve`, against a real backend (a threaded
Python HTTP/1.1 server on 127.0.0.1, in this process): the request's
headers as the backend sees them (hop-by-hop ones dropped, those named by
Connection too; X-Forwarded-For appended; Forwarded; Via; opts.headers),
the answer's hop-by-hop headers dropped, a chunked upload, 1 GiB up and
1 GiB down through the proxy with its RSS flat, backpressure both ways
(a slow backend stops the reading of the client's body; a slow client
stops the reading of the backend's answer), 502 on a refused port, 504
on a backend that does not answer in time, their error log lines.
$MF_MOONFLOW is the binary. The server must stop with status 0."""
import json
import os
import shutil
import signal
import socket
import socketserver
import tempfile
import threading
import time
import unittest

from harness import (Server, connect, free_port, read_response, request,
                     rss_kib)

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
GIB = 1 << 30


class RssPeak:
    """The peak VmRSS of a process while a block runs (sampled every
    20 ms)."""

    def __init__(self, pid):
        self.pid = pid

    def __enter__(self):
        self.base = rss_kib(self.pid)
        self.peak = self.base
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done.wait(0.02):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    @property
    def growth(self):
        return self.peak - self.base


# ---- the backend -------------------------------------------------------


class Backend(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), BackendHandler)
        self.port = self.server_address[1]
        self.seen = []  # (method, target, headers, body bytes, framing)
        self.upload_pause = 0.0  # s between 1 MiB reads of a /slow body
        self.slow_gate = threading.Event()
        self.read_so_far = 0
        self.thread = threading.Thread(target=self.serve_forever)
        self.thread.daemon = True
        self.thread.start()


class BackendHandler(socketserver.BaseRequestHandler):
    def setup(self):
        self.request.settimeout(120)
        self.buf = b""

    def recv_more(self):
        data = self.request.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self.recv_more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def take(self, n, sink):
        """n body bytes to sink(bytes), at most 1 MiB at a time."""
        while n > 0:
            if not self.buf:
                self.recv_more()
            piece = self.buf[:min(n, 1 << 20)]
            self.buf = self.buf[len(piece):]
            n -= len(piece)
            sink(piece)

    def body(self, headers, path):
        count = [0]
        keep = []

        def sink(piece):
            count[0] += len(piece)
            self.server.read_so_far = count[0]
            if len(keep) < 4 and sum(map(len, keep)) < 65536:
                keep.append(piece)
            if path.startswith("/slow") and self.server.upload_pause:
                time.sleep(self.server.upload_pause)
        if "transfer-encoding" in headers:
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line() != b"":
                        pass
                    return count[0], b"".join(keep), "chunked"
                self.take(size, sink)
                self.line()
        n = int(headers.get("content-length", "0"))
        self.take(n, sink)
        return count[0], b"".join(keep), "length"

    def handle(self):
        try:
            while self.one():
                pass
        except (EOFError, OSError):
            pass

    def one(self):
        request_line = self.line().decode()
        method, target, _ = request_line.split(" ", 2)
        pairs = []
        while True:
            line = self.line()
            if not line:
                break
            name, value = line.decode().split(":", 1)
            pairs.append((name, value.strip()))
        headers = {n.lower(): v for n, v in pairs}
        path = target.split("?")[0]
        if path.startswith("/early"):  # refuses the body unread
            self.request.sendall(b"HTTP/1.1 413 Payload Too Large\r\n"
                                 b"Content-Length: 8\r\n"
                                 b"Connection: close\r\n\r\ntoo big\n")
            self.request.shutdown(socket.SHUT_WR)
            time.sleep(0.3)
            return False
        if path.startswith("/hang"):
            time.sleep(3)
            return False
        count, start, framing = self.body(headers, path)
        self.server.seen.append((method, target, pairs, count, framing))
        if path.startswith("/big"):
            self.send_big(int(target.split("n=")[1]))
            return True
        if path.startswith("/hop"):
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                b"Connection: keep-alive, X-Hop-Secret\r\n"
                b"X-Hop-Secret: s\r\nKeep-Alive: timeout=5\r\n"
                b"Proxy-Authenticate: Basic\r\nX-End: e\r\n"
                b"Via: 1.1 backend\r\n\r\nok")
            return True
        if path.startswith("/drop"):  # a head, then the connection reset
            self.request.sendall(b"HTTP/1.1 200 OK\r\n"
                                 b"Content-Length: 100\r\n\r\nshort")
            return False
        out = json.dumps({"method": method, "target": target,
                          "headers": pairs, "count": count,
                          "framing": framing,
                          "start": start[:16].decode("latin-1")}).encode()
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: "
                             b"application/json\r\nContent-Length: %d\r\n"
                             b"\r\n%s" % (len(out), out))
        return True

    def send_big(self, n):
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                             b"\r\n" % n)
        piece = b"0123456789abcdef" * 65536
        while n > 0:
            k = min(n, len(piece))
            self.request.sendall(piece[:k])
            n -= k


# ---- the proxy ----------------------------------------------------------

SITE = {
    "proxy.lua": '''local mf = require "moonflow"
return function(req, resp)
    local status, err = resp:proxy("http://127.0.0.1:%(backend)d", {
        via = true, timeout = 5000,
        headers = { ["X-Added"] = "yes", ["X-Gone"] = false } })
    mf.log("info", "proxied " .. tostring(status) .. " " .. tostring(err))
end
''',
    "path.lua": '''local mf = require "moonflow"
return function(req, resp)
    resp:proxy("http://127.0.0.1:%(backend)d/fixed?a=1")
end
''',
    "stream.lua": '''local mf = require "moonflow"
return function(req, resp)
    local status, err = resp:proxy("http://127.0.0.1:%(backend)d",
                                   { timeout = 60000 })
    mf.log("info", "streamed " .. tostring(status) .. " " .. tostring(err))
end
''',
    "refused.lua": '''local mf = require "moonflow"
return function(req, resp)
    local status, err = resp:proxy("http://127.0.0.1:%(closed)d", { tries = 2 })
    mf.log("info", "refused: " .. tostring(status) .. " " .. tostring(err))
end
''',
    "hang.lua": '''local mf = require "moonflow"
return function(req, resp)
    local status, err = resp:proxy("http://127.0.0.1:%(backend)d",
                                   { timeout = 300 })
    mf.log("info", "hang: " .. tostring(status) .. " " .. tostring(err))
end
''',
    "tmo.lua": '''local mf = require "moonflow"
return function(req, resp)
    local target = req.query.big and "/big?n=268435456" or "/hang"
    resp:proxy("http://127.0.0.1:%(backend)d" .. target, { timeout = 5000 })
    mf.log("info", "tmo: never resumed")
end
''',
}

CONFIG = '''return { root = ".", limits = { max_body = %(max_body)d },
  log_level = "info",
  routes = {
    ["/echo"] = "proxy.lua",
    ["/hop"] = "proxy.lua",
    ["/drop"] = "proxy.lua",
    ["/path"] = "path.lua",
    ["/up"] = { file = "stream.lua", body = "stream" },
    ["/slow"] = { file = "stream.lua", body = "stream" },
    ["/early"] = { file = "stream.lua", body = "stream" },
    ["/big"] = "stream.lua",
    ["/refused"] = "refused.lua",
    ["/hang"] = "hang.lua",
    ["/tmo"] = { file = "tmo.lua", timeout = 300 } } }
'''


def chunked(pieces):
    out = b""
    for p in pieces:
        out += b"%x\r\n%s\r\n" % (len(p), p)
    return out + b"0\r\n\r\n"


class Proxy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.backend = Backend()
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        cls.root = tempfile.mkdtemp(prefix="moonflow-proxy-")
        values = {"backend": cls.backend.port, "closed": closed,
                  "max_body": 2 * GIB}
        for name, text in SITE.items():
            with open(os.path.join(cls.root, name), "w") as f:
                f.write(text % values)
        conf = os.path.join(cls.root, "conf.lua")
        with open(conf, "w") as f:
            f.write(CONFIG % values)
        cls.errors = os.path.join(cls.root, "stderr.log")
        port = free_port()
        try:
            cls.srv = Server([MOONFLOW, "serve", "--config", conf,
                              "--listen", "127.0.0.1:%d" % port,
                              "--workers", "1", "--access-log", "off"],
                             port, stderr_path=cls.errors)
        except Exception:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        code, _, _ = cls.srv.stop(sig=signal.SIGTERM, timeout=30)
        log = cls.error_log()
        shutil.rmtree(cls.root, ignore_errors=True)
        cls.backend.shutdown()
        cls.backend.server_close()
        if code != 0:
            raise AssertionError("serve exited %d:\n%s" % (code, log[-3000:]))

    @classmethod
    def error_log(cls):
        with open(cls.errors, errors="replace") as f:
            return f.read()

    def wait_log(self, text, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.error_log():
                return
            time.sleep(0.05)
        self.fail("%r not in the error log:\n%s" % (text,
                                                    self.error_log()[-2000:]))

    def get(self, raw, timeout=10):
        return request(self.srv.port, raw, timeout=timeout)

    def seen_by_backend(self, r):
        self.assertEqual(r.status, 200, r.body)
        return json.loads(r.body)

    # ---- headers ----------------------------------------------------------

    def test_hop_by_hop_request_headers_are_dropped(self):
        r = self.get(b"GET /echo?q=1 HTTP/1.1\r\nHost: front.test\r\n"
                     b"Connection: keep-alive, X-Private, x-other\r\n"
                     b"X-Private: p\r\nX-Other: o\r\nKeep-Alive: 5\r\n"
                     b"Proxy-Connection: keep-alive\r\nTE: trailers\r\n"
                     b"Upgrade: h2c\r\nProxy-Authorization: Basic eA==\r\n"
                     b"Trailer: X-T\r\nX-Kept: k\r\nX-Gone: g\r\n\r\n")
        seen = self.seen_by_backend(r)
        names = [n.lower() for n, _ in seen["headers"]]
        for hop in ("connection", "x-private", "x-other", "keep-alive",
                    "proxy-connection", "te", "upgrade",
                    "proxy-authorization", "trailer", "x-gone"):
            self.assertNotIn(hop, names)
        headers = dict((n.lower(), v) for n, v in seen["headers"])
        self.assertEqual(headers["x-kept"], "k")
        self.assertEqual(headers["x-added"], "yes")  # opts.headers
        self.assertEqual(headers["host"], "front.test")  # the client's
        self.assertEqual(seen["target"], "/echo?q=1")  # appended
        self.assertEqual(seen["method"], "GET")

    def test_forwarded_headers_are_appended(self):
        r = self.get(b"GET /echo HTTP/1.1\r\nHost: front.test:8080\r\n"
                     b"X-Forwarded-For: 203.0.113.7\r\n"
                     b"X-Forwarded-For: 198.51.100.1\r\n"
                     b"Forwarded: for=203.0.113.7\r\n"
                     b"X-Forwarded-Proto: https\r\n"
                     b"Via: 1.0 edge\r\n\r\n")
        headers = dict((n.lower(), v) for n, v in
                       self.seen_by_backend(r)["headers"])
        self.assertEqual(headers["x-forwarded-for"],
                         "203.0.113.7, 198.51.100.1, 127.0.0.1")
        self.assertEqual(headers["forwarded"],
                         'for=203.0.113.7, for=127.0.0.1;proto=http;'
                         'host="front.test:8080"')
        self.assertEqual(headers["x-forwarded-proto"], "http")  # ours
        self.assertEqual(headers["x-forwarded-host"], "front.test:8080")
        self.assertEqual(headers["via"], "1.0 edge, 1.1 moonflow")

    def test_answer_hop_by_hop_headers_are_dropped(self):
        r = self.get(b"GET /hop HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual((r.status, r.body), (200, b"ok"))
        self.assertNotIn("x-hop-secret", r.headers)
        self.assertNotIn("keep-alive", r.headers)
        self.assertNotIn("proxy-authenticate", r.headers)
        self.assertEqual(r.headers["x-end"], "e")
        self.assertEqual(r.headers["via"], "1.1 backend, 1.1 moonflow")

    def test_a_url_with_a_path_is_the_whole_target(self):
        r = self.get(b"GET /path?b=2 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(self.seen_by_backend(r)["target"], "/fixed?a=1")

    def test_post_body_and_a_chunked_upload(self):
        r = self.get(b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                     b"Content-Length: 5\r\n\r\nhello")
        seen = self.seen_by_backend(r)
        self.assertEqual((seen["method"], seen["count"], seen["start"]),
                         ("POST", 5, "hello"))
        body = chunked([b"abc", b"defgh", b"i" * 70000])
        r = self.get(b"POST /up HTTP/1.1\r\nHost: h\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + body)
        seen = self.seen_by_backend(r)
        self.assertEqual((seen["count"], seen["framing"], seen["start"][:8]),
                         (70008, "chunked", "abcdefgh"))

    # ---- errors -----------------------------------------------------------

    def test_a_refused_port_is_a_502_with_a_log_line(self):
        r = self.get(b"GET /refused HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 502)
        self.wait_log("proxy to http://127.0.0.1:")
        self.wait_log(": 502: connection refused")
        self.wait_log("refused: nil connection refused")

    def test_a_backend_that_does_not_answer_is_a_504(self):
        t0 = time.monotonic()
        r = self.get(b"GET /hang HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 504)
        self.assertLess(time.monotonic() - t0, 2.5)
        self.wait_log(": 504: timeout")
        self.wait_log("hang: nil timeout")

    def test_an_answer_before_the_whole_upload_is_relayed(self):
        with connect(self.srv.port, timeout=10) as s:
            s.sendall(b"POST /early HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: %d\r\n\r\n" % (64 << 20))
            s.setblocking(False)
            piece, sent = b"x" * (1 << 20), 0
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and sent < (64 << 20):
                try:
                    sent += s.send(piece)
                except BlockingIOError:
                    time.sleep(0.01)
                except OSError:
                    break  # the proxy closed after its answer
            s.setblocking(True)
            r, _ = read_response(s)
        self.assertEqual((r.status, r.body), (413, b"too big\n"))
        self.wait_log("streamed 413 nil")

    def test_an_answer_cut_midway_is_cut_for_the_client(self):
        with connect(self.srv.port) as s:
            s.sendall(b"GET /drop HTTP/1.1\r\nHost: h\r\n\r\n")
            s.settimeout(5)
            data = b""
            while True:
                piece = s.recv(65536)
                if not piece:
                    break
                data += piece
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data)
        self.assertNotIn(b"\r\n0\r\n\r\n", data)  # no last chunk
        self.wait_log("the answer was cut")

    def test_a_client_that_leaves_midway_ends_the_forward(self):
        with connect(self.srv.port, timeout=10) as s:  # the answer's side
            s.sendall(b"GET /big?n=%d HTTP/1.1\r\nHost: h\r\n\r\n"
                      % (256 << 20))
            s.recv(65536)
        with connect(self.srv.port, timeout=10) as s:  # the upload's side
            s.sendall(b"POST /up HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: %d\r\n\r\n" % (256 << 20))
            s.sendall(b"x" * (4 << 20))
        deadline = time.monotonic() + 5
        while self.error_log().count("streamed nil closed") < 2:
            self.assertLess(time.monotonic(), deadline, self.error_log()[-2000:])
            time.sleep(0.05)
        r = self.get(b"GET /echo HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 200)

    def test_a_handler_timeout_ends_the_forward(self):
        r = self.get(b"GET /tmo HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 504)  # the handler's, not the proxy's
        with connect(self.srv.port, timeout=10) as s:  # its head is out
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(b"GET /tmo?big=1 HTTP/1.1\r\nHost: h\r\n\r\n")
            data = s.recv(65536)
            self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:100])
            time.sleep(0.6)  # the client is slow past the timeout
            n = len(data)
            while True:
                piece = s.recv(1 << 20)
                if not piece:
                    break
                n += len(piece)
        self.assertLess(n, 256 << 20)  # cut
        self.wait_log("the streamed response is cut after")
        self.assertNotIn("tmo: never resumed", self.error_log())
        r = self.get(b"GET /echo HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 200)

    # ---- 1 GiB each way, backpressure -------------------------------------

    def test_a_gib_upload_streams_with_flat_memory(self):
        self.get(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n"
                 b"\r\n" % (4 << 20) + b"w" * (4 << 20))  # buffers made
        piece = b"0123456789abcdef" * 65536
        t0 = time.monotonic()
        with RssPeak(self.srv.proc.pid) as rss:
            with connect(self.srv.port, timeout=120) as s:
                s.sendall(b"POST /up HTTP/1.1\r\nHost: h\r\n"
                          b"Content-Length: %d\r\n\r\n" % GIB)
                for _ in range(GIB // len(piece)):
                    s.sendall(piece)
                r, _ = read_response(s)
        took = time.monotonic() - t0
        print("1 GiB up through the proxy in %.1f s (%.0f MiB/s): RSS "
              "+%d KiB" % (took, 1024 / took, rss.growth))
        seen = self.seen_by_backend(r)
        self.assertEqual((seen["count"], seen["framing"]), (GIB, "length"))
        self.assertLess(rss.growth, 16 * 1024)

    def test_a_gib_download_streams_with_flat_memory(self):
        self.get(b"GET /big?n=%d HTTP/1.1\r\nHost: h\r\n\r\n" % (4 << 20))
        t0 = time.monotonic()
        got = 0
        with RssPeak(self.srv.proc.pid) as rss:
            with connect(self.srv.port, timeout=120) as s:
                s.sendall(b"GET /big?n=%d HTTP/1.1\r\nHost: h\r\n"
                          b"Connection: close\r\n\r\n" % GIB)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += s.recv(65536)
                head, rest = head.split(b"\r\n\r\n", 1)
                self.assertIn(b"200 OK", head)
                self.assertIn(b"chunked", head.lower())
                data = rest
                while True:
                    piece = s.recv(1 << 20)
                    if not piece:
                        break
                    got += len(piece)
                got += len(data)
        took = time.monotonic() - t0
        print("1 GiB down through the proxy in %.1f s (%.0f MiB/s): RSS "
              "+%d KiB" % (took, 1024 / took, rss.growth))
        # the chunk framing adds a few bytes per piece
        self.assertGreaterEqual(got, GIB)
        self.assertLess(got, GIB + GIB // 1000)
        self.assertLess(rss.growth, 16 * 1024)

    def test_a_slow_backend_stops_the_reading_of_the_client(self):
        self.backend.upload_pause = 0.2  # 1 MiB every 0.2 s at most
        base = rss_kib(self.srv.proc.pid)
        try:
            total = 256 << 20
            with connect(self.srv.port, timeout=30) as s:
                s.sendall(b"POST /slow HTTP/1.1\r\nHost: h\r\n"
                          b"Content-Length: %d\r\n\r\n" % total)
                s.setblocking(False)
                sent = 0
                piece = b"x" * (1 << 20)
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline and sent < total:
                    try:
                        sent += s.send(piece)
                    except BlockingIOError:
                        time.sleep(0.01)
                # 3 s at 5 MiB/s: the backend read at most ~16 MiB; the
                # rest waits in the sockets' buffers (loopback's grow to
                # 32 MiB: tcp_rmem), not in the proxy
                self.assertLess(self.backend.read_so_far, 24 << 20)
                self.assertLess(sent, 128 << 20)
                growth = rss_kib(self.srv.proc.pid) - base
                self.assertLess(growth, 8 * 1024)
        finally:
            self.backend.upload_pause = 0.0

    def test_a_slow_client_stops_the_reading_of_the_backend(self):
        base = rss_kib(self.srv.proc.pid)
        with connect(self.srv.port, timeout=30) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(b"GET /big?n=%d HTTP/1.1\r\nHost: h\r\n"
                      b"Connection: close\r\n\r\n" % (256 << 20))
            s.recv(1024)
            time.sleep(2)  # the client reads nothing more
            growth = rss_kib(self.srv.proc.pid) - base
        # 256 MiB waiting at the backend, not in the proxy
        self.assertLess(growth, 16 * 1024)


if __name__ == "__main__":
    unittest.main()
