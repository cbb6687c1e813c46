"""req:websocket under `moonflow serve`: a conformance runner written from
RFC 6455 over raw sockets (the opening handshake and its refusals, every
framing rule of section 5 and the close handshake of section 7, each
answered with the close code the RFC asks for and the connection closed),
python3-websockets as a plain client (echo, fragments, ping/pong,
subprotocols, close codes), the keepalive pings, and many idle sockets
with moonflow's memory per socket measured; and examples/websocket_fanout
with a redis-server of its own.

MF_WS_SOCKETS (default 10,000; 2,000 under the ASan build; fewer when the
fd limit is lower) sets how many sockets the idle test opens. $MF_MOONFLOW is the binary."""
import asyncio
import os
import resource
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import unittest
import zlib

from harness import Redis, Server, connect, free_port, rss_kib

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

SITE = {
    # Echoes text and binary messages until the close; max_payload 1000.
    "echo.lua": '''return function(req, resp)
    local ws = req:websocket { protocols = { "chat", "echo" },
                               max_payload = 1000 }
    if not ws then return end
    while true do
        local typ, data = ws:recv()
        if typ == "text" then ws:send_text(data)
        elseif typ == "binary" then ws:send_binary(data)
        elseif typ ~= "ping" and typ ~= "pong" then break end
    end
end
''',
    # The same with room for big messages.
    "big.lua": '''return function(req, resp)
    local ws = req:websocket { max_payload = 1048576 }
    while true do
        local typ, data = ws:recv()
        if typ == "text" then ws:send_text(data)
        elseif typ == "binary" then ws:send_binary(data)
        elseif typ ~= "ping" and typ ~= "pong" then break end
    end
end
''',
    # Echoes with permessage-deflate when the client offers it.
    "deflate.lua": '''return function(req, resp)
    local ws = req:websocket { compress = true, max_payload = 100000 }
    while true do
        local typ, data = ws:recv()
        if typ == "text" then ws:send_text(data)
        elseif typ == "binary" then ws:send_binary(data)
        elseif typ ~= "ping" and typ ~= "pong" then break end
    end
end
''',
    # Says what recv returned, as text: "type:data" (close: code, reason).
    "types.lua": '''return function(req, resp)
    local ws = req:websocket()
    while true do
        local typ, data, reason = ws:recv()
        if not typ then return end
        if typ == "close" then return end
        ws:send_text(typ .. ":" .. data)
    end
end
''',
    # Keepalive pings every 0.2 s; a silent peer is closed.
    "keepalive.lua": '''return function(req, resp)
    local ws = req:websocket { ping_interval = 0.2 }
    local typ, err = ws:recv()
    while typ do typ, err = ws:recv() end
end
''',
    # The server closes first, with a code and a reason, then waits for
    # the client's close.
    "bye.lua": '''return function(req, resp)
    local ws = req:websocket()
    assert(ws:close(4000, "server says bye"))
    local typ, code, reason = ws:recv()
    assert(typ == "close", typ)
    local again, err = ws:send_text("late")
    assert(again == nil and err == "closed", err)
end
''',
    # recv with a timeout: nil, "timeout", and the socket still works.
    "timeout.lua": '''return function(req, resp)
    local ws = req:websocket { timeout = 100 }
    local typ, err = ws:recv()
    ws:send_text(tostring(typ) .. " " .. tostring(err))
    typ, err = ws:recv()
    ws:send_text(tostring(typ) .. " " .. tostring(err))
end
''',
    # A thread waits in recv after the handler returned: it wakes with
    # "closed" (and says so on the error log).
    "thread.lua": '''local mf = require "moonflow"
return function(req, resp)
    local ws = req:websocket()
    mf.spawn(function()
        local typ, err = ws:recv()
        mf.log("warn", "thread recv: ", tostring(typ), " ", tostring(err))
    end)
    mf.sleep(50) -- the thread parks first
end
''',
    # A bad option raises, naming it.
    "badopt.lua": '''return function(req, resp)
    local ok, err = pcall(req.websocket, req, { compress = "yes" })
    resp:send(tostring(ok) .. " " .. tostring(err))
end
''',
}


