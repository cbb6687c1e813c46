"""What an operator reads from `moonflow serve`: the /metrics page
(config metrics = { path = ... }) after a known mix of requests — hello,
404, 500, a fan-out to the HTTP fixture, Redis, a handler timeout, a
request the parser refuses, a client that leaves — checked value by value
on two workers and through Prometheus's own parser (promtool).
$MF_MOONFLOW is the binary, $MF_HTTP_FIXTURE the HTTP fixture (the ASan
twins in asan.*)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import Redis, Server, connect, free_port, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
FIXTURE = os.environ.get("MF_HTTP_FIXTURE", "build/spec/fixture/http_fixture")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')


def parse(text):
    """{(name, labels-as-text): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("not a sample line: %r" % line)
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def site(root, fixture_port, redis_url):
    files = {
        "hello.lua": 'local mf = require "moonflow"\n'
                     'local c = mf.metrics.counter("site_hellos_total", '
                     '"Hellos.", {"who"})\n'
                     'return function(req, resp)\n'
                     '  c:inc(1, {req.query.who or "anon"})\n'
                     '  resp:send("hello")\n'
                     'end\n',
        "boom.lua": 'return function() error("boom") end\n',
        "fanout.lua": 'local mf = require "moonflow"\n'
                      'return function(req, resp)\n'
                      '  local r = mf.parallel {\n'
                      '    mf.task.http { url = "http://127.0.0.1:%d/sleep?ms=60" },\n'
                      '    mf.task.http { url = "http://127.0.0.1:%d/sleep?ms=90" },\n'
                      '  }:wait()\n'
                      '  resp:send(r[1].status .. " " .. r[2].status)\n'
                      'end\n' % (fixture_port, fixture_port),
        "redis.lua": 'local mf = require "moonflow"\n'
                     'local r = mf.redis(%r)\n'
                     'return function(req, resp)\n'
                     '  resp:send(tostring(assert(r:call("INCR", "hits"))))\n'
                     'end\n' % redis_url,
        "upstream_timeout.lua": 'local mf = require "moonflow"\n'
                                'return function(req, resp)\n'
                                '  local ok, r = pcall(function() return mf.task.http {\n'
                                '    url = "http://127.0.0.1:%d/sleep?ms=400", timeout = 50,\n'
                                '  }:wait() end)\n'
                                '  resp:send("after the timeout")\n'
                                'end\n' % fixture_port,
        "slow.lua": 'local mf = require "moonflow"\n'
                    'return function(req, resp) mf.sleep(2000) resp:send("late") end\n',
    }
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    conf = os.path.join(root, "conf.lua")
    with open(conf, "w") as f:
        f.write('return { root = ".", access_log = "off",\n'
                '  metrics = { path = "/_metrics" },\n'
                '  routes = { ["/slow"] = { file = "slow.lua", timeout = 100 } } }\n')
    return conf


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mf-observability-")
        fport = free_port()
        cls.fixture = Server([FIXTURE, "--listen", "127.0.0.1:%d" % fport], fport)
        cls.redis = Redis(cls.tmp)
        root = os.path.join(cls.tmp, "site")
        os.makedirs(root)
        conf = site(root, fport, cls.redis.url())
        cls.port = free_port()
        cls.srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                          "127.0.0.1:%d" % cls.port, "--workers", "2"], cls.port)
        cls.mix()
        cls.text = cls.get("/_metrics").body.decode()
        cls.samples = parse(cls.text)

    @classmethod
    def tearDownClass(cls):
        code, _, err = cls.srv.stop(sig=signal.SIGTERM)
        cls.fixture.stop(sig=signal.SIGTERM)
        cls.redis.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if code != 0:
            raise AssertionError(err.decode(errors="replace")[-3000:])

    @classmethod
    def get(cls, path, method="GET", body=b""):
        head = b"%s %s HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % (
            method.encode(), path.encode(), len(body))
        return request(cls.port, head + body)

    @classmethod
    def mix(cls):
        """A known mix, over new connections so both workers take some."""
        for who in ("a", "a", "b"):
            assert cls.get("/hello?who=" + who).status == 200
        assert cls.get("/hello", "POST", b"0123456789").status == 200
        assert cls.get("/nope").status == 404
        assert cls.get("/nope/again").status == 404
        assert cls.get("/boom").status == 500
        for _ in range(2):
            assert cls.get("/fanout").body == b"200 200"
        for _ in range(3):
            assert cls.get("/redis").status == 200
        assert cls.get("/slow").status == 504
        assert cls.get("/upstream_timeout").status == 200
        bad = request(cls.port, b"GET / HTTP/1.1\r\nHost: h\r\nno colon\r\n\r\n")
        assert bad.status == 400
        s = connect(cls.port)  # leaves while its handler sleeps: 499
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
        time.sleep(0.05)
        s.close()
        time.sleep(0.2)  # past the 100 ms timeout of the one it left

    def value(self, name, labels=""):
        return self.samples.get((name, labels))

    def requests(self, route, method, status):
        return self.value("moonflow_http_requests_total",
                          '{route="%s",method="%s",status="%d"}' %
                          (route, method, status))

    def test_counts_each_request_by_route_method_and_status(self):
        self.assertEqual(self.requests("/hello", "GET", 200), 3)
        self.assertEqual(self.requests("/hello", "POST", 200), 1)
        self.assertEqual(self.requests("", "GET", 404), 2)
        self.assertEqual(self.requests("/boom", "GET", 500), 1)
        self.assertEqual(self.requests("/fanout", "GET", 200), 2)
        self.assertEqual(self.requests("/redis", "GET", 200), 3)
        self.assertEqual(self.requests("/slow", "GET", 504), 1)
        self.assertEqual(self.requests("/slow", "GET", 499), 1)
        self.assertEqual(self.requests("", "GET", 400), 1)
        total = sum(v for (n, _), v in self.samples.items()
                    if n == "moonflow_http_requests_total")
        self.assertEqual(total, 16)  # the page's own request is not in yet

    def test_tasks_by_kind_and_final_state(self):
        def tasks(kind, state):
            return self.value("moonflow_tasks_total",
                              '{kind="%s",state="%s"}' % (kind, state))
        self.assertEqual(tasks("http", "success"), 4)
        self.assertEqual(tasks("http", "timeout"), 1)
        self.assertEqual(tasks("parallel", "success"), 2)
        self.assertEqual(tasks("redis", "success"), 3)
        name = "moonflow_task_duration_seconds"
        self.assertEqual(self.value(name + "_count", '{kind="http"}'), 5)
        # 60 + 90 ms twice, and the timeout at 50 ms
        self.assertGreaterEqual(self.value(name + "_sum", '{kind="http"}'),
                                2 * (0.06 + 0.09) + 0.05)
        self.assertLess(self.value(name + "_sum", '{kind="http"}'), 0.6)

    def test_latency_histograms_per_route(self):
        name = "moonflow_http_request_duration_seconds"
        self.assertEqual(self.value(name + "_count", '{route="/fanout"}'), 2)
        # Both calls overlap: about 90 ms each, never 150.
        fan = self.value(name + "_sum", '{route="/fanout"}')
        self.assertGreaterEqual(fan, 2 * 0.09)
        self.assertLess(fan, 2 * 0.15)
        self.assertEqual(self.value(name + "_bucket", '{route="/fanout",le="0.05"}'), 0)
        self.assertEqual(self.value(name + "_bucket", '{route="/fanout",le="+Inf"}'), 2)
        self.assertEqual(self.value(name + "_count", '{route="/hello"}'), 4)
        self.assertEqual(self.value(name + "_count", '{route="/slow"}'), 2)

    def test_body_bytes_in_and_out(self):
        self.assertEqual(self.value("moonflow_http_request_body_bytes_total",
                                    '{route="/hello"}'), 10)
        self.assertEqual(self.value("moonflow_http_response_body_bytes_total",
                                    '{route="/hello"}'), 4 * len("hello"))

    def test_user_metrics_add_up_over_the_workers(self):
        self.assertEqual(self.value("site_hellos_total", '{who="a"}'), 2)
        self.assertEqual(self.value("site_hellos_total", '{who="b"}'), 1)
        self.assertEqual(self.value("site_hellos_total", '{who="anon"}'), 1)

    def test_lua_memory_of_each_worker(self):
        for worker in ("0", "1"):
            self.assertGreater(self.value("moonflow_lua_memory_bytes",
                                          '{worker="%s"}' % worker), 10000)

    def test_the_page_itself_counts_under_its_path(self):
        page = self.get("/_metrics")
        self.assertEqual(page.headers.get("content-type"),
                         "text/plain; version=0.0.4; charset=utf-8")
        later = parse(page.body.decode())
        key = ("moonflow_http_requests_total",
               '{route="/_metrics",method="GET",status="200"}')
        self.assertGreaterEqual(later.get(key, 0), 1)

    def test_prometheus_parses_the_page(self):
        out = subprocess.run(["promtool", "check", "metrics"], input=self.text,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


class MetricsConfig(unittest.TestCase):
    def refused(self, line):
        root = tempfile.mkdtemp(prefix="mf-metrics-conf-")
        self.addCleanup(shutil.rmtree, root, True)
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", metrics = %s }\n' % line)
        out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2, out.stderr)
        return out.stderr

    def test_a_bad_metrics_section_is_refused_at_start_naming_the_key(self):
        self.assertIn("metrics.path: a path starting with / (no query) "
                      "expected, got metrics", self.refused('{ path = "metrics" }'))
        self.assertIn("metrics.path: a path starting with / (no query) "
                      "expected, got none", self.refused("{}"))
        self.assertIn("metrics.listen", self.refused('{ path = "/m", listen = "x" }'))
        self.assertIn("metrics: a table expected, got a string",
                      self.refused('"/metrics"'))


if __name__ == "__main__":
    unittest.main()
