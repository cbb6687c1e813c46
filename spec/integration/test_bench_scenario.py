"""`moonflow bench` scenario mode: a script defining iteration(ctx) runs
flows of moonflow tasks as load. Against one redis-server, one
spec/fixture/http_fixture and one librdkafka mock cluster (each started
once for the file):

- a SET+GET series: the iterations and the per-step series agree with what
  Redis counted (INFO commandstats), step names "1 redis SET" / "2 redis
  GET", ctx fields, the JSON document and the text report;
- -R 200 for 2 s gives about 400 iterations, latency counted from the due
  times;
- a step Redis refuses (INCR on a string) counts errors on that step and
  the iteration, not in latency;
- a Lua error in iteration() is printed once with its traceback, counted,
  and the run still ends on time;
- HTTP steps against /sleep?ms=6 measure at least 5 ms each (the fixture's
  timers run on a millisecond loop clock: up to 1 ms early); a parallel
  step as a whole; the iteration the sum of its steps;
- MySQL steps (a query, and one the server refuses: errors on that step);
- a Kafka produce step (init() waits for a first delivery: it waits for
  the mock cluster's metadata);
- done(summary, latency, requests) after the report, the main chunk given
  the script's arguments and modules beside it;
- a script whose init() raises ends the run with the error (exit 1).

Every run is bounded by -d and a subprocess timeout. $MF_MOONFLOW is the
binary (the ASan twin in asan.*)."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import KafkaMock, MariaDB, Redis, Server, free_port

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
FIXTURE = os.environ.get("MF_HTTP_FIXTURE", "build/spec/fixture/http_fixture")

SETGET = """
local mf = require "moonflow"
local r
local seen = {}
function init(args) r = mf.redis(args[1]) end
function iteration(ctx)
  assert(type(ctx.thread) == "number" and type(ctx.user) == "number")
  assert(ctx.iteration >= 1)
  local k = "k" .. ctx.user .. ":" .. ctx.iteration % 100
  return mf.series{ mf.task.redis(r, "SET", k, "v"),
                    mf.task.redis(r, "GET", k) }
end
"""

WAITS = """
local mf = require "moonflow"
local r, base
function init(args) r = mf.redis(args[1]); base = args[2] end
function iteration(ctx)
  -- iteration() may wait itself and read what it gets: whole results
  local v = mf.task.redis(r, "INCR", "waits"):wait().value
  assert(type(v) == "number", "a whole result: " .. tostring(v))
  local res = assert(mf.http.get(base .. "/sleep?ms=0"))
  assert(res.status == 200, "status " .. tostring(res.status))
  return mf.task.redis(r, "GET", "waits")
end
"""

CHECKS = """
local mf = require "moonflow"
local r, base
function init(args) r = mf.redis(args[1]); base = args[2] end
function iteration(ctx)
  local n = mf.task.redis(r, "INCR", "checked"):wait().value
  local res = assert(mf.http.get(base .. "/sleep?ms=0"))
  local all = bench.check(res, {
    ["status is 200"] = function(x) return x.status == 200 end,
    ["status is 404"] = function(x) return x.status == 404 end,
  })
  assert(all == false, "one of the two checks fails every time")
  bench.check(n, {
    ["even INCR"] = function(v) return v % 2 == 0 end,
    ["raises"] = function(v) error("check boom") end,
  })
  return mf.task.redis(r, "GET", "checked")
end
"""

FAILING = """
local mf = require "moonflow"
local r
function init(args) r = mf.redis(args[1]) end
function iteration(ctx)
  return mf.series{ mf.task.redis(r, "SET", "str", "text"),
                    mf.task.redis(r, "INCR", "str") }
end
"""

LUA_ERROR = """
local mf = require "moonflow"
local r
function init(args) r = mf.redis(args[1]) end
function iteration(ctx)
  if ctx.iteration % 3 == 0 then error("scenario boom " .. ctx.iteration) end
  return mf.task.redis(r, "PING")
end
"""

HTTP = """
local mf = require "moonflow"
local base
function init(args) base = args[1] end
function iteration(ctx)
  return mf.series{
    mf.task.http{url = base .. "/sleep?ms=6"},
    mf.parallel{ mf.task.http{url = base .. "/sleep?ms=6"},
                 mf.task.timer(1) } }
end
"""

KAFKA = """
local mf = require "moonflow"
local k
function init(args)
  k = mf.kafka{ brokers = args[1] }
  -- the first delivery waits for the cluster's metadata: before the load
  assert(k:produce{ topic = "bench", value = "first" })