def handshake(path="/echo", extra=b""):
    return (b"GET " + path.encode() + b" HTTP/1.1\r\nHost: h\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + KEY +
            b"\r\n" + extra + b"\r\n")


MASK = b"\x37\xfa\x21\x3d"


def frame(op, payload=b"", fin=True, rsv=0, mask=True, length=None):
    """A client frame; length forces the 16/64-bit form when set."""
    if isinstance(payload, str):
        payload = payload.encode()
    first = (0x80 if fin else 0) | (rsv << 4) | op
    n = len(payload)
    mbit = 0x80 if mask else 0
    if length == 64 or (length is None and n > 0xffff):
        head = struct.pack("!BBQ", first, mbit | 127, n)
    elif length == 16 or (length is None and n > 125):
        head = struct.pack("!BBH", first, mbit | 126, n)
    else:
        head = struct.pack("!BB", first, mbit | n)
    if not mask:
        return head + payload
    body = bytes(b ^ MASK[i & 3] for i, b in enumerate(payload))
    return head + MASK + body


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


def compress(data):
    """A permessage-deflate payload: raw deflate, the sync flush's tail
    stripped (RFC 7692 §7.2.1)."""
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


def decompress(data):
    return zlib.decompressobj(-15).decompress(data + b"\x00\x00\xff\xff")


DEFLATE = b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"


class Peer:
    """A raw client after the handshake: reads server frames."""

    def __init__(self, port, path="/echo", timeout=5.0, extra=b""):
        self.sock = connect(port, timeout)
        self.sock.sendall(handshake(path, extra))
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise AssertionError("closed during the handshake")
            self.buf += data
        self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)

    def need(self, n):
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("closed with %r buffered" % self.buf)
            self.buf += data

    def read_frame(self):
        """(fin, opcode, payload) of the next server frame; servers never
        mask (the test fails if one is)."""
        self.need(2)
        b0, b1 = self.buf[0], self.buf[1]
        assert not b1 & 0x80, "a server frame was masked"
        n, at = b1 & 0x7f, 2
        if n == 126:
            self.need(4)
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self.need(10)
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        self.need(at + n)
        payload = self.buf[at:at + n]
        self.buf = self.buf[at + n:]
        return bool(b0 & 0x80), b0 & 0x0f, payload

    def read_close(self):
        """The code of the server's close frame (frames before it are
        skipped), None for an empty one."""
        while True:
            _, op, payload = self.read_frame()
            if op == 8:
                if not payload:
                    return None
                return struct.unpack("!H", payload[:2])[0]

    def closed_after(self, timeout=5.0):
        """Whether the server closes the TCP connection (nothing more
        than frames before it)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def import_websockets():
    """python3-websockets is Debian's: a Python built elsewhere (pyenv)
    does not search Debian's dist-packages."""
    try:
        import websockets
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")
        import websockets
    return websockets


