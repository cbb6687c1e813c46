"""Upstream groups under `moonflow serve` against real backends (three
`moonflow serve` processes): weights over 10,000 requests, a backend
killed under wrk load skipped after max_fails with no failed request seen
by clients (the attempt moves to another server), taken back by the active
checker within one health interval once it listens again; a group with
every server dead answers "no live upstream". $MF_MOONFLOW is the binary;
everything on 127.0.0.1, bounded in count and time."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import Server, free_port, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
WEIGHTS = (5, 3, 2)
HEALTH_INTERVAL = 0.5


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def backend_files(root, name):
    write(os.path.join(root, "conf.lua"), '''return {
    root = "site", workers = 1, access_log = "off",
    routes = { ["/"] = { file = "who.lua" } },
}
''')
    write(os.path.join(root, "site", "who.lua"),
          'return function(req, resp) resp:send(%r) end\n' % name)


def front_files(root, ports, dead):
    servers = ", ".join('{"127.0.0.1:%d", weight = %d}' % (p, w)
                        for p, w in zip(ports, WEIGHTS))
    write(os.path.join(root, "conf.lua"), '''return {
    root = "site", workers = 2, access_log = "off",
    init_worker = "init_worker.lua", metrics = { path = "/metrics" },
    upstreams = { gone = { servers = { "127.0.0.1:%d" }, max_fails = 1 } },
    routes = { ["/"] = { file = "front.lua" },
               ["/burst"] = { file = "burst.lua" },
               ["/servers"] = { file = "servers.lua" },
               ["/dead"] = { file = "dead.lua" } },
}
''' % dead)
    write(os.path.join(root, "init_worker.lua"), '''local mf = require "moonflow"
mf.upstream("api", { servers = { %s }, max_fails = 2, fail_timeout = 30,
    health = { type = "http", path = "/", interval = %s, timeout = 0.3,
               rise = 1, fall = 1 } })
''' % (servers, HEALTH_INTERVAL))
    write(os.path.join(root, "site", "front.lua"), '''local mf = require "moonflow"
return function(req, resp)
    local r, err = mf.http.get("http://api/")
    if not r then resp.status = 502; return resp:send(err) end
    resp:send(r.body)
end
''')
    write(os.path.join(root, "site", "burst.lua"), '''local mf = require "moonflow"
return function(req, resp)
    local counts, n = {}, tonumber(req.query.n)
    for i = 1, n, 50 do -- 50 at a time, in parallel
        local threads = {}
        for j = 1, 50 do
            threads[j] = mf.spawn(function()
                local r = assert(mf.http.get("http://api/"))
                counts[r.body] = (counts[r.body] or 0) + 1
            end)
        end
        for j = 1, 50 do threads[j]:wait() end
    end
    resp:send(mf.json.encode(counts))
end
''')
    write(os.path.join(root, "site", "servers.lua"), '''local mf = require "moonflow"
return function(req, resp)
    resp:send(mf.json.encode(mf.upstream("api"):servers()))
end
''')
    write(os.path.join(root, "site", "dead.lua"), '''local mf = require "moonflow"
return function(req, resp)
    local r, err = mf.http.get("http://gone/")
    local r2, err2 = mf.http.get("http://gone/")
    resp:send(tostring(err) .. "\\n" .. tostring(err2))
end
''')


class Upstreams(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="moonflow-upstream-")
        cls.backends = []
        cls.ports = [free_port() for _ in WEIGHTS]
        try:
            for i, port in enumerate(cls.ports):
                d = os.path.join(cls.root, "b%d" % i)
                backend_files(d, "b%d" % i)
                cls.backends.append(cls.start_backend(i))
            front = os.path.join(cls.root, "front")
            front_files(front, cls.ports, free_port())
            cls.errors = os.path.join(cls.root, "front.log")
            cls.port = free_port()
            cls.front = Server([MOONFLOW, "serve", "--config",
                                os.path.join(front, "conf.lua"), "--listen",
                                "127.0.0.1:%d" % cls.port], cls.port,
                               stderr_path=cls.errors)
        except Exception:
            cls.stop_all()
            raise

    @classmethod
    def start_backend(cls, i):
        d = os.path.join(cls.root, "b%d" % i)
        return Server([MOONFLOW, "serve", "--config",
                       os.path.join(d, "conf.lua"), "--listen",
                       "127.0.0.1:%d" % cls.ports[i]], cls.ports[i])

    @classmethod
    def stop_all(cls):
        for b in cls.backends:
            b.stop()
        if getattr(cls, "front", None):
            cls.front.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        try:
            code, _, _ = cls.front.stop(sig=signal.SIGTERM, timeout=30)
            assert code == 0, "front exited %d:\n%s" % (code, cls.log()[-3000:])
        finally:
            cls.front = None
            cls.stop_all()

    @classmethod
    def log(cls):
        with open(cls.errors, errors="replace") as f:
            return f.read()

    def get(self, path, timeout=30):
        r = request(self.port, ("GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % path)
                    .encode(), timeout=timeout)
        self.assertEqual(r.status, 200, r.body)
        return r.body.decode()

    def states(self):
        return {s["address"]: s["state"]
                for s in json.loads(self.get("/servers"))}

    def test_1_weights_hold_within_5_percent_over_10000_requests(self):
        counts = json.loads(self.get("/burst?n=10000", timeout=120))
        self.assertEqual(sum(counts.values()), 10000)
        total = sum(WEIGHTS)
        for i, w in enumerate(WEIGHTS):
            want = 10000 * w / total
            got = counts.get("b%d" % i, 0)
            self.assertLessEqual(abs(got - want), want * 0.05,
                                 "b%d: %d, want %.0f" % (i, got, want))

    def test_2_every_server_dead_is_a_clear_error(self):
        first, second = self.get("/dead").split("\n")
        self.assertTrue(first.startswith("connection refused: http://127.0.0.1:"),
                        first)
        self.assertIn("(upstream 'gone')", first)
        self.assertEqual(second, "no live upstream: 'gone'")

    def test_4_a_bad_upstream_in_the_config_is_refused_at_start(self):
        bad = os.path.join(self.root, "bad.lua")
        write(bad, 'return { upstreams = { api = { servers = { "x" } },'
                   ' other = { servers = {}, polcy = "random" } } }\n')
        out = subprocess.run([MOONFLOW, "serve", "--config", bad,
                              "--listen", "127.0.0.1:%d" % free_port()],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        # The first bad entry met (a table's order) is named.
        self.assertTrue(
            "upstreams.api: server 'x' is not host:port" in out.stderr
            or "upstreams.other: unknown key 'polcy'" in out.stderr,
            out.stderr)

    @unittest.skipUnless(shutil.which("wrk"), "wrk is not installed")
    def test_3_a_killed_backend_is_skipped_and_taken_back(self):
        wrk = subprocess.Popen(
            ["wrk", "-t1", "-c16", "-d4s", "http://127.0.0.1:%d/" % self.port],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        victim = "127.0.0.1:%d" % self.ports[2]
        self.backends[2].stop()  # SIGKILL under load
        out, _ = wrk.communicate(timeout=30)
        done = re.search(r"(\d+) requests in", out)
        self.assertTrue(done and int(done.group(1)) > 1000, out)
        failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        # Every attempt that met the dead server moved to another one: the
        # clients saw none of max_fails (2) per worker (2) failures.
        self.assertIsNone(failed, out)
        self.assertNotEqual(self.states()[victim], "up")
        self.assertRegex(self.log(), "upstream 'api' server %s (down|unhealthy)"
                         % re.escape(victim))
        self.backends[2] = self.start_backend(2)
        back = time.monotonic()
        while self.states()[victim] != "up":
            self.assertLess(time.monotonic() - back, 5, self.states())
            time.sleep(0.05)
        # A probe runs every interval: the server is back within one (plus
        # the probe's own round trip and this poll's step).
        self.assertLess(time.monotonic() - back, HEALTH_INTERVAL + 0.3)
        # /metrics says so within its one-second tick, and counts the downs.
        deadline = time.monotonic() + 3
        series = ('moonflow_upstream_server_up{upstream="api",server="%s"} 1'
                  % victim)
        while series not in self.get("/metrics"):
            self.assertLess(time.monotonic(), deadline, self.get("/metrics"))
            time.sleep(0.1)
        downs = re.search(r'moonflow_upstream_server_downs_total'
                          r'\{upstream="api",server="%s"\} (\d+)'
                          % re.escape(victim), self.get("/metrics"))
        self.assertTrue(downs and int(downs.group(1)) >= 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
