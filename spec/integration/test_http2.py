"""HTTP/2 (RFC 9113) on moonflow serve's listener, checked from the wire:
a conformance runner written from §§4-8 (frame sizes, stream states, flow
control, HPACK errors, SETTINGS, PING, GOAWAY, RST_STREAM), each case
asserting what the RFC says the server must do; the floods of 2019-2024
(rapid reset, CONTINUATION, SETTINGS and PING) ending in GOAWAY or a close
within bounded time and memory, counted in /metrics; and real clients:
curl --http2-prior-knowledge, curl --http2 over TLS (ALPN), h2load; and
Upgrade: h2c (RFC 7540 §3.2) from curl --http2 and python3-h2's client.

Frames are built and read with hyperframe and hpack (python3-h2's own
framing and HPACK packages) over a plain socket, so that malformed input
can be sent byte for byte. $MF_MOONFLOW is the binary."""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import unittest

from harness import (Server, connect, free_port, read_response, request,
                     self_signed, temp_dir, rss_kib)

try:
    import h2.config
    import h2.connection
    import h2.events
    import hpack
    import hyperframe.frame as hf
except ImportError:  # Debian's packages, under a Python built elsewhere
    sys.path.append("/usr/lib/python3/dist-packages")
    import h2.config
    import h2.connection
    import h2.events
    import hpack
    import hyperframe.frame as hf

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
# ASan keeps freed memory in quarantine (256 MiB) and doubles CPU time.
SANITIZED = "asan" in os.path.basename(MOONFLOW)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Error codes (RFC 9113 §7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 5, 6, 7, 8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 9, 0xB

# SETTINGS identifiers (§6.5.2).
ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 2, 3, 4
MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 5, 6

SITE = {
    "index.lua": 'return function(req, resp) resp:send(req.version .. " " '
                 '.. req.method .. " " .. req.path .. " " .. '
                 'tostring(req.headers.host) .. " " .. #(req.body or "")) end\n',
    "sleep.lua": 'local mf = require "moonflow"\n'
                 'return function(req, resp) mf.sleep(400) '
                 'resp:send("slept") end\n',
    "big.lua": 'local s = string.rep("0123456789abcdef", 65536)\n'
               'return function(req, resp) resp:send(s) end\n',
    # 200 pieces of 64 KiB; the count written so far is in the shared dict
    "stream.lua": 'local mf = require "moonflow"\n'
                  'local piece = string.rep("s", 65536)\n'
                  'return function(req, resp)\n'
                  '  for i = 1, 200 do\n'
                  '    if not resp:write(piece) then return end\n'
                  '    mf.shared.h2:set("written", i)\n'
                  '  end\n'
                  '  resp:send()\n'
                  'end\n',
    "raw.lua": 'return function(req, resp) resp.status = 101 '
               'local sock, err = req:socket(true) '
               'resp.status = 200 resp:send(tostring(sock) .. " " .. err) end\n',
    "rawhead.lua": 'return function(req, resp) resp:send(req.raw_header) end\n',
    # a body read as it comes (body = "stream"); ?wait=ms before reading
    "up.lua": 'local mf = require "moonflow"\n'
              'return function(req, resp)\n'
              '  local sock = assert(req:socket())\n'
              '  if req.query.wait then mf.sleep(tonumber(req.query.wait)) end\n'
              '  local n = 0\n'
              '  while true do\n'
              '    local data, err, partial = sock:receive(4096)\n'
              '    n = n + #(data or partial or "")\n'
              '    if not data then\n'
              '      if err ~= "closed" then return resp:send(err) end\n'
              '      break\n'
              '    end\n'
              '  end\n'
              '  resp:send(tostring(n))\n'
              'end\n',
    "noread.lua": 'return function(req, resp) resp:send("no") end\n',
    "many.lua": 'return function(req, resp) for i = 1, 150 do '
                'resp.headers["X-H" .. i] = tostring(i) end '
                'resp:send("many") end\n',
    "progress.lua": 'local mf = require "moonflow"\n'
                    'return function(req, resp) '
                    'resp:send(tostring(mf.shared.h2:get("written") or 0)) end\n',
}

CONFIG = """return {
  listen = "127.0.0.1:%(port)d", workers = 1, root = %(root)r,
  limits = { max_body = 32768 },
  timeouts = { stop = 3000 },
  shared = { h2 = 65536 },
  metrics = { path = "/_metrics" },
  http2 = { max_concurrent_streams = 100, max_header_list_size = 16384,
            initial_window_size = 16384 },
  routes = { ["/up"] = { file = "up.lua", body = "stream" },
             ["/noread"] = { file = "noread.lua", body = "stream" } },
  %(extra)s
}
"""


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_frame(ftype, flags, sid, payload):
    """A frame as bytes, whatever its contents (for malformed ones)."""
    return (struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) +
            struct.pack(">I", sid) + payload)


