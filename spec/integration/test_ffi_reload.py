"""LuaJIT's FFI under moonflow serve's hot reload: a route and the site
module it requires declare C types and functions with ffi.cdef and give a
type methods with ffi.metatype, at their top level, which every reload runs
again in the same Lua state (moonflow.ffi_guard). And lua-resty-core's FFI
modules in handlers, on the functions the binary exports
(lua/ngx_ffi). $MF_MOONFLOW is the binary (the ASan twin in asan.*)."""
import os
import re
import signal
import subprocess
import time
import unittest

from harness import Server, free_port, request, temp_dir

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")


def write_atomically(path, text):
    tmp = os.path.join(os.path.dirname(path), ".tmp-" + os.path.basename(path))
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


# The module: a struct with methods, a C function, an enum; version n.
MODULE = '''local ffi = require "ffi"
ffi.cdef [[
typedef struct { int n; } reload_obj_t;
int abs(int x);
enum reload_colour { RELOAD_RED, RELOAD_GREEN };
]]
local version = "m%d"
local obj = ffi.metatype("reload_obj_t", { __index = {
    version = function(self) return version .. "/r" .. self.n end } })
return { new = obj }
'''

# The same module with reload_obj_t declared otherwise.
CHANGED_MODULE = MODULE.replace("typedef struct { int n; }",
                                "typedef struct { int n; double extra; }")

# The route: its own declaration too, and a call of the module's function.
ROUTE = '''local ffi = require "ffi"
local cdefs = require "cdefs"
ffi.cdef "typedef struct { int k; } route_local_t;"
return function(req, resp)
    resp:send(cdefs.new(ffi.C.abs(-%d)):version())
end
'''


class Serve(unittest.TestCase):
    def serve(self, root, *args, workers=1):
        port = free_port()
        self.log = os.path.join(temp_dir(self), "stderr")
        srv = Server([MOONFLOW, "serve", root, "--listen",
                      "127.0.0.1:%d" % port, "--workers", str(workers)]
                     + list(args), port, stderr_path=self.log)
        self.addCleanup(lambda: srv.proc.poll() is None and srv.stop())
        return srv

    def stop(self, srv):
        code, _, _ = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0, self.stderr()[-3000:])

    def stderr(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def get(self, srv, path):
        return request(srv.port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" %
                       path.encode())

    def site(self, files):
        root = temp_dir(self)
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return root


class FfiReload(Serve):
    ROUNDS = 1000
    SECONDS = 90  # a bound, never reached on a quiet machine

    def wait_for(self, srv, want, limit=5.0):
        deadline = time.monotonic() + limit
        while True:
            r = self.get(srv, "/v")
            if r.status == 200 and r.body == want:
                return
            self.assertLess(time.monotonic(), deadline,
                            "%r never came (last: %d %r)"
                            % (want, r.status, r.body[:300]))

    def test_a_thousand_reloads_under_load_answer_2xx_only(self):
        root = self.site({"lib/cdefs.lua": MODULE % 0, "v.lua": ROUTE % 0})
        srv = self.serve(root, workers=2)
        self.wait_for(srv, b"m0/r0")
        wrk = subprocess.Popen(["wrk", "-t1", "-c4", "-d%ds" % (
                                self.SECONDS + 30),
                                "http://127.0.0.1:%d/v" % srv.port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        self.addCleanup(lambda: wrk.poll() is None and wrk.kill())
        rounds, route, module = 0, 0, 0
        start = time.monotonic()
        while rounds < self.ROUNDS:
            self.assertLess(time.monotonic() - start, self.SECONDS, rounds)
            rounds += 1
            if rounds % 2:  # the route alone reloads
                route += 1
                write_atomically(os.path.join(root, "v.lua"), ROUTE % route)
            else:  # a new generation: the module and every route reload
                module += 1
                write_atomically(os.path.join(root, "lib", "cdefs.lua"),
                                 MODULE % module)
            self.wait_for(srv, b"m%d/r%d" % (module, route))
        elapsed = time.monotonic() - start
        wrk.send_signal(signal.SIGINT)
        out, err = wrk.communicate(timeout=30)
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        self.stop(srv)
        log = self.stderr()
        print("\n  %d reloads of ffi.cdef code in %.0f s under wrk: %d "
              "requests, non-2xx: %s" % (rounds, elapsed, requests,
                                        "Non-2xx" in out and out or 0))
        self.assertNotIn("Non-2xx", out)
        self.assertNotIn("Socket errors", out)
        self.assertGreater(requests, rounds)
        self.assertNotIn("attempt to redefine", log)
        self.assertNotIn("ffi.cdef", log)  # nothing changed: nothing said

    def test_a_changed_declaration_is_reported_once_and_the_first_stays(self):
        root = self.site({"lib/cdefs.lua": MODULE % 0, "v.lua": ROUTE % 1})
        srv = self.serve(root)
        self.wait_for(srv, b"m0/r1")
        for n in range(1, 4):
            write_atomically(os.path.join(root, "lib", "cdefs.lua"),
                             CHANGED_MODULE % n)
            self.wait_for(srv, b"m%d/r1" % n)
        self.stop(srv)
        log = self.stderr()
        said = re.findall(r".*ffi\.cdef.*", log)
        self.assertEqual(len(said), 1, log[-3000:])
        self.assertIn("lib/cdefs.lua:3: ffi.cdef: 'reload_obj_t' is "
                      "declared already", said[0])
        self.assertNotIn("attempt to redefine", log)


# A handler on lua-resty-core: the shared dict through ngx.shared (the
# config's dict), time, digests, base64, URIs and the worker, as OpenResty
# code writes them.
RESTY_HANDLER = '''local ngx = require "moonflow.ngx"
require "resty.core"
local str = require "nginx.string"
return function(req, resp)
    local hits = ngx.shared.hits
    local n = assert(hits:incr("n", 1, 0))
    resp:send(table.concat({
        n, ngx.worker.id(), ngx.worker.count(),
        -- os.time() reads the kernel's coarse clock, a few ms behind
        -- ngx.now()'s just after a second turns: 1 s and that lag apart
        tostring(math.abs(ngx.now() - os.time()) < 2),
        ngx.md5("x"), str.to_hex(ngx.sha1_bin("x")):sub(1, 8),
        ngx.crc32_long("x"), ngx.encode_base64("x"),
        ngx.escape_uri("a b"), ngx.http_time(0)}, " "))
end
'''


class RestyCoreInServe(Serve):
    def test_resty_core_modules_run_in_handlers(self):
        root = self.site({"r.lua": RESTY_HANDLER, "_conf.lua":
                          "return { shared = { hits = 1048576 } }\n"})
        srv = self.serve(root, "--config", os.path.join(root, "_conf.lua"),
                         workers=2)
        seen = set()
        for i in range(1, 41):
            r = self.get(srv, "/r")
            self.assertEqual(r.status, 200, r.body)
            fields = r.body.decode().split(" ", 9)
            self.assertEqual(int(fields[0]), i)  # one dict for both workers
            seen.add(fields[1])
            self.assertEqual(fields[2:], [
                "2", "true", "9dd4e461268c8034f5c8564e155c67a6", "11f6ad8e",
                "2363233923", "eA==", "a%20b",
                "Thu, 01 Jan 1970 00:00:00 GMT"])
        self.assertLessEqual(seen, {"0", "1"})
        self.stop(srv)


if __name__ == "__main__":
    unittest.main()
