"""Rate and concurrency limits under `moonflow serve` (a route's `limit` in
the config, mf.limit): a route limited to 200 r/s with no burst lets
1,000 +- 2% requests through a 5 s wrk run at 64 connections (the others
are answered 429); a route's limit.conn comes back to 0 after clients that
closed while their handler slept; and the same 200 r/s limit kept in one
redis-server for two moonflow serve processes (two workers each) lets the
same total through both. "Through" is an answer 200: counted by the
handler in each server's shared dict. $MF_MOONFLOW is the binary;
everything on 127.0.0.1, bounded in count and time."""
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
            rate = 200, burst = 0, key = "global", dict = "limits",
            status = 429 } } },
        ["/cluster"] = { file = "through.lua", limit = { req = {
            rate = 200, burst = 0, key = "global", redis = "%(redis)s",
            dict = "limits", status = 429 } } },
        ["/conn"] = { file = "slow.lua", limit = { conn = {
            max = 1000, key = "global", dict = "limits" } } },
    },
}
'''
FILES = {
    "site/through.lua": '''local mf = require "moonflow"
return function(req, resp)
    mf.shared.limits:incr("through" .. req.path, 1, 0)
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
    resp:json { conn = d:get("route:conn:/conn|") or 0,
                rate = d:get("through/rate") or 0,
                cluster = d:get("through/cluster") or 0 }
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

    def state(self, srv):
        r = request(srv.port, b"GET /state HTTP/1.1\r\nHost: x\r\n"
                    b"Connection: close\r\n\r\n")
        self.assertEqual(r.status, 200)
        return json.loads(r.body)

    def run_wrk(self, procs):
        for p in procs:
            out, _ = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, out)
            self.assertTrue(re.search(r"Non-2xx or 3xx responses: \d+", out),
                            "no request was refused:\n" + out)

    @unittest.skipUnless(WRK, "wrk is not installed")
    def test_a_200_rps_route_lets_1000_through_in_5_s(self):
        srv = self.servers[0]
        self.run_wrk([wrk(srv.port, "/rate", 5, 64)])
        through = self.state(srv)["rate"]
        sys.stderr.write("200 r/s, 5 s, 64 connections: %d through\n" % through)
        self.assertTrue(980 <= through <= 1020, through)

    @unittest.skipUnless(WRK, "wrk is not installed")
    def test_a_redis_limit_holds_the_total_over_two_servers(self):
        self.run_wrk([wrk(srv.port, "/cluster", 3, 32)
                      for srv in self.servers])
        counts = [self.state(srv)["cluster"] for srv in self.servers]
        sys.stderr.write("redis 200 r/s, 3 s, 2 servers: %s through\n" % counts)
        self.assertTrue(all(c > 50 for c in counts), counts)  # both served
        self.assertTrue(588 <= sum(counts) <= 612, counts)

    def test_conn_slots_come_back_after_clients_left_mid_request(self):
        srv = self.servers[1]
        socks = []
        for _ in range(40):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET /conn HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        deadline = time.monotonic() + 2
        while self.state(srv)["conn"] < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(self.state(srv)["conn"], 40)
        for s in socks:  # they leave while their handlers sleep
            s.close()
        deadline = time.monotonic() + 3
        while self.state(srv)["conn"] != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.state(srv)["conn"], 0)

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