class Conn:
    """One HTTP/2 connection, frame by frame."""

    def __init__(self, port, settings=None, preface=True, sock=None):
        self.sock = sock or connect(port)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.closed = False
        self.streams = {}  # stream id: its answer so far
        self.auto_window = True  # give back what DATA takes, at once
        if preface:
            self.raw(PREFACE + hf.SettingsFrame(0, settings or {}).serialize())

    def raw(self, data):
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    def send(self, *frames):
        self.raw(b"".join(f.serialize() for f in frames))

    def headers_frame(self, sid, fields, end_stream=True):
        f = hf.HeadersFrame(sid, self.enc.encode(fields))
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return f

    def request(self, sid, path="/index", method="GET", body=None,
                extra=()):
        fields = [(":method", method), (":scheme", "http"),
                  (":authority", "h2.test"), (":path", path)] + list(extra)
        block = self.enc.encode(fields)
        frames = []
        for at in range(0, max(len(block), 1), 16384):  # CONTINUATIONs
            f = (hf.HeadersFrame if at == 0 else hf.ContinuationFrame)(
                sid, block[at:at + 16384])
            frames.append(f)
        frames[-1].flags.add("END_HEADERS")
        if body is None:
            frames[0].flags.add("END_STREAM")
        else:
            for at in range(0, max(len(body), 1), 16384):
                frames.append(hf.DataFrame(sid, body[at:at + 16384]))
            frames[-1].flags.add("END_STREAM")
        self.send(*frames)

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.closed = True
                return False
            self.buf += chunk
        return True

    def frame(self, timeout=5.0):
        """The next frame (SETTINGS from the server are acknowledged), or
        None once the server has closed."""
        deadline = time.monotonic() + timeout
        if not self._fill(9, deadline):
            return None
        f, length = hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
        if not self._fill(9 + length, deadline):
            return None
        f.parse_body(memoryview(self.buf[9:9 + length]))
        self.buf = self.buf[9 + length:]
        if isinstance(f, hf.HeadersFrame):  # HPACK's state is the
            f.fields = self.dec.decode(f.data)  # connection's: in order
        self._track(f)
        if isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags:
            ack = hf.SettingsFrame(0)
            ack.flags.add("ACK")
            self.send(ack)
        return f

    def until(self, pred, timeout=5.0):
        """Frames until one matches pred (returned), or None at the close."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.frame(max(0.01, deadline - time.monotonic()))
            if f is None or pred(f):
                return f

    def goaway(self, timeout=5.0):
        """The GOAWAY the server sends (then it closes), or None if it only
        closed."""
        return self.until(lambda f: isinstance(f, hf.GoAwayFrame), timeout)

    def _track(self, f):
        if not f.stream_id or not isinstance(
                f, (hf.HeadersFrame, hf.DataFrame, hf.RstStreamFrame)):
            return
        st = self.streams.setdefault(f.stream_id, {
            "fields": {}, "body": b"", "done": False, "rst": None})
        if isinstance(f, hf.RstStreamFrame):
            st["rst"], st["done"] = f.error_code, True
            return
        if isinstance(f, hf.HeadersFrame):
            st["fields"].update(f.fields)
        else:
            st["body"] += f.data
            n = f.flow_controlled_length
            if self.auto_window and n:
                self.send(hf.WindowUpdateFrame(0, n),
                          hf.WindowUpdateFrame(f.stream_id, n))
        if "END_STREAM" in f.flags:
            st["done"] = True

    def response(self, sid, timeout=10.0):
        """(status, fields, body) of stream sid, or ("rst", code) as status
        when the server reset it."""
        deadline = time.monotonic() + timeout
        while not self.streams.get(sid, {}).get("done"):
            f = self.frame(max(0.01, deadline - time.monotonic()))
            if f is None:
                raise AssertionError("closed before stream %d ended" % sid)
            if isinstance(f, hf.GoAwayFrame):
                raise AssertionError("GOAWAY %d" % f.error_code)
        st = self.streams[sid]
        if st["rst"] is not None:
            return ("rst", st["rst"]), st["fields"], st["body"]
        return int(st["fields"].get(":status", 0)), st["fields"], st["body"]

    def close(self):
        self.sock.close()


class Http2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(cls.tmp(), "site")
        os.makedirs(cls.root)
        for name, text in SITE.items():
            with open(os.path.join(cls.root, name), "w") as f:
                f.write(text)
        cls.srv = cls.start()

    @classmethod
    def tmp(cls):
        if not hasattr(cls, "_tmp"):
            import tempfile
            cls._tmp = tempfile.mkdtemp(prefix="mf-h2-")
        return cls._tmp

    @classmethod
    def start(cls, extra="", name="moonflow.lua"):
        port = free_port()
        path = os.path.join(cls.tmp(), name)
        with open(path, "w") as f:
            f.write(CONFIG % {"port": port, "root": cls.root, "extra": extra})
        return Server([MOONFLOW, "serve", "--config", path], port)

    @classmethod
    def tearDownClass(cls):
        code, _, err = cls.srv.stop(sig=signal.SIGTERM)
        shutil.rmtree(cls.tmp(), ignore_errors=True)
        assert code == 0, err.decode(errors="replace")[-3000:]

    def conn(self, **kw):
        c = Conn(self.srv.port, **kw)
        self.addCleanup(c.close)
        return c

    def assert_connection_error(self, c, code):
        g = c.goaway()
        self.assertIsNotNone(g, "closed without GOAWAY")
        self.assertEqual(g.error_code, code)
        self.assertIsNone(c.frame(), "still open after GOAWAY %d" % code)

    def assert_stream_error(self, c, sid, code):
        f = c.until(lambda f: isinstance(f, (hf.RstStreamFrame,
                                             hf.GoAwayFrame)))
        self.assertIsInstance(f, hf.RstStreamFrame)
        self.assertEqual((f.stream_id, f.error_code), (sid, code))

    def metrics(self):
        r = request(self.srv.port,
                    b"GET /_metrics HTTP/1.1\r\nHost: h\r\n\r\n")
        out = {}
        for m in re.finditer(rb'moonflow_http2_events_total\{event="(\w+)"\}'
                             rb' (\d+)', r.body):
            out[m.group(1).decode()] = int(m.group(2))
        return out

    def wait_metric(self, event, at_least, timeout=3.0):
        deadline = time.monotonic() + timeout
        while True:
            n = self.metrics().get(event, 0)
            if n >= at_least or time.monotonic() > deadline:
                return n
            time.sleep(0.1)


class Basics(Http2Test):
    def test_server_preface_is_settings_with_the_configured_values(self):
        # §3.4: the server's preface is a SETTINGS frame, first.
        c = self.conn()
        f = c.frame()
        self.assertIsInstance(f, hf.SettingsFrame)
        self.assertNotIn("ACK", f.flags)
        self.assertEqual(f.settings.get(MAX_CONCURRENT_STREAMS), 100)
        self.assertEqual(f.settings.get(MAX_HEADER_LIST_SIZE), 16384)

    def test_settings_are_acknowledged(self):
        # §6.5.3: a SETTINGS frame is answered with SETTINGS ACK.
        c = self.conn(settings={INITIAL_WINDOW_SIZE: 1 << 20})
        f = c.until(lambda f: isinstance(f, hf.SettingsFrame) and
                    "ACK" in f.flags)
        self.assertIsNotNone(f)
        self.assertEqual(f.body_len, 0)

    def test_a_request_reaches_the_same_handler_with_version_2(self):
        c = self.conn()
        c.request(1)
        status, fields, body = c.response(1)
        self.assertEqual(status, 200)
        self.assertEqual(body, b"2.0 GET /index h2.test 0")
        self.assertEqual(fields["content-length"], str(len(body)))
        self.assertIn("date", fields)

    def test_a_body_and_many_streams_on_one_connection(self):
        c = self.conn()
        for sid in range(1, 40, 2):
            c.request(sid, method="POST", body=b"x" * sid)
        for sid in range(1, 40, 2):
            status, _, body = c.response(sid)
            self.assertEqual((status, body),
                             (200, b"2.0 POST /index h2.test %d" % sid))

    def test_a_body_bigger_than_windows_and_frames(self):
        c = self.conn(settings={INITIAL_WINDOW_SIZE: 65535})
        c.request(1, path="/big")
        status, _, body = c.response(1, timeout=20)
        self.assertEqual((status, len(body)), (200, 16 * 65536))
        self.assertEqual(body[:16], b"0123456789abcdef")

    def test_head_has_a_length_and_no_body(self):
        c = self.conn()
        c.request(1, path="/big", method="HEAD")
        status, fields, body = c.response(1)
        self.assertEqual((status, fields["content-length"], body),
                         (200, str(16 * 65536), b""))

    def test_an_answer_with_many_fields_keeps_them_all(self):
        c = self.conn()
        c.request(1, path="/many")
        status, fields, body = c.response(1)
        self.assertEqual((status, body), (200, b"many"))
        for i in (1, 77, 150):
            self.assertEqual(fields.get("x-h%d" % i), str(i))

    def test_no_connection_specific_field_in_an_answer(self):
        # §8.2.2: Connection, Keep-Alive, Transfer-Encoding ... must not be
        # sent in HTTP/2.
        c = self.conn()
        c.request(1)
        _, fields, _ = c.response(1)
        for name in ("connection", "keep-alive", "transfer-encoding"):
            self.assertNotIn(name, fields)

    def test_a_body_over_max_body_is_answered_413(self):
        # Its Content-Length says so: answered before its body comes.
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"), (":path", "/index"),
                                   ("content-length", "40000")],
                               end_stream=False),
               hf.DataFrame(1, b"x" * 1000))
        status, _, body = c.response(1)
        self.assertEqual((status, body), (413, b"413 Content Too Large\n"))
        c.request(3)  # the connection goes on
        self.assertEqual(c.response(3)[0], 200)

    def test_a_header_list_over_the_limit_is_answered_431(self):
        c = self.conn()
        c.request(1, extra=[("x-big-%d" % i, "v" * 4000)
                            for i in range(5)])
        self.assertEqual(c.response(1)[0], 431)
        c.request(3)
        self.assertEqual(c.response(3)[0], 200)

    def test_the_raw_connection_is_refused_and_the_handler_answers(self):
        c = self.conn()
        c.request(1, path="/raw")
        status, _, body = c.response(1)
        self.assertEqual((status, body),
                         (200, b"nil no raw connection over HTTP/2"))

    def test_raw_header_shows_the_head_as_http1_would_carry_it(self):
        c = self.conn()
        c.request(1, path="/rawhead?a=1", extra=[("x-one", "1")])
        status, _, body = c.response(1)
        self.assertEqual(status, 200)
        self.assertTrue(body.startswith(b"GET /rawhead?a=1 HTTP/2.0\r\n"),
                        body)
        self.assertIn(b"\r\nx-one: 1\r\n", body)
        self.assertIn(b"\r\nhost: h2.test\r\n", body)
        self.assertTrue(body.endswith(b"\r\n\r\n"))

    def test_a_body_over_max_body_without_length_is_answered_413(self):
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"), (":path", "/index")],
                               end_stream=False),
               hf.DataFrame(1, b"x" * 16000))  # the window's
        f = c.until(lambda f: isinstance(f, hf.WindowUpdateFrame) and
                    f.stream_id == 1)
        self.assertIsNotNone(f)  # a body read whole gives its window back
        c.send(hf.DataFrame(1, b"x" * 16000), hf.DataFrame(1, b"x" * 1000))
        self.assertEqual(c.response(1)[0], 413)

    def send_window(self, c, sid, data, end=True):
        """DATA within the stream's window, waiting for WINDOW_UPDATEs."""
        window, at = 16384, 0
        while at < len(data):
            while window == 0:
                f = c.until(lambda f: isinstance(f, hf.WindowUpdateFrame)
                            and f.stream_id == sid, timeout=5)
                self.assertIsNotNone(f)
                window += f.window_increment
            n = min(window, len(data) - at, 16384)
            d = hf.DataFrame(sid, data[at:at + n])
            at += n
            window -= n
            if end and at == len(data):
                d.flags.add("END_STREAM")
            c.send(d)

    def test_a_streamed_body_is_read_as_it_comes(self):
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"), (":path", "/up")],
                               end_stream=False))
        self.send_window(c, 1, b"u" * 30000)
        self.assertEqual(c.response(1)[:3:2], (200, b"30000"))

    def test_a_streamed_body_window_opens_only_as_the_handler_reads(self):
        # The handler waits 600 ms before its first read: the client's
        # first window (16384) is all it may send until then.
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"),
                                   (":path", "/up?wait=600")],
                               end_stream=False),
               hf.DataFrame(1, b"w" * 16384))
        t0 = time.monotonic()
        f = c.until(lambda f: isinstance(f, hf.WindowUpdateFrame) and
                    f.stream_id == 1, timeout=5)
        self.assertIsNotNone(f)
        self.assertGreater(time.monotonic() - t0, 0.4)
        d = hf.DataFrame(1, b"w" * 100)
        d.flags.add("END_STREAM")
        c.send(d)
        self.assertEqual(c.response(1)[:3:2], (200, b"16484"))

    def test_unread_streamed_bodies_give_the_connection_window_back(self):
        # Eight streams each send a window's worth (16384) to a handler
        # that answers without reading: 131072 bytes, twice the
        # connection's window (65535). What nobody read must still count
        # as taken for the connection, or the ninth upload would stall.
        c = self.conn()
        for i in range(8):
            sid = 1 + 2 * i
            c.send(c.headers_frame(sid, [
                (":method", "POST"), (":scheme", "http"), (":authority", "h"),
                (":path", "/noread")], end_stream=False))
            status, _, body = c.response(sid)
            self.assertEqual((status, body), (200, b"no"))
            c.send(hf.DataFrame(sid, b"n" * 16384))
            time.sleep(0.02)
        c.send(c.headers_frame(17, [(":method", "POST"), (":scheme", "http"),
                                    (":authority", "h"), (":path", "/up")],
                               end_stream=False))
        self.send_window(c, 17, b"u" * 30000)
        self.assertEqual(c.response(17)[:3:2], (200, b"30000"))

    def test_a_streamed_body_over_max_body_is_answered_413(self):
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"), (":path", "/up")],
                               end_stream=False))
        self.send_window(c, 1, b"u" * 40000, end=False)
        status, _, body = c.response(1)
        self.assertEqual((status, body), (413, b"413 Content Too Large\n"))

    def test_http1_still_answers_on_the_same_port(self):
        r = request(self.srv.port, b"GET /index HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual((r.status, r.body), (200, b"1.1 GET /index h 0"))

    def test_a_preface_sent_byte_by_byte(self):
        c = self.conn(preface=False)
        for b in PREFACE:
            c.raw(bytes([b]))
            time.sleep(0.002)
        c.send(hf.SettingsFrame(0))
        c.request(1)
        self.assertEqual(c.response(1)[0], 200)


class Frames(Http2Test):
    """§4.2 frame sizes, §6 frame definitions."""

    def test_data_over_max_frame_size_is_frame_size_error(self):
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "POST"), (":scheme", "http"),
                                   (":authority", "h"), (":path", "/index")],
                               end_stream=False))
        c.raw(raw_frame(0, 1, 1, b"x" * 16385))
        self.assert_connection_error(c, FRAME_SIZE_ERROR)

    def test_settings_with_a_length_not_a_multiple_of_6(self):
        c = self.conn()
        c.raw(raw_frame(4, 0, 0, b"\x00\x03\x00\x00\x00"))
        self.assert_connection_error(c, FRAME_SIZE_ERROR)

    def test_settings_ack_with_a_payload(self):
        c = self.conn()
        c.raw(raw_frame(4, 1, 0, b"\x00\x03\x00\x00\x00\x01"))
        self.assert_connection_error(c, FRAME_SIZE_ERROR)

    def test_settings_on_a_stream(self):
        c = self.conn()
        c.raw(raw_frame(4, 0, 1, b""))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_enable_push_other_than_0_or_1(self):
        c = self.conn()
        c.raw(raw_frame(4, 0, 0, struct.pack(">HI", ENABLE_PUSH, 2)))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_initial_window_size_over_2_31_minus_1(self):
        c = self.conn()
        c.raw(raw_frame(4, 0, 0, struct.pack(">HI", INITIAL_WINDOW_SIZE,
                                             1 << 31)))
        self.assert_connection_error(c, FLOW_CONTROL_ERROR)

    def test_max_frame_size_under_16384(self):
        c = self.conn()
        c.raw(raw_frame(4, 0, 0, struct.pack(">HI", MAX_FRAME_SIZE, 16383)))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_ping_is_answered_with_the_same_payload(self):
        c = self.conn()
        c.send(hf.PingFrame(0, b"12345678"))
        f = c.until(lambda f: isinstance(f, hf.PingFrame))
        self.assertIn("ACK", f.flags)
        self.assertEqual(f.opaque_data, b"12345678")

    def test_ping_of_another_length(self):
        c = self.conn()
        c.raw(raw_frame(6, 0, 0, b"1234567"))
        self.assert_connection_error(c, FRAME_SIZE_ERROR)

    def test_window_update_of_zero_on_the_connection(self):
        c = self.conn()
        c.raw(raw_frame(8, 0, 0, struct.pack(">I", 0)))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_unknown_frame_types_are_ignored(self):
        # §4.1: implementations must ignore frames of unknown types.
        c = self.conn()
        c.raw(raw_frame(0xFA, 0, 0, b"whatever"))
        c.request(1)
        self.assertEqual(c.response(1)[0], 200)


