"""What an operator reads from `moonflow serve`: the /metrics page
(config metrics = { path = ... }) after a known mix of requests — hello,
404, 500, a fan-out to the HTTP fixture, Redis, a handler timeout, a
request the parser refuses, a client that leaves — checked value by value
on two workers and through Prometheus's own parser (promtool).
$MF_MOONFLOW is the binary, $MF_HTTP_FIXTURE the HTTP fixture (the ASan
twins in asan.*)."""
import json
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



class RequestIds(unittest.TestCase):
    """req.id: a client's valid X-Request-Id or a made one; the same id in
    the access line (combined and JSON), in mf.log's lines and in the
    X-Request-Id of the HTTP calls the handler makes."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mf-request-ids-")
        cls.port = free_port()
        files = {
            "up.lua": 'local mf = require "moonflow"\n'
                      'return function(req, resp)\n'
                      '  mf.log("warn", "handling")\n'
                      '  local r = mf.http.get("http://127.0.0.1:%d/echo_id")\n'
                      '  resp:send(req.id .. " " .. r.body)\n'
                      'end\n' % cls.port,
            "echo_id.lua": 'return function(req, resp)\n'
                           '  resp:send(req.headers["x-request-id"] or "none")\n'
                           'end\n',
            "own.lua": 'local mf = require "moonflow"\n'
                       'return function(req, resp)\n'
                       '  local r = mf.http.get("http://127.0.0.1:%d/echo_id",\n'
                       '                        { headers = { ["X-REQUEST-ID"] = "mine" } })\n'
                       '  resp:send(r.body)\n'
                       'end\n' % cls.port,
            "slow.lua": 'local mf = require "moonflow"\n'
                        'return function(req, resp) mf.sleep(2000) end\n',
        }
        for name, text in files.items():
            with open(os.path.join(cls.tmp, name), "w") as f:
                f.write(text)
        cls.log = os.path.join(cls.tmp, "access.log")
        conf = os.path.join(cls.tmp, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log = "access.log",\n'
                    '  access_log_format = "json" }\n')
        cls.err_path = os.path.join(cls.tmp, "stderr")
        cls.srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                          "127.0.0.1:%d" % cls.port], cls.port,
                         stderr_path=cls.err_path)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop(sig=signal.SIGTERM)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path, headers=b""):
        return request(self.port, b"GET %s HTTP/1.1\r\nHost: h\r\n%s\r\n" %
                       (path.encode(), headers))

    def lines(self, needle, count=1):
        """The access lines (parsed) holding needle, once count are there
        (lines are written once a second)."""
        deadline = time.time() + 10
        while True:
            with open(self.log) as f:
                found = [json.loads(l) for l in f if needle in l]
            if len(found) >= count or time.time() > deadline:
                return found
            time.sleep(0.05)

    def test_a_made_id_is_32_hex_digits_and_reaches_the_upstream(self):
        mine, upstream = self.get("/up").body.decode().split()
        self.assertRegex(mine, r"^[0-9a-f]{32}$")
        self.assertEqual(upstream, mine)
        self.assertNotEqual(self.get("/up").body.decode().split()[0], mine)
        both = self.lines('"request_id":"%s"' % mine, count=2)
        self.assertEqual(sorted(l["uri"] for l in both), ["/echo_id", "/up"])
        with open(self.err_path) as f:
            self.assertIn("[warn] GET /up [%s]: handling" % mine, f.read())

    def test_a_valid_client_id_is_kept_and_a_bad_one_replaced(self):
        body = self.get("/up", b"X-Request-Id: order-42:a/b+c=d@e.f~g\r\n").body
        self.assertEqual(body, b"order-42:a/b+c=d@e.f~g order-42:a/b+c=d@e.f~g")
        for bad in (b"has space", b"x" * 129, b"quote\"d", b""):
            mine = self.get("/up", b"X-Request-Id: " + bad + b"\r\n").body.split()
            self.assertRegex(mine[0].decode(), r"^[0-9a-f]{32}$")

    def test_a_handler_naming_its_own_id_sends_that_one(self):
        self.assertEqual(self.get("/own").body, b"mine")

    def test_json_lines_with_every_field_for_answers_refusals_and_leavers(self):
        self.get("/up?q=1", b'User-Agent: a"b\\c\xff\r\nReferer: r\r\n')
        line = self.lines('"uri":"/up?q=1"')[0]
        self.assertEqual(set(line), {"time", "remote_addr", "method", "uri",
                                     "protocol", "status", "body_bytes_sent",
                                     "referer", "user_agent", "request_time",
                                     "request_id"})
        self.assertRegex(line["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}"
                                       r"[+-]\d\d:\d\d$")
        self.assertEqual((line["remote_addr"], line["method"], line["protocol"],
                          line["status"], line["referer"]),
                         ("127.0.0.1", "GET", "HTTP/1.1", 200, "r"))
        self.assertEqual(line["user_agent"], 'a"b\\c\u00ff')
        self.assertEqual(line["body_bytes_sent"], 65)
        bad = request(self.port, b"GET /refused HTTP/1.1\r\nHost: h\r\nno colon\r\n\r\n")
        self.assertEqual(bad.status, 400)
        refused = self.lines('"uri":"/refused"')[0]
        self.assertEqual((refused["status"], refused["body_bytes_sent"]), (400, 0))
        self.assertRegex(refused["request_id"], r"^[0-9a-f]{32}$")
        s = connect(self.port)
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: h\r\nX-Request-Id: gone-1\r\n\r\n")
        time.sleep(0.1)
        s.close()
        left = self.lines('"request_id":"gone-1"')[0]
        self.assertEqual(left["status"], 499)
        self.assertIsNone(left["referer"])


class AccessLogConfig(unittest.TestCase):
    def test_an_unknown_format_is_refused_naming_the_key(self):
        root = tempfile.mkdtemp(prefix="mf-log-conf-")
        self.addCleanup(shutil.rmtree, root, True)
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log_format = "xml" }\n')
        out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn('access_log_format: "combined" or "json" expected, '
                      'got "xml"', out.stderr)


if __name__ == "__main__":
    unittest.main()
