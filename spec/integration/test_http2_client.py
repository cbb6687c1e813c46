"""The http client's HTTP/2 (mf.http with `http2`), driven by `moonflow run`
scripts against real servers on 127.0.0.1: nginx with HTTP/2 over TLS (ALPN
h2), over cleartext (h2c, prior knowledge) and a TLS listener without
HTTP/2 (the fallback to HTTP/1.1), its certificate made by the test; and
H2Peer (h2_peer.py, python3-h2) for a peer that resets streams, refuses
them, sends GOAWAY or never answers. Connections are counted from nginx's
access log ($connection) and by H2Peer. $MF_MOONFLOW is the binary."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from h2_peer import BrokenPeer, H2Peer
from harness import Server, free_port, self_signed, temp_dir

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
NGINX = shutil.which("nginx") or (
    "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
MIB = 1 << 20

NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections 512; }
http {
    log_format conn '$connection $server_protocol $request_method $uri $status';
    access_log %(dir)s/access.log conn;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    client_max_body_size 64m;
    http2_max_concurrent_streams 128;
    server {
        listen 127.0.0.1:%(h2)d ssl http2;
        listen 127.0.0.1:%(h2c)d http2;
        listen 127.0.0.1:%(h1)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        root %(dir)s/www;
        location / { }
        location /up/ { dav_methods PUT; create_full_put_path on; }
        location = /hello { return 200 "hello\\n"; }
        location = /moved { return 302 /hello; }
    }
    server {
        listen 127.0.0.1:%(h2few)d ssl http2;
        http2_max_concurrent_streams 8;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        root %(dir)s/www;
        location / { }
    }
}
"""


