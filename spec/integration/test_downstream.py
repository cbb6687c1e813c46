"""The downstream socket under `moonflow serve`: req:socket() reads a body
as a stream on a route with body = "stream" (receive, receiveuntil over a
multipart-like body, limits: 413, timeouts, 100-continue, keep-alive
after it), a 1 GiB body streamed with the server's memory flat, and
req:socket(true) handing the connection to Debian's
nginx.websocket.server, hit by a real WebSocket client (python3-websockets):
text, binary, ping/pong, fragmented messages, close with a code.
$MF_MOONFLOW is the binary. Each server must stop with status 0."""
import asyncio
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import unittest

from harness import (Server, connect, free_port, read_response, request,
                     rss_kib)

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

SITE = {
    # Counts the body's bytes, read 64 KiB at a time.
    "count.lua": '''return function(req, resp)
    local sock = assert(req:socket())
    local n = 0
    while true do
        local data, err, partial = sock:receive(65536)
        if not data then
            if err ~= "closed" then resp.status = 500 resp:send(err) return end
            n = n + #partial
            break
        end
        n = n + #data
    end
    resp:send(tostring(n))
end
''',
    # A multipart-like body: parts between boundary lines, each with
    # header lines, its data read through a sized receiveuntil iterator.
    "parts.lua": '''return function(req, resp)
    local sock = assert(req:socket())
    local boundary = "--" .. req.headers["content-type"]:match("boundary=(.+)$")
    local preamble = sock:receiveuntil(boundary)
    assert(preamble() == "")
    local read_data = sock:receiveuntil("\\r\\n" .. boundary)
    local parts = {}
    while true do
        local rest = assert(sock:receive("*l"))
        if rest == "--" then break end
        local part = { headers = {} }
        while true do
            local line = assert(sock:receive("*l"))
            if line == "" then break end
            part.headers[#part.headers + 1] = line
        end
        local pieces = {}
        while true do
            local data, err = read_data(7)
            if not data then assert(not err, err) break end
            assert(#data <= 7)
            pieces[#pieces + 1] = data
        end
        part.data = table.concat(pieces)
        parts[#parts + 1] = part
    end
    resp:json { parts = parts, epilogue = sock:receive("*a") }
end
''',
    # receiveuntil inclusive, then bytes and a line.
    "until.lua": '''return function(req, resp)
    local sock = assert(req:socket())
    local upto = sock:receiveuntil("END", { inclusive = true })
    local a = upto()
    local b = sock:receive(3)
    local c, err, partial = sock:receive("*l")
    resp:send(table.concat({ a, b, tostring(c), tostring(err), partial }, "|"))
end
''',
    # The first receive waits (the client sends after a 100 Continue).
    "timeout.lua": '''return function(req, resp)
    local sock = assert(req:socket())
    if req.query.ms then sock:settimeout(tonumber(req.query.ms)) end
    local data, err, partial = sock:receive(10)
    local again = sock:receive(1) -- still usable after a timeout
    resp:send(tostring(data) .. " " .. tostring(err) .. " " .. tostring(partial)
              .. " " .. tostring(again))
end
''',
    # Reads all; logs what the receive said.
    "all.lua": '''local mf = require "moonflow"
return function(req, resp)
    local sock = assert(req:socket())
    local data, err = sock:receive("*a")
    mf.log("warn", "all: ", tostring(data and #data), " ", tostring(err))
    resp:send(data or err)
end
''',
    # A route without body = "stream": req:socket() reads the body read
    # before the handler, and says "no body" without one.
    "buffered.lua": '''return function(req, resp)
    local sock, err = req:socket()
    if not sock then resp:send(err) return end
    resp:send(req.body .. "/" .. sock:receive("*a"))
end
''',
    "ws.lua": '''require "moonflow.ngx"
local server = require "nginx.websocket.server"
return ngx.handler(function(req, resp)
    local wb, err = server:new { timeout = 5000, max_payload_len = 1048576 }
    if not wb then
        resp.status = 400
        resp:send("websocket: " .. tostring(err))
        return
    end
    local kind, pieces = nil, {}
    while true do
        local data, typ, e = wb:recv_frame()
        if not data then
            if not tostring(e):find("timeout", 1, true) then break end
        elseif typ == "close" then
            wb:send_close(e, "echo " .. data)
            break
        elseif typ == "ping" then
            wb:send_pong(data)
        elseif typ == "text" or typ == "binary" then
            if e == "again" then
                kind, pieces = typ, { data }
            else
                wb:send_frame(true, typ == "text" and 1 or 2, data)
            end
        elseif typ == "continuation" then
            pieces[#pieces + 1] = data
            if e ~= "again" then
                wb:send_frame(true, kind == "text" and 1 or 2,
                              table.concat(pieces))
            end
        end
    end
end)
''',
    # Raw without WebSocket: 200, then the bytes back upper-cased by line.
    "raw.lua": '''return function(req, resp)
    resp:set_header("X-Raw", "yes")
    local sock = assert(req:socket(true))
    while true do
        local line = sock:receive("*l")
        if not line or line == "bye" then break end
        sock:send(line:upper() .. "\\n")
    end
end
''',
    # A second req:socket() is the first socket, with what it buffered.
    "twice.lua": '''return function(req, resp)
    local a = assert(req:socket())
    local first = a:receive(2)
    local b = assert(req:socket())
    resp:send(tostring(a == b) .. " " .. first .. b:receive("*a"))
end
''',
    # OpenResty's form: ngx.req.socket() on a streamed route.
    "ngxbody.lua": '''require "moonflow.ngx"
return ngx.handler(function(req, resp)
    local sock = assert(ngx.req.socket())
    local upto = sock:receiveuntil("&")
    local first = upto()
    resp:send(ngx.req.http_version() .. " " .. first .. " " .. sock:receive("*a"))
end)
''',
    # A thread of the handler sends while the handler waits in a receive.
    "duplex.lua": '''local mf = require "moonflow"
return function(req, resp)
    local sock = assert(req:socket(true))
    local writer = mf.spawn(function()
        for i = 1, 3 do
            mf.sleep(20)
            assert(sock:send("tick " .. i .. "\\n"))
        end
    end)
    local line, err = sock:receive("*l")
    writer:wait()
    sock:send("got " .. tostring(line or err) .. "\\n")
end
''',
}