class StreamStates(Http2Test):
    """§5.1 stream states, §5.1.1 identifiers."""

    def test_data_on_an_idle_stream(self):
        c = self.conn()
        c.raw(raw_frame(0, 0, 1, b"x"))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_an_even_stream_id_from_the_client(self):
        c = self.conn()
        c.request(2)
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_a_stream_id_lower_than_one_used_before_is_not_served(self):
        # §5.1.1 asks for a connection error PROTOCOL_ERROR; nghttp2 keeps
        # no record of closed streams and ignores such a HEADERS instead
        # (it cannot tell it from trailers sent after a reset it made).
        # What must hold either way: the request is not served, and the
        # connection is not confused.
        c = self.conn()
        c.request(5)
        self.assertEqual(c.response(5)[0], 200)
        c.request(3)
        c.request(7)
        f = c.until(lambda f: f.stream_id in (3, 7) and
                    isinstance(f, (hf.HeadersFrame, hf.RstStreamFrame)) or
                    isinstance(f, hf.GoAwayFrame))
        if isinstance(f, hf.GoAwayFrame):
            self.assertEqual(f.error_code, PROTOCOL_ERROR)
        else:
            self.assertEqual(f.stream_id, 7)

    def test_headers_on_a_half_closed_remote_stream(self):
        # The client ended stream 1; more HEADERS on it (not trailers, the
        # stream is half-closed): STREAM_CLOSED.
        c = self.conn()
        c.request(1, path="/sleep")
        c.send(c.headers_frame(1, [("x-more", "1")]))
        f = c.until(lambda f: isinstance(f, (hf.RstStreamFrame,
                                             hf.GoAwayFrame)))
        self.assertIsNotNone(f)
        self.assertEqual(f.error_code, STREAM_CLOSED)

    def test_data_on_a_closed_stream(self):
        # §5.1 "closed": an endpoint MAY treat it as a connection error
        # STREAM_CLOSED, or ignore it; it must not be taken as a request.
        c = self.conn()
        c.request(1)
        c.response(1)
        c.raw(raw_frame(0, 1, 1, b"late"))
        c.request(3)
        f = c.until(lambda f: isinstance(f, (hf.GoAwayFrame,
                                             hf.RstStreamFrame)) or
                    f.stream_id == 3)
        if isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame)):
            self.assertEqual(f.error_code, STREAM_CLOSED)
        else:
            self.assertIsInstance(f, hf.HeadersFrame)
            self.assertIn((":status", "200"), f.fields)

    def test_rst_stream_on_an_idle_stream(self):
        c = self.conn()
        c.send(hf.RstStreamFrame(7, CANCEL))
        self.assert_connection_error(c, PROTOCOL_ERROR)

    def test_a_reset_request_leaves_the_connection_usable(self):
        c = self.conn()
        c.request(1, path="/sleep")
        c.send(hf.RstStreamFrame(1, CANCEL))
        c.request(3)
        status, _, body = c.response(3)
        self.assertEqual(status, 200)

    def test_a_connection_closed_under_waiting_handlers(self):
        # Handlers wait (mf.sleep) while their client goes: they finish
        # later on a connection that is gone, and the server goes on.
        for _ in range(3):
            c = Conn(self.srv.port)
            for sid in (1, 3, 5):
                c.request(sid, path="/sleep")
            time.sleep(0.05)
            c.close()
        time.sleep(0.6)  # the sleeps end after their connections
        c = self.conn()
        c.request(1)
        self.assertEqual(c.response(1)[0], 200)

    def test_streams_over_max_concurrent_streams_are_refused(self):
        # §5.1.2: a stream past the limit is a stream error PROTOCOL_ERROR
        # or REFUSED_STREAM; the others are served. (The 101 streams go out
        # with the preface, before the client has read the limit.)
        c = self.conn()
        for sid in range(1, 2 * 101, 2):
            c.request(sid, path="/sleep")
        f = c.until(lambda f: isinstance(f, (hf.RstStreamFrame,
                                             hf.GoAwayFrame)))
        self.assertIsInstance(f, hf.RstStreamFrame)
        self.assertEqual(f.stream_id, 201)
        self.assertIn(f.error_code, (REFUSED_STREAM, PROTOCOL_ERROR))
        self.assertEqual(c.response(199)[0], 200)

    def test_uppercase_field_name_is_malformed(self):
        # §8.2.1: a field name with uppercase characters is malformed; §8.1.1:
        # a stream error PROTOCOL_ERROR.
        c = self.conn()
        c.request(1, extra=[("X-Upper", "1")])
        self.assert_stream_error(c, 1, PROTOCOL_ERROR)

    def test_missing_path_is_malformed(self):
        c = self.conn()
        c.send(c.headers_frame(1, [(":method", "GET"), (":scheme", "http"),
                                   (":authority", "h")]))
        self.assert_stream_error(c, 1, PROTOCOL_ERROR)

    def test_content_length_not_matching_the_data(self):
        # §8.1.1: a content-length that disagrees with the DATA is malformed.
        c = self.conn()
        c.request(1, method="POST", body=b"abc",
                  extra=[("content-length", "10")])
        self.assert_stream_error(c, 1, PROTOCOL_ERROR)