class WebSocket(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # the idle test's sockets, both ends in this process and the
        # server's in its child
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
        cls.root = tempfile.mkdtemp(prefix="moonflow-websocket-")
        for file, text in SITE.items():
            with open(os.path.join(cls.root, file), "w") as f:
                f.write(text)
        cls.errors = os.path.join(cls.root, "stderr.log")
        cls.port = free_port()
        cls.srv = Server([MOONFLOW, "serve", cls.root, "--listen",
                          "127.0.0.1:%d" % cls.port, "--workers", "1",
                          "--access-log", "off"], cls.port,
                         stderr_path=cls.errors)

    @classmethod
    def tearDownClass(cls):
        # a clean stop (under ASan: no leak, no error) with every socket
        # of the tests gone
        code, _, _ = cls.srv.stop(sig=signal.SIGTERM, timeout=60)
        with open(cls.errors) as f:
            errors = f.read()
        shutil.rmtree(cls.root, ignore_errors=True)
        assert code == 0 and "attempt to" not in errors, (code, errors)

    # ---- the opening handshake (RFC 6455 §4.2) ----------------------------

    def answer(self, raw):
        with connect(self.port) as s:
            s.sendall(raw)
            s.settimeout(5)
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = s.recv(4096)
                if not data:
                    break
                buf += data
        return buf

    def test_the_101_carries_the_accept_and_the_chosen_protocol(self):
        head = self.answer(handshake(
            "/echo", b"Sec-WebSocket-Protocol: soap, echo, chat\r\n"))
        self.assertTrue(head.startswith(b"HTTP/1.1 101 Switching Protocols"),
                        head)
        self.assertIn(b"\r\nUpgrade: websocket\r\n", head)
        self.assertIn(b"\r\nConnection: upgrade\r\n", head)
        self.assertIn(b"\r\nSec-WebSocket-Accept: " + ACCEPT + b"\r\n", head)
        # the server's order decides: chat is its first
        self.assertIn(b"\r\nSec-WebSocket-Protocol: chat\r\n", head)
        head = self.answer(handshake("/echo"))
        self.assertNotIn(b"Sec-WebSocket-Protocol", head)

    def test_refusals_say_why(self):
        ok = handshake("/echo")
        cases = [
            (ok.replace(b"GET", b"POST", 1), b"400", b"is a GET"),
            (ok.replace(b"HTTP/1.1", b"HTTP/1.0", 1), b"400", b"HTTP/1.1"),
            (ok.replace(b"Upgrade: websocket\r\n", b""), b"426",
             b"Upgrade: websocket expected"),
            (ok.replace(b"Connection: Upgrade", b"Connection: keep-alive"),
             b"400", b"Connection: upgrade expected"),
            (ok.replace(b"Version: 13", b"Version: 8"), b"426",
             b"Sec-WebSocket-Version 13 expected"),
            (ok.replace(KEY, b"c2hvcnQ="), b"400", b"Sec-WebSocket-Key"),
            (ok.replace(KEY, b"!!!!" + KEY[4:]), b"400", b"Sec-WebSocket-Key"),
        ]
        for raw, status, why in cases:
            with connect(self.port) as s:
                s.sendall(raw)
                s.settimeout(5)
                buf = b""
                while True:
                    data = s.recv(4096)
                    if not data:
                        break
                    buf += data
                    if b"\r\n\r\n" in buf and buf.endswith(b"\n"):
                        break
            self.assertTrue(buf.startswith(b"HTTP/1.1 " + status), (raw, buf))
            self.assertIn(why, buf.split(b"\r\n\r\n", 1)[1])
            if b"Version: 8" in raw:
                self.assertIn(b"\r\nSec-WebSocket-Version: 13\r\n", buf)
            if status == b"426" and b"Version: 8" not in raw:
                self.assertIn(b"\r\nUpgrade: websocket\r\n", buf)

    def test_a_bad_option_raises_naming_it(self):
        with connect(self.port) as s:
            s.sendall(b"GET /badopt HTTP/1.1\r\nHost: h\r\n"
                      b"Connection: close\r\n\r\n")
            s.settimeout(5)
            buf = b""
            while True:
                data = s.recv(4096)
                if not data:
                    break
                buf += data
        self.assertTrue(buf.startswith(b"HTTP/1.1 200"), buf)
        self.assertIn(b"false ", buf)
        self.assertIn(b"bad option compress", buf)

    # ---- framing (§5) and closing (§7): the conformance runner ------------

    def expect_close(self, frames, code, path="/echo", name=""):
        """Sends frames after the handshake; the server must answer with
        a close frame of code and close the connection."""
        p = Peer(self.port, path)
        try:
            p.sock.sendall(b"".join(frames))
            got = p.read_close()
            self.assertEqual(got, code, name)
            self.assertTrue(p.closed_after(), name + ": still open")
        finally:
            p.close()

    def test_unmasked_client_frames_are_1002(self):
        self.expect_close([frame(1, "hi", mask=False)], 1002)

    def test_reserved_bits_are_1002(self):
        for rsv in (1, 2, 4):
            self.expect_close([frame(1, "x", rsv=rsv)], 1002, name=str(rsv))

    def test_reserved_opcodes_are_1002(self):
        for op in (3, 4, 5, 6, 7, 0xb, 0xc, 0xd, 0xe, 0xf):
            self.expect_close([frame(op, "x")], 1002, name=hex(op))

    def test_fragmented_control_frames_are_1002(self):
        for op in (8, 9, 10):
            self.expect_close([frame(op, "", fin=False)], 1002, name=hex(op))

    def test_control_frames_past_125_bytes_are_1002(self):
        for op in (9, 10):
            self.expect_close([frame(op, b"x" * 126)], 1002, name=hex(op))
        self.expect_close([frame(8, close_payload(1000, b"r" * 124))], 1002)

    def test_continuation_without_a_start_is_1002(self):
        self.expect_close([frame(0, "orphan")], 1002)
        self.expect_close([frame(0, "orphan", fin=False)], 1002)

    def test_a_new_message_during_a_fragmented_one_is_1002(self):
        self.expect_close([frame(1, "one", fin=False), frame(1, "two")], 1002)
        self.expect_close([frame(2, "one", fin=False), frame(2, "two")], 1002)

    def test_lengths_not_in_their_shortest_form_are_1002(self):
        self.expect_close([frame(1, "short", length=16)], 1002)
        self.expect_close([frame(2, b"x" * 200, length=64)], 1002)

    def test_the_close_handshake_echoes_the_code(self):
        for code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011,
                     3000, 3999, 4000, 4999):
            self.expect_close([frame(8, close_payload(code, b"bye"))], code,
                              name=str(code))
        self.expect_close([frame(8, b"")], None)  # no code: none echoed

    def test_invalid_close_codes_are_1002(self):
        for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999,
                     5000, 65535):
            self.expect_close([frame(8, close_payload(code))], 1002,
                              name=str(code))

    def test_a_close_payload_of_one_byte_is_1002(self):
        self.expect_close([frame(8, b"\x03")], 1002)

    def test_invalid_utf8_is_1007(self):
        for bad in (b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                    b"\xff", b"ok\x80", b"\xce"):
            self.expect_close([frame(1, bad)], 1007, name=repr(bad))
        # fails fast: at the first fragment, the message's end never sent
        self.expect_close([frame(1, b"\xce\xba\xff", fin=False)], 1007)
        # a sequence cut by the message's end
        self.expect_close([frame(1, b"a", fin=False), frame(0, b"\xe1\xbd")],
                          1007)

    def test_invalid_utf8_in_a_close_reason_is_1007(self):
        self.expect_close([frame(8, close_payload(1000, b"\xff\xfe"))], 1007)

    def test_messages_past_max_payload_are_1009(self):
        self.expect_close([frame(2, b"x" * 1001)], 1009)
        self.expect_close([frame(1, b"x" * 600, fin=False),
                           frame(0, b"y" * 401)], 1009)
        # refused at the head: the 1 TiB payload is never sent
        head = struct.pack("!BBQ", 0x82, 0xff, 1 << 40) + MASK
        self.expect_close([head], 1009)

    def test_valid_utf8_split_across_fragments_is_echoed(self):
        p = Peer(self.port)
        try:
            text = "κόσμε"
            raw = text.encode()
            p.sock.sendall(frame(1, raw[:3], fin=False) + frame(0, raw[3:]))
            self.assertEqual(p.read_frame(), (True, 1, raw))
        finally:
            p.close()

    def test_control_frames_between_fragments_and_pings_answered(self):
        p = Peer(self.port, "/types")
        try:
            p.sock.sendall(frame(1, "frag", fin=False) + frame(9, "p1") +
                           frame(0, "ment", fin=False) + frame(10, "u") +
                           frame(0, "ed"))
            # the pong comes at once, then recv's answers in order
            self.assertEqual(p.read_frame(), (True, 10, b"p1"))
            self.assertEqual(p.read_frame(), (True, 1, b"ping:p1"))
            self.assertEqual(p.read_frame(), (True, 1, b"pong:u"))
            self.assertEqual(p.read_frame(), (True, 1, b"text:fragmented"))
            big = bytes(range(125))
            p.sock.sendall(frame(9, big))
            self.assertEqual(p.read_frame(), (True, 10, big))
            self.assertEqual(p.read_frame()[2], b"ping:" + big)
        finally:
            p.close()

    def test_a_frame_sent_a_byte_at_a_time_is_read_whole(self):
        p = Peer(self.port, "/types")
        try:
            data = frame(2, b"z" * 300) + frame(1, "next")
            for i in range(len(data)):
                p.sock.sendall(data[i:i + 1])
            self.assertEqual(p.read_frame(), (True, 1, b"binary:" + b"z" * 300))
            self.assertEqual(p.read_frame(), (True, 1, b"text:next"))
        finally:
            p.close()

    def test_a_64_bit_length_message_is_echoed(self):
        p = Peer(self.port, "/big")
        try:
            body = os.urandom(70000)
            p.sock.sendall(frame(2, body))
            self.assertEqual(p.read_frame(), (True, 2, body))
        finally:
            p.close()

    def test_the_server_closes_first_and_waits_for_the_echo(self):
        p = Peer(self.port, "/bye")
        try:
            fin, op, payload = p.read_frame()
            self.assertEqual(op, 8)
            self.assertEqual(payload, close_payload(4000, b"server says bye"))
            p.sock.sendall(frame(8, close_payload(4000)))
            self.assertTrue(p.closed_after())
        finally:
            p.close()

    def test_recv_times_out_and_stays_usable(self):
        p = Peer(self.port, "/timeout")
        try:
            self.assertEqual(p.read_frame(), (True, 1, b"nil timeout"))
            p.sock.sendall(frame(1, "hi"))
            self.assertEqual(p.read_frame(), (True, 1, b"text hi"))
        finally:
            p.close()

    def test_a_recv_in_a_thread_wakes_when_the_handler_ends(self):
        p = Peer(self.port, "/thread")
        try:
            self.assertTrue(p.closed_after())
        finally:
            p.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(self.errors) as f:
                if "thread recv: nil closed" in f.read():
                    return
            time.sleep(0.05)
        self.fail("the thread's recv never woke")

    def test_keepalive_pings_and_a_silent_peer_is_closed(self):
        p = Peer(self.port, "/keepalive")
        try:
            t0 = time.monotonic()
            _, op, _ = p.read_frame()
            self.assertEqual(op, 9)
            p.sock.sendall(frame(10, ""))  # answered: the next ping comes
            _, op, _ = p.read_frame()
            self.assertEqual(op, 9)
            # silent now: closed with 1001 after one more interval
            self.assertEqual(p.read_close(), 1001)
            self.assertTrue(p.closed_after())
            self.assertLess(time.monotonic() - t0, 3)
        finally:
            p.close()

    def test_a_graceful_stop_closes_with_1001(self):
        port = free_port()
        srv = Server([MOONFLOW, "serve", self.root, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1",
                      "--access-log", "off"], port)
        try:
            p = Peer(port, "/echo")
            p.sock.sendall(frame(1, "hi"))
            self.assertEqual(p.read_frame(), (True, 1, b"hi"))
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            self.assertEqual(p.read_close(), 1001)
            self.assertTrue(p.closed_after())
            p.close()
            self.assertEqual(srv.proc.wait(timeout=10), 0)
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            srv.stop()

    # ---- a real client -----------------------------------------------------

    # ---- permessage-deflate (RFC 7692) --------------------------------------

    def test_deflate_is_negotiated_only_when_asked_and_offered(self):
        p = Peer(self.port, "/deflate", extra=DEFLATE)
        self.assertIn(b"\r\nSec-WebSocket-Extensions: permessage-deflate; "
                      b"server_no_context_takeover; "
                      b"client_no_context_takeover\r\n", p.head)
        p.close()
        p = Peer(self.port, "/deflate", extra=b"Sec-WebSocket-Extensions: "
                 b"permessage-deflate; server_max_window_bits=10\r\n")
        self.assertIn(b"; server_max_window_bits=10\r\n", p.head)
        p.close()
        p = Peer(self.port, "/deflate")  # not offered
        self.assertNotIn(b"Sec-WebSocket-Extensions", p.head)
        p.close()
        p = Peer(self.port, "/echo", extra=DEFLATE)  # not asked
        self.assertNotIn(b"Sec-WebSocket-Extensions", p.head)
        # and a compressed frame there is a protocol error
        p.sock.sendall(frame(1, compress(b"x" * 100), rsv=4))
        self.assertEqual(p.read_close(), 1002)
        p.close()

    def test_compressed_messages_both_ways(self):
        p = Peer(self.port, "/deflate", extra=DEFLATE)
        try:
            text = ("κόσμε " * 2000).encode()
            z = compress(text)
            self.assertLess(len(z), len(text) // 10)
            # one frame, then fragments with a ping between them
            p.sock.sendall(frame(1, z, rsv=4))
            fin, op, payload = p.read_frame()
            self.assertEqual((fin, op), (True, 1))
            self.assertLess(len(payload), len(text) // 10)  # sent compressed
            self.assertEqual(decompress(payload), text)
            p.sock.sendall(frame(2, z[:10], fin=False, rsv=4) + frame(9, "p") +
                           frame(0, z[10:]))
            self.assertEqual(p.read_frame(), (True, 10, b"p"))
            fin, op, payload = p.read_frame()
            self.assertEqual((fin, op, decompress(payload)), (True, 2, text))
            # short messages go plain, and plain ones are taken too
            p.sock.sendall(frame(1, "short"))
            self.assertEqual(p.read_frame(), (True, 1, b"short"))
        finally:
            p.close()

    def test_server_frames_set_rsv1_only_when_compressed(self):
        p = Peer(self.port, "/deflate", extra=DEFLATE)
        try:
            p.sock.sendall(frame(1, compress(b"a" * 1000), rsv=4))
            p.need(1)
            self.assertEqual(p.buf[0], 0xc1)  # FIN, RSV1, text
            p.read_frame()
            p.sock.sendall(frame(1, "tiny"))
            p.need(1)
            self.assertEqual(p.buf[0], 0x81)
        finally:
            p.close()

    def test_compressed_errors(self):
        ext = dict(path="/deflate")
        # RSV1 on a continuation
        p = Peer(self.port, extra=DEFLATE, **ext)
        p.sock.sendall(frame(1, compress(b"ab"), fin=False, rsv=4) +
                       frame(0, b"", rsv=4))
        self.assertEqual(p.read_close(), 1002)
        p.close()
        # RSV1 on a control frame
        p = Peer(self.port, extra=DEFLATE, **ext)
        p.sock.sendall(frame(9, b"x", rsv=4))
        self.assertEqual(p.read_close(), 1002)
        p.close()
        # not deflate data
        p = Peer(self.port, extra=DEFLATE, **ext)
        p.sock.sendall(frame(2, b"\xff\xff\xff\xff", rsv=4))
        self.assertEqual(p.read_close(), 1007)
        p.close()
        # text that inflates to invalid UTF-8
        p = Peer(self.port, extra=DEFLATE, **ext)
        p.sock.sendall(frame(1, compress(b"ok\xff"), rsv=4))
        self.assertEqual(p.read_close(), 1007)
        p.close()
        # a bomb: 161 bytes that inflate past max_payload (100,000)
        p = Peer(self.port, extra=DEFLATE, **ext)
        p.sock.sendall(frame(2, compress(b"\0" * 200000), rsv=4))
        self.assertEqual(p.read_close(), 1009)
        p.close()

    def test_python_websockets_client_with_compression(self):
        websockets = import_websockets()

        async def talk():
            uri = "ws://127.0.0.1:%d/deflate" % self.port
            async with websockets.connect(uri, compression="deflate") as ws:
                ext = ws.response_headers.get("Sec-WebSocket-Extensions", "")
                self.assertIn("permessage-deflate", ext)
                for i in range(20):
                    msg = ("message %d " % i) * (i * 50 + 1)
                    await ws.send(msg)
                    self.assertEqual(await ws.recv(), msg)
                await ws.send(["frag" * 100, "ment" * 100])
                self.assertEqual(await ws.recv(), "frag" * 100 + "ment" * 100)
                await ws.close()

        asyncio.run(asyncio.wait_for(talk(), 30))

    def test_python_websockets_client(self):
        websockets = import_websockets()

        async def talk():
            uri = "ws://127.0.0.1:%d/echo" % self.port
            async with websockets.connect(uri, subprotocols=["echo"]) as ws:
                self.assertEqual(ws.subprotocol, "echo")
                await ws.send("hello")
                self.assertEqual(await ws.recv(), "hello")
                await ws.send(b"\x00\x01\xff" * 300)
                self.assertEqual(await ws.recv(), b"\x00\x01\xff" * 300)
                await ws.send(["frag", "ment", "ed"])
                self.assertEqual(await ws.recv(), "fragmented")
                pong = await ws.ping(b"are you there")
                await asyncio.wait_for(pong, 5)
                await ws.close(code=4001, reason="done")
                return ws.close_code

        self.assertEqual(asyncio.run(asyncio.wait_for(talk(), 30)), 4001)

    # ---- many idle sockets -------------------------------------------------

    def test_many_idle_sockets_cost_little_memory(self):
        # one end of each in this process, the other in the server's
        room = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 500
        sanitized = "asan" in os.path.basename(MOONFLOW)  # redzones
        count = int(os.environ.get("MF_WS_SOCKETS",
                                   "2000" if sanitized else "10000"))
        count = min(count, room)
        self.assertGreater(count, 500)
        per_socket, took = idle_sockets(self.port, self.srv.proc.pid, count)
        print("\n%d idle websockets: %.0f bytes of RSS each (%.1f s)" %
              (count, per_socket, took), file=sys.stderr)
        # An idle socket keeps its connection's and request's records, the
        # request's head (copied out of the input at the upgrade), the
        # handler's coroutine and the object: no input or output buffer,
        # no message buffer. 3.8 KiB when measured; the bound is 4 KiB.
        self.assertLess(per_socket, (64 if sanitized else 4) * 1024)


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "websocket_fanout")


def publish(port, channel, message):
    """PUBLISH over RESP: the count of subscribers that got it."""
    words = [b"PUBLISH", channel.encode(), message.encode()]
    raw = b"*%d\r\n" % len(words) + b"".join(
        b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
    with connect(port) as s:
        s.sendall(raw)
        reply = s.recv(64)
    assert reply.startswith(b":"), reply
    return int(reply[1:].split(b"\r\n")[0])


class Fanout(unittest.TestCase):
    """examples/websocket_fanout with a redis-server of its own."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="moonflow-ws-fanout-")
        self.redis = Redis(self.tmp)
        self.port = free_port()
        env = dict(os.environ, REDIS_URL=self.redis.url())
        self.srv = Server([MOONFLOW, "serve", EXAMPLE, "--listen",
                           "127.0.0.1:%d" % self.port, "--workers", "2",
                           "--access-log", "off"], self.port, env=env)

    def tearDown(self):
        code, _, err = self.srv.stop(sig=signal.SIGTERM, timeout=60)
        self.redis.kill()
        self.assertEqual(code, 0, err)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_room_hears_its_clients_and_redis_other_rooms_do_not(self):
        websockets = import_websockets()
        base = "ws://127.0.0.1:%d/room?name=" % self.port

        async def talk():
            a = await websockets.connect(base + "lobby")
            b = await websockets.connect(base + "lobby")
            c = await websockets.connect(base + "other")
            await a.send("hi from a")
            self.assertEqual(await asyncio.wait_for(a.recv(), 5), "hi from a")
            self.assertEqual(await asyncio.wait_for(b.recv(), 5), "hi from a")
            self.assertEqual(publish(self.redis.port, "room:lobby", "outside"),
                             2)
            self.assertEqual(await asyncio.wait_for(a.recv(), 5), "outside")
            self.assertEqual(await asyncio.wait_for(b.recv(), 5), "outside")
            # c heard none of it: the first it gets is its own room's
            self.assertEqual(publish(self.redis.port, "room:other", "yours"), 1)
            self.assertEqual(await asyncio.wait_for(c.recv(), 5), "yours")
            await b.close()
            for ws in (a, c):
                await ws.close()
            # each closed socket ended its subscription
            deadline = time.monotonic() + 5
            while publish(self.redis.port, "room:lobby", "x") and \
                    time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            self.assertEqual(publish(self.redis.port, "room:lobby", "x"), 0)

        asyncio.run(asyncio.wait_for(talk(), 30))

    def test_a_bad_room_name_is_a_400(self):
        with connect(self.port) as s:
            s.sendall(b"GET /room?name=a%20b HTTP/1.1\r\nHost: h\r\n"
                      b"Connection: close\r\n\r\n")
            s.settimeout(5)
            buf = b""
            while True:
                data = s.recv(4096)
                if not data:
                    break
                buf += data
        self.assertTrue(buf.startswith(b"HTTP/1.1 400"), buf)
        self.assertIn(b"a room name", buf)


async def open_idle(port, count, deadline):
    """count sockets that each echo one message, then stay open; the
    streams are returned."""
    hs = handshake("/echo")
    msg = frame(1, "hi")

    async def one():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(hs + msg)
        await w.drain()
        buf = b""
        while not buf.endswith(b"\x81\x02hi"):
            data = await r.read(4096)
            if not data:
                raise AssertionError("closed: %r" % buf)
            buf += data
        return r, w

    streams = []
    batch = 200  # bounded concurrency of the opening
    for i in range(0, count, batch):
        if time.monotonic() > deadline:
            raise AssertionError("opening %d sockets took too long" % count)
        streams += await asyncio.gather(*(one() for _ in
                                          range(min(batch, count - i))))
    return streams


def idle_sockets(port, pid, count, limit_s=120):
    """RSS of the server per idle websocket (after each echoed a message)
    and the seconds it took."""
    async def run():
        t0 = time.monotonic()
        warm = await open_idle(port, 200, t0 + limit_s)
        for _, w in warm:
            w.close()
        await asyncio.sleep(0.5)
        before = rss_kib(pid)
        streams = await open_idle(port, count, t0 + limit_s)
        await asyncio.sleep(0.5)
        after = rss_kib(pid)
        for r, w in streams:
            w.write(frame(8, close_payload(1000)))
        for _, w in streams:
            w.close()
        return (after - before) * 1024.0 / count, time.monotonic() - t0

    return asyncio.run(run())


if __name__ == "__main__":
    unittest.main(verbosity=2)
