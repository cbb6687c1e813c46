"""Request phases under `moonflow serve` with clients that leave: a
concurrency counter kept in a shared dict, incremented in a route's access
phase and decremented in its log phase, comes back to 0 after many clients
left mid-request (python sockets closed early, and wrk, whose 32
connections close mid-request when its run ends, when wrk is installed);
the log phase ran once for every request that reached the route.
ngx.get_phase() says init and init_worker in those scripts. Two workers, one shared dict; the server must
stop with status 0. $MF_MOONFLOW is the binary; everything on 127.0.0.1,
bounded in count and time."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import Server, free_port, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

FILES = {
    "conf.lua": '''return {
    root = "site", workers = 2, access_log = "off",
    init = "init.lua", init_worker = "init_worker.lua",
    shared = { conc = 1048576 },
    limits = { max_body = 1000 }, timeouts = { body = 500, body_total = 300 },
    routes = { ["/upload"] = { file = "upload.lua", body = "stream" } },
}
''',
    "init.lua": '''local mf = require "moonflow"
local ngx = require "moonflow.ngx"
mf.shared.conc:set("init", ngx.get_phase())
''',
    "init_worker.lua": '''local mf = require "moonflow"
local ngx = require "moonflow.ngx"
mf.shared.conc:set("init_worker", ngx.get_phase())
ngx.exit(ngx.OK) -- ends the script, quietly
error("not reached")
''',
    "site/limited.lua": '''local mf = require "moonflow"
local ngx = require "moonflow.ngx"
local conc = mf.shared.conc
return {
    access = function(req)
        conc:incr("accessed", 1, 0)
        conc:incr("n", 1, 0)
        ngx.ctx.counted = true
    end,
    content = function(req, resp)
        mf.sleep(tonumber(req.query.ms) or 100)
        resp:send("done")
    end,
    log = function()
        conc:incr("logs", 1, 0)
        if ngx.ctx.counted then conc:incr("n", -1, 0) end
    end,
}
''',
    "site/upload.lua": '''local mf = require "moonflow"
local ngx = require "moonflow.ngx"
return {
    content = function(req, resp)
        local sock = assert(req:socket())
        sock:settimeout(3000) -- past the body's: the server's 408 comes first
        local data, err = sock:receive("*a")
        ngx.ctx.err = err or "none"
        if req.query["then"] == "raise" then assert(data, err) end
        if req.query["then"] == "status" then resp.status = 500 end
        resp:send(data and "read" or "not read")
    end,
    log = function(req, resp)
        mf.shared.conc:set("upload:" .. req.query.key, ("%d %s %s"):format(
            resp.status, ngx.var.status, ngx.ctx.err))
    end,
}
''',
    "site/upload_log.lua": '''local mf = require "moonflow"
return function(req, resp)
    resp:send(mf.shared.conc:get("upload:" .. req.query.key) or "")
end
''',
    "site/count.lua": '''local mf = require "moonflow"
return function(req, resp)
    local conc = mf.shared.conc
    resp:json { n = conc:get("n") or 0, accessed = conc:get("accessed") or 0,
                logs = conc:get("logs") or 0, init = conc:get("init"),
                init_worker = conc:get("init_worker") }
end
''',
}


class Phases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="moonflow-phases-")
        os.mkdir(os.path.join(cls.root, "site"))
        for name, text in FILES.items():
            with open(os.path.join(cls.root, name), "w") as f:
                f.write(text)
        cls.errors = os.path.join(cls.root, "stderr.log")
        cls.port = free_port()
        try:
            cls.srv = Server([MOONFLOW, "serve", "--config",
                              os.path.join(cls.root, "conf.lua"), "--listen",
                              "127.0.0.1:%d" % cls.port], cls.port,
                             stderr_path=cls.errors)
        except Exception:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            code, _, _ = cls.srv.stop(sig=signal.SIGTERM, timeout=30)
            if code != 0:
                raise AssertionError("moonflow serve exited %d:\n%s" % (
                    code, cls.error_log()[-3000:]))
        finally:
            shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def error_log(cls):
        with open(cls.errors, errors="replace") as f:
            return f.read()

    def count(self):
        r = request(self.port, b"GET /count HTTP/1.1\r\nHost: h\r\n\r\n",
                    timeout=10)
        self.assertEqual(r.status, 200)
        return json.loads(r.body)

    def settled(self):
        """The counts once every request that reached the route has ended
        (its log phase ran), waiting at most 10 s."""
        deadline = time.monotonic() + 10
        c = self.count()
        while time.monotonic() < deadline and (c["n"] != 0 or
                                          c["logs"] != c["accessed"]):
            time.sleep(0.05)
            c = self.count()
        return c

    def leave_early(self, n, ms):
        """n clients that send a request for /limited and close their
        connection after a few milliseconds, long before its answer."""
        socks = []
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(b"GET /limited?ms=%d HTTP/1.1\r\nHost: h\r\n\r\n" % ms)
            socks.append(s)
            if len(socks) == 25:  # 25 in flight at a time
                time.sleep(0.01)
                for s in socks:
                    s.close()
                socks = []
        time.sleep(0.01)
        for s in socks:
            s.close()

    def upload_log(self, key):
        """What the log phase of /upload?key=KEY stored (waits up to 5 s)."""
        deadline = time.monotonic() + 5
        while True:
            r = request(self.port, b"GET /upload_log?key=%s HTTP/1.1\r\n"
                        b"Host: h\r\n\r\n" % key, timeout=10)
            if r.body or time.monotonic() > deadline:
                return r.body.decode()
            time.sleep(0.05)

    def refused_upload(self, key, head, body, pause=0, more=b""):
        """The status a POST to /upload gets: its body, then after pause
        seconds more of it."""
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=10) as s:
            s.sendall(b"POST /upload?key=%s HTTP/1.1\r\nHost: h\r\n%s\r\n"
                      % (key, head) + body)
            time.sleep(pause)
            if more:
                s.sendall(more)
            data = b""
            while b"\r\n" not in data:
                more = s.recv(4096)
                if not more:
                    break
                data += more
        return int(data.split(b" ", 2)[1])

    def test_a_streamed_body_refused_while_read_runs_the_log_phase(self):
        chunked = b"Transfer-Encoding: chunked\r\n"
        cases = [
            (b"big", chunked, b"258\r\n" + b"x" * 600 + b"\r\n" +
             b"258\r\n" + b"y" * 600 + b"\r\n0\r\n\r\n", 0, 413,
             "body too large"),
            (b"bad", chunked, b"zz\r\nnot a chunk\r\n", 0, 400, "bad body"),
            # the rest past the body's total time (300 ms)
            (b"slow", b"Content-Length: 20\r\n", b"only part", 1.0, 408,
             "timeout"),
        ]
        # the handler then answers, raises, or sets a status of its own:
        # the client heard the refusal, and so does the log phase
        for then in (b"send", b"raise", b"status"):
            for key, head, body, pause, status, err in cases:
                key = key + b"-" + then + b"&then=" + then
                with self.subTest(key=key):
                    self.assertEqual(self.refused_upload(
                        key, head, body, pause,
                        b"and the rest" if pause else b""), status)
                    self.assertEqual(self.upload_log(key.split(b"&")[0]),
                                     "%d %d %s" % (status, status, err))

    def test_init_phases(self):
        c = self.count()
        self.assertEqual((c["init"], c["init_worker"]), ("init", "init_worker"))
        self.assertNotIn("not reached", self.error_log())

    def test_a_counter_kept_by_access_and_log_comes_back_to_zero(self):
        before = self.settled()
        self.leave_early(300, 150)
        mid = self.count()
        self.assertGreater(mid["n"], 0)  # handlers outlive their clients
        after = self.settled()
        self.assertEqual(after["n"], 0)
        # (a request whose close came before the server read it never
        # reached the route: not counted either way)
        self.assertGreater(after["accessed"] - before["accessed"], 200)
        self.assertEqual(after["logs"], after["accessed"])

    @unittest.skipUnless(shutil.which("wrk"), "wrk is not installed")
    def test_a_wrk_run_whose_clients_leave_leaves_the_counter_at_zero(self):
        before = self.settled()
        out = subprocess.run(
            ["wrk", "-t2", "-c32", "-d2s",
             "http://127.0.0.1:%d/limited?ms=300" % self.port],
            capture_output=True, text=True, timeout=60)
        self.assertIn("requests in", out.stdout, out.stdout + out.stderr)
        after = self.settled()
        self.assertEqual(after["n"], 0)
        self.assertGreater(after["accessed"] - before["accessed"], 32)
        self.assertEqual(after["logs"], after["accessed"])
        self.assertNotIn("moonflow: GET /limited", self.error_log())


if __name__ == "__main__":
    unittest.main()
