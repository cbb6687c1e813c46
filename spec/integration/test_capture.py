"""Subrequests under `moonflow serve` (mf.capture, mf.capture_multi,
ngx.location.capture): a handler captures a slow route, a failing one and a
missing one side by side; what a subrequest inherits; the depth limit; a
client that leaves while its handler waits on subrequests (both go on).
One server for the file, its stderr (the error log) in a file; it must stop
with status 0 (under the ASan twin that includes the leak check).
$MF_MOONFLOW is the binary."""
import json
import os
import shutil
import signal
import tempfile
import time
import unittest

from harness import Server, connect, free_port, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

SITE = {
    # Each subrequest reports when it started and ended (loop ms).
    "slow.lua": '''local mf = require "moonflow"
return function(req, resp)
    local t0 = mf.now()
    mf.sleep(tonumber(req.query.ms))
    resp:json { start = t0, stop = mf.now(), depth = req.subrequest }
end
''',
    "fail.lua": '''return function(req, resp)
    error("failing on purpose")
end
''',
    "echo.lua": '''return function(req, resp)
    resp.status = 201
    resp:set_header("X-Echo", "yes")
    resp:write(req.method .. " " .. req.uri .. " " .. req.body .. " ")
    resp:write(tostring(req.headers["x-parent"]) .. " ")
    resp:write(tostring(req.headers["x-extra"]) .. " " .. tostring(req.cookies.c))
end
''',
    "main.lua": '''local mf = require "moonflow"
return function(req, resp)
    local r = mf.capture_multi {
        { "/slow?ms=150" },
        { "/slow", { args = { ms = 150 } } },
        { "/fail" },
        { "/missing" },
    }
    local out = {}
    for i, a in ipairs(r) do
        out[i] = { status = a.status, body = a.body,
                   type = a.headers["Content-Type"] }
    end
    resp:json(out)
end
''',
    "inherit.lua": '''local mf = require "moonflow"
return function(req, resp)
    local a = mf.capture("/echo?a=1", { method = "POST", body = "b1",
        args = "z=2", headers = { ["X-Extra"] = "e" } })
    local b = mf.capture("/echo", { headers = { ["X-Parent"] = false } })
    resp:json { a = a.body, a_status = a.status, a_echo = a.headers["x-echo"],
                b = b.body }
end
''',
    "loop.lua": '''local mf = require "moonflow"
return function(req, resp)
    local r = mf.capture("/loop")
    resp.status = r.status -- the refusal climbs back to the top
    resp:send((req.subrequest or 0) .. ":" .. r.status)
end
''',
    # Logs "marked TAG" once it has slept: an aborted one never does.
    "marked.lua": '''local mf = require "moonflow"
return function(req, resp)
    mf.sleep(tonumber(req.query.ms))
    mf.log("warn", "marked ", req.query.tag)
    resp:send("marked")
end
''',
    "wait.lua": '''local mf = require "moonflow"
return function(req, resp)
    resp:send(mf.capture("/marked?ms=300&tag=left").body)
end
''',
    "timeout.lua": '''local mf = require "moonflow"
return function(req, resp)
    local r = mf.capture("/marked?ms=300&tag=late", { timeout = 30 })
    resp:send(r.status .. " " .. r.body)
end
''',
    "ngx.lua": '''require "moonflow.ngx"
return function(req, resp)
    local a, b = ngx.location.capture_multi {
        { "/slow", { args = "ms=1" } },
        { "/echo", { method = ngx.HTTP_PUT, body = "x" } },
    }
    local c = ngx.location.capture("/missing")
    resp:send(a.status .. " " .. b.header["x-echo"] .. " " .. c.status)
end
''',
    "ok.lua": 'return function(req, resp) resp:send("ok") end\n',
}


class Capture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="moonflow-capture-")
        for name, text in SITE.items():
            with open(os.path.join(cls.root, name), "w") as f:
                f.write(text)
        cls.errors = os.path.join(cls.root, "stderr.log")
        port = free_port()
        try:
            cls.srv = Server([MOONFLOW, "serve", cls.root, "--listen",
                              "127.0.0.1:%d" % port, "--workers", "1",
                              "--access-log", "off"], port,
                             stderr_path=cls.errors)
        except Exception:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise
        cls.port = port

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

    def get(self, path, headers=b""):
        return request(self.port, b"GET %s HTTP/1.1\r\nHost: h\r\n%s\r\n" % (
            path.encode(), headers), timeout=10)

    def wait_log(self, text):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if text in self.error_log():
                return
            time.sleep(0.05)
        self.fail("%r not in the error log:\n%s" % (text, self.error_log()))

    def test_slow_failing_and_missing_routes_side_by_side(self):
        r = self.get("/main")
        self.assertEqual(r.status, 200, r.body)
        out = json.loads(r.body)
        slow1, slow2 = json.loads(out[0]["body"]), json.loads(out[1]["body"])
        self.assertEqual([a["status"] for a in out], [200, 200, 500, 404])
        self.assertEqual(slow1["depth"], 1)
        # Overlap on the worker's own clock: each started before the other
        # ended (no wall time asserted).
        self.assertLess(slow1["start"], slow2["stop"])
        self.assertLess(slow2["start"], slow1["stop"])
        self.assertEqual(out[0]["type"], "application/json")
        self.assertEqual(out[2]["body"], "500 Internal Server Error\n")
        self.assertEqual(out[3]["body"], "404 Not Found\n")
        self.wait_log("capture /fail: ")
        self.assertIn("failing on purpose", self.error_log())

    def test_a_subrequest_inherits_headers_and_has_its_own_method_body_args(
            self):
        r = self.get("/inherit", b"X-Parent: p\r\nCookie: c=1\r\n")
        self.assertEqual(r.status, 200, r.body)
        out = json.loads(r.body)
        self.assertEqual(out["a"], "POST /echo?a=1&z=2 b1 p e 1")
        self.assertEqual(out["a_status"], 201)
        self.assertEqual(out["a_echo"], "yes")
        self.assertEqual(out["b"], "GET /echo  nil nil 1")

    def test_runaway_recursion_stops_at_the_depth_limit(self):
        r = self.get("/loop")
        self.assertEqual((r.status, r.body), (500, b"0:500"))
        self.wait_log("subrequests nested deeper than 50")

    def test_ngx_location_capture_maps_onto_mf_capture(self):
        r = self.get("/ngx")
        self.assertEqual(r.body, b"200 yes 404")

    def test_a_client_leaving_during_a_capture_lets_the_subrequest_finish(self):
        # As in OpenResty: the handler outlives its client, and so does the
        # subrequest it waits on.
        with connect(self.port) as s:
            s.sendall(b"GET /wait HTTP/1.1\r\nHost: h\r\n\r\n")
            time.sleep(0.1)  # the handler waits on its subrequest now
        self.assertEqual(self.get("/ok").body, b"ok")
        self.wait_log("marked left")

    def test_a_subrequest_past_its_timeout_is_a_504_and_stops(self):
        r = self.get("/timeout")
        self.assertEqual(r.body, b"504 504 Gateway Timeout\n")
        self.wait_log("capture /marked?ms=300&tag=late: timeout")
        self.assertEqual(self.get("/marked?ms=400&tag=after-late").body,
                         b"marked")
        self.assertNotIn("marked late", self.error_log())


if __name__ == "__main__":
    unittest.main()
