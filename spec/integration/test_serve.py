"""moonflow serve as a process: hot reload under load, SIGHUP, routes
appearing and disappearing, the Lua config file, handler timeouts, TLS and
graceful stop. $MF_MOONFLOW is the binary (the ASan twin in asan.*)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (Server, connect, free_port, read_response,
                     read_until_closed, request, self_signed, temp_dir,
                     wait_port, rss_kib)

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")


def write_atomically(path, text):
    """As editors save: a temporary file renamed over the old one."""
    tmp = os.path.join(os.path.dirname(path), ".tmp-" + os.path.basename(path))
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def handler(text):
    return 'return function(req, resp) resp:send(%r) end\n' % text


class ServeTest(unittest.TestCase):
    def serve(self, *args, root=None, workers=1):
        port = free_port()
        argv = [MOONFLOW, "serve"] + ([root] if root else []) + [
            "--listen", "127.0.0.1:%d" % port, "--workers", str(workers)]
        srv = Server(argv + list(args), port)
        self.addCleanup(self.stop_cleanly, srv)
        return srv

    def stop_cleanly(self, srv):
        if srv.proc.poll() is not None and srv.proc.returncode == 0:
            return
        code, _, err = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0, err.decode(errors="replace")[-3000:])

    def get(self, srv, path):
        return request(srv.port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" %
                       path.encode())

    def get_in_flight(self, srv, path):
        """Starts GET path in a thread; returns a function that waits for it
        and gives its body."""
        results = []
        t = threading.Thread(target=lambda: results.append(
            self.get(srv, path).body))
        t.start()

        def body():
            t.join()
            return results[0] if results else None
        return body

    def start_marker(self):
        """A file outside the site, and the Lua line a handler runs first
        to create it: a test waits for it (wait_started) to act once the
        request is surely in flight, however slowly a loaded machine
        brings it there."""
        path = os.path.join(temp_dir(self), "started")
        return path, '  io.open(%r, "w"):close()\n' % path

    def wait_started(self, path, limit=10.0):
        deadline = time.monotonic() + limit
        while not os.path.exists(path):
            self.assertLess(time.monotonic(), deadline, "the handler never started")
            time.sleep(0.01)

    def site(self, files):
        root = temp_dir(self)
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return root


class HotReload(ServeTest):
    def wait_body(self, srv, path, body, limit=1.0):
        """Seconds until `path` answers `body` (fails past `limit`)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            r = self.get(srv, path)
            if r.status == 200 and r.body == body.encode():
                return time.monotonic() - t0
            time.sleep(0.01)
        self.fail("%s did not switch to %r within %.1fs" % (path, body, limit))

    def test_rewrites_under_load_lose_nothing_and_apply_within_a_second(self):
        root = self.site({"v.lua": handler("version A")})
        srv = self.serve(root=root, workers=2)
        wrk = subprocess.Popen(["wrk", "-t1", "-c256", "-d20s",
                                "http://127.0.0.1:%d/v" % srv.port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            path = os.path.join(root, "v.lua")
            worst = 0.0
            start = time.monotonic()
            for i in range(100):
                # Spread the 100 rewrites over wrk's 20 s.
                time.sleep(max(0.0, start + i * 0.19 - time.monotonic()))
                version = "version %s" % ("B" if i % 2 == 0 else "A")
                write_atomically(path, handler(version))
                worst = max(worst, self.wait_body(srv, "/v", version))
                # A broken version: logged, the previous one keeps serving.
                write_atomically(path, "return function(req, resp) resp:send(\n")
                time.sleep(0.05)
                self.assertEqual(self.get(srv, "/v").body, version.encode())
            out, err = wrk.communicate(timeout=60)
        finally:
            if wrk.poll() is None:
                wrk.kill()
        self.assertEqual(wrk.returncode, 0, err)
        self.assertNotIn("Non-2xx", out)
        self.assertNotIn("Socket errors", out)
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        self.assertGreater(requests, 10000)
        self.assertLess(worst, 1.0)
        print("\n  hot reload under wrk: %d requests, 100 rewrites, slowest "
              "switch %.0f ms" % (requests, worst * 1000))
        code, _, log = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        self.assertIn(b"v.lua", log)  # the broken versions were reported

    def test_new_and_deleted_files_add_and_remove_routes(self):
        root = self.site({"index.lua": handler("home")})
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/new").status, 404)
        write_atomically(os.path.join(root, "new.lua"), handler("fresh"))
        self.wait_body(srv, "/new", "fresh")
        os.unlink(os.path.join(root, "new.lua"))
        deadline = time.monotonic() + 2
        while self.get(srv, "/new").status != 404:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        os.makedirs(os.path.join(root, "sub"))
        time.sleep(0.05)
        write_atomically(os.path.join(root, "sub", "page.lua"), handler("deep"))
        self.wait_body(srv, "/sub/page", "deep")

    def test_sighup_reloads_every_script(self):
        root = self.site({"a.lua": 'local n = 0\n'
                                   'return function(req, resp)\n'
                                   '  n = n + 1; resp:send(tostring(n)) end\n'})
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/a").body, b"1")
        self.assertEqual(self.get(srv, "/a").body, b"2")
        srv.proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        self.assertEqual(self.get(srv, "/a").body, b"1")  # a fresh chunk

    def test_in_flight_requests_finish_on_the_code_they_started_with(self):
        started, mark = self.start_marker()
        root = self.site({"s.lua": 'local mf = require "moonflow"\n'
                                   'return function(req, resp)\n'
                                   + mark +
                                   '  mf.sleep(300); resp:send("old") end\n'})
        srv = self.serve(root=root)
        body = self.get_in_flight(srv, "/s")
        self.wait_started(started)
        write_atomically(os.path.join(root, "s.lua"), handler("new"))
        self.assertEqual(body(), b"old")
        self.wait_body(srv, "/s", "new")


class SiteModules(ServeTest):
    """Modules a route requires from the site reload with it: a change to
    one starts a new generation of the site's code on every worker, pinned
    per request like routes; lib/ and _files hold modules, never routes."""

    UTIL = 'return { v = %r }\n'
    USER = ('local util = require "util"\n'
            'return function(req, resp) resp:send(util.v) end\n')

    def bodies(self, srv, path, n):
        """path on n fresh connections: SO_REUSEPORT spreads them over the
        workers (all on one of two workers: a chance of 2^-(n-1))."""
        return {self.get(srv, path).body for _ in range(n)}

    def wait_all(self, srv, path, body, limit=3.0):
        deadline = time.monotonic() + limit
        while self.bodies(srv, path, 40) != {body}:
            self.assertLess(time.monotonic(), deadline,
                            "%s never answered only %r" % (path, body))
            time.sleep(0.02)

    def test_a_changed_module_reloads_its_routes_on_every_worker(self):
        root = self.site({"lib/util.lua": self.UTIL % "A",
                          "a.lua": self.USER,
                          "b.lua": 'local util = require "util"\n'
                                   'return function(req, resp)\n'
                                   '  resp:send("b" .. util.v) end\n'})
        srv = self.serve(root=root, workers=2)
        self.assertEqual(self.bodies(srv, "/a", 40), {b"A"})
        self.assertEqual(self.bodies(srv, "/b", 40), {b"bA"})
        write_atomically(os.path.join(root, "lib", "util.lua"),
                         self.UTIL % "B")
        self.wait_all(srv, "/a", b"B")
        self.assertEqual(self.bodies(srv, "/b", 40), {b"bB"})

    def test_a_request_in_flight_finishes_on_the_modules_it_started_with(
            self):
        started, mark = self.start_marker()
        root = self.site({
            "lib/util.lua": self.UTIL % "old",
            "s.lua": 'local mf = require "moonflow"\n'
                     'local util = require "util"\n'
                     'return function(req, resp)\n'
                     + mark +
                     '  mf.sleep(400)\n'
                     '  -- required again after the change: still its own\n'
                     '  resp:send(util.v .. "/" .. require("util").v) end\n'})
        srv = self.serve(root=root)
        body = self.get_in_flight(srv, "/s")
        self.wait_started(started)
        write_atomically(os.path.join(root, "lib", "util.lua"),
                         self.UTIL % "new")
        self.assertEqual(body(), b"old/old")
        self.wait_all(srv, "/s", b"new/new")

    def test_sighup_brings_every_worker_to_the_same_modules(self):
        # The module is a link to a file outside the site: its edits raise
        # no event under the root, so only SIGHUP can reload it.
        outside = self.site({"util.lua": self.UTIL % "A"})
        root = self.site({"a.lua": self.USER})
        os.makedirs(os.path.join(root, "lib"))
        os.symlink(os.path.join(outside, "util.lua"),
                   os.path.join(root, "lib", "util.lua"))
        srv = self.serve(root=root, workers=2)
        self.assertEqual(self.bodies(srv, "/a", 40), {b"A"})  # both loaded
        write_atomically(os.path.join(outside, "util.lua"), self.UTIL % "B")
        time.sleep(0.2)
        self.assertEqual(self.bodies(srv, "/a", 20), {b"A"})  # no event
        srv.proc.send_signal(signal.SIGHUP)
        self.wait_all(srv, "/a", b"B")

    def test_a_broken_module_keeps_its_last_good_version(self):
        root = self.site({"lib/util.lua": self.UTIL % "good",
                          "a.lua": self.USER})
        srv = self.serve(root=root, workers=2)
        self.assertEqual(self.bodies(srv, "/a", 10), {b"good"})
        write_atomically(os.path.join(root, "lib", "util.lua"),
                         "return { v = \n")
        time.sleep(0.2)
        self.assertEqual(self.bodies(srv, "/a", 40), {b"good"})
        write_atomically(os.path.join(root, "lib", "util.lua"),
                         self.UTIL % "fixed")
        self.wait_all(srv, "/a", b"fixed")
        code, _, log = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        self.assertIn(b"util.lua:2: unexpected symbol", log)
        self.assertIn(b"(the previous version runs instead)", log)

    def test_lib_and_underscore_files_are_modules_never_routes(self):
        root = self.site({
            "lib/helper.lua": 'return { hi = "from lib" }\n',
            "lib/pkg/init.lua": 'return { hi = "from lib/pkg" }\n',
            "api/_shared.lua": 'return { hi = "beside the routes" }\n',
            "_private.lua": handler("never"),
            "page.lua": 'return function(req, resp)\n'
                        '  resp:send(require("helper").hi .. ", " ..\n'
                        '    require("pkg").hi .. ", " ..\n'
                        '    require("api._shared").hi) end\n'})
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/page").body,
                         b"from lib, from lib/pkg, beside the routes")
        for path in ("/lib/helper", "/lib/pkg", "/lib/pkg/", "/lib/",
                     "/lib", "/api/_shared", "/_private"):
            self.assertEqual(self.get(srv, path).status, 404, path)

    def test_globals_of_site_code_stay_in_its_generation(self):
        root = self.site({"lib/util.lua": self.UTIL % "1",
                          "set.lua": 'counter = (counter or 0) + 1\n'
                                     'local util = require "util"\n'
                                     'return function(req, resp)\n'
                                     '  resp:send(tostring(counter) .. " " ..'
                                     ' tostring(rawget(_G, "counter"))) end\n',
                          "get.lua": 'return function(req, resp)\n'
                                     '  resp:send(tostring(counter)) end\n'})
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/set").body, b"1 nil")  # not in _G
        self.assertEqual(self.get(srv, "/get").body, b"1")  # shared by routes
        write_atomically(os.path.join(root, "lib", "util.lua"),
                         self.UTIL % "2")
        deadline = time.monotonic() + 2
        while self.get(srv, "/get").body != b"nil":  # a fresh generation
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.assertEqual(self.get(srv, "/set").body, b"1 nil")


class ReloadMemory(ServeTest):
    """A replaced version is freed: reloads under load do not grow the
    process. Each round rewrites the route (odd rounds) or the module it
    requires (even rounds: a new generation) and waits until a request sees
    the new version, while wrk keeps both workers busy on the same route so
    the old versions are hot (traced by the JIT) when they are replaced."""

    SECONDS = 45  # the rounds; reported with their rate
    ROUNDS = 10000
    # Past the warm-up (allocator pools, the JIT's first machine code area,
    # the route miss cache) the process must stay within 1 MiB: the traces
    # of each replaced version used to stay (0.6 KiB a reload per worker,
    # about 3 MiB over the rounds that fit here).
    BOUND_KIB = 1024

    def rss_kib(self, srv):
        return rss_kib(srv.proc.pid)

    def route(self, n):
        return ('local util = require "util"\n'
                'local k = 0\n'
                'return function(req, resp)\n'
                '  for i = 1, 30 do k = k + i end\n'
                '  resp:send("r%d/" .. util.v) end\n' % n)

    def test_ten_thousand_reloads_under_load_keep_the_memory_flat(self):
        sanitized = "asan" in os.path.basename(MOONFLOW)
        root = self.site({"lib/util.lua": 'return { v = "m0" }\n',
                          "v.lua": self.route(0)})
        srv = self.serve(root=root, workers=2)
        wrk = subprocess.Popen(["wrk", "-t1", "-c4", "-d%ds" % (
                                self.SECONDS + 30),
                                "http://127.0.0.1:%d/v" % srv.port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        self.addCleanup(lambda: wrk.poll() is None and wrk.kill())
        rounds, route, module, warm = 0, 0, 0, None
        start = time.monotonic()
        while rounds < self.ROUNDS and time.monotonic() - start < self.SECONDS:
            rounds += 1
            if rounds % 2:
                route += 1
                write_atomically(os.path.join(root, "v.lua"),
                                 self.route(route))
            else:
                module += 1
                write_atomically(os.path.join(root, "lib", "util.lua"),
                                 'return { v = "m%d" }\n' % module)
            want = b"r%d/m%d" % (route, module)
            deadline = time.monotonic() + 5
            while self.get(srv, "/v").body != want:
                self.assertLess(time.monotonic(), deadline, want)
            if warm is None and time.monotonic() - start > self.SECONDS / 10:
                warm = (rounds, self.rss_kib(srv))
        end = self.rss_kib(srv)
        elapsed = time.monotonic() - start
        wrk.kill()
        wrk.communicate()
        print("\n  %d reloads in %.0f s (%.0f/s) under wrk: RSS %d KiB after "
              "%d (warm-up), %d KiB at the end (%+d KiB)"
              % (rounds, elapsed, rounds / elapsed, warm[1], warm[0], end,
                 end - warm[1]))
        self.assertGreater(rounds, 200)
        if not sanitized:  # ASan keeps freed memory in quarantine
            self.assertLess(end - warm[1], self.BOUND_KIB)
        self.stop_cleanly(srv)  # the twin's leak check runs at this exit


class RouteMisses(ServeTest):
    """A path with no script is looked up on the disk once, then remembered
    until the watcher reports a change under the root."""

    def wait_status(self, srv, path, status, limit=2.0):
        deadline = time.monotonic() + limit
        while self.get(srv, path).status != status:
            self.assertLess(time.monotonic(), deadline,
                            "%s never answered %d" % (path, status))
            time.sleep(0.01)

    def children(self, pid):
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]

    @unittest.skipUnless(shutil.which("strace"), "strace is not installed")
    def test_a_missing_path_costs_no_stat_once_known_to_be_absent(self):
        root = self.site({"ok.lua": handler("ok")})
        log = os.path.join(root, "..", os.path.basename(root) + ".strace")
        self.addCleanup(lambda: os.path.exists(log) and os.unlink(log))
        port = free_port()
        # LeakSanitizer cannot run under ptrace: the twin skips it here.
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        srv = Server(["strace", "-f", "-qq", "-o", log, "-e",
                      "trace=stat,lstat,newfstatat,statx,access,open,openat",
                      MOONFLOW, "serve", root, "--listen",
                      "127.0.0.1:%d" % port, "--workers", "1"], port, env=env)
        self.addCleanup(srv.stop)
        requests = 200
        for _ in range(requests):
            self.assertEqual(self.get(srv, "/absent").status, 404)
        self.assertEqual(self.get(srv, "/ok").status, 200)
        for pid in self.children(srv.proc.pid):  # moonflow, not strace
            os.kill(pid, signal.SIGTERM)
        code, _, err = srv.stop(sig=signal.SIGCONT, timeout=20)
        self.assertEqual(code, 0, err.decode(errors="replace")[-3000:])
        with open(log) as f:
            probes = [l for l in f if "absent" in l]
        # absent.lua and absent/index.lua, once; not twice per request.
        self.assertGreaterEqual(len(probes), 1)
        self.assertLessEqual(len(probes), 2, "".join(probes[:6]))
        print("\n  %d requests for a missing path: %d file-system probes"
              % (requests, len(probes)))

    def test_a_script_created_after_a_404_is_served_once_the_watcher_saw_it(
            self):
        root = self.site({"index.lua": handler("home")})
        srv = self.serve(root=root)
        for _ in range(3):  # remembered as missing
            self.assertEqual(self.get(srv, "/later").status, 404)
        write_atomically(os.path.join(root, "later.lua"), handler("now"))
        self.wait_status(srv, "/later", 200)
        self.assertEqual(self.get(srv, "/later").body, b"now")
        os.unlink(os.path.join(root, "later.lua"))
        self.wait_status(srv, "/later", 404)
        for _ in range(3):
            self.assertEqual(self.get(srv, "/later").status, 404)
        with open(os.path.join(root, "later.lua"), "w") as f:
            f.write(handler("again"))  # written in place, not renamed
        self.wait_status(srv, "/later", 200)

    def test_a_folder_moved_in_serves_its_scripts_and_moved_out_stops(self):
        root = self.site({"index.lua": handler("home")})
        outside = self.site({"page.lua": handler("moved in"),
                             "index.lua": handler("folder index")})
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/blog/page").status, 404)
        self.assertEqual(self.get(srv, "/blog/").status, 404)
        moved = os.path.join(root, "blog")
        os.rename(outside, moved)
        self.addCleanup(lambda: os.path.exists(moved) and
                        shutil.rmtree(moved, True))
        self.wait_status(srv, "/blog/page", 200)
        self.assertEqual(self.get(srv, "/blog/page").body, b"moved in")
        self.assertEqual(self.get(srv, "/blog/").body, b"folder index")
        os.rename(moved, outside)
        self.wait_status(srv, "/blog/page", 404)
        self.assertEqual(self.get(srv, "/blog/").status, 404)

    def test_a_link_made_after_a_404_is_served(self):
        root = self.site({"index.lua": handler("home")})
        target = os.path.join(self.site({"t.lua": handler("linked")}), "t.lua")
        srv = self.serve(root=root)
        self.assertEqual(self.get(srv, "/linked").status, 404)
        os.symlink(target, os.path.join(root, "linked.lua"))
        self.wait_status(srv, "/linked", 200)
        self.assertEqual(self.get(srv, "/linked").body, b"linked")


class Config(ServeTest):
    def test_a_config_file_sets_routes_limits_timeouts_and_the_log(self):
        root = self.site({
            "home.lua": handler("from the config"),
            "slow.lua": 'local mf = require "moonflow"\n'
                        'return function(req, resp) mf.sleep(2000)\n'
                        '  resp:send("late") end\n',
            "echo.lua": 'return function(req, resp) resp:send(req.body) end\n',
        })
        conf = os.path.join(root, "moonflow.conf.lua")
        log = os.path.join(root, "access.log")
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log = "access.log",\n'
                    '  limits = { max_body = 1000 },\n'
                    '  routes = { ["/"] = "home.lua",\n'
                    '             ["/slow"] = { file = "slow.lua", timeout = 200 } } }\n')
        srv = self.serve("--config", conf)
        self.assertEqual(self.get(srv, "/").body, b"from the config")
        t0 = time.monotonic()
        r = self.get(srv, "/slow")
        self.assertEqual(r.status, 504)
        self.assertLess(time.monotonic() - t0, 1.5)
        r = request(srv.port, b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                    b"Content-Length: 2000\r\n\r\n" + b"x" * 2000)
        self.assertEqual(r.status, 413)
        r = request(srv.port, b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                    b"Content-Length: 5\r\n\r\nhello")
        self.assertEqual(r.body, b"hello")
        self.stop_cleanly(srv)
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertTrue(any('"GET / HTTP/1.1" 200' in l for l in lines), lines)
        self.assertTrue(any('"GET /slow HTTP/1.1" 504' in l for l in lines))

    def test_a_broken_config_is_reported(self):
        root = self.site({})
        conf = os.path.join(root, "bad.lua")
        with open(conf, "w") as f:
            f.write("return {")
        out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2)
        self.assertIn("bad.lua", out.stderr)

    def serve_fails(self, *args):
        return subprocess.run([MOONFLOW, "serve"] + list(args),
                              capture_output=True, text=True, timeout=10)

    def test_unknown_keys_and_wrong_types_in_the_config_are_named(self):
        root = self.site({})
        cases = [
            ('return { root = ".", acces_log = "x" }', "acces_log"),
            ('return { root = ".", workers = "two" }', "workers"),
            ('return { root = ".", limits = { max_bdy = 1 } }',
             "limits.max_bdy"),
            ('return { root = ".", timeouts = { handler = -1 } }',
             "timeouts.handler"),
            ('return { root = ".", tls = { cert = "c.pem" } }', "tls"),
            ('return { root = ".", tls = { sni = { a = { cert = "c" } } } }',
             "tls.sni[a]"),
            ('return { root = ".", routes = { ["/"] = { file = "a.lua", '
             'timeout = "1s" } } }', "routes[/].timeout"),
            # numbers are integers in range: no wrap-around, no silent cap
            ('return { root = ".", timeouts = { handler = 1e12 } }',
             "timeouts.handler: an integer from 0 to 4294967295 (ms; 0: "
             "none) expected, got 1000000000000"),
            ('return { root = ".", workers = 1.5 }',
             "workers: an integer from 0 to 1024"),
            ('return { root = ".", workers = 5000 }',
             "workers: an integer from 0 to 1024"),
            ('return { root = ".", limits = { max_headers = 1000 } }',
             "limits.max_headers: an integer from 1 to 100"),
            ('return { root = ".", limits = { max_connections = 0 } }',
             "limits.max_connections"),
            ('return { root = ".", limits = { max_body = 0/0 } }',
             "limits.max_body"),
            ('return { root = ".", timeouts = { header = "10s" } }',
             "timeouts.header: an integer from 0 to 4294967295 (ms; 0: "
             "none) expected, got a string"),
            ('return { root = ".", listen = "localhost:99999" }',
             "listen: HOST:PORT expected"),
            ('return { root = ".", listen = "example.com:80" }',
             "listen: HOST:PORT expected"),
        ]
        for text, key in cases:
            conf = os.path.join(root, "c.lua")
            with open(conf, "w") as f:
                f.write(text)
            out = self.serve_fails("--config", conf)
            self.assertEqual(out.returncode, 2, text)
            self.assertIn(key, out.stderr, text)

    def config_fails(self, root, text):
        conf = os.path.join(root, "c.lua")
        with open(conf, "w") as f:
            f.write(text)
        out = self.serve_fails("--config", conf, "--listen",
                               "127.0.0.1:%d" % free_port())
        self.assertEqual(out.returncode, 2, text)
        self.assertIn(conf + ": ", out.stderr, text)  # the file, then the key
        return out.stderr

    def test_a_route_file_that_does_not_exist_stops_the_start(self):
        root = self.site({"home.lua": handler("home")})
        err = self.config_fails(root, 'return { root = ".", routes = {\n'
                                '  ["/"] = "home.lua", ["/gone"] = "gone.lua" } }')
        self.assertIn("routes[/gone]: ", err)
        self.assertIn("gone.lua: no such file or directory", err)
        os.mkdir(os.path.join(root, "dir.lua"))
        err = self.config_fails(root, 'return { root = ".", routes = {\n'
                                '  ["/d"] = { file = "dir.lua" } } }')
        self.assertIn("routes[/d]: ", err)
        self.assertIn("dir.lua: not a regular file", err)

    def test_missing_tls_files_are_named_with_the_reason(self):
        root = self.site({"index.lua": handler("home")})
        cert, key = self_signed(root, "localhost")
        err = self.config_fails(root, 'return { root = ".", tls = {\n'
                                '  cert = "nope.crt", key = %r } }' % key)
        self.assertIn("tls.cert: ", err)
        self.assertIn("nope.crt: no such file or directory", err)
        self.assertNotIn("system lib", err)
        err = self.config_fails(root, 'return { root = ".", tls = {\n'
                                '  cert = %r, key = "." } }' % cert)
        self.assertIn("tls.key: ", err)
        self.assertIn(": not a regular file", err)
        err = self.config_fails(root, 'return { root = ".", tls = {\n'
                                '  cert = %r, key = %r, sni = {\n'
                                '  ["api.test"] = { cert = %r, key = "k" } } } }'
                                % (cert, key, cert))
        self.assertIn("tls.sni[api.test].key: ", err)
        self.assertIn("no such file or directory", err)

    def test_shared_dicts_with_a_bad_name_or_size_stop_the_start(self):
        root = self.site({"index.lua": handler("home")})
        for text, words in (
                ("shared = { hits = 100 }", "shared.hits: an integer from 8192 "
                 "to 68719476736 (bytes) expected, got 100"),
                ("shared = { hits = 8192.5 }", "shared.hits: an integer from"),
                ("shared = { hits = 2^37 }", "shared.hits: an integer from"),
                ('shared = { hits = "1m" }', "shared.hits: an integer from 8192 "
                 "to 68719476736 (bytes) expected, got a string"),
                ('shared = { ["9lives"] = 8192 }', "shared.9lives: a dict name "
                 "expected"),
                ('shared = { ["a-b"] = 8192 }', "shared.a-b: a dict name"),
                ("shared = { [1] = 8192 }", "a key that is not a string"),
                ("shared = 1048576", "shared: a table expected, got 1048576")):
            err = self.config_fails(root, 'return { root = ".", %s }' % text)
            self.assertIn(words, err)

    def test_a_config_is_read_as_data_whatever_its_metatables_do(self):
        root = self.site({"index.lua": handler("home")})
        # An __index that raises used to escape every pcall: a PANIC abort.
        err = self.config_fails(root, 'return setmetatable({ root = ".",\n'
                                '  limits = setmetatable({ max_bdy = 1 },\n'
                                '    { __index = function() error("no") end })'
                                ' }, { __index = function() error("no") end })')
        self.assertIn("limits.max_bdy: unknown key", err)
        self.assertNotIn("PANIC", err)
        conf = os.path.join(root, "c.lua")
        with open(conf, "w") as f:
            f.write("error({})")
        out = self.serve_fails("--config", conf)
        self.assertEqual(out.returncode, 2)
        self.assertIn(conf + ": raised table", out.stderr)

    def test_an_access_log_that_cannot_be_opened_stops_the_start(self):
        root = self.site({"index.lua": handler("home")})
        log = os.path.join(root, "no-such-dir", "access.log")
        out = self.serve_fails(root, "--listen", "127.0.0.1:%d" % free_port(),
                               "--workers", "1", "--access-log", log)
        self.assertEqual(out.returncode, 1)
        self.assertIn(log, out.stderr)
        # named by its config key, the cause after it
        self.assertIn("moonflow serve: access_log %s: " % log, out.stderr)


