"""Response compression under `moonflow serve` (compress = {...}): curl
--compressed round-trips gzip and br; Accept-Encoding's q-values, identity
and * as raw requests send them; Vary: Accept-Encoding whenever the
client's header decided; small answers, unlisted types, HEAD, 204, 304,
206 and answers that carry their own Content-Encoding untouched; ETag
weakened; a streamed answer compressed piece by piece, each piece
decodable as it arrives; a proxied answer compressed by the same rules;
a route's own compress (false, or a table); an unknown key under compress refused at start,
named. $MF_MOONFLOW is the binary. The server must stop with status 0."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import zlib

from harness import Server, connect, free_port, read_response, request

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

PAGE = "".join("<p>line %d of a page that compresses well</p>\n" % i
               for i in range(400)).encode()

SITE = {
    "page.lua": '''
local page = ...
return function(req, resp)
  resp.headers["Content-Type"] = "text/html; charset=utf-8"
  resp.headers["ETag"] = '"v1"'
  resp:send(PAGE)
end''',
    "small.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "text/html"
  resp:send(string.rep("s", 100))
end''',
    "png.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "image/png"
  resp:send(PAGE)
end''',
    "json.lua": '''
return function(req, resp)
  local t = {}
  for i = 1, 300 do t[i] = i end
  resp:json { numbers = t }
end''',
    "encoded.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "text/html"
  resp.headers["Content-Encoding"] = "identity-but-named"
  resp:send(PAGE)
end''',
    "notmod.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "text/html"
  resp.status = 304
  resp:send()
end''',
    "nocontent.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "text/html"
  resp.status = 204
  resp:send()
end''',
    "range.lua": '''
return function(req, resp)
  resp.headers["Content-Type"] = "text/html"
  resp.headers["Content-Range"] = "bytes 0-1999/20000"
  resp.status = 206
  resp:send(string.sub(PAGE, 1, 2000))
end''',
    "proxied.lua": '''
return function(req, resp)
  resp:proxy("http://127.0.0.1:PORT/off")
end''',
    "stream.lua": '''
local mf = require "moonflow"
return function(req, resp)
  resp.headers["Content-Type"] = "text/plain"
  for i = 1, 4 do
    resp:write(string.format("piece %d ", i) .. string.rep("x", 300) .. "\\n")
    mf.sleep(tonumber(req.query.pause or "0"))
  end
end''',
}

CONFIG = '''return {
  root = "site",
  routes = { ["/off"] = { file = "page.lua", compress = false },
             ["/gzonly"] = { file = "page.lua",
                             compress = { brotli = false, level = 1 } },
             ["/pngtoo"] = { file = "png.lua",
                             compress = { types = { "image/png" } } } },
  compress = { types = { "text/html", "text/plain", "application/json" },
               min_length = 1024, level = 6, brotli = true,
               brotli_level = 4 },
}
'''


def curl(port, path, *args):
    """curl's status line, headers (lower-case names) and decoded body."""
    out = subprocess.run(["curl", "-s", "-D", "-", "--max-time", "10"] +
                         list(args) + ["http://127.0.0.1:%d%s" % (port, path)],
                         check=True, capture_output=True, timeout=20).stdout
    head, body = out.split(b"\r\n\r\n", 1)
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, value = line.split(b":", 1)
        headers[name.decode().lower()] = value.strip().decode()
    return headers, body


def get(port, path, accept=None, method="GET"):
    raw = "%s %s HTTP/1.1\r\nHost: t\r\n" % (method, path)
    if accept is not None:
        raw += "Accept-Encoding: %s\r\n" % accept
    with connect(port) as s:
        s.sendall((raw + "\r\n").encode())
        resp, _ = read_response(s, head_request=method == "HEAD")
        return resp


