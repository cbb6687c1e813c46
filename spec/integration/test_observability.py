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

from harness import Redis, Server, connect, free_port, request, wait_port

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


def write_site(root, files, conf):
    """Writes the scripts and conf.lua (its text) into root; the conf's
    path."""
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    path = os.path.join(root, "conf.lua")
    with open(path, "w") as f:
        f.write(conf)
    return path


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
    return write_site(root, files,
                      'return { root = ".", access_log = "off",\n'
                      '  metrics = { path = "/_metrics" },\n'
                      '  routes = { ["/slow"] = { file = "slow.lua", timeout = 100 } } }\n')


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
        cls.fixture_port = fport
        time.sleep(1.2)  # the pools' gauges are read once a second
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

    def test_connections_loop_lag_and_pool_gauges(self):
        for worker in ("0", "1"):
            w = '{worker="%s"}' % worker
            self.assertGreaterEqual(self.value("moonflow_http_connections", w), 0)
            self.assertGreaterEqual(self.value("moonflow_http_connections_idle", w), 0)
            lag = self.value("moonflow_loop_lag_seconds", w)
            self.assertGreaterEqual(lag, 0)
            self.assertLess(lag, 1)
        self.assertGreaterEqual(self.value("moonflow_pool_threads"), 1)
        self.assertEqual(self.value("moonflow_pool_queued_jobs"), 0)
        self.assertIsNotNone(self.value("moonflow_pool_jobs_completed_total"))
        self.assertEqual(self.value("moonflow_reloads_total", '{result="ok"}'), 0)

    def summed(self, name, label_part):
        return sum(v for (n, labels), v in self.samples.items()
                   if n == name and label_part in labels)

    def test_client_pools_and_redis_batching_by_endpoint(self):
        http = 'endpoint="http://127.0.0.1:%d"' % self.fixture_port
        conns = self.summed("moonflow_http_client_connections", http)
        idle = self.summed("moonflow_http_client_connections_idle", http)
        # a fan-out opens two at once; the timed-out call closes its own
        self.assertGreaterEqual(conns, 1)
        self.assertEqual(idle, conns)  # all back in the pool
        self.assertEqual(self.summed("moonflow_http_client_waiters", http), 0)
        self.assertEqual(self.summed("moonflow_http_client_evictions_total", http), 0)
        redis = 'endpoint="127.0.0.1:%d/0"' % self.redis.port
        self.assertEqual(self.summed("moonflow_redis_commands_total", redis), 3)
        writes = self.summed("moonflow_redis_writes_total", redis)
        self.assertGreaterEqual(writes, 1)
        self.assertLessEqual(writes, 3 + 2)  # + a SELECT or AUTH per connection
        self.assertGreaterEqual(self.summed("moonflow_redis_connects_total", redis), 1)

    def test_an_idle_keep_alive_connection_shows(self):
        s = connect(self.port)
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n")
        s.recv(4096)
        deadline = time.monotonic() + 5
        idle = 0
        while time.monotonic() < deadline and idle < 1:
            time.sleep(0.25)  # the gauges are set once a second
            page = parse(self.get("/_metrics").body.decode())
            idle = sum(v for (n, _), v in page.items()
                       if n == "moonflow_http_connections_idle")
        s.close()
        self.assertGreaterEqual(idle, 1)

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


class Reloads(unittest.TestCase):
    def test_reloads_done_and_failed_are_counted(self):
        root = tempfile.mkdtemp(prefix="mf-reloads-")
        self.addCleanup(shutil.rmtree, root, True)
        script = os.path.join(root, "r.lua")

        def save(text):
            tmp = script + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.rename(tmp, script)
            time.sleep(0.3)  # the watcher's event

        save('return function(req, resp) resp:send("one") end\n')
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log = "off", '
                    'metrics = { path = "/m" } }\n')
        port = free_port()
        srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1"], port)
        get = lambda p: request(port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % p)
        try:
            self.assertEqual(get(b"/r").body, b"one")
            save('return function(req, resp) resp:send("two") end\n')
            self.assertEqual(get(b"/r").body, b"two")
            save('return function(req, resp) resp:send( end\n')
            self.assertEqual(get(b"/r").body, b"two")  # the last good one
            time.sleep(1.2)  # the counts are read once a second
            page = parse(get(b"/m").body.decode())
        finally:
            srv.stop(sig=signal.SIGTERM)
        self.assertEqual(page[("moonflow_reloads_total", '{result="ok"}')], 1)
        self.assertEqual(page[("moonflow_reloads_total", '{result="failed"}')], 1)