class Lifecycle(ServeTest):
    def test_graceful_stop_finishes_handlers_in_flight(self):
        root = self.site({"s.lua": 'local mf = require "moonflow"\n'
                                   'return function(req, resp)\n'
                                   '  mf.sleep(300); resp:send("done") end\n'})
        srv = self.serve(root=root, workers=2)
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            self.get(srv, "/s").body)) for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(0.1)
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        self.assertEqual(results, [b"done"] * 6)
        code, _, _ = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)

    def test_the_start_line_counts_its_workers_in_words(self):
        root = self.site({"index.lua": handler("hi")})
        for workers, words in [(1, b"(1 worker)\n"), (2, b"(2 workers)\n")]:
            with self.subTest(workers):
                srv = self.serve(root=root, workers=workers)
                code, _, err = srv.stop(sig=signal.SIGTERM)
                self.assertEqual(code, 0)
                self.assertIn(words, err)

    def test_pipelined_requests_to_lua_handlers_are_answered_in_order(self):
        root = self.site({
            "n.lua": 'return function(req, resp) resp:send(req.query.i) end\n',
            "w.lua": 'local mf = require "moonflow"\n'
                     'return function(req, resp) mf.sleep(30)\n'
                     '  resp:send("w" .. req.query.i) end\n'})
        srv = self.serve(root=root)
        reqs = b"".join(b"GET /%s?i=%d HTTP/1.1\r\nHost: h\r\n\r\n" %
                        (b"w" if i % 3 == 0 else b"n", i) for i in range(12))
        with connect(srv.port) as s:
            s.sendall(reqs)
            buf, bodies = b"", []
            for _ in range(12):
                r, buf = read_response(s, buf)
                bodies.append(r.body)
        self.assertEqual(bodies, [(b"w%d" if i % 3 == 0 else b"%d") % i
                                  for i in range(12)])

    def test_https_with_a_config_certificate(self):
        root = self.site({"index.lua": handler("secure")})
        cert, key = self_signed(root, "localhost")
        conf = os.path.join(root, "tls.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", tls = { cert = %r, key = %r } }\n'
                    % (cert, key))
        srv = self.serve("--config", conf)
        out = subprocess.run(["curl", "-sS", "--cacert", cert, "--resolve",
                              "localhost:%d:127.0.0.1" % srv.port,
                              "https://localhost:%d/" % srv.port],
                             capture_output=True, check=True)
        self.assertEqual(out.stdout, b"secure")

    def test_the_bundled_site_serves_its_pages(self):
        here = os.path.dirname(os.path.abspath(__file__))
        site = os.path.join(here, "..", "..", "scripts", "site")
        srv = self.serve(root=site)
        self.assertIn(b"/fanout", self.get(srv, "/").body)
        self.assertEqual(self.get(srv, "/hello").body, b"Hello, moonflow!\n")
        j = json.loads(self.get(srv, "/json?name=x").body)
        self.assertEqual(j["query"]["name"], "x")
        f = json.loads(request(srv.port, b"GET /fanout HTTP/1.1\r\nHost: "
                               b"127.0.0.1:%d\r\n\r\n" % srv.port).body)
        self.assertEqual(f["hello"]["status"], 200)
        self.assertEqual(f["json"]["status"], 200)
        self.assertTrue(self.get(srv, "/sleep?ms=50").body.startswith(b"slept"))
        self.assertEqual(self.get(srv, "/lib/query").status, 404)  # a module


