"""Rate and concurrency limits under `moonflow serve` (a route's `limit` in
the config, mf.limit): a route limited to 200 r/s (burst 10) lets 200 a
second +- 2% through a 5 s wrk run at 64 connections (1,000 in 5 s; the
others are answered 429), counted over the span from the first request
let through to the last; the same limit kept in one redis-server for two
moonflow serve processes (two workers each) holds the same rate over
both, and a Redis count of 500 lets exactly 500 through both; a route's
limit.conn comes back to 0 after clients that closed while their handler
slept (in the dict, and in Redis); a bad limit stops the start. "Through"
is an answer 200, counted by the handler in each server's shared dict.
$MF_MOONFLOW is the binary; everything on 127.0.0.1, bounded in count and
time."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from harness import Redis, Server, free_port, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
WRK = shutil.which("wrk")

CONF = '''return {
    root = "site", workers = 2, access_log = "off",
    shared = { limits = 1048576 },
    routes = {
        ["/rate"] = { file = "through.lua", limit = { req = {
            rate = 200, burst = 10, key = "global", dict = "limits",
            status = 429 } } },
        ["/cluster"] = { file = "through.lua", limit = { req = {
            rate = 200, burst = 10, key = "global", redis = "%(redis)s",
            dict = "limits", status = 429 } } },
        ["/total"] = { file = "through.lua", limit = { count = {
            limit = 500, window = 600, key = "global", redis = "%(redis)s" } } },
        ["/conn"] = { file = "slow.lua", limit = { conn = {
            max = 1000, key = "global", dict = "limits" } } },
        ["/rconn"] = { file = "slow.lua", limit = { conn = {
            max = 1000, key = "global", redis = "%(redis)s" } } },
        ["/peer"] = { file = "through.lua", limit = { req = {
            rate = 1, burst = 0, dict = "limits" } } },
    },
}
'''
FILES = {
    "site/through.lua": '''local mf = require "moonflow"
local d = mf.shared.limits
return function(req, resp)
    local now = mf.now() -- CLOCK_MONOTONIC: one clock for both servers
    d:incr("through" .. req.path, 1, 0)
    d:add("first" .. req.path, now)
    d:set("last" .. req.path, now)
    resp:send("ok")
end
''',
    "site/reset.lua": '''local mf = require "moonflow"
return function(req, resp)
    for _, k in ipairs { "through", "first", "last" } do
        mf.shared.limits:delete(k .. req.query.path)
    end
    resp:send("ok")
end
''',
    "site/slow.lua": '''local mf = require "moonflow"
return function(req, resp)
    mf.sleep(300)
    resp:send("slow")
end
''',
    "site/state.lua": '''local mf = require "moonflow"
return function(req, resp)
    local d = mf.shared.limits
    local p = req.query.path or "/rate"
    resp:json { conn = d:get("route:conn:/conn|") or 0,
                through = d:get("through" .. p) or 0,
                first = d:get("first" .. p), last = d:get("last" .. p) }
end
''',
}


def wrk(port, path, seconds, conns):
    return subprocess.Popen(
        [WRK, "-t", "2", "-c", str(conns), "-d", "%ds" % seconds,
         "http://127.0.0.1:%d%s" % (port, path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class LimitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mf-limit-")
        cls.redis = Redis(cls.tmp)
        conf = os.path.join(cls.tmp, "conf.lua")
        with open(conf, "w") as f:
            f.write(CONF % {"redis": cls.redis.url()})
        for name, text in FILES.items():
            path = os.path.join(cls.tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        cls.servers = []
        for _ in range(2):
            port = free_port()
            cls.servers.append(Server(
                [MOONFLOW, "serve", "--config", conf, "--listen",
                 "127.0.0.1:%d" % port], port))

    @classmethod
    def tearDownClass(cls):
        try:
            for srv in cls.servers:
                code, _, err = srv.stop(sig=signal.SIGTERM, timeout=30)
                if code != 0:
                    raise AssertionError("serve exited %d: %s" %
                                         (code, err[-2000:]))
        finally:
            cls.redis.kill()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, srv, path):
        r = request(srv.port, b"GET " + path.encode() + b" HTTP/1.1\r\n"
                    b"Host: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(r.status, 200)
        return r.body

    def state(self, srv, path="/rate"):
        return json.loads(self.get(srv, "/state?path=" + path))

    def run_wrk(self, procs):
        for p in procs:
            out, _ = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, out)
            self.assertTrue(re.search(r"Non-2xx or 3xx responses: \d+", out),
                            "no request was refused:\n" + out)

    def rate_run(self, servers, path, seconds, conns):
        """(requests through, the ones due): 200 a second over the span
        from the first to the last one let through, and the first."""
        for srv in servers:
            self.get(srv, "/reset?path=" + path)
        self.run_wrk([wrk(srv.port, path, seconds, conns) for srv in servers])
        states = [self.state(srv, path) for srv in servers]
        through = sum(st["through"] for st in states)
        span = max(st["last"] for st in states) - \
            min(st["first"] for st in states)
        sys.stderr.write("%s: %d through in %d ms (%s)\n" % (
            path, through, span, [st["through"] for st in states]))
        return through, 200 * span / 1000.0 + 1

    def assert_rate(self, servers, path, seconds, conns):
        # A leaky bucket without burst loses the turns of a server that
        # did not run at all for them (no request reached it): on a
        # machine busy elsewhere, one run may; a second one is allowed.
        for attempt in range(2):
            through, due = self.rate_run(servers, path, seconds, conns)
            if abs(through - due) <= 0.02 * due:
                break
        self.assertLessEqual(abs(through - due), 0.02 * due, (through, due))
        return through

    @unittest.skipUnless(WRK, "wrk is not installed")
    def test_a_200_rps_route_lets_1000_through_in_5_s(self):
        # wrk's 5 s run spans about 5.1 s from the first answer to the
        # last: 1,000 +- 2% at 200 a second is checked on that span. A
        # burst of 10 delays (nginx's limit_req burst without nodelay)
        # rather than refuses a request a loaded machine brings a few ms
        # late; with burst 0 such a turn is lost (3-4% fewer under a full
        # parallel test run), and what goes through is still 200 a second.
        self.assert_rate(self.servers[:1], "/rate", 5, 64)

    @unittest.skipUnless(WRK, "wrk is not installed")
    def test_a_redis_rate_holds_over_two_servers(self):
        # burst 10: a request delayed up to 50 ms keeps the turns a Redis
        # round trip late on a loaded machine would lose (burst 0 lost 4%
        # there); the rate let through is still 200 a second
        self.assert_rate(self.servers, "/cluster", 3, 32)

    @unittest.skipUnless(WRK, "wrk is not installed")
    def test_a_redis_count_holds_its_total_over_two_servers(self):
        # 60 requests to each server in turn first: both take their share
        # of the count however late a loaded machine starts one server's
        # wrk (one alone can spend the 500 in a tenth of a second); then
        # both at once, to take the rest of the count together.
        for _ in range(60):
            for srv in self.servers:
                self.get(srv, "/total")
        self.run_wrk([wrk(srv.port, "/total", 2, 16) for srv in self.servers])
        counts = [self.state(srv, "/total")["through"]
                  for srv in self.servers]
        self.assertTrue(all(c > 50 for c in counts), counts)  # both served
        self.assertEqual(sum(counts), 500, counts)

    def leave_mid_request(self, path, count):
        """40 clients that close while their handlers sleep: count() goes
        to 40, then back to 0."""
        srv = self.servers[1]
        socks = []
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        deadline = time.monotonic() + 2
        while count() < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(count(), 40)
        for s in socks:
            s.close()
        deadline = time.monotonic() + 3
        while count() != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(count(), 0)

    def test_conn_slots_come_back_after_clients_left_mid_request(self):
        self.leave_mid_request(
            b"/conn", lambda: self.state(self.servers[1])["conn"])

    def test_redis_conn_slots_come_back_after_clients_left(self):
        def count():
            out = subprocess.run(
                ["redis-cli", "-p", str(self.redis.port), "GET",
                 "mf:limit:route:conn:/rconn|"],
                capture_output=True, text=True, timeout=5).stdout.strip()
            return int(out or 0)
        self.leave_mid_request(b"/rconn", count)

    def test_a_route_limit_on_the_client_address_refuses_past_its_rate(self):
        # remote_addr, the default key: one C call a request (limit_peer).
        # One a second, no burst: the second at once is refused (503), and
        # another client address would have a bucket of its own.
        srv = self.servers[0]
        first = request(srv.port, b"GET /peer HTTP/1.1\r\nHost: x\r\n"
                        b"Connection: close\r\n\r\n")
        second = request(srv.port, b"GET /peer HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\n\r\n")
        self.assertEqual(first.status, 200)
        self.assertEqual(second.status, 503)
        self.assertEqual(second.body, b"503 Service Unavailable\n")
        time.sleep(1.1)  # a second leaks the bucket
        third = request(srv.port, b"GET /peer HTTP/1.1\r\nHost: x\r\n"
                        b"Connection: close\r\n\r\n")
        self.assertEqual(third.status, 200)

    def test_a_bad_limit_in_the_config_stops_the_start_naming_it(self):
        bad = os.path.join(self.tmp, "bad.lua")
        cases = [
            ('req = { rate = 5, key = "bogus", dict = "limits" }',
             'routes[/x].limit.req.key: "remote_addr", "uri", "host", '
             '"global" or "header:NAME" expected, got \'bogus\''),
            ('conn = { key = "global", dict = "limits" }',
             "routes[/x].limit.conn.max: missing"),
            ('count = { limit = 5, window = 1, rate = 3, dict = "limits" }',
             "routes[/x].limit.count.rate: unknown key"),
            ('req = { rate = 5 }', "routes[/x].limit.req.dict: missing"),
        ]
        for limit, message in cases:
            with open(bad, "w") as f:
                f.write('return { root = "site", routes = { ["/x"] = '
                        '{ file = "through.lua", limit = { %s } } } }' % limit)
            p = subprocess.run([MOONFLOW, "serve", "--config", bad, "--listen",
                                "127.0.0.1:%d" % free_port()],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("bad.lua: " + message, p.stderr)


if __name__ == "__main__":
    unittest.main()
