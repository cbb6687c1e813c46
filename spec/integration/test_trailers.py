"""Answer trailers (resp:set_trailer) from the wire: over HTTP/1.1 the last
chunk then the trailer section, byte for byte on a raw socket; an
HTTP/1.0 client gets the body without them (and the server says so on
stderr); over HTTP/2 (python3-h2 as the client) a HEADERS frame with
END_STREAM after the last DATA, and curl --http2-prior-knowledge still
reads the body; a compressed stream still decodes whole before its
trailers. $MF_MOONFLOW is the binary."""
import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from harness import Server, connect, free_port, read_until_closed

try:
    import h2.config
    import h2.connection
    import h2.events
except ImportError:  # Debian's package, under a Python built elsewhere
    sys.path.append("/usr/lib/python3/dist-packages")
    import h2.config
    import h2.connection
    import h2.events

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

SITE = {
    # two pieces, then grpc-status style trailers
    "stream.lua": 'return function(req, resp)\n'
                  '  resp.headers["Content-Type"] = "application/grpc"\n'
                  '  resp:write("hello ")\n'
                  '  resp:set_trailer("Grpc-Status", "0")\n'
                  '  resp:write("world")\n'
                  '  resp:set_trailer("Grpc-Message", "all good")\n'
                  '  resp:send()\n'
                  'end\n',
    # a whole answer with a trailer is sent streamed
    "whole.lua": 'return function(req, resp)\n'
                 '  resp:set_trailer("X-Checksum", 42)\n'
                 '  resp:send("whole body")\n'
                 'end\n',
    # a compressible stream (text/plain, listed below)
    "text.lua": 'return function(req, resp)\n'
                '  resp.headers["Content-Type"] = "text/plain"\n'
                '  for i = 1, 50 do resp:write(("line %d\\n"):format(i)) end\n'
                '  resp:set_trailer("X-Lines", "50")\n'
                '  resp:send()\n'
                'end\n',
    # the request's trailers, sorted "name=value;", behind the body's size
    "echo.lua": 'return function(req, resp)\n'
                '  local body = req.body or ""\n'
                '  if req.query.stream then\n'
                '    local sock = assert(req:socket())\n'
                '    local n = 0\n'
                '    while true do\n'
                '      local data, err, partial = sock:receive(4096)\n'
                '      n = n + #(data or partial or "")\n'
                '      if not data then break end\n'
                '    end\n'
                '    body = string.rep("x", n)\n'
                '  end\n'
                '  local t, out = req:trailers(), {}\n'
                '  for k, v in pairs(t) do out[#out + 1] = k .. "=" .. v end\n'
                '  table.sort(out)\n'
                '  resp:send(#body .. " " .. table.concat(out, ";"))\n'
                'end\n',
    # the forbidden and malformed fields raise; the message is the body
    "bad.lua": 'return function(req, resp)\n'
               '  local ok, err = pcall(resp.set_trailer, resp,\n'
               '                        req.query.name, req.query.value)\n'
               '  resp:send(tostring(ok) .. " " .. tostring(err))\n'
               'end\n',
}

CONFIG = """return {
  listen = "127.0.0.1:%(port)d", workers = 1, root = %(root)r,
  timeouts = { stop = 3000 },
  http2 = { max_concurrent_streams = 100, max_header_list_size = 8192 },
  compress = { types = { "text/plain" } },
  routes = { ["/echo_stream"] = { file = "echo.lua", body = "stream" } },
}
"""


def raw_exchange(port, raw):
    """Everything the server sends for raw until it closes."""
    with connect(port) as s:
        s.sendall(raw)
        return read_until_closed(s)


def h2_get(port, path, headers=(), body=None, trailers=None):
    """(headers, body, trailers) of one HTTP/2 request with python3-h2;
    with body, a POST whose DATA is followed by trailers, if any."""
    c = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "POST" if body else "GET"),
                         (":scheme", "http"), (":authority", "t.test"),
                         (":path", path)] + list(headers),
                   end_stream=body is None)
    if body is not None:
        c.send_data(sid, body, end_stream=not trailers)
        if trailers:
            c.send_headers(sid, trailers, end_stream=True)
    got = {"headers": None, "body": b"", "trailers": None, "ended": False,
           "data_ended": False}
    with connect(port) as s:
        s.sendall(c.data_to_send())
        deadline = time.monotonic() + 10
        while not got["ended"] and time.monotonic() < deadline:
            data = s.recv(65536)
            if not data:
                break
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    got["headers"] = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    got["body"] += ev.data
                    c.acknowledge_received_data(
                        ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.TrailersReceived):
                    got["trailers"] = dict(ev.headers)
                    got["data_ended"] = ev.stream_ended is None
                elif isinstance(ev, h2.events.StreamEnded):
                    got["ended"] = True
                elif isinstance(ev, h2.events.StreamReset):
                    raise AssertionError("stream reset %d" % ev.error_code)
            s.sendall(c.data_to_send())
    assert got["ended"], "the stream did not end"
    return got