CONFIG = '''return { root = ".", limits = { max_body = %d },
  timeouts = { body = 500 },
  routes = {
    ["/count"] = { file = "count.lua", body = "stream" },
    ["/parts"] = { file = "parts.lua", body = "stream" },
    ["/until"] = { file = "until.lua", body = "stream" },
    ["/timeout"] = { file = "timeout.lua", body = "stream" },
    ["/all"] = { file = "all.lua", body = "stream" },
    ["/ngxbody"] = { file = "ngxbody.lua", body = "stream" },
    ["/twice"] = { file = "twice.lua", body = "stream" } } }
'''


WS_HANDSHAKE = (b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")


def import_websockets():
    """python3-websockets (the Makefile's PACKAGES) is Debian's: a Python
    built elsewhere (pyenv) does not search Debian's dist-packages."""
    try:
        import websockets
    except ImportError:
        import sys
        sys.path.append("/usr/lib/python3/dist-packages")
        import websockets
    return websockets


def chunked(pieces):
    out = b""
    for p in pieces:
        out += b"%x\r\n%s\r\n" % (len(p), p)
    return out + b"0\r\n\r\n"


class Downstream(unittest.TestCase):
    servers = {}

    @classmethod
    def start(cls, name, max_body):
        root = tempfile.mkdtemp(prefix="moonflow-downstream-")
        for file, text in SITE.items():
            with open(os.path.join(root, file), "w") as f:
                f.write(text)
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write(CONFIG % max_body)
        errors = os.path.join(root, "stderr.log")
        port = free_port()
        try:
            srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                          "127.0.0.1:%d" % port, "--workers", "1",
                          "--access-log", os.path.join(root, "access.log")],
                         port, stderr_path=errors)
        except Exception:
            shutil.rmtree(root, ignore_errors=True)
            raise
        cls.servers[name] = (srv, root, errors)

    @classmethod
    def setUpClass(cls):
        cls.start("big", 2 << 30)
        cls.start("small", 1000)

    @classmethod
    def tearDownClass(cls):
        failures = []
        for name, (srv, root, errors) in cls.servers.items():
            code, _, _ = srv.stop(sig=signal.SIGTERM, timeout=30)
            if code != 0:
                with open(errors, errors="replace") as f:
                    failures.append("%s exited %d:\n%s" % (
                        name, code, f.read()[-3000:]))
            shutil.rmtree(root, ignore_errors=True)
        if failures:
            raise AssertionError("\n".join(failures))

    def port(self, name="big"):
        return self.servers[name][0].port

    def error_log(self, name):
        with open(self.servers[name][2], errors="replace") as f:
            return f.read()

    def wait_access_lines(self, name, text, n):
        path = os.path.join(self.servers[name][1], "access.log")
        deadline = time.monotonic() + 5
        lines = []
        while time.monotonic() < deadline:  # written every second
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    lines = [l for l in f if text in l]
                if len(lines) >= n:
                    return
            time.sleep(0.1)
        self.fail("%d lines with %r in the access log: %r" % (n, text, lines))

    def post(self, path, body, headers=b"", name="big"):
        return request(self.port(name), b"POST %s HTTP/1.1\r\nHost: h\r\n"
                       b"Content-Length: %d\r\n%s\r\n%s" % (
                           path.encode(), len(body), headers, body),
                       timeout=10)

    # ---- req:socket(): the body as a stream ---------------------------

    def test_receive_counts_a_body_sent_in_pieces_and_chunked(self):
        self.assertEqual(self.post("/count", b"x" * 200000).body, b"200000")
        with connect(self.port()) as s:
            s.sendall(b"POST /count HTTP/1.1\r\nHost: h\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            for piece in (b"a" * 5, b"b" * 70000, b"c" * 3):
                time.sleep(0.05)  # the handler waits for each
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            s.sendall(b"0\r\n\r\n")
            r, _ = read_response(s)
        self.assertEqual(r.body, b"70008")

    def test_receiveuntil_reads_a_multipart_like_body_part_by_part(self):
        body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
                b"first part, longer than seven bytes\r\n"
                b"--XyZ\r\nContent-Disposition: form-data; name=\"b\"\r\n"
                b"Content-Type: text/plain\r\n\r\n"
                b"second\r\n--Xy not the boundary\r\n"
                b"--XyZ--\r\nepilogue")
        head = (b"POST /parts HTTP/1.1\r\nHost: h\r\n"
                b"Content-Type: multipart/form-data; boundary=XyZ\r\n")
        for framing in ("length", "chunked"):
            with connect(self.port()) as s:
                if framing == "length":
                    s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
                    for i in range(0, len(body), 11):  # in small pieces
                        s.sendall(body[i:i + 11])
                        time.sleep(0.002)
                else:
                    s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" +
                              chunked([body[i:i + 13]
                                       for i in range(0, len(body), 13)]))
                r, _ = read_response(s)
            self.assertEqual(r.status, 200, r.body)
            out = json.loads(r.body)
            parts = out["parts"]
            self.assertEqual(len(parts), 2)
            self.assertEqual(parts[0]["headers"],
                             ['Content-Disposition: form-data; name="a"'])
            self.assertEqual(parts[0]["data"],
                             "first part, longer than seven bytes")
            self.assertEqual(len(parts[1]["headers"]), 2)
            self.assertEqual(parts[1]["data"],
                             "second\r\n--Xy not the boundary")
            self.assertEqual(out["epilogue"], "epilogue")

    def test_receiveuntil_inclusive_then_bytes_then_a_line_at_the_end(self):
        r = self.post("/until", b"abcENDxyzno newline")
        self.assertEqual(r.body, b"abcEND|xyz|nil|closed|no newline")

    def test_the_connection_serves_the_next_request_after_a_streamed_body(
            self):
        with connect(self.port()) as s:
            one = b"POST /count HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
            s.sendall(one + one.replace(b"3\r\n\r\nabc", b"1\r\n\r\nz"))
            r1, rest = read_response(s)
            r2, _ = read_response(s, rest)
        self.assertEqual((r1.body, r2.body), (b"3", b"1"))

    def test_100_continue_goes_out_when_the_handler_reads(self):
        with connect(self.port()) as s:
            s.sendall(b"POST /count HTTP/1.1\r\nHost: h\r\n"
                      b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            s.settimeout(5)
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 100 Continue"))
            s.sendall(b"data")
            r, _ = read_response(s)
        self.assertEqual(r.body, b"4")

    def test_a_receive_times_out_and_the_socket_stays_usable(self):
        with connect(self.port()) as s:
            s.sendall(b"POST /timeout?ms=200 HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: 10\r\n\r\nabcde")
            t0 = time.monotonic()
            r, _ = read_response(s)
        # receive(10) times out with the 5 bytes; receive(1) again (the
        # server's body timeout, 500 ms) finds nothing either.
        self.assertEqual(r.body, b"nil timeout abcde nil")
        self.assertLess(time.monotonic() - t0, 3)

    def test_the_body_timeout_is_the_default_read_timeout(self):
        with connect(self.port()) as s:
            s.sendall(b"POST /timeout HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: 10\r\n\r\n12")
            t0 = time.monotonic()
            r, _ = read_response(s)
            took = time.monotonic() - t0
        self.assertEqual(r.body, b"nil timeout 12 nil")
        self.assertGreater(took, 0.9)  # two reads of the 500 ms timeout
        self.assertLess(took, 4)

    def test_a_body_past_max_body_is_answered_413(self):
        r = self.post("/all", b"x" * 2000, name="small")  # by its length
        self.assertEqual(r.status, 413)
        with connect(self.port("small")) as s:  # chunked: while it is read
            s.sendall(b"POST /all HTTP/1.1\r\nHost: h\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" +
                      chunked([b"y" * 600, b"z" * 600]))
            r, _ = read_response(s)
        self.assertEqual(r.status, 413)
        deadline = time.monotonic() + 5
        while "all: nil body too large" not in self.error_log("small"):
            self.assertLess(time.monotonic(), deadline, self.error_log("small"))
            time.sleep(0.05)
        self.assertEqual(self.post("/all", b"ok", name="small").body, b"ok")
        # both access lines say what the client got (the second one is the
        # handler's request, whose answer the server replaced)
        self.wait_access_lines("small", '"POST /all HTTP/1.1" 413 ', 2)

    def test_a_second_req_socket_is_the_first(self):
        self.assertEqual(self.post("/twice", b"abcdef").body, b"true abcdef")

    def test_ngx_req_socket_is_req_socket(self):
        self.assertEqual(self.post("/ngxbody", b"a=1&b=2").body,
                         b"1.1 a=1 b=2")

    def test_req_socket_reads_a_body_read_before_the_handler(self):
        self.assertEqual(self.post("/buffered", b"hello").body,
                         b"hello/hello")
        r = request(self.port(), b"GET /buffered HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.body, b"no body")

    def test_a_gib_body_streams_with_flat_memory(self):
        srv = self.servers["big"][0]
        self.post("/count", b"w" * (4 << 20))  # windows and buffers made
        base = rss_kib(srv.proc.pid)
        peak = [base]
        done = threading.Event()

        def sample():
            while not done.wait(0.02):
                peak[0] = max(peak[0], rss_kib(srv.proc.pid))
        sampler = threading.Thread(target=sample)
        sampler.start()
        total = 1 << 30
        piece = b"0123456789abcdef" * 65536  # 1 MiB
        t0 = time.monotonic()
        try:
            with connect(self.port(), timeout=120) as s:
                s.sendall(b"POST /count HTTP/1.1\r\nHost: h\r\n"
                          b"Content-Length: %d\r\n\r\n" % total)
                for _ in range(total // len(piece)):
                    s.sendall(piece)
                    self.assertLess(time.monotonic() - t0, 240)
                r, _ = read_response(s)
        finally:
            done.set()
            sampler.join()
        took = time.monotonic() - t0
        growth = peak[0] - base
        print("1 GiB streamed in %.1f s: RSS %d KiB before, peak %d KiB "
              "(+%d KiB)" % (took, base, peak[0], growth))
        self.assertEqual(r.body, str(total).encode())
        self.assertLess(growth, 8 * 1024)

    # ---- req:socket(true): the raw connection -------------------------

    def test_a_raw_socket_after_the_head(self):
        with connect(self.port()) as s:
            s.sendall(b"GET /raw HTTP/1.1\r\nHost: h\r\n\r\nfirst\n")
            s.settimeout(5)
            buf = b""
            while b"FIRST\n" not in buf:
                buf += s.recv(4096)
            head = buf.split(b"\r\n\r\n")[0]
            self.assertTrue(head.startswith(b"HTTP/1.1 200 OK"), head)
            self.assertIn(b"X-Raw: yes", head)
            self.assertIn(b"Connection: close", head)
            self.assertNotIn(b"Transfer-Encoding", head)
            self.assertNotIn(b"Content-Length", head)
            s.sendall(b"second\nbye\n")
            rest = b""
            while True:
                data = s.recv(4096)
                if not data:
                    break
                rest += data
        self.assertEqual(rest, b"SECOND\n")

    def test_one_thread_sends_while_another_waits_in_a_receive(self):
        with connect(self.port()) as s:
            s.sendall(b"GET /duplex HTTP/1.1\r\nHost: h\r\n\r\n")
            s.settimeout(5)
            buf = b""
            while b"tick 3\n" not in buf:
                data = s.recv(4096)
                self.assertTrue(data, buf)
                buf += data
            s.sendall(b"hello\n")
            while True:
                data = s.recv(4096)
                if not data:
                    break
                buf += data
        body = buf.split(b"\r\n\r\n", 1)[1]
        self.assertEqual(body, b"tick 1\ntick 2\ntick 3\ngot hello\n")

    def test_nginx_websocket_server_echoes_a_real_client(self):
        websockets = import_websockets()

        async def talk():
            uri = "ws://127.0.0.1:%d/ws" % self.port()
            async with websockets.connect(uri) as ws:
                await ws.send("hello")
                self.assertEqual(await ws.recv(), "hello")
                await ws.send(b"\x00\x01\xff" * 1000)
                self.assertEqual(await ws.recv(), b"\x00\x01\xff" * 1000)
                pong = await ws.ping(b"are you there")
                await asyncio.wait_for(pong, 5)
                await ws.send(["frag", "ment", "ed"])  # three frames
                self.assertEqual(await ws.recv(), "fragmented")
                await ws.send([b"\x01", b"\x02"])
                self.assertEqual(await ws.recv(), b"\x01\x02")
                await ws.close(code=4001, reason="done")
                return ws.close_code, ws.close_reason
        code, reason = asyncio.run(asyncio.wait_for(talk(), 30))
        self.assertEqual((code, reason), (4001, "echo done"))

    def test_a_stop_ends_a_websocket_handler_waiting_for_its_client(self):
        root = self.servers["big"][1]
        port = free_port()
        srv = Server([MOONFLOW, "serve", root, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1",
                      "--access-log", "off"], port)
        try:
            with connect(port) as s:
                s.sendall(WS_HANDSHAKE)
                s.settimeout(5)
                self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 101 "))
                t0 = time.monotonic()
                code, _, err = srv.stop(sig=signal.SIGTERM, timeout=30)
                took = time.monotonic() - t0
        finally:
            srv.stop()
        # the handler's receive heard the end: no wait for timeouts.stop
        self.assertEqual(code, 0, err)
        self.assertLess(took, 0.9)

    def test_a_websocket_handshake_gets_101_with_connection_upgrade(self):
        with connect(self.port()) as s:
            s.sendall(WS_HANDSHAKE)
            s.settimeout(5)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(4096)
            head = buf.split(b"\r\n\r\n")[0]
            s.shutdown(socket.SHUT_WR)  # the handler reads the end: closed
            read_rest = b""
            while True:
                data = s.recv(4096)
                if not data:
                    break
                read_rest += data
        self.assertTrue(head.startswith(b"HTTP/1.1 101 Switching Protocols"),
                        head)
        self.assertIn(b"Connection: upgrade", head)
        self.assertIn(b"Upgrade: websocket", head)
        self.assertIn(b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
                      head)
        self.assertNotIn(b"Content-Type", head)


if __name__ == "__main__":
    unittest.main(verbosity=2)