class MetricsListen(unittest.TestCase):
    """metrics.listen: the page on an address of its own, held by one
    server only."""

    def test_the_page_is_served_on_its_own_address_only(self):
        root = tempfile.mkdtemp(prefix="mf-metrics-listen-")
        self.addCleanup(shutil.rmtree, root, True)
        mport = free_port()
        conf = write_site(root, {"hi.lua": 'return function(req, resp) '
                                           'resp:send("hi") end\n'},
                          'return { root = ".", access_log = "off", metrics = '
                          '{ path = "/m", listen = "127.0.0.1:%d" } }\n' % mport)
        port = free_port()
        srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "2"], port)
        get = lambda p, path: request(p, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % path)
        try:
            wait_port(mport, srv.proc)  # its own listener may come up later
            self.assertEqual(get(port, b"/hi").body, b"hi")
            self.assertEqual(get(port, b"/m").status, 404)  # not on the site
            page = get(mport, b"/m")
            self.assertEqual(page.status, 200)
            self.assertIn(b'moonflow_http_requests_total{route="/hi",method="GET",'
                          b'status="200"} 1', page.body)
            self.assertEqual(get(mport, b"/hi").status, 404)
            # A second server cannot have the page's address.
            other = free_port()
            out = subprocess.run([MOONFLOW, "serve", "--config", conf, "--listen",
                                  "127.0.0.1:%d" % other], capture_output=True,
                                 text=True, timeout=20)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("metrics.listen 127.0.0.1:%d" % mport, out.stderr)
            self.assertIn("already in use", out.stderr)
            self.assertEqual(get(mport, b"/m").status, 200)  # still ours
        finally:
            code, _, err = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0, err)


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
        self.assertIn("metrics.listen: ", self.refused('{ path = "/m", listen = "x" }'))
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
            "stream.lua": 'return function(req, resp)\n'
                          '  resp:write("a"); resp:write("b") end\n',
            "own_header.lua": 'return function(req, resp)\n'
                              '  resp.headers["x-REQUEST-id"] = "theirs"\n'
                              '  resp:send("") end\n',
        }
        cls.log = os.path.join(cls.tmp, "access.log")
        conf = write_site(cls.tmp, files,
                          'return { root = ".", access_log = "access.log",\n'
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
        deadline = time.monotonic() + 10
        while True:
            with open(self.log) as f:
                found = [json.loads(l) for l in f if needle in l]
            if len(found) >= count or time.monotonic() > deadline:
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

    def test_made_ids_count_up_in_hex_across_carries(self):
        # A worker's made ids: its prefix, then its serial in 16 hex
        # digits, counted up past every ...f (a carry) as a number.
        by_worker = {}
        for _ in range(80):
            made = self.get("/stream").header("x-request-id")
            self.assertRegex(made, r"^[0-9a-f]{32}$")
            by_worker.setdefault(made[:16], []).append(int(made[16:], 16))
        for serials in by_worker.values():
            self.assertEqual(serials, sorted(set(serials)))
        self.assertGreater(max(max(v) for v in by_worker.values()), 16)

    def test_a_valid_client_id_is_kept_and_a_bad_one_replaced(self):
        body = self.get("/up", b"X-Request-Id: order-42:a/b+c=d@e.f~g\r\n").body
        self.assertEqual(body, b"order-42:a/b+c=d@e.f~g order-42:a/b+c=d@e.f~g")
        for bad in (b"has space", b"x" * 129, b"quote\"d", b""):
            mine = self.get("/up", b"X-Request-Id: " + bad + b"\r\n").body.split()
            self.assertRegex(mine[0].decode(), r"^[0-9a-f]{32}$")

    def test_every_answer_carries_its_id_back(self):
        # The client's valid id comes back as it was sent; a made one is
        # the id of the access line. Handler answers, streams, 404s.
        r = self.get("/up", b"X-Request-Id: back-1\r\n")
        self.assertEqual(r.header("x-request-id"), "back-1")
        r = self.get("/up")
        made = r.body.decode().split()[0]
        self.assertEqual(r.header("x-request-id"), made)
        r = self.get("/stream", b"X-Request-Id: back-2\r\n")
        self.assertEqual((r.body, r.header("x-request-id")), (b"ab", "back-2"))
        r = self.get("/nowhere")
        self.assertEqual(r.status, 404)
        made = r.header("x-request-id")
        self.assertRegex(made, r"^[0-9a-f]{32}$")
        self.assertEqual(self.lines('"request_id":"%s"' % made)[0]["uri"],
                         "/nowhere")
        # An id the handler sets itself is the one sent, once.
        r = self.get("/own_header", b"X-Request-Id: back-3\r\n")
        self.assertEqual(r.header("x-request-id"), "theirs")
        self.assertEqual(r.raw_head.lower().count(b"x-request-id"), 1)

    def test_a_handler_naming_its_own_id_sends_that_one(self):
        self.assertEqual(self.get("/own").body, b"mine")

    def test_a_json_line_parses_whatever_the_client_sent(self):
        path = b"/hello?" + b"a%22" * 400  # past the 1,024 bytes logged
        agent = b"\xff\"\\" * 200     # 600 bytes to escape, 6 each at most
        r = request(self.port, b"GET " + path + b" HTTP/1.1\r\nHost: h\r\n"
                    b"User-Agent: " + agent + b"\r\nReferer: " + agent +
                    b"\r\nX-Request-Id: long-1\r\n\r\n")
        self.assertEqual(r.status, 404)  # no /hello script in this site
        line = self.lines('"request_id":"long-1"')[0]
        self.assertEqual(line["uri"], path[:1024].decode("latin-1"))
        self.assertEqual(line["user_agent"], agent[:256].decode("latin-1"))
        self.assertEqual(line["referer"], agent[:256].decode("latin-1"))

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
        self.assertEqual((refused["status"], refused["body_bytes_sent"]),
                         (400, len(bad.body)))  # "400 Bad Request\n"
        self.assertRegex(refused["request_id"], r"^[0-9a-f]{32}$")
        s = connect(self.port)
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: h\r\nX-Request-Id: gone-1\r\n\r\n")
        time.sleep(0.1)
        s.close()
        left = self.lines('"request_id":"gone-1"')[0]
        self.assertEqual(left["status"], 499)
        self.assertIsNone(left["referer"])


class RequestIdHeader(unittest.TestCase):
    """request_id_header: renames the header the id goes back in, or
    ("off") sends none; a name that cannot be one is refused at start."""

    def serve(self, setting):
        root = tempfile.mkdtemp(prefix="mf-id-header-")
        self.addCleanup(shutil.rmtree, root, True)
        conf = write_site(root, {"a.lua": 'return function(req, resp)\n'
                                          '  resp:send(req.id) end\n'},
                          'return { root = ".", request_id_header = %s }\n'
                          % setting)
        port = free_port()
        srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1"], port)
        self.addCleanup(srv.stop, signal.SIGTERM)
        return port

    def get(self, port, path):
        return request(port, b"GET %s HTTP/1.1\r\nHost: h\r\n"
                       b"X-Request-Id: sent-1\r\n\r\n" % path)

    def test_a_renamed_header_carries_the_id(self):
        port = self.serve('"X-Trace-Id"')
        for path in (b"/a", b"/missing"):
            r = self.get(port, path)
            self.assertEqual(r.header("x-trace-id"), "sent-1")
            self.assertIsNone(r.header("x-request-id"))

    def test_off_sends_no_id(self):
        port = self.serve('"off"')
        r = self.get(port, b"/a")
        self.assertEqual(r.body, b"sent-1")  # still the request's id
        self.assertIsNone(r.header("x-request-id"))

    def test_a_name_that_cannot_be_one_is_refused(self):
        root = tempfile.mkdtemp(prefix="mf-id-header-")
        self.addCleanup(shutil.rmtree, root, True)
        for bad in ('"X Id"', '"Content-Length"', '""'):
            conf = write_site(root, {}, 'return { root = ".", '
                              'request_id_header = %s }\n' % bad)
            out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                                 capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("request_id_header: a header name", out.stderr)


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


class Traces(unittest.TestCase):
    """trace = { file, sample, token }: a traced fan-out shows both calls
    under their parallel, overlapping, with the times the backend slept;
    `moonflow trace` draws it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mf-traces-")
        fport = free_port()
        cls.fixture = Server([FIXTURE, "--listen", "127.0.0.1:%d" % fport], fport)
        dead = free_port()
        files = {
            "fanout.lua": 'local mf = require "moonflow"\n'
                          'return function(req, resp)\n'
                          '  local r = mf.parallel {\n'
                          '    mf.task.http { url = "http://127.0.0.1:%d/sleep?ms=60" },\n'
                          '    mf.task.http { url = "http://127.0.0.1:%d/sleep?ms=90" },\n'
                          '  }:wait()\n'
                          '  resp:send("ok")\n'
                          'end\n' % (fport, fport),
            "dead.lua": 'local mf = require "moonflow"\n'
                        'return function(req, resp)\n'
                        '  local r = mf.task.http { url = "http://127.0.0.1:%d/" }:wait()\n'
                        '  resp:send(r.error or "?")\n'
                        'end\n' % dead,
            "hello.lua": 'return function(req, resp) resp:send("hi") end\n',
        }
        cls.file = os.path.join(cls.tmp, "trace.jsonl")
        conf = write_site(cls.tmp, files,
                          'return { root = ".", access_log = "off",\n'
                          '  trace = { file = "trace.jsonl", sample = 0, '
                          'token = "t0k" } }\n')
        cls.port = free_port()
        cls.srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                          "127.0.0.1:%d" % cls.port], cls.port)

    @classmethod
    def tearDownClass(cls):
        code, _, err = cls.srv.stop(sig=signal.SIGTERM)
        cls.fixture.stop(sig=signal.SIGTERM)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        if code != 0:
            raise AssertionError(err.decode(errors="replace")[-3000:])

    def get(self, path, headers=b""):
        return request(self.port, b"GET %s HTTP/1.1\r\nHost: h\r\n%s\r\n" %
                       (path.encode(), headers))

    def trace_of(self, request_id):
        """The spans of the trace of request_id, once its line is there."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(self.file):
                with open(self.file) as f:
                    for line in f:
                        doc = json.loads(line)
                        spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
                        attrs = {a["key"]: a["value"] for a in spans[0]["attributes"]}
                        if attrs["moonflow.request_id"]["stringValue"] == request_id:
                            return spans
            time.sleep(0.02)
        self.fail("no trace of %s" % request_id)

    def test_a_traced_fan_out_shows_both_calls_overlapping(self):
        r = self.get("/fanout", b"X-Moonflow-Trace: t0k\r\nX-Request-Id: fan-1\r\n")
        self.assertEqual(r.body, b"ok")
        spans = self.trace_of("fan-1")
        self.assertEqual([s["name"] for s in spans],
                         ["GET /fanout", "parallel", "http", "http"])
        root, par, a, b = spans
        trace_id = root["traceId"]
        self.assertRegex(trace_id, r"^[0-9a-f]{32}$")
        for s in spans:
            self.assertEqual(s["traceId"], trace_id)
            self.assertRegex(s["spanId"], r"^[0-9a-f]{16}$")
            ids = [a["value"]["stringValue"] for a in s["attributes"]
                   if a["key"] == "moonflow.request_id"]
            self.assertEqual(ids, ["fan-1"])
        self.assertNotIn("parentSpanId", root)
        self.assertEqual(par["parentSpanId"], root["spanId"])
        self.assertEqual((a["parentSpanId"], b["parentSpanId"]),
                         (par["spanId"], par["spanId"]))
        self.assertEqual((a["kind"], b["kind"], root["kind"]), (3, 3, 2))
        t = lambda s, k: int(s[k + "TimeUnixNano"]) / 1e6  # ms
        dur = lambda s: t(s, "end") - t(s, "start")
        # The backend's timers count whole milliseconds of its loop clock:
        # a sleep of N ms may end up to 1 ms short on a finer clock.
        # Side by side: both start together, each takes its own sleep.
        self.assertLess(abs(t(a, "start") - t(b, "start")), 20)
        self.assertGreaterEqual(dur(a), 60 - 1)
        self.assertLess(dur(a), 85)
        self.assertGreaterEqual(dur(b), 90 - 1)
        self.assertLess(dur(b), 140)  # not 60 + 90: they overlapped
        self.assertGreaterEqual(dur(root), dur(b))
        self.assertLess(dur(root), 145)
        self.assertLessEqual(t(root, "start"), t(par, "start"))
        self.assertEqual(root["status"], {"code": 1})
        self.assertEqual(a["status"], {"code": 1})
        # An HTTP call's steps are its events, in order, within the span.
        for s, slept in ((a, 60), (b, 90)):
            names = [e["name"] for e in s["events"]]
            self.assertEqual(names[-3:], ["request.start", "request.sent",
                                          "response.first_byte"])
            # the server's first calls to the backend: new connections
            self.assertEqual(names[:2], ["dns.resolved", "connection.connected"])
            self.assertEqual(len(names), 5)  # plain HTTP: no TLS step
            at = [int(e["timeUnixNano"]) / 1e6 for e in s["events"]]
            self.assertEqual(at, sorted(at))
            self.assertGreaterEqual(at[0], t(s, "start"))
            self.assertLessEqual(at[-1], t(s, "end"))
            self.assertGreaterEqual(at[-1] - at[3], slept - 1)  # sent → answer
        # Wall clock: now, give or take a minute.
        self.assertLess(abs(t(root, "start") / 1e3 - time.time()), 60)

    def test_moonflow_trace_draws_the_waterfall(self):
        self.get("/fanout", b"X-Moonflow-Trace: t0k\r\nX-Request-Id: fan-2\r\n")
        self.trace_of("fan-2")
        out = subprocess.run([MOONFLOW, "trace", self.file, "fan-2"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertRegex(lines[0], r"^trace fan-2  GET /fanout  200  \d+\.\d ms$")
        body = [l for l in lines[2:] if l.strip()]
        self.assertEqual(len(body), 6)
        self.assertIn("  GET /fanout ", body[0])
        self.assertIn("    parallel  success ", body[1])
        self.assertIn("      http  success ", body[2])
        self.assertIn("      http  success ", body[4])
        for l in body[:3] + body[4:5]:
            self.assertRegex(l, r"\|[ =]{40}\|$")
        # Under each call, its steps from its start.
        for steps, at_least in ((body[3], 60), (body[5], 90)):
            # (a pooled connection needs no resolving or connecting)
            self.assertRegex(steps, r"^ +(resolved \+[\d.]+ ms, connected \+[\d.]+ ms, )?"
                                    r"sending \+[\d.]+ ms, sent \+[\d.]+ ms, "
                                    r"first byte \+([\d.]+) ms$")
            first = float(re.search(r"first byte \+([\d.]+) ms", steps).group(1))
            self.assertGreaterEqual(first, at_least - 1)  # whole ms timers
        # The shorter call's bar ends well before the longer one's.
        self.assertLess(body[2].count("="), body[4].count("="))

    def test_moonflow_trace_names_the_ids_it_does_not_find(self):
        self.get("/hello", b"X-Moonflow-Trace: t0k\r\nX-Request-Id: here-1\r\n")
        self.trace_of("here-1")
        out = subprocess.run([MOONFLOW, "trace", self.file, "no-such-id"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, "")
        self.assertIn("no trace with id no-such-id", out.stderr)
        # The ids found are drawn; the missing one is still named.
        out = subprocess.run([MOONFLOW, "trace", self.file, "here-1", "gone-2"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertRegex(out.stdout, r"^trace here-1  GET /hello  200 ")
        self.assertNotIn("here-1", out.stderr)
        self.assertIn("no trace with id gone-2", out.stderr)

    def test_a_failed_task_is_an_error_span_and_untraced_requests_leave_none(self):
        self.get("/dead", b"X-Moonflow-Trace: t0k\r\nX-Request-Id: dead-1\r\n")
        spans = self.trace_of("dead-1")
        self.assertEqual([s["name"] for s in spans], ["GET /dead", "http"])
        self.assertEqual(spans[1]["status"]["code"], 2)
        attrs = {x["key"]: x["value"]["stringValue"] for x in spans[1]["attributes"]}
        self.assertEqual(attrs["moonflow.task.state"], "system error")
        self.assertEqual(attrs["moonflow.task.error"], "connection refused")
        for token in (b"", b"X-Moonflow-Trace: wrong\r\n"):
            self.get("/hello", token + b"X-Request-Id: quiet-1\r\n")
        self.get("/hello", b"X-Moonflow-Trace: t0k\r\nX-Request-Id: loud-1\r\n")
        self.trace_of("loud-1")  # written after the quiet ones would be
        with open(self.file) as f:
            self.assertNotIn('"quiet-1"', f.read())


class TraceConfig(unittest.TestCase):
    def run_conf(self, line):
        root = tempfile.mkdtemp(prefix="mf-trace-conf-")
        self.addCleanup(shutil.rmtree, root, True)
        conf = os.path.join(root, "conf.lua")
        with open(os.path.join(root, "hello.lua"), "w") as f:
            f.write('return function(req, resp) resp:send("hi") end\n')
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log = "off", trace = %s }\n' % line)
        return root, conf

    def test_bad_trace_settings_are_refused_at_start_naming_the_key(self):
        for line, want in (('{ sample = 2 }', "trace.file: a file name expected, got none"),
                           ('{ file = "t", sample = -1 }', "trace.sample: an integer from 0"),
                           ('{ file = "t", token = "" }', "trace.token: 1 to 128 bytes"),
                           ('{ file = "t", every = 2 }', "trace.every")):
            _, conf = self.run_conf(line)
            out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                                 capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(want, out.stderr)

    def test_one_request_in_sample_is_traced(self):
        root, conf = self.run_conf('{ file = "t.jsonl", sample = 3 }')
        port = free_port()
        srv = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1"], port)
        try:
            for i in range(9):
                request(port, b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n")
        finally:
            code, _, _ = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        with open(os.path.join(root, "t.jsonl")) as f:
            self.assertEqual(len(f.read().splitlines()), 3)

    def test_a_trace_file_that_cannot_be_opened_stops_the_start(self):
        _, conf = self.run_conf('{ file = "/nonexistent-dir/t.jsonl", sample = 1 }')
        port = free_port()
        out = subprocess.run([MOONFLOW, "serve", "--config", conf, "--listen",
                              "127.0.0.1:%d" % port], capture_output=True,
                             text=True, timeout=10)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("/nonexistent-dir/t.jsonl", out.stderr)
        # named by its config key, the cause after it
        self.assertIn("moonflow serve: trace.file /nonexistent-dir/t.jsonl: ",
                      out.stderr)


if __name__ == "__main__":
    unittest.main()