end
function iteration(ctx)
  return mf.task.kafka_produce(k, { topic = "bench", value = "v" .. ctx.iteration })
end
"""

MYSQL = """
local mf = require "moonflow"
local db
function init(args)
  db = mf.mysql(args[1])
  assert(db:query("SELECT 1")) -- connected before the load
end
function iteration(ctx)
  return mf.series{ mf.task.mysql(db, "select ? + 1", ctx.iteration),
                    mf.task.mysql(db, "SELECT no_such_column") }
end
"""

DONE = """
local mf = require "moonflow"
local helper = require "scen_helper" -- beside the script
local r
local url = ...
function init(args) r = mf.redis(args[1]) end
function iteration(ctx) return mf.task.redis(r, "PING") end
function done(summary, latency, requests)
  io.write(("done: %s %s %d %d %d %d\\n"):format(helper, url, summary.requests,
    summary.errors.status, latency.min, latency:percentile(99)))
end
"""

BAD_INIT = """
function init(args) error("init refused: " .. tostring(args[1])) end
function iteration(ctx) end
"""


def redis_command(port, *args):
    """One command, one reply line (enough for INFO's bulk string)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(out)
        f = s.makefile("rb")
        line = f.readline()
        if line.startswith(b"$"):
            return f.read(int(line[1:]) + 2)[:-2].decode()
        return line.decode().strip()


def calls(port, cmd):
    info = redis_command(port, "INFO", "commandstats")
    m = re.search(r"cmdstat_%s:calls=(\d+)" % cmd, info)
    return int(m.group(1)) if m else 0


class BenchScenario(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="moonflow-bench-scen-")
        cls.redis = Redis(cls.dir)
        cls.http_port = free_port()
        cls.http = Server([FIXTURE, "--listen", "127.0.0.1:%d" % cls.http_port],
                          cls.http_port)

    @classmethod
    def tearDownClass(cls):
        cls.http.stop()
        cls.redis.kill()
        shutil.rmtree(cls.dir, True)

    def script(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def bench(self, args, timeout=60):
        """Runs moonflow bench with --json; (exit code, stdout, stderr,
        the JSON document or None)."""
        out = os.path.join(self.dir, "result.json")
        if os.path.exists(out):
            os.unlink(out)
        argv = [MOONFLOW, "bench", "--no-progress", "--json", out] + args
        p = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        doc = None
        if os.path.exists(out):
            with open(out) as f:
                doc = json.load(f)
        return p.returncode, p.stdout, p.stderr, doc

    def series(self, doc):
        return {s["name"]: s for s in doc["series"]}

    def test_redis_series_counts_agree_with_redis(self):
        path = self.script("setget.lua", SETGET)
        port = self.redis.port
        gets0, sets0 = calls(port, "get"), calls(port, "set")
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "8", "-d", "2s", path, "--", self.redis.url()])
        gets, sets = calls(port, "get") - gets0, calls(port, "set") - sets0
        self.assertEqual(code, 0, err)
        self.assertEqual(doc["mode"], "scenario")
        n = doc["requests"]
        self.assertGreater(n, 100)
        self.assertEqual(sum(doc["errors"].values()), 0, doc["errors"])
        # Every iteration counted made its GET; iterations in flight when
        # the run ended (at most one per user) are not counted.
        self.assertTrue(n <= gets <= n + 8, (n, gets))
        self.assertTrue(n <= sets <= n + 8, (n, sets))
        s = self.series(doc)
        self.assertEqual(sorted(s), ["1 redis SET", "2 redis GET"])
        for name in s:
            self.assertEqual(s[name]["count"], n)
            self.assertEqual(s[name]["errors"], 0)
            self.assertGreater(s[name]["latency_us"]["min"], 0)
        # an iteration takes at least its two steps
        self.assertGreaterEqual(
            doc["latency_us"]["max"],
            max(s[k]["latency_us"]["min"] for k in s))
        self.assertIn("Running 2s test @ " + path, out)
        self.assertIn("%d requests in" % n, out)
        self.assertIn("1 redis SET", out)
        self.assertEqual(err, "")

    def test_constant_rate(self):
        path = self.script("rate.lua", SETGET)
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "10", "-d", "2s", "-R", "200", path, "--",
             self.redis.url()])
        self.assertEqual(code, 0, err)
        self.assertTrue(360 <= doc["requests"] <= 440, doc["requests"])
        self.assertEqual(self.series(doc)["2 redis GET"]["count"],
                         doc["requests"])

    def test_iteration_may_wait_and_read_results(self):
        path = self.script("waits.lua", WAITS)
        code, out, err, doc = self.bench(
            ["-t", "1", "-c", "2", "-d", "1s", path, "--", self.redis.url(),
             "http://127.0.0.1:%d" % self.http_port])
        self.assertEqual(code, 0, err)
        self.assertGreater(doc["requests"], 10)
        self.assertEqual(sum(doc["errors"].values()), 0, (doc["errors"], err))
        self.assertEqual(err, "")

    def test_checks_are_counted_per_name(self):
        redis_command(self.redis.port, "DEL", "checked")
        path = self.script("checks.lua", CHECKS)
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "4", "-d", "1s", "--threshold", "checks>=30%",
             "--threshold", "checks>45", path, "--", self.redis.url(),
             "http://127.0.0.1:%d" % self.http_port])
        # 1.5 of every 4 check calls pass (200: all, 404: none, even INCR:
        # half, raises: none): 37.5 %
        self.assertEqual(code, 99, err)
        self.assertIn("threshold checks>=30%: ok (checks 3", out)
        self.assertIn("threshold checks>45: FAILED (checks 3", out)
        checks = {c["name"]: (c["passes"], c["fails"]) for c in doc["checks"]}
        self.assertEqual(sorted(checks), ["even INCR", "raises",
                                          "status is 200", "status is 404"])
        n = checks["status is 200"][0]
        self.assertGreater(n, 10)
        # each check ran once per counted call: the same total everywhere
        self.assertEqual(checks["status is 200"], (n, 0))
        self.assertEqual(checks["status is 404"], (0, n))
        self.assertEqual(checks["raises"], (0, n))
        even, odd = checks["even INCR"]
        self.assertEqual(even + odd, n)
        self.assertLessEqual(abs(even - odd), 8)  # INCR alternates
        # checks in the measured window only, as iterations: no more than
        # the iterations begun in it
        self.assertGreaterEqual(n, doc["requests"])
        self.assertLessEqual(n, doc["requests"] + 4)
        # the first raised error is told (once per thread), not thrown
        self.assertIn("check 'raises' raised:", err)
        self.assertIn("check boom", err)
        self.assertLessEqual(err.count("check 'raises' raised:"), 2, err)
        self.assertRegex(out, r"status is 404 +0 / %d +0\.00%% passed" % n)

    def test_a_bad_check_is_a_lua_error_of_the_iteration(self):
        for checks, words in (
                ("{ 1 }", "bench.check: each check is a name and a function "
                          "(got number = number)"),
                ("nil", "bad argument #2 to 'check' (table expected, got "
                        "nil)"),
                # 65 names: past the most a run keeps
                ("(function() local t = {} for i = 1, 65 do "
                 "t['c' .. i] = function() return true end end return t "
                 "end)()", "bench.check: more than 64 check names")):
            path = self.script("badcheck.lua",
                               'local mf = require "moonflow"\n'
                               "function iteration()\n"
                               "  bench.check(1, %s)\n"
                               "  return mf.task.timer(1)\n"
                               "end\n" % checks)
            code, out, err, doc = self.bench(["-t", "1", "-c", "1", "-d",
                                              "300ms", path])
            self.assertEqual(code, 1, err)  # every iteration failed
            self.assertIn(words, err)
            self.assertIn("every iteration failed", err)

    def test_failing_step_counts_errors(self):
        path = self.script("failing.lua", FAILING)
        code, out, err, doc = self.bench(
            ["-t", "1", "-c", "2", "-d", "1s", path, "--", self.redis.url()])
        # no iteration succeeded: the run failed, with no threshold asked
        self.assertEqual(code, 1, err)
        self.assertIn("every iteration failed", err)
        s = self.series(doc)
        self.assertGreater(s["1 redis SET"]["count"], 10)
        self.assertEqual(s["1 redis SET"]["errors"], 0)
        self.assertEqual(s["2 redis INCR"]["count"], 0)
        self.assertEqual(s["2 redis INCR"]["errors"],
                         s["1 redis SET"]["count"])
        self.assertEqual(doc["requests"], 0)
        self.assertEqual(doc["errors"]["status"], s["1 redis SET"]["count"])
        # the first failure is printed once, with Redis's words
        self.assertEqual(err.count("step '2 redis INCR' failed"), 1, err)
        self.assertIn("not an integer", err)
        self.assertIn("Failed iterations: %d" % doc["errors"]["status"], out)

    def test_lua_error_reported_once(self):
        path = self.script("luaerror.lua", LUA_ERROR)
        t0 = time.monotonic()
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "4", "-d", "1s", path, "--", self.redis.url()])
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(code, 0, err)
        self.assertEqual(err.count("scenario boom"), 1, err)
        self.assertEqual(err.count("stack traceback"), 1, err)
        self.assertIn("luaerror.lua:6:", err)
        ok, failed = doc["requests"], doc["errors"]["status"]
        self.assertGreater(ok, 10)
        # every third iteration raised: about half as many as succeeded
        self.assertTrue(ok / 2 - 10 <= failed <= ok / 2 + 10, (ok, failed))
        self.assertEqual(self.series(doc)["1 redis PING"]["count"], ok)

    def test_http_steps_measure_the_server(self):
        path = self.script("http.lua", HTTP)
        code, out, err, doc = self.bench(
            ["-t", "1", "-c", "4", "-d", "1s", path, "--",
             "http://127.0.0.1:%d" % self.http_port])
        self.assertEqual(code, 0, err)
        self.assertGreater(doc["requests"], 10)
        s = self.series(doc)
        self.assertEqual(sorted(s), ["1 http GET", "2 parallel"])
        for name in s:
            self.assertEqual(s[name]["count"], doc["requests"])
            self.assertGreaterEqual(s[name]["latency_us"]["min"], 5000)
        self.assertGreaterEqual(doc["latency_us"]["min"], 10000)

    def test_kafka_produce_step(self):
        mock = KafkaMock(brokers=1, topics={"bench": 1})
        try:
            path = self.script("kafka.lua", KAFKA)
            code, out, err, doc = self.bench(
                ["-t", "1", "-c", "4", "-d", "1s", path, "--", mock.bootstrap])
        finally:
            mock.close()
        self.assertEqual(code, 0, err)
        s = self.series(doc)
        self.assertEqual(list(s), ["1 kafka_produce bench"])
        self.assertGreater(s["1 kafka_produce bench"]["count"], 10, (out, err))
        self.assertEqual(s["1 kafka_produce bench"]["errors"], 0)
        self.assertEqual(doc["requests"], s["1 kafka_produce bench"]["count"])

    def test_mysql_steps(self):
        db = MariaDB()
        try:
            path = self.script("mysql.lua", MYSQL)
            code, out, err, doc = self.bench(
                ["-t", "1", "-c", "2", "-d", "1s", path, "--", db.url()])
        finally:
            db.close()
        # no iteration succeeds (below): the run failed
        self.assertEqual(code, 1, err)
        self.assertIn("every iteration failed", err)
        s = self.series(doc)
        self.assertEqual(sorted(s), ["1 mysql SELECT", "2 mysql SELECT"])
        ok, bad = s["1 mysql SELECT"], s["2 mysql SELECT"]
        self.assertGreater(ok["count"], 10, (out, err))
        self.assertEqual(ok["errors"], 0)
        # the unknown column fails every second step: no iteration succeeds
        self.assertEqual(bad["count"], 0)
        self.assertEqual(bad["errors"], ok["count"])
        self.assertEqual(doc["requests"], 0)
        self.assertEqual(doc["errors"]["status"], ok["count"])

    def test_done_after_the_report(self):
        self.script("scen_helper.lua", 'return "helper"\n')
        path = self.script("done.lua", DONE)
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "2", "-d", "1s", path, "--", self.redis.url()])
        self.assertEqual(code, 0, err)
        m = re.search(r"^done: helper (\S+) (\d+) (\d+) (\d+) (\d+)$", out,
                      re.M)
        self.assertIsNotNone(m, out)
        self.assertEqual(m.group(1), self.redis.url())
        self.assertEqual(int(m.group(2)), doc["requests"])
        self.assertEqual(int(m.group(3)), 0)
        self.assertEqual(int(m.group(4)), int(doc["latency_us"]["min"]))
        self.assertLess(out.index("Requests/sec"), m.start())

    def test_init_error_ends_the_run(self):
        path = self.script("badinit.lua", BAD_INIT)
        code, out, err, doc = self.bench(
            ["-t", "2", "-c", "2", "-d", "5s", "-s", path, "--", "xyz"])
        self.assertEqual(code, 1)
        self.assertIn("init refused: xyz", err)
        self.assertIn(path, err)
        self.assertIsNone(doc)


if __name__ == "__main__":
    unittest.main(verbosity=2)