class FlowControl(Http2Test):
    """§5.2, §6.9."""

    def test_connection_window_over_2_31_minus_1(self):
        c = self.conn()
        c.send(hf.WindowUpdateFrame(0, 0x7FFFFFFF))
        self.assert_connection_error(c, FLOW_CONTROL_ERROR)

    def test_stream_window_over_2_31_minus_1(self):
        c = self.conn()
        c.request(1, path="/sleep")
        c.send(hf.WindowUpdateFrame(1, 0x7FFFFFFF))
        self.assert_stream_error(c, 1, FLOW_CONTROL_ERROR)

    def test_a_zero_window_holds_data_until_an_update(self):
        c = self.conn(settings={INITIAL_WINDOW_SIZE: 0})
        c.auto_window = False
        c.request(1)
        f = c.until(lambda f: isinstance(f, (hf.HeadersFrame, hf.DataFrame)))
        self.assertIsInstance(f, hf.HeadersFrame)  # HEADERS are not held
        with self.assertRaises(TimeoutError):
            c.until(lambda f: isinstance(f, hf.DataFrame), timeout=0.5)
        c.send(hf.WindowUpdateFrame(1, 100))
        f = c.until(lambda f: isinstance(f, hf.DataFrame))
        self.assertEqual(f.data, b"2.0 GET /index h2.test 0")

    def test_a_slow_reader_makes_a_streaming_handler_wait(self):
        # The client opens no window: the handler's writes pile up to the
        # high water and it waits, instead of buffering its 12.5 MiB.
        rss0 = rss_kib(self.srv.proc.pid)
        c = self.conn()
        c.auto_window = False
        c.request(1, path="/stream")
        time.sleep(1.0)
        written = int(request(self.srv.port, b"GET /progress HTTP/1.1\r\n"
                              b"Host: h\r\n\r\n").body)
        self.assertLess(written, 10)
        self.assertLess(rss_kib(self.srv.proc.pid) - rss0, 8 * 1024)
        c.auto_window = True
        c.send(hf.WindowUpdateFrame(0, 64 << 20),
               hf.WindowUpdateFrame(1, 64 << 20))
        status, _, body = c.response(1, timeout=30)
        self.assertEqual((status, len(body)), (200, 200 * 65536))