def run_lua(tmp, source, env=None, timeout=120):
    """Runs a Lua script with `moonflow run`; its last stdout line is the
    JSON it printed."""
    path = os.path.join(tmp, "case.lua")
    with open(path, "w") as f:
        f.write('local mf = require "moonflow"\n' + source)
    p = subprocess.run([MOONFLOW, "run", path], capture_output=True,
                       timeout=timeout, env=dict(os.environ, **(env or {})))
    out = p.stdout.decode(errors="replace").strip().splitlines()
    if p.returncode != 0 or not out:
        raise AssertionError("moonflow run failed (%d): %s %s" % (
            p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return json.loads(out[-1])


@unittest.skipIf(not NGINX, "nginx is not installed")
class NginxHttp2(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="moonflow-h2c-")
        os.makedirs(os.path.join(cls.dir, "www", "up"))
        cert, key = self_signed(cls.dir)
        cls.h2, cls.h2c, cls.h1 = free_port(), free_port(), free_port()
        cls.h2few = free_port()
        conf = os.path.join(cls.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF % {"dir": cls.dir, "h2": cls.h2, "h2c": cls.h2c,
                                  "h1": cls.h1, "h2few": cls.h2few, "cert": cert, "key": key})
        # 3 MiB + 1 byte of a pattern that shows a shifted or lost piece.
        cls.big = b"".join(hashlib.sha256(b"%d" % i).digest()
                           for i in range(3 * MIB // 32 + 1))[:3 * MIB + 1]
        with open(os.path.join(cls.dir, "www", "big.bin"), "wb") as f:
            f.write(cls.big)
        with open(os.path.join(cls.dir, "www", "small.txt"), "wb") as f:
            f.write(b"small\n")
        cls.nginx = Server([NGINX, "-c", conf, "-p", cls.dir], cls.h2)

    @classmethod
    def tearDownClass(cls):
        cls.nginx.stop()
        shutil.rmtree(cls.dir, True)

    def setUp(self):
        self.tmp = temp_dir(self)

    def access_log(self):
        """(connection, protocol, method, uri, status) of each request."""
        with open(os.path.join(self.dir, "access.log")) as f:
            return [tuple(line.split()) for line in f if line.strip()]

    def lua(self, source):
        env = {"H2": "https://127.0.0.1:%d" % self.h2,
               "H2C": "http://127.0.0.1:%d" % self.h2c,
               "H1": "https://127.0.0.1:%d" % self.h1,
               "H2FEW": "https://127.0.0.1:%d" % self.h2few,
               "WWW": os.path.join(self.dir, "www"),
               "DEAD": str(free_port())}
        return run_lua(self.tmp, source, env)

    def test_alpn_picks_h2_and_the_response_says_version_2(self):
        r = self.lua('''
local r, err = mf.http.get(os.getenv("H2") .. "/hello", {verify = false})
print(mf.json.encode{status = r.status, version = r.version, body = r.body,
                     err = err, type = r.headers["content-type"]})''')
        self.assertEqual(r, {"status": 200, "version": "2", "body": "hello\n",
                             "type": "text/plain"})

    def test_prior_knowledge_speaks_h2c_on_http(self):
        r = self.lua('''
local r, err = mf.http.request{url = os.getenv("H2C") .. "/hello",
                               http2 = "prior_knowledge"}
print(mf.json.encode{status = r.status, version = r.version, body = r.body})''')
        self.assertEqual(r, {"status": 200, "version": "2", "body": "hello\n"})

    def test_https_without_h2_falls_back_to_http11(self):
        r = self.lua('''
local a = mf.http.get(os.getenv("H1") .. "/hello", {verify = false})
local b = mf.http.get(os.getenv("H1") .. "/hello", {verify = false})
print(mf.json.encode{a = a.version, b = b.version, body = b.body})''')
        self.assertEqual(r, {"a": "1.1", "b": "1.1", "body": "hello\n"})

    def test_concurrent_first_requests_fall_back_together(self):
        # 30 at once to a new https origin without h2: they wait for the
        # first connection's ALPN, then go on HTTP/1.1 side by side.
        before = len(self.access_log())
        r = self.lua('''
local tasks = {}
for i = 1, 30 do
  tasks[i] = mf.task.http{url = os.getenv("H1") .. "/hello?c=" .. i,
                          verify = false}
end
local res = mf.parallel(tasks):wait()
local ok = 0
for i = 1, 30 do
  if res[i].status == 200 and res[i].version == "1.1" then ok = ok + 1 end
end
print(mf.json.encode{ok = ok})''')
        self.assertEqual(r, {"ok": 30})
        lines = self.access_log()[before:]
        self.assertEqual({p for _, p, *_ in lines}, {"HTTP/1.1"})
        self.assertGreater(len({c for c, *_ in lines}), 1)

    def test_concurrent_first_requests_to_a_dead_origin_all_fail(self):
        # They waited for one connection that could not open: each fails
        # with its reason, none waits forever.
        r = self.lua('''
local tasks = {}
for i = 1, 30 do
  tasks[i] = mf.task.http{url = "https://127.0.0.1:" .. os.getenv("DEAD"),
                          verify = false, timeout = 5000}
end
local res = mf.parallel(tasks):wait()
local refused = 0
for i = 1, 30 do
  if res[i].error:find("^connection refused") then refused = refused + 1 end
end
print(mf.json.encode{refused = refused, first = res[1].error})''')
        self.assertEqual(r["refused"], 30, r)

    def test_http2_false_stays_on_http11_with_an_h2_server(self):
        r = self.lua('''
local r = mf.http.get(os.getenv("H2") .. "/hello",
                      {verify = false, http2 = false})
print(mf.json.encode{version = r.version, status = r.status})''')
        self.assertEqual(r, {"version": "1.1", "status": 200})

    def test_100_concurrent_requests_share_one_connection(self):
        before = len(self.access_log())
        r = self.lua('''
local tasks = {}
for i = 1, 100 do
  tasks[i] = mf.task.http{url = os.getenv("H2") .. "/hello?i=" .. i,
                          verify = false}
end
local res = mf.parallel(tasks):wait()
local ok = 0
for i = 1, 100 do
  if res[i].status == 200 and res[i].version == "2" then ok = ok + 1 end
end
print(mf.json.encode{ok = ok})''')
        self.assertEqual(r, {"ok": 100})
        lines = self.access_log()[before:]
        self.assertEqual(len(lines), 100)
        self.assertEqual({(c, p) for c, p, *_ in lines},
                         {(lines[0][0], "HTTP/2.0")})

    def test_beyond_max_concurrent_streams_requests_wait_for_a_stream(self):
        # The server takes 8 streams at a time: 40 requests wait their
        # turn on its one connection instead of being refused.
        before = len(self.access_log())
        r = self.lua('''
local tasks = {}
for i = 1, 40 do
  tasks[i] = mf.task.http{url = os.getenv("H2FEW") .. "/big.bin?i=" .. i,
                          verify = false}
end
local res = mf.parallel(tasks):wait()
local ok = 0
for i = 1, 40 do
  if res[i].status == 200 and #res[i].body == 3 * 1048576 + 1 then
    ok = ok + 1
  end
end
print(mf.json.encode{ok = ok})''')
        self.assertEqual(r, {"ok": 40})
        lines = self.access_log()[before:]
        self.assertEqual(len(lines), 40)
        self.assertEqual(len({c for c, *_ in lines}), 1)

    def test_an_upstream_group_keeps_one_h2_connection_per_server(self):
        before = len(self.access_log())
        r = self.lua('''
local port = function(v) return os.getenv(v):match(":(%d+)$") end
mf.upstream("h2pair", {servers = {"127.0.0.1:" .. port("H2"),
                                  "127.0.0.1:" .. port("H2FEW")}})
local tasks = {}
for i = 1, 40 do
  tasks[i] = mf.task.http{url = "https://h2pair/small.txt?u=" .. i,
                          verify = false}
end
local res = mf.parallel(tasks):wait()
local ok = 0
for i = 1, 40 do
  if res[i].status == 200 and res[i].version == "2" then ok = ok + 1 end
end
print(mf.json.encode{ok = ok})''')
        self.assertEqual(r, {"ok": 40})
        lines = self.access_log()[before:]  # both servers log here
        self.assertEqual(len(lines), 40)
        self.assertEqual(len({c for c, *_ in lines}), 2)

    def test_a_few_mib_down_byte_exact_20_at_once(self):
        # 20 downloads of 3 MiB at once on one connection, each checked
        # against the file (flow control over many streams).
        before = len(self.access_log())
        r = self.lua('''
local f = assert(io.open(os.getenv("WWW") .. "/big.bin", "rb"))
local want = f:read("*a")
f:close()
local tasks = {}
for i = 1, 20 do
  tasks[i] = mf.task.http{url = os.getenv("H2") .. "/big.bin?i=" .. i,
                          verify = false}
end
local res = mf.parallel(tasks):wait()
local same = 0
for i = 1, 20 do
  if res[i].body == want and res[i].version == "2" then same = same + 1 end
end
print(mf.json.encode{same = same, len = #want})''')
        self.assertEqual(r, {"same": 20, "len": 3 * MIB + 1})
        lines = self.access_log()[before:]
        self.assertEqual(len({c for c, *_ in lines}), 1)

    def test_a_few_mib_up_byte_exact(self):
        r = self.lua('''
local f = assert(io.open(os.getenv("WWW") .. "/big.bin", "rb"))
local body = f:read("*a")
f:close()
local r, err = mf.http.request{method = "PUT", verify = false, body = body,
                               url = os.getenv("H2") .. "/up/copy.bin"}
print(mf.json.encode{status = r and r.status, version = r and r.version,
                     err = err})''')
        self.assertEqual(r, {"status": 201, "version": "2"})
        with open(os.path.join(self.dir, "www", "up", "copy.bin"), "rb") as f:
            self.assertEqual(f.read(), self.big)

    def test_redirects_are_followed_on_h2(self):
        r = self.lua('''
local r = mf.http.request{url = os.getenv("H2") .. "/moved", verify = false,
                          redirects = 1}
print(mf.json.encode{status = r.status, version = r.version, body = r.body,
                     url = r.url})''')
        self.assertEqual(r["status"], 200)
        self.assertEqual(r["version"], "2")
        self.assertEqual(r["body"], "hello\n")
        self.assertTrue(r["url"].endswith("/hello"))

    def test_prior_knowledge_to_an_http11_server_is_an_error(self):
        # nginx's TLS-less HTTP/1.1 is not there; its TLS port answers a
        # cleartext h2 preface with a 400 and closes: a failed task, the
        # process goes on.
        r = self.lua('''
local r, err = mf.http.request{url = "http://127.0.0.1:" ..
    os.getenv("H1"):match(":(%d+)$") .. "/hello", http2 = "prior_knowledge",
    retries = 0}
local ok = mf.http.get(os.getenv("H2") .. "/hello", {verify = false})
print(mf.json.encode{err = err, status = r and r.status, after = ok.status})''')
        self.assertIsNone(r.get("status"))
        self.assertRegex(r["err"], "^(protocol error|connection)")
        self.assertEqual(r["after"], 200)


class PeerHttp2(unittest.TestCase):
    """Against H2Peer: resets, refusals, GOAWAY, silence."""

    def setUp(self):
        self.tmp = temp_dir(self)
        self.peer = H2Peer()
        self.addCleanup(self.peer.stop)

    def lua(self, source):
        env = {"PEER": "http://127.0.0.1:%d" % self.peer.port}
        return run_lua(self.tmp, 'local P = os.getenv("PEER")\n' + source,
                       env)

    def test_a_reset_stream_is_an_error_the_script_sees(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/rst", http2 = "prior_knowledge"}
local ok = mf.http.request{url = P .. "/fine", http2 = "prior_knowledge"}
print(mf.json.encode{err = err, got = r ~= nil, after = ok.body})''')
        self.assertFalse(r["got"])
        self.assertRegex(r["err"], "^protocol error")
        self.assertIn("INTERNAL_ERROR", r["err"])
        self.assertEqual(r["after"], "ok")
        self.assertEqual(self.peer.connections, 1)

    def test_a_refused_stream_is_retried_when_safe(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/refuse-once?a",
                               http2 = "prior_knowledge"}
print(mf.json.encode{err = err, body = r and r.body})''')
        self.assertEqual(r, {"body": "again"})
        self.assertEqual(self.peer.paths, ["/refuse-once?a"] * 2)

    def test_a_stream_refused_every_time_ends_after_the_retries(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/refuse-always", retries = 2,
                               http2 = "prior_knowledge"}
print(mf.json.encode{err = err, got = r ~= nil})''')
        self.assertFalse(r["got"])
        self.assertRegex(r["err"], "^connection reset: HTTP/2 stream refused")
        self.assertEqual(self.peer.paths, ["/refuse-always"] * 3)

    def test_a_head_over_64_kib_is_a_protocol_error_on_its_stream_only(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/bighead", http2 = "prior_knowledge"}
local ok = mf.http.request{url = P .. "/fine", http2 = "prior_knowledge"}
print(mf.json.encode{err = err, got = r ~= nil, after = ok.body})''')
        self.assertEqual(r, {"got": False, "after": "ok",
                             "err": "protocol error: the response head is "
                                    "over 64 KiB"})
        self.assertEqual(self.peer.connections, 1)

    def test_goaway_retries_a_get_on_a_fresh_connection(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/goaway-once?g",
                               http2 = "prior_knowledge"}
print(mf.json.encode{err = err, body = r and r.body, version = r and r.version})''')
        self.assertEqual(r, {"body": "fresh", "version": "2"})
        self.assertEqual(self.peer.connections, 2)

    def test_goaway_fails_a_post_the_script_sees_it(self):
        r = self.lua('''
local r, err = mf.http.request{url = P .. "/goaway-once?p", method = "POST",
                               body = "x", http2 = "prior_knowledge"}
print(mf.json.encode{err = err, got = r ~= nil})''')
        self.assertFalse(r["got"])
        self.assertRegex(r["err"], "^connection reset")
        self.assertIn("GOAWAY", r["err"])
        self.assertEqual(self.peer.paths, ["/goaway-once?p"])

    def test_bodies_up_and_down_byte_exact(self):
        r = self.lua('''
local parts = {}
for i = 1, 900 * 1024 / 16 do parts[i] = string.format("%015d\\n", i) end
local body = table.concat(parts)
local r, err = mf.http.request{url = P .. "/echo", method = "POST",
                               body = body, http2 = "prior_knowledge"}
print(mf.json.encode{same = r.body == body, got = r.headers["x-got"],
                     len = #body, err = err})''')
        self.assertEqual(r, {"same": True, "got": str(900 * 1024),
                             "len": 900 * 1024})

    def test_a_timeout_resets_its_stream_and_the_connection_goes_on(self):
        r = self.lua('''
local t0 = mf.now()
local r, err = mf.http.request{url = P .. "/slow", timeout = 300,
                               http2 = "prior_knowledge"}
local took = mf.now() - t0
local ok = mf.http.request{url = P .. "/fine", http2 = "prior_knowledge"}
print(mf.json.encode{err = err, took = took, after = ok.body})''')
        self.assertEqual(r["err"], "timeout")
        self.assertLess(r["took"], 3000)
        self.assertEqual(r["after"], "ok")
        self.assertEqual(self.peer.connections, 1)

    def test_concurrent_streams_on_one_connection_each_get_their_answer(self):
        r = self.lua('''
local tasks = {}
for i = 1, 50 do
  tasks[i] = mf.task.http{url = P .. "/echo", method = "POST",
                          body = "n" .. i, http2 = "prior_knowledge"}
end
local res = mf.parallel(tasks):wait()
local ok = 0
for i = 1, 50 do if res[i].body == "n" .. i then ok = ok + 1 end end
print(mf.json.encode{ok = ok})''')
        self.assertEqual(r, {"ok": 50})
        self.assertEqual(self.peer.connections, 1)


class BrokenHttp2(unittest.TestCase):
    """Against BrokenPeer: frames made at random, three seeds."""

    def test_random_frames_end_every_request_and_never_the_process(self):
        tmp = temp_dir(self)
        for seed in (1, 2, 3):
            peer = BrokenPeer(seed)
            self.addCleanup(peer.stop)
            r = run_lua(tmp, '''
local P = os.getenv("PEER")
local ended, odd = 0, {}
for i = 1, 150 do
  local r, err = mf.http.request{url = P .. "/x?" .. i, retries = 0,
                                 timeout = 500, http2 = "prior_knowledge"}
  local word = r and "response" or err:match("^[^:]+")
  ended = ended + 1
  if not (word == "response" or word == "protocol error" or
          word == "connection closed" or word == "connection reset" or
          word == "timeout" or word == "system error") then
    odd[#odd + 1] = err
  end
end
print(mf.json.encode{ended = ended, odd = #odd, first = odd[1]})''',
                        {"PEER": "http://127.0.0.1:%d" % peer.port})
            self.assertEqual(r, {"ended": 150, "odd": 0}, seed)


if __name__ == "__main__":
    unittest.main(verbosity=2)