class ErrorsInTheLogs(unittest.TestCase):
    """What the client and the logs see of answers that fail: requests the
    server refuses before any handler, a client that leaves, a stream the
    handler cannot finish, a response header that cannot be sent. One
    `moonflow serve` for the class, with an access log and its stderr in
    files (the error log); each test waits, bounded, for its lines."""

    SITE = {
        "slow.lua": 'local mf = require "moonflow"\n'
                    'return function(req, resp) mf.sleep(3000)\n'
                    '  resp:send("late") end\n',
        "echo.lua": 'return function(req, resp) resp:send(req.body) end\n',
        "stream-error.lua": 'return function(req, resp)\n'
                            '  assert(resp:write("part 1\\n"))\n'
                            '  error("failed after the head")\n'
                            'end\n',
        "stream-timeout.lua": 'local mf = require "moonflow"\n'
                              'return function(req, resp)\n'
                              '  assert(resp:write("part\\n"))\n'
                              '  mf.sleep(5000)\n'
                              'end\n',
        "bad-header.lua": 'return function(req, resp)\n'
                          '  resp.headers["Content-Length "] = "5"\n'
                          '  resp:send("never sent")\n'
                          'end\n',
    }

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="moonflow-test-")
        for name, text in cls.SITE.items():
            with open(os.path.join(cls.root, name), "w") as f:
                f.write(text)
        conf = os.path.join(cls.root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", access_log = "access.log",\n'
                    '  limits = { max_body = 1000 },\n'
                    '  timeouts = { header = 300 },\n'
                    '  routes = { ["/stream-timeout"] = { file = '
                    '"stream-timeout.lua", timeout = 300 } } }\n')
        cls.log = os.path.join(cls.root, "access.log")
        cls.errors = os.path.join(cls.root, "stderr.log")
        cls.port = free_port()
        with open(cls.errors, "wb") as err:
            cls.proc = subprocess.Popen(
                [MOONFLOW, "serve", "--config", conf, "--listen",
                 "127.0.0.1:%d" % cls.port, "--workers", "1"],
                stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(cls.port, cls.proc)
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            if cls.proc.poll() is None:
                cls.proc.send_signal(signal.SIGTERM)
            try:
                code = cls.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                cls.proc.kill()
                code = cls.proc.wait()
            if code != 0:
                with open(cls.errors, errors="replace") as f:
                    raise AssertionError("moonflow serve exited %d:\n%s"
                                         % (code, f.read()[-3000:]))
        finally:
            shutil.rmtree(cls.root, True)

    def lines(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def wait_line(self, path, needle, count=1, limit=5.0):
        """The lines of path holding needle, once there are count of them
        (the access log is written once a second)."""
        deadline = time.monotonic() + limit
        while True:
            found = [l for l in self.lines(path) if needle in l]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                self.fail("no %d lines with %r in %s:\n%s" % (
                    count, needle, os.path.basename(path),
                    "\n".join(self.lines(path)[-20:])))
            time.sleep(0.05)

    def raw(self, data, timeout=5.0):
        """Sends data, returns all the server sends until it closes."""
        with connect(self.port) as s:
            s.sendall(data)
            return read_until_closed(s, timeout)

    def test_a_malformed_request_is_answered_400_and_logged(self):
        out = self.raw(b"GET /malformed HTTP/1.1\r\nHost: h\r\n"
                       b"Bad Header: x\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:80])
        line = self.wait_line(self.log, '"GET /malformed HTTP/1.1" 400 ')[0]
        self.assertRegex(line, r'^127\.0\.0\.1 - - \[[^]]+\] "GET /malformed '
                               r'HTTP/1\.1" 400 16 "-" "-" \d+\.\d{3} '
                               r'[0-9a-f]{32}$')  # "400 Bad Request\n"
        # Not HTTP at all: nothing of a request line is known.
        before = len([l for l in self.lines(self.log) if '"-" 400 ' in l])
        out = self.raw(b"\x16\x03\x01\x02\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:80])
        self.wait_line(self.log, '"-" 400 ', count=before + 1)

    def test_refused_requests_are_logged_with_the_body_bytes_sent(self):
        # Each answer the connection makes itself: the access line counts
        # its body, as nginx's $body_bytes_sent does.
        for raw, status in [
                (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n", 414),
                (b"GET /v2 HTTP/2.0\r\nHost: h\r\n\r\n", 505),
                (b"POST /gz HTTP/1.1\r\nHost: h\r\n"
                 b"Transfer-Encoding: gzip, chunked\r\n\r\n", 501)]:
            with self.subTest(status):
                out = self.raw(raw)
                head, _, body = out.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 %d " % status))
                line = self.wait_line(self.log, '" %d ' % status)[-1]
                self.assertIn('" %d %d "' % (status, len(body)), line)
                self.assertGreater(len(body), 0)

    def test_an_oversize_head_is_answered_431_and_logged(self):
        out = self.raw(b"GET /big-head HTTP/1.1\r\nHost: h\r\nX-Big: " +
                       b"a" * 20000 + b"\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:80])
        self.wait_line(self.log, '"GET /big-head HTTP/1.1" 431 ')

    def test_a_body_over_the_limit_is_answered_413_and_logged(self):
        out = self.raw(b"POST /echo?big HTTP/1.1\r\nHost: h\r\n"
                       b"User-Agent: spec-413\r\nContent-Length: 2000\r\n"
                       b"\r\n" + b"x" * 2000)
        self.assertTrue(out.startswith(b"HTTP/1.1 413 "), out[:80])
        line = self.wait_line(self.log, '"POST /echo?big HTTP/1.1" 413 ')[0]
        self.assertIn('"spec-413"', line)  # the head was whole

    def test_a_head_that_stalls_is_closed_and_logged_408(self):
        t0 = time.monotonic()
        out = self.raw(b"GET /stall HTTP/1.1\r\nHost: h\r\n")
        self.assertEqual(out, b"")  # closed unanswered, as nginx does
        self.assertLess(time.monotonic() - t0, 3.0)
        self.wait_line(self.log, '"GET /stall HTTP/1.1" 408 ')

    def test_a_client_leaving_mid_handler_is_logged_499(self):
        with connect(self.port) as s:
            s.sendall(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
            time.sleep(0.2)  # the handler is waiting now
        line = self.wait_line(self.log, '"GET /slow HTTP/1.1" 499 ')[0]
        self.assertRegex(line, r'" 499 0 "-" "-" 0\.[0-9]{3} [0-9a-f]{32}$')

    def assert_cut(self, out, body):
        """A chunked answer that stops without its last chunk."""
        head, _, rest = out.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), out[:80])
        self.assertIn(b"transfer-encoding: chunked", head.lower())
        self.assertEqual(rest, b"%x\r\n%s\r\n" % (len(body), body))
        self.assertFalse(rest.endswith(b"0\r\n\r\n"))

    def test_an_error_after_streaming_began_cuts_the_stream(self):
        # A request pipelined behind it is never answered: the connection
        # closes right after the part that was written.
        out = self.raw(b"GET /stream-error HTTP/1.1\r\nHost: h\r\n\r\n"
                       b"GET /echo HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assert_cut(out, b"part 1\n")
        self.wait_line(self.log, '"GET /stream-error HTTP/1.1" 200 7 ')
        self.wait_line(self.errors, "GET /stream-error: the streamed response "
                       "is cut after 7 body bytes: the handler raised an "
                       "error")

    def test_a_handler_timeout_after_streaming_began_cuts_the_stream(self):
        t0 = time.monotonic()
        out = self.raw(b"GET /stream-timeout HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assert_cut(out, b"part\n")
        self.wait_line(self.errors, "GET /stream-timeout: the streamed "
                       "response is cut after 5 body bytes: handler timeout")

    def test_an_invalid_response_header_is_a_500_logged_with_route_and_name(
            self):
        r = request(self.port, b"GET /bad-header HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 500)
        self.assertNotIn(b"never sent", r.body)
        self.assertEqual(r.header("connection"), "close")
        self.wait_line(self.log, '"GET /bad-header HTTP/1.1" 500 %d '
                       % len(r.body))  # the server's own 500, counted
        self.wait_line(self.errors, 'GET /bad-header: response header '
                       '"Content-Length " is not a valid field name')
class OnePerAddress(ServeTest):
    """Only the workers of one process share a listen address: another
    moonflow there is refused unless it takes the address over."""

    def run_serve(self, root, port, *args, timeout=20):
        return subprocess.run([MOONFLOW, "serve", root, "--listen",
                               "127.0.0.1:%d" % port, "--workers", "2"] +
                              list(args), capture_output=True, text=True,
                              timeout=timeout)

    def assert_in_use(self, out, port):
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("127.0.0.1:%d: address already in use" % port,
                      out.stderr)

    def test_a_second_server_on_the_address_is_refused_and_shares_nothing(
            self):
        first = self.site({"v.lua": handler("first")})
        second = self.site({"v.lua": handler("second")})
        srv = self.serve(root=first, workers=2)
        self.assert_in_use(self.run_serve(second, srv.port), srv.port)
        bodies = {self.get(srv, "/v").body for _ in range(50)}
        self.assertEqual(bodies, {b"first"})

    def test_another_program_listening_on_the_port_is_address_in_use(self):
        root = self.site({"v.lua": handler("v")})
        for reuseport in (False, True):
            with socket.socket() as other:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuseport:
                    other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                other.bind(("127.0.0.1", 0))
                other.listen(4)
                port = other.getsockname()[1]
                self.assert_in_use(self.run_serve(root, port), port)
                self.assert_in_use(self.run_serve(root, port, "--takeover"),
                                   port)

    def test_of_servers_started_at_the_same_moment_exactly_one_serves(self):
        root = self.site({"v.lua": handler("v")})
        for _ in range(3):
            port = free_port()
            argv = [MOONFLOW, "serve", root, "--listen",
                    "127.0.0.1:%d" % port, "--workers", "2"]
            procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
                     for _ in range(3)]
            try:
                refused = []
                deadline = time.monotonic() + 20
                while len(refused) < 2 and time.monotonic() < deadline:
                    refused = [p for p in procs if p.poll() is not None]
                    time.sleep(0.02)
                self.assertEqual(len(refused), 2)
                for p in refused:
                    self.assertEqual(p.returncode, 1)
                    self.assertIn("address already in use", p.stderr.read())
                r = request(port, b"GET /v HTTP/1.1\r\nHost: h\r\n\r\n")
                self.assertEqual(r.body, b"v")
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                        self.assertEqual(p.wait(timeout=10), 0)
                    p.stderr.close()


class Takeover(ServeTest):
    """moonflow serve --takeover: a graceful restart. The new process takes
    the listening sockets over; the old one drains and exits 0."""

    def start(self, root, port, *args, workers=2):
        """A server whose stderr goes to a file (read while it runs)."""
        log = os.path.join(temp_dir(self), "stderr")
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [MOONFLOW, "serve", root, "--listen", "127.0.0.1:%d" % port,
                 "--workers", str(workers)] + list(args),
                stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(self.reap, proc)
        return proc, log

    def reap(self, proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=20), 0)

    def wait_log(self, log, text, proc=None, limit=20.0):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with open(log) as f:
                if text in f.read():
                    return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.02)
        with open(log) as f:
            self.fail("%r not in the log: %s" % (text, f.read()))

    def wait_exit(self, proc, limit=20.0):
        deadline = time.monotonic() + limit
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIsNotNone(proc.poll(), "the old server did not exit")
        return proc.returncode

    def test_a_graceful_restart_under_wrk_load_fails_no_request(self):
        old_root = self.site({"v.lua": handler("old")})
        new_root = self.site({"v.lua": handler("new")})
        port = free_port()
        old, old_log = self.start(old_root, port)
        self.wait_log(old_log, "workers)", old)
        wrk = subprocess.Popen(["wrk", "-t1", "-c32", "-d6s",
                                "http://127.0.0.1:%d/v" % port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            time.sleep(2)
            new, new_log = self.start(new_root, port, "--takeover")
            self.wait_log(new_log, "took 127.0.0.1:%d over from pid %d"
                          % (port, old.pid), new)
            self.assertEqual(self.wait_exit(old), 0)
            out, err = wrk.communicate(timeout=60)
        finally:
            if wrk.poll() is None:
                wrk.kill()
                wrk.wait()
        self.assertEqual(wrk.returncode, 0, err)
        self.assertNotIn("Socket errors", out)
        self.assertNotIn("Non-2xx", out)
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        self.assertGreater(requests, 1000)
        with open(old_log) as f:
            self.assertIn("pid %d took 127.0.0.1:%d over" % (new.pid, port),
                          f.read())
        bodies = {request(port, b"GET /v HTTP/1.1\r\nHost: h\r\n\r\n").body
                  for _ in range(20)}
        self.assertEqual(bodies, {b"new"})
        print("\n  graceful restart under wrk -c32 -d6s: %d requests, 0 "
              "socket errors, 0 non-2xx" % requests)

    def test_a_taker_that_fails_to_start_leaves_the_old_server_serving(self):
        root = self.site({"v.lua": handler("old")})
        port = free_port()
        old, old_log = self.start(root, port)
        self.wait_log(old_log, "workers)", old)
        bad_log = os.path.join(root, "no-such-dir", "access.log")
        new, new_log = self.start(root, port, "--takeover", "--access-log",
                                  bad_log)
        self.assertEqual(new.wait(timeout=20), 1)
        self.wait_log(old_log, "pid %d exited before taking over: still "
                      "serving" % new.pid, old)
        self.assertIsNone(old.poll())
        self.assertEqual(request(port, b"GET /v HTTP/1.1\r\nHost: h\r\n"
                                 b"\r\n").body, b"old")
        # and a later takeover still works
        new, new_log = self.start(root, port, "--takeover", workers=3)
        self.assertEqual(self.wait_exit(old), 0)
        self.assertEqual(request(port, b"GET /v HTTP/1.1\r\nHost: h\r\n"
                                 b"\r\n").body, b"old")

    def test_a_request_in_flight_finishes_on_the_old_server(self):
        root = self.site({"s.lua": 'local mf = require "moonflow"\n'
                                   'return function(req, resp)\n'
                                   '  mf.sleep(500); resp:send("slow") end\n'})
        port = free_port()
        old, old_log = self.start(root, port)
        self.wait_log(old_log, "workers)", old)
        with connect(port) as s:
            s.sendall(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n")
            time.sleep(0.1)
            new, new_log = self.start(root, port, "--takeover")
            self.wait_log(old_log, "took 127.0.0.1:%d over" % port, old)
            r, _ = read_response(s)
            self.assertEqual(r.body, b"slow")
            self.assertEqual(r.header("connection"), "close")
        self.assertEqual(self.wait_exit(old), 0)

    def test_a_takeover_with_no_server_there_starts_afresh(self):
        root = self.site({"v.lua": handler("v")})
        port = free_port()
        proc, log = self.start(root, port, "--takeover")
        self.wait_log(log, "no server on 127.0.0.1:%d, starting afresh"
                      % port, proc)
        self.wait_log(log, "workers)", proc)
        self.assertEqual(request(port, b"GET /v HTTP/1.1\r\nHost: h\r\n"
                                 b"\r\n").body, b"v")


class WholeLines(ServeTest):
    """Workers share stdout and stderr: a line a handler writes, with
    io.stderr:write, io.write, print or mf.log, reaches the file whole,
    whatever the other workers write at the same moment."""

    HANDLER = ('local mf = require "moonflow"\n'
               'return function(req, resp)\n'
               '  local w = req.query.w\n'
               '  for i = 1, 40 do\n'
               '    io.stderr:write("err-", w, "-", i, " a", " b", " c", " d",\n'
               '                    " e", " f", " g", " end", "\\n")\n'
               '    print("out", w, i, "x", "y", "z")\n'
               '    io.write("io-", w, "-", i, " p", " q", " r", "\\n")\n'
               '    mf.log("warn", "log-", w, "-", i, " s", " t", " u")\n'
               '  end\n'
               '  resp:send("ok")\n'
               'end\n')

    def test_lines_written_by_many_workers_at_once_stay_whole(self):
        root = self.site({"lines.lua": self.HANDLER})
        tmp = temp_dir(self)
        out_path, err_path = (os.path.join(tmp, n) for n in ("out", "err"))
        port = free_port()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [MOONFLOW, "serve", root, "--workers", "4", "--listen",
                 "127.0.0.1:%d" % port], stdout=out, stderr=err)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        wait_port(port, proc)
        clients, rounds = 8, 6

        def client(c):
            for r in range(rounds):
                w = c * rounds + r
                self.assertEqual(self.get_port(port, "/lines?w=%d" % w), b"ok")
        threads = [threading.Thread(target=client, args=(c,))
                   for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=20), 0)
        n = clients * rounds * 40
        with open(err_path, errors="replace") as f:
            err = f.read().splitlines()
        with open(out_path, errors="replace") as f:
            out = f.read().splitlines()
        whole = {
            "err": (err, r"^err-\d+-\d+ a b c d e f g end$"),
            "log": (err, r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[warn\] "
                         r"GET /lines \[[0-9a-f]{32}\]: log-\d+-\d+ s t u$"),
            "out": (out, r"^out\t\d+\t\d+\tx\ty\tz$"),
            "io": (out, r"^io-\d+-\d+ p q r$"),
        }
        for kind, (lines, pattern) in whole.items():
            with self.subTest(kind):
                mine = [l for l in lines if kind in l]
                broken = [l for l in mine if not re.match(pattern, l)]
                self.assertEqual(broken[:5], [])
                self.assertEqual(len(mine), n)

    def get_port(self, port, path):
        return request(port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" %
                       path.encode()).body


class HandlerUtilities(ServeTest):
    """mf.log, mf.worker and req.ctx in handlers served by `moonflow
    serve`."""

    def test_mf_log_writes_level_route_and_message_at_or_above_log_level(self):
        root = self.site({
            "log.lua": 'local mf = require "moonflow"\n'
                       'return function(req, resp)\n'
                       '  mf.log("warn", "a=", 1, " b=", true, " nl:\\n", nil)\n'
                       '  mf.log("debug", "hidden below the level")\n'
                       '  resp:send("ok")\n'
                       '  mf.log("error", "after the answer")\n'
                       'end\n',
            "bad.lua": 'local mf = require "moonflow"\n'
                       'return function(req, resp) mf.log("loud", "x") end\n',
        })
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", log_level = "info" }\n')
        srv = self.serve("--config", conf)
        self.assertEqual(self.get(srv, "/log?q=1").body, b"ok")
        self.assertEqual(self.get(srv, "/bad").status, 500)
        code, _, err = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        err = err.decode(errors="replace")
        self.assertRegex(err, r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[warn\] "
                              r"GET /log \[[0-9a-f]{32}\]: a=1 b=true "
                              r"nl:\\x0anil\n")
        self.assertRegex(err, r"\[error\] \(answered\) \[[0-9a-f]{32}\]: "
                              r"after the answer\n")
        self.assertNotIn("hidden below the level", err)
        self.assertIn("a level expected", err)

    def test_a_log_level_that_is_no_level_is_refused_at_start(self):
        root = self.site({})
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", log_level = "loud" }\n')
        out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 2)
        self.assertIn('log_level: "loud" is not a level', out.stderr)

    def test_init_runs_once_and_init_worker_on_every_worker_and_may_wait(self):
        out = temp_dir(self)
        root = self.site({
            "ok.lua": handler("ok"),
            "init.lua": 'local f = assert(io.open(%r .. "/init-" .. '
                        'require("moonflow").worker.id, "w")) f:close()\n' % out,
            "boot.lua": 'local mf = require "moonflow"\n'
                        'mf.sleep(20) -- waits: the server is up meanwhile\n'
                        'local f = assert(io.open(%r .. "/worker-" .. mf.worker.id, "w"))\n'
                        'f:write(mf.worker.count) f:close()\n' % out,
        })
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", init = "init.lua", init_worker = "boot.lua" }\n')
        srv = self.serve("--config", conf, workers=2)
        self.assertEqual(self.get(srv, "/ok").body, b"ok")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(os.listdir(out)) < 3:
            time.sleep(0.02)
        self.assertEqual(sorted(os.listdir(out)), ["init-0", "worker-0", "worker-1"])
        with open(os.path.join(out, "worker-1")) as f:
            self.assertEqual(f.read(), "2")

    def test_an_init_script_that_fails_stops_the_start_with_its_error(self):
        root = self.site({
            "raises.lua": 'error("no database at start")\n',
            "broken.lua": 'local x = \n',
            "late.lua": 'require("moonflow").sleep(5) error("after a wait")\n',
        })
        for key, script, words in (("init_worker", "raises.lua", "no database at start"),
                                    ("init", "broken.lua", "broken.lua:2:"),
                                    ("init_worker", "missing.lua", "init_worker")):
            conf = os.path.join(root, "conf.lua")
            with open(conf, "w") as f:
                f.write('return { root = ".", %s = %r }\n' % (key, script))
            out = subprocess.run([MOONFLOW, "serve", "--config", conf, "--listen",
                                  "127.0.0.1:%d" % free_port()],
                                 capture_output=True, text=True, timeout=20)
            self.assertNotEqual(out.returncode, 0, (key, script))
            self.assertIn(words, out.stderr, (key, script))
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", init_worker = "late.lua" }\n')
        srv = self.serve("--config", conf)
        time.sleep(0.2)
        code, _, err = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        self.assertIn(b"after a wait", err)

    def test_mf_worker_names_each_worker_and_req_ctx_is_per_request(self):
        root = self.site({
            "w.lua": 'local mf = require "moonflow"\n'
                     'return function(req, resp)\n'
                     '  local first = req.ctx.seen\n'
                     '  req.ctx.seen = true\n'
                     '  assert(req.ctx.seen and req.ctx == req.ctx)\n'
                     '  resp:send(("%d %d %s"):format(mf.worker.id, mf.worker.count,\n'
                     '                                tostring(first)))\n'
                     'end\n',
        })
        srv = self.serve(root=root, workers=2)
        seen = set()
        for _ in range(40):
            r = self.get(srv, "/w")
            self.assertEqual(r.status, 200, r.body)
            wid, count, first = r.body.decode().split()
            self.assertEqual((count, first), ("2", "nil"))
            seen.add(int(wid))
        self.assertTrue(seen and seen <= {0, 1}, seen)


if __name__ == "__main__":
    unittest.main(verbosity=2)