class Hpack(Http2Test):
    def test_an_index_out_of_the_table_is_compression_error(self):
        # §4.3: a header block that cannot be decoded is a connection error
        # COMPRESSION_ERROR. Index 70 names no entry of an empty table.
        c = self.conn()
        c.raw(raw_frame(1, 0x5, 1, bytes([0x80 | 70])))
        self.assert_connection_error(c, COMPRESSION_ERROR)

    def test_a_table_size_update_over_the_limit(self):
        c = self.conn()
        # Dynamic table size update to 1 MiB (5-bit prefix integer), more
        # than SETTINGS_HEADER_TABLE_SIZE (4096).
        block = bytes([0x3F, 0xE1, 0xFF, 0x3F])
        c.raw(raw_frame(1, 0x5, 1, block))
        self.assert_connection_error(c, COMPRESSION_ERROR)


class Goaway(Http2Test):
    def test_graceful_stop_sends_goaway_and_finishes_streams(self):
        srv = self.start(name="stop.lua")
        try:
            c = Conn(srv.port)
            self.addCleanup(c.close)
            c.request(1, path="/sleep")
            time.sleep(0.1)
            srv.proc.send_signal(signal.SIGTERM)
            g = c.goaway()
            self.assertIsNotNone(g)
            self.assertEqual((g.error_code, g.last_stream_id), (NO_ERROR, 1))
            # the stream in flight still gets its answer
            status, _, body = c.response(1)
            self.assertEqual((status, body), (200, b"slept"))
            self.assertIsNone(c.frame())
            srv.proc.wait(timeout=10)
            self.assertEqual(srv.proc.returncode, 0)
        finally:
            srv.stop()

    def test_a_takeover_says_goaway_at_once_then_at_the_drain_end(self):
        # --takeover: the old server drains. Its HTTP/2 clients hear a
        # GOAWAY naming no stream at once (RFC 9113 §6.8: open new streams
        # elsewhere), streams under way finish, and the last GOAWAY comes
        # at the end of timeouts.drain; the new server serves the next
        # connection.
        port = free_port()
        conf = os.path.join(self.tmp(), "takeover.lua")
        with open(conf, "w") as f:
            f.write('return { root = %r, timeouts = { drain = 1500 } }'
                    % self.root)
        argv = [MOONFLOW, "serve", "--config", conf, "--listen",
                "127.0.0.1:%d" % port, "--workers", "1"]
        old = Server(argv, port)
        new = None
        try:
            c = Conn(port)
            self.addCleanup(c.close)
            c.request(1)
            self.assertEqual(c.response(1)[0], 200)
            c.request(3, path="/sleep")
            new = Server(argv + ["--takeover"], port)
            g = c.goaway(timeout=5)
            self.assertIsNotNone(g)
            self.assertEqual((g.error_code, g.last_stream_id),
                             (NO_ERROR, 0x7FFFFFFF))
            self.assertEqual(c.response(3)[:3:2], (200, b"slept"))
            t0 = time.monotonic()
            g = c.goaway(timeout=5)
            self.assertIsNotNone(g)
            self.assertEqual((g.error_code, g.last_stream_id), (NO_ERROR, 3))
            self.assertGreater(time.monotonic() - t0, 0.5)
            self.assertIsNone(c.frame())
            self.assertEqual(old.proc.wait(timeout=10), 0)
            c2 = self.conn_to(port)
            c2.request(1)
            self.assertEqual(c2.response(1)[0], 200)
        finally:
            old.stop()
            if new:
                new.stop(sig=signal.SIGTERM)

    def conn_to(self, port):
        c = Conn(port)
        self.addCleanup(c.close)
        return c

    def test_a_client_goaway_ends_the_connection(self):
        c = self.conn()
        c.request(1)
        c.response(1)
        c.send(hf.GoAwayFrame(0, last_stream_id=0, error_code=NO_ERROR))
        self.assertIsNone(c.until(lambda f: False, timeout=5))