class Trailers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mf-trl-")
        root = os.path.join(cls.tmp, "site")
        os.makedirs(root)
        for name, text in SITE.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        port = free_port()
        conf = os.path.join(cls.tmp, "moonflow.lua")
        with open(conf, "w") as f:
            f.write(CONFIG % {"port": port, "root": root})
        cls.err = os.path.join(cls.tmp, "stderr")
        cls.srv = Server([MOONFLOW, "serve", "--config", conf], port,
                         stderr_path=cls.err)

    @classmethod
    def tearDownClass(cls):
        code, _, _ = cls.srv.stop(sig=signal.SIGTERM)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert code == 0, code

    def stderr(self):
        with open(self.err, "rb") as f:
            return f.read().decode(errors="replace")

    # ---- HTTP/1.1 -------------------------------------------------------

    def test_http1_last_chunk_then_trailer_section_byte_exact(self):
        out = raw_exchange(self.srv.port, b"GET /stream HTTP/1.1\r\n"
                           b"Host: t\r\nConnection: close\r\n\r\n")
        head, body = out.split(b"\r\n\r\n", 1)
        self.assertIn(b"\r\nTransfer-Encoding: chunked", head)
        self.assertEqual(body, b"6\r\nhello \r\n5\r\nworld\r\n0\r\n"
                         b"Grpc-Status: 0\r\nGrpc-Message: all good\r\n"
                         b"\r\n")

    def test_http1_whole_answer_with_a_trailer_goes_chunked(self):
        out = raw_exchange(self.srv.port, b"GET /whole HTTP/1.1\r\n"
                           b"Host: t\r\nConnection: close\r\n\r\n")
        head, body = out.split(b"\r\n\r\n", 1)
        self.assertNotIn(b"Content-Length", head)
        self.assertEqual(body, b"a\r\nwhole body\r\n0\r\n"
                         b"X-Checksum: 42\r\n\r\n")

    def test_http1_keep_alive_continues_after_the_trailers(self):
        out = raw_exchange(self.srv.port,
                           b"GET /whole HTTP/1.1\r\nHost: t\r\n\r\n"
                           b"GET /whole HTTP/1.1\r\nHost: t\r\n"
                           b"Connection: close\r\n\r\n")
        self.assertEqual(out.count(b"0\r\nX-Checksum: 42\r\n\r\n"), 2)
        self.assertTrue(out.endswith(b"0\r\nX-Checksum: 42\r\n\r\n"))

    def test_http1_0_client_gets_the_body_and_a_log_line(self):
        out = raw_exchange(self.srv.port,
                           b"GET /stream HTTP/1.0\r\nHost: t\r\n\r\n")
        head, body = out.split(b"\r\n\r\n", 1)
        self.assertEqual(body, b"hello world")
        deadline = time.monotonic() + 3
        while "trailers dropped" not in self.stderr() and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("GET /stream: trailers dropped", self.stderr())

    def test_http1_head_request_gets_no_body_nor_trailers(self):
        out = raw_exchange(self.srv.port, b"HEAD /whole HTTP/1.1\r\n"
                           b"Host: t\r\nConnection: close\r\n\r\n")
        self.assertTrue(out.endswith(b"\r\n\r\n"))
        self.assertNotIn(b"X-Checksum", out)

    def test_curl_reads_the_chunked_body(self):
        r = subprocess.run(["curl", "-sS", "--max-time", "10",
                            "http://127.0.0.1:%d/stream" % self.srv.port],
                           capture_output=True, timeout=20)
        self.assertEqual((r.returncode, r.stdout), (0, b"hello world"))

    def test_compressed_stream_ends_before_its_trailers(self):
        out = raw_exchange(self.srv.port,
                           b"GET /text HTTP/1.1\r\nHost: t\r\n"
                           b"Accept-Encoding: gzip\r\n"
                           b"Connection: close\r\n\r\n")
        head, rest = out.split(b"\r\n\r\n", 1)
        self.assertIn(b"Content-Encoding: gzip", head)
        body = b""
        while True:
            line, rest = rest.split(b"\r\n", 1)
            size = int(line, 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2:]
        self.assertEqual(rest, b"X-Lines: 50\r\n\r\n")
        self.assertEqual(gzip.decompress(body), b"".join(
            b"line %d\n" % i for i in range(1, 51)))

    # ---- HTTP/2 ---------------------------------------------------------

    def test_http2_trailers_after_the_last_data(self):
        got = h2_get(self.srv.port, "/stream")
        self.assertEqual(got["headers"][":status"], "200")
        self.assertEqual(got["body"], b"hello world")
        self.assertEqual(got["trailers"], {"grpc-status": "0",
                                           "grpc-message": "all good"})

    def test_http2_whole_answer_with_a_trailer(self):
        got = h2_get(self.srv.port, "/whole")
        self.assertNotIn("content-length", got["headers"])
        self.assertEqual(got["body"], b"whole body")
        self.assertEqual(got["trailers"], {"x-checksum": "42"})

    def test_http2_compressed_stream_then_trailers(self):
        got = h2_get(self.srv.port, "/text", [("accept-encoding", "gzip")])
        self.assertEqual(got["headers"].get("content-encoding"), "gzip")
        self.assertEqual(gzip.decompress(got["body"]), b"".join(
            b"line %d\n" % i for i in range(1, 51)))
        self.assertEqual(got["trailers"], {"x-lines": "50"})

    def test_http2_without_trailers_ends_on_data_as_before(self):
        got = h2_get(self.srv.port, "/bad?name=X-Ok&value=1")
        self.assertEqual(got["body"], b"true true")
        self.assertEqual(got["trailers"], {"x-ok": "1"})

    def test_curl_http2_prior_knowledge_reads_the_body(self):
        r = subprocess.run(["curl", "-sS", "--max-time", "10",
                            "--http2-prior-knowledge",
                            "http://127.0.0.1:%d/stream" % self.srv.port],
                           capture_output=True, timeout=20)
        self.assertEqual((r.returncode, r.stdout), (0, b"hello world"),
                         r.stderr)

    # ---- the request's trailers ----------------------------------------

    def test_http2_request_trailers_read_by_the_handler(self):
        got = h2_get(self.srv.port, "/echo", body=b"abc",
                     trailers=[("x-sum", "7"), ("x-more", "a"),
                               ("x-more", "b")])
        self.assertEqual(got["headers"][":status"], "200")
        self.assertEqual(got["body"], b"3 x-more=a, b;x-sum=7")

    def test_http2_request_trailers_after_a_streamed_body(self):
        got = h2_get(self.srv.port, "/echo_stream?stream=1",
                     body=b"y" * 5000, trailers=[("grpc-timeout", "1S")])
        self.assertEqual(got["body"], b"5000 grpc-timeout=1S")

    def test_http2_request_without_trailers_has_an_empty_table(self):
        got = h2_get(self.srv.port, "/echo", body=b"abcd")
        self.assertEqual(got["body"], b"4 ")

    def test_http2_request_trailers_past_the_limit_reset_the_stream(self):
        with self.assertRaises(AssertionError) as e:
            h2_get(self.srv.port, "/echo", body=b"a",
                   trailers=[("x-big%d" % i, "v" * 1000) for i in range(20)])
        self.assertIn("stream reset", str(e.exception))
        self.assertEqual(h2_get(self.srv.port, "/stream")["body"],
                         b"hello world")

    def test_http1_chunked_request_trailers_are_not_kept(self):
        out = raw_exchange(self.srv.port,
                           b"POST /echo HTTP/1.1\r\nHost: t\r\n"
                           b"Transfer-Encoding: chunked\r\n"
                           b"Connection: close\r\n\r\n"
                           b"3\r\nabc\r\n0\r\nX-Sum: 7\r\n\r\n")
        self.assertTrue(out.endswith(b"\r\n\r\n3 "), out)

    # ---- refused fields -------------------------------------------------

    def bad(self, name, value="v"):
        from urllib.parse import quote
        out = raw_exchange(self.srv.port, (
            "GET /bad?name=%s&value=%s HTTP/1.1\r\nHost: t\r\n"
            "Connection: close\r\n\r\n" % (quote(name), quote(value))
        ).encode())
        return out.split(b"\r\n\r\n", 1)[1]

    def test_forbidden_fields_raise_a_clear_error(self):
        for name in ("Content-Length", "transfer-encoding", "Host",
                     "Authorization", "Set-Cookie", "Content-Type",
                     "Trailer", "Connection", "Cache-Control"):
            body = self.bad(name)
            self.assertIn(b"false", body, name)
            self.assertIn(b"may not be sent as a trailer", body, name)

    def test_malformed_fields_raise(self):
        self.assertIn(b"is not a valid field name", self.bad("bad name"))
        self.assertIn(b"has a control byte", self.bad("X-A", "a\nb"))


if __name__ == "__main__":
    unittest.main()