class Compress(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.root = tempfile.mkdtemp(prefix="moonflow-compress-")
        os.mkdir(os.path.join(cls.root, "site"))
        page = PAGE.decode()
        for name, text in SITE.items():
            with open(os.path.join(cls.root, "site", name), "w") as f:
                f.write(text.replace("PAGE", "[[%s]]" % page)
                        .replace("PORT", str(cls.port)))
        conf = os.path.join(cls.root, "conf.lua")
        with open(conf, "w") as f:
            f.write(CONFIG)
        cls.errors = os.path.join(cls.root, "stderr.log")
        try:
            cls.srv = Server([MOONFLOW, "serve", "--config", conf,
                              "--listen", "127.0.0.1:%d" % cls.port,
                              "--workers", "1", "--access-log", "off"],
                             cls.port, stderr_path=cls.errors)
        except Exception:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        code, _, _ = cls.srv.stop(sig=signal.SIGTERM, timeout=30)
        with open(cls.errors, errors="replace") as f:
            log = f.read()
        shutil.rmtree(cls.root, ignore_errors=True)
        if code != 0:
            raise AssertionError("serve exited %d:\n%s" % (code, log[-3000:]))

    # ---- curl --compressed round trips --------------------------------

    def test_curl_round_trips_gzip(self):
        h, body = curl(self.port, "/page", "--compressed",
                       "-H", "Accept-Encoding: gzip")
        self.assertEqual(h.get("content-encoding"), "gzip")
        self.assertEqual(body, PAGE)
        self.assertEqual(h.get("vary"), "Accept-Encoding")
        self.assertLess(int(h["content-length"]), len(PAGE) // 4)

    def test_curl_round_trips_brotli(self):
        h, body = curl(self.port, "/page", "--compressed")  # offers br too
        self.assertEqual(h.get("content-encoding"), "br")
        self.assertEqual(body, PAGE)
        h, body = curl(self.port, "/json", "--compressed")
        self.assertEqual(h.get("content-encoding"), "br")
        self.assertTrue(body.startswith(b'{"numbers":[1,2,3'))

    def test_the_compressed_length_and_a_weak_etag(self):
        r = get(self.port, "/page", "gzip")
        self.assertEqual(int(r.header("content-length")), len(r.body))
        self.assertEqual(zlib.decompress(r.body, 31), PAGE)
        self.assertEqual(r.header("etag"), 'W/"v1"')
        plain = get(self.port, "/page", "identity")
        self.assertEqual(plain.header("etag"), '"v1"')
        self.assertEqual(plain.body, PAGE)

    # ---- Accept-Encoding --------------------------------------------

    def test_q_values_choose_the_coding(self):
        cases = [
            ("gzip;q=0", None),
            ("gzip;q=0, br", "br"),
            ("gzip;q=0, br;q=0", None),
            ("br;q=0.5, gzip;q=1", "gzip"),
            ("br;q=0.5, gzip", "gzip"),
            ("gzip, br", "br"),
            ("GZIP", "gzip"),
            ("identity", None),
            ("identity;q=1, gzip;q=0.5", None),
            ("*", "br"),
            ("*;q=0", None),
            ("*, br;q=0", "gzip"),
            ("", None),
            (None, None),
            ("deflate, compress", None),
            ("gzip;q=7", None),  # malformed: skipped
        ]
        for accept, want in cases:
            r = get(self.port, "/page", accept)
            self.assertEqual(r.header("content-encoding"), want, accept)
            self.assertEqual(r.header("vary"), "Accept-Encoding", accept)
            if want is None:
                self.assertEqual(r.body, PAGE, accept)
            elif want == "gzip":
                self.assertEqual(zlib.decompress(r.body, 31), PAGE, accept)

    def test_two_accept_encoding_lines_are_one_list(self):
        r = request(self.port, b"GET /page HTTP/1.1\r\nHost: t\r\n"
                    b"Accept-Encoding: br;q=0\r\n"
                    b"Accept-Encoding: gzip\r\n\r\n")
        self.assertEqual(r.header("content-encoding"), "gzip")
        self.assertEqual(zlib.decompress(r.body, 31), PAGE)

    # ---- a route's own compression -----------------------------------

    def test_a_route_overrides_the_servers_compression(self):
        r = get(self.port, "/off", "gzip, br")
        self.assertIsNone(r.header("content-encoding"))
        self.assertIsNone(r.header("vary"))
        self.assertEqual(r.body, PAGE)
        r = get(self.port, "/gzonly", "gzip, br")
        self.assertEqual(r.header("content-encoding"), "gzip")
        self.assertEqual(zlib.decompress(r.body, 31), PAGE)
        r = get(self.port, "/pngtoo", "gzip")
        self.assertEqual(r.header("content-encoding"), "gzip")
        self.assertEqual(zlib.decompress(r.body, 31), PAGE)

    def test_a_proxied_answer_is_compressed_by_the_same_rules(self):
        """/proxied relays /off (a route that never compresses): the
        relayed page is compressed on its way out, streamed."""
        r = get(self.port, "/proxied", "gzip")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-encoding"), "gzip")
        self.assertEqual(zlib.decompress(r.body, 31), PAGE)
        r = get(self.port, "/proxied", "identity")
        self.assertIsNone(r.header("content-encoding"))
        self.assertEqual(r.body, PAGE)

    # ---- what is never compressed -----------------------------------

    def test_small_answers_and_unlisted_types_stay_as_they_are(self):
        for path, length in (("/small", 100), ("/png", len(PAGE))):
            r = get(self.port, path, "gzip, br")
            self.assertIsNone(r.header("content-encoding"), path)
            self.assertIsNone(r.header("vary"), path)  # nothing depended
            self.assertEqual(len(r.body), length, path)

    def test_head_204_304_206_and_encoded_answers_are_untouched(self):
        r = get(self.port, "/page", "gzip", method="HEAD")
        self.assertIsNone(r.header("content-encoding"))
        self.assertEqual(int(r.header("content-length")), len(PAGE))
        for path in ("/notmod", "/nocontent"):
            r = get(self.port, path, "gzip")
            self.assertIsNone(r.header("content-encoding"), path)
            self.assertIsNone(r.header("content-length"), path)
        r = get(self.port, "/range", "gzip")
        self.assertEqual(r.status, 206)
        self.assertIsNone(r.header("content-encoding"))
        self.assertEqual(r.body, PAGE[:2000])
        r = get(self.port, "/encoded", "gzip")
        self.assertEqual(r.header("content-encoding"), "identity-but-named")
        self.assertEqual(r.body, PAGE)

    # ---- streamed answers -------------------------------------------

    def expected_stream(self):
        return b"".join(b"piece %d " % i + b"x" * 300 + b"\n"
                        for i in range(1, 5))

    def test_a_streamed_answer_decompresses_to_the_exact_body(self):
        r = get(self.port, "/stream", "gzip")
        self.assertEqual(r.header("transfer-encoding"), "chunked")
        self.assertEqual(r.header("content-encoding"), "gzip")
        self.assertIsNone(r.header("content-length"))
        self.assertEqual(zlib.decompress(r.body, 31), self.expected_stream())
        h, body = curl(self.port, "/stream", "--compressed")
        self.assertEqual(h.get("content-encoding"), "br")
        self.assertEqual(body, self.expected_stream())
        r = get(self.port, "/stream", "identity")
        self.assertEqual(r.body, self.expected_stream())

    def test_each_streamed_piece_decodes_as_it_arrives(self):
        """The handler pauses 300 ms after each piece: the first piece
        must decode alone, long before the last is written."""
        with connect(self.port, timeout=10) as s:
            s.sendall(b"GET /stream?pause=300 HTTP/1.1\r\nHost: t\r\n"
                      b"Accept-Encoding: gzip\r\n\r\n")
            start = time.monotonic()
            buf = b""
            d = zlib.decompressobj(31)
            text = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            buf = buf.split(b"\r\n\r\n", 1)[1]
            while b"piece 1 " not in text or not text.endswith(b"\n"):
                while b"\r\n" not in buf:
                    buf += s.recv(65536)
                size = int(buf.split(b"\r\n", 1)[0], 16)
                while len(buf) < buf.index(b"\r\n") + 2 + size + 2:
                    buf += s.recv(65536)
                at = buf.index(b"\r\n") + 2
                text += d.decompress(buf[at:at + size])
                buf = buf[at + size + 2:]
            self.assertLess(time.monotonic() - start, 0.9)
            self.assertEqual(text, b"piece 1 " + b"x" * 300 + b"\n")


class CompressConfig(unittest.TestCase):
    def run_config(self, text):
        root = tempfile.mkdtemp(prefix="moonflow-compress-conf-")
        self.addCleanup(shutil.rmtree, root, True)
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write(text)
        return subprocess.run([MOONFLOW, "serve", "--config", conf,
                               "--listen", "127.0.0.1:%d" % free_port()],
                              capture_output=True, timeout=20)

    def test_a_bad_compress_key_is_refused_at_start_and_named(self):
        cases = [
            ("compress = { level = 6, gzip_level = 6 }",
             b"compress.gzip_level: unknown key"),
            ("compress = { level = 10 }", b"compress.level: an integer"),
            ("compress = { brotli_level = 12 }", b"compress.brotli_level"),
            ("compress = { brotli = 1 }", b"compress.brotli: a boolean"),
            ("compress = { types = { \"text\" } }", b"compress.types"),
            ("compress = { min_length = -1 }", b"compress.min_length"),
            ("routes = { [\"/x\"] = { file = \"x.lua\", compress = true } }",
             b"routes[/x].compress: false or a table expected, got true"),
            ("routes = { [\"/x\"] = { file = \"x.lua\", "
             "compress = { levl = 1 } } }",
             b"routes[/x].compress.levl: unknown key"),
        ]
        for conf, message in cases:
            r = self.run_config("return { %s }\n" % conf)
            self.assertNotEqual(r.returncode, 0, conf)
            self.assertIn(message, r.stderr, conf)


if __name__ == "__main__":
    unittest.main()