class Floods(Http2Test):
    """The attacks of 2019 (CVE-2019-9512/9515: PING and SETTINGS floods),
    2023 (CVE-2023-44487: rapid reset) and 2024 (CVE-2024-27316 and kin:
    CONTINUATION floods), and HPACK bombs: each ends in GOAWAY or a close,
    in bounded time, CPU and memory, and is counted."""

    def bounded(self, run, seconds=10.0, cpu=2.0, rss_mib=64):
        if SANITIZED:
            cpu, rss_mib = cpu * 3, rss_mib + 512
        pid = self.srv.proc.pid
        cpu0, rss0, t0 = cpu_seconds(pid), rss_kib(pid), time.monotonic()
        out = run()
        self.assertLess(time.monotonic() - t0, seconds)
        self.assertLess(cpu_seconds(pid) - cpu0, cpu)
        grown = rss_kib(pid) - rss0
        if os.environ.get("MF_H2_VERBOSE"):
            print("%s: %.2f s CPU, RSS +%d KiB" % (
                self.id(), cpu_seconds(pid) - cpu0, grown), file=sys.stderr)
        self.assertLess(grown, rss_mib * 1024)
        return out

    def test_rapid_reset_ends_in_enhance_your_calm(self):
        before = self.metrics().get("calm_goaways", 0)

        def run():
            c = self.conn()
            batch = []
            for i in range(3000):
                sid = 1 + 2 * i
                batch.append(c.headers_frame(sid, [
                    (":method", "GET"), (":scheme", "http"),
                    (":authority", "h"), (":path", "/sleep")]))
                batch.append(hf.RstStreamFrame(sid, CANCEL))
                if len(batch) >= 200:
                    c.send(*batch)
                    batch = []
                    if c.closed:
                        break
            c.send(*batch)
            return c.goaway(timeout=10)
        g = self.bounded(run)
        self.assertIsNotNone(g)
        self.assertEqual(g.error_code, ENHANCE_YOUR_CALM)
        self.assertGreater(self.wait_metric("calm_goaways", before + 1),
                           before)
        self.assertGreater(self.metrics().get("resets_received", 0), 300)

    def test_continuation_flood_ends_the_connection(self):
        def run():
            c = self.conn()
            block = c.enc.encode([(":method", "GET"), (":scheme", "http"),
                                  (":authority", "h"), (":path", "/index")])
            c.raw(raw_frame(1, 0x1, 1, block))  # HEADERS, no END_HEADERS
            for _ in range(10000):
                c.raw(raw_frame(9, 0, 1, b"\x40\x01a\x01b"))  # CONTINUATION
                if c.closed:
                    break
            return c.goaway(timeout=10)
        g = self.bounded(run)
        if g is not None:
            self.assertNotEqual(g.error_code, NO_ERROR)

    def test_an_hpack_bomb_is_refused(self):
        # One 4,000-byte entry in the dynamic table, then referenced by one
        # byte each: a 6 KB block that decodes to 8 MB.
        before = self.metrics().get("headers_refused", 0)

        def run():
            c = self.conn()
            big = "b" * 4000
            first = c.enc.encode([(":method", "GET"), (":scheme", "http"),
                                  (":authority", "h"), (":path", "/index"),
                                  ("x-bomb", big)])
            ref = c.enc.encode([("x-bomb", big)])  # an index: 1-2 bytes
            c.raw(raw_frame(1, 0x5, 1, first + ref * 2000))
            return c.until(lambda f: isinstance(f, (hf.HeadersFrame,
                                                    hf.RstStreamFrame,
                                                    hf.GoAwayFrame)))
        f = self.bounded(run)
        self.assertFalse(isinstance(f, hf.HeadersFrame) and
                         (b":status", b"200") in hpack.Decoder().decode(
                             f.data, raw=True), "the bomb was served")
        self.assertGreater(self.wait_metric("headers_refused", before + 1),
                           before)

    def test_ping_flood_without_reading_is_cut(self):
        before = self.metrics().get("floods", 0)

        def run():
            s = connect(self.srv.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c = Conn(self.srv.port, sock=s)
            self.addCleanup(c.close)
            ping = hf.PingFrame(0, b"floodme!").serialize()
            deadline = time.monotonic() + 8
            s.settimeout(0.5)
            while time.monotonic() < deadline:
                try:
                    s.sendall(ping * 1000)
                except (socket.timeout, OSError):
                    break
            return True
        self.bounded(run)
        self.assertGreater(self.wait_metric("floods", before + 1), before)

    def test_settings_flood_without_reading_is_cut(self):
        before = self.metrics().get("floods", 0)

        def run():
            s = connect(self.srv.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c = Conn(self.srv.port, sock=s)
            self.addCleanup(c.close)
            settings = hf.SettingsFrame(0, {INITIAL_WINDOW_SIZE: 65535})
            frame = settings.serialize()
            deadline = time.monotonic() + 8
            s.settimeout(0.5)
            while time.monotonic() < deadline:
                try:
                    s.sendall(frame * 1000)
                except (socket.timeout, OSError):
                    break
            return True
        self.bounded(run)
        self.assertGreater(self.wait_metric("floods", before + 1), before)


class Clients(Http2Test):
    def test_curl_with_prior_knowledge(self):
        out = subprocess.run(
            ["curl", "-sS", "--http2-prior-knowledge", "-w",
             " %{http_version}", "http://127.0.0.1:%d/index" % self.srv.port],
            capture_output=True, timeout=20)
        self.assertEqual(out.stdout, b"2.0 GET /index 127.0.0.1:%d 0 2" %
                         self.srv.port)

    def test_curl_http2_over_tls_by_alpn(self):
        cert, key = self_signed(self.tmp(), "localhost")
        srv = self.start(extra="tls = { cert = %r, key = %r }," % (cert, key),
                         name="tls.lua")
        try:
            base = "https://localhost:%d/index" % srv.port
            resolve = "localhost:%d:127.0.0.1" % srv.port
            h2 = subprocess.run(["curl", "-sS", "--http2", "--cacert", cert,
                                 "--resolve", resolve, "-w",
                                 " %{http_version}", base],
                                capture_output=True, timeout=20)
            self.assertEqual(h2.stdout, b"2.0 GET /index localhost:%d 0 2" %
                             srv.port, h2.stderr)
            h1 = subprocess.run(["curl", "-sS", "--http1.1", "--cacert",
                                 cert, "--resolve", resolve, "-w",
                                 " %{http_version}", base],
                                capture_output=True, timeout=20)
            self.assertEqual(h1.stdout, b"1.1 GET /index localhost:%d 0 1.1"
                             % srv.port, h1.stderr)
        finally:
            srv.stop(sig=signal.SIGTERM)

    def test_h2load_bounded_run_has_no_errors(self):
        out = subprocess.run(
            ["h2load", "-n", "20000", "-c", "8", "-m", "16", "-t", "1",
             "http://127.0.0.1:%d/index" % self.srv.port],
            capture_output=True, timeout=60, text=True)
        self.assertIn("20000 succeeded, 0 failed, 0 errored, 0 timeout",
                      out.stdout, out.stdout + out.stderr)
        self.assertIn("20000 2xx", out.stdout)

    def test_disabled_http2_leaves_the_preface_to_http1(self):
        srv = self.start(extra="http2 = { enabled = false },",
                         name="off.lua")
        try:
            s = connect(srv.port)
            s.sendall(PREFACE)
            r, _ = read_response(s)
            self.assertEqual(r.status, 505)
            s.close()
        finally:
            srv.stop(sig=signal.SIGTERM)


def upgrade_head(settings, method="GET", path="/index", more=b""):
    """An HTTP/1.1 request asking for h2c with the given HTTP2-Settings."""
    return (b"%s %s HTTP/1.1\r\nHost: h2.test\r\n"
            b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            b"HTTP2-Settings: %s\r\n%s\r\n"
            % (method.encode(), path.encode(), settings, more))


class H2cUpgrade(Http2Test):
    """Upgrade: h2c on a plain listener: 101, then HTTP/2 with the request
    that asked for it served as stream 1; anything not right about the
    request leaves it to HTTP/1.1, the Upgrade ignored."""

    def client(self):
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True))
        settings = conn.initiate_upgrade_connection()
        sock = connect(self.srv.port)
        self.addCleanup(sock.close)
        return conn, settings, sock

    def switch(self, sock, raw):
        """Sends raw, reads the 101's head; returns (head, bytes after)."""
        sock.sendall(raw)
        buf = b""
        deadline = time.monotonic() + 5
        while b"\r\n\r\n" not in buf and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    def events_until_end(self, conn, sock, sid, rest=b""):
        """Feeds the connection until stream sid ends: (status, body)."""
        status, body, data = None, b"", rest
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for ev in conn.receive_data(data):
                if getattr(ev, "stream_id", None) != sid:
                    continue
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers)[b":status"]
                elif isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    conn.acknowledge_received_data(
                        ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.StreamEnded):
                    return status, body
            sock.sendall(conn.data_to_send())
            data = sock.recv(65536)
            self.assertTrue(data, "closed before stream %d ended" % sid)
        self.fail("stream %d did not end in time" % sid)

    def test_curl_http2_upgrades_a_plain_request(self):
        out = subprocess.run(
            ["curl", "-sS", "--http2", "-w", " %{http_version}",
             "http://127.0.0.1:%d/index" % self.srv.port],
            capture_output=True, timeout=20)
        self.assertEqual(out.stdout, b"2.0 GET /index 127.0.0.1:%d 0 2" %
                         self.srv.port, out.stderr)

    def test_h2_client_upgrade_then_a_second_stream(self):
        conn, settings, sock = self.client()
        head, rest = self.switch(sock, upgrade_head(settings))
        lines = head.split(b"\r\n")
        self.assertEqual(lines[0], b"HTTP/1.1 101 Switching Protocols")
        self.assertIn(b"connection: upgrade", [l.lower() for l in lines])
        self.assertIn(b"upgrade: h2c", [l.lower() for l in lines])
        sock.sendall(conn.data_to_send())  # the preface, after the 101
        self.assertEqual(self.events_until_end(conn, sock, 1, rest),
                         (b"200", b"2.0 GET /index h2.test 0"))
        conn.send_headers(3, [(":method", "GET"), (":path", "/index?b"),
                              (":scheme", "http"), (":authority", "h2.test")],
                          end_stream=True)
        sock.sendall(conn.data_to_send())
        self.assertEqual(self.events_until_end(conn, sock, 3),
                         (b"200", b"2.0 GET /index h2.test 0"))

    def test_an_upgraded_head_request_has_no_body(self):
        conn, settings, sock = self.client()
        head, rest = self.switch(sock, upgrade_head(settings, method="HEAD"))
        self.assertTrue(head.startswith(b"HTTP/1.1 101 "), head)
        sock.sendall(conn.data_to_send())
        self.assertEqual(self.events_until_end(conn, sock, 1, rest),
                         (b"200", b""))

    def assert_served_by_http1(self, raw, body, port=None, wrap=None):
        s = connect(port or self.srv.port)
        if wrap:
            s = wrap(s)
        try:
            s.sendall(raw)
            r, _ = read_response(s)
            self.assertEqual((r.status, r.body), (200, body))
            # still HTTP/1.1 on the same connection
            s.sendall(b"GET /index HTTP/1.1\r\nHost: h\r\n\r\n")
            r, _ = read_response(s)
            self.assertEqual((r.status, r.body), (200, b"1.1 GET /index h 0"))
        finally:
            s.close()

    def test_invalid_http2_settings_is_answered_over_http1(self):
        # "AAAA" decodes to 3 bytes, not a whole setting; "!" is no base64url
        for bad in (b"AAAA", b"AAMAAABk!", b"AAIAAAAC"):  # ENABLE_PUSH=2
            with self.subTest(settings=bad):
                self.assert_served_by_http1(upgrade_head(bad),
                                            b"1.1 GET /index h2.test 0")

    def test_a_duplicated_http2_settings_is_answered_over_http1(self):
        self.assert_served_by_http1(
            upgrade_head(b"AAMAAABk", more=b"HTTP2-Settings: AAMAAABk\r\n"),
            b"1.1 GET /index h2.test 0")

    def test_a_missing_http2_settings_is_answered_over_http1(self):
        self.assert_served_by_http1(
            b"GET /index HTTP/1.1\r\nHost: h2.test\r\n"
            b"Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            b"1.1 GET /index h2.test 0")

    def test_an_absolute_form_target_is_answered_over_http1(self):
        # only an origin-form target becomes stream 1's :path as it is
        s = connect(self.srv.port)
        self.addCleanup(s.close)
        s.sendall(upgrade_head(b"AAMAAABk", path="http://h2.test/index"))
        r, _ = read_response(s)
        self.assertNotEqual(r.status, 101)
        s.sendall(b"GET /index HTTP/1.1\r\nHost: h\r\n\r\n")
        r, _ = read_response(s)
        self.assertEqual((r.status, r.body), (200, b"1.1 GET /index h 0"))

    def test_a_post_with_a_body_is_answered_over_http1(self):
        self.assert_served_by_http1(
            upgrade_head(b"AAMAAABk", method="POST",
                         more=b"Content-Length: 5\r\n") + b"hello",
            b"1.1 POST /index h2.test 5")

    def test_disabled_http2_ignores_the_upgrade(self):
        srv = self.start(extra="http2 = { enabled = false },",
                         name="off-h2c.lua")
        try:
            self.assert_served_by_http1(upgrade_head(b"AAMAAABk"),
                                        b"1.1 GET /index h2.test 0",
                                        port=srv.port)
        finally:
            srv.stop(sig=signal.SIGTERM)

    def test_tls_ignores_the_upgrade(self):
        import ssl
        cert, key = self_signed(self.tmp(), "localhost")
        srv = self.start(extra="tls = { cert = %r, key = %r }," % (cert, key),
                         name="tls-h2c.lua")
        ctx = ssl.create_default_context(cafile=cert)
        ctx.set_alpn_protocols(["http/1.1"])
        try:
            self.assert_served_by_http1(
                upgrade_head(b"AAMAAABk"), b"1.1 GET /index h2.test 0",
                port=srv.port,
                wrap=lambda s: ctx.wrap_socket(s, server_hostname="localhost"))
        finally:
            srv.stop(sig=signal.SIGTERM)

    def test_many_upgraded_connections_in_a_row(self):
        # bounded: 200 connections, 30 s; each upgrades, is answered on
        # stream 1 and closed; each is counted as an HTTP/2 connection
        deadline = time.monotonic() + 30
        for i in range(200):
            self.assertLess(time.monotonic(), deadline, "only %d in time" % i)
            conn, settings, sock = self.client()
            _, rest = self.switch(sock, upgrade_head(settings))
            sock.sendall(conn.data_to_send())
            self.assertEqual(self.events_until_end(conn, sock, 1, rest),
                             (b"200", b"2.0 GET /index h2.test 0"))
            sock.close()
        m = self.wait_metric("connections", 200)
        self.assertGreaterEqual(m, 200)


class Config(Http2Test):
    def check_refused(self, http2, word):
        path = os.path.join(self.tmp(), "bad.lua")
        with open(path, "w") as f:
            f.write('return { listen = "127.0.0.1:%d", root = %r, '
                    'http2 = %s }' % (free_port(), self.root, http2))
        out = subprocess.run([MOONFLOW, "serve", "--config", path],
                             capture_output=True, timeout=20)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(word, out.stderr)

    def test_unknown_key_is_refused_by_name(self):
        self.check_refused("{ max_streams = 10 }", b"http2.max_streams")

    def test_a_frame_size_out_of_range_is_refused(self):
        self.check_refused("{ max_frame_size = 100 }", b"http2.max_frame_size")


if __name__ == "__main__":
    unittest.main()
