"""Static files under `moonflow serve` (static = { ["/assets"] = "public" }
and resp:file), checked against what curl reports and raw sockets: 200
with validators and a type from /etc/mime.types, HEAD, 304 from
If-None-Match (curl --etag-compare) and If-Modified-Since (curl -z), 206
for one range (curl -r) and several (multipart/byteranges, parsed here),
If-Range, 416 with Content-Range: bytes */len; traversal (.., %2e%2e,
%00) answered 400 and a symbolic link out of the root 403, as nginx
answers them; a directory never listed; a 1 GiB sparse file fetched in
part, then resumed with curl -C - and compared byte for byte, the
server's RSS flat meanwhile; strace showing the body sent with sendfile
and no read/write copy of it; the same file over TLS.
$MF_MOONFLOW is the binary. The server must stop with status 0."""
import gzip
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (Server, connect, free_port, read_response, request,
                     self_signed, rss_kib)

MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")
MIB = 1 << 20
GIB = 1 << 30
# A few bytes written into the sparse file, so a shifted or zero-filled
# copy cannot pass for it.
MARKS = [(0, b"head-of-the-file"), (100 * MIB - 7, b"across-100MiB"),
         (512 * MIB + 3, b"middle"), (GIB - 4, b"tail")]


def curl(*args, timeout=120):
    """curl's -w report (status, bytes) and its stdout, with -s."""
    out = subprocess.run(["curl", "-s", "-S", "--max-time", str(timeout)]
                         + list(args), capture_output=True,
                         timeout=timeout + 10)
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(4 * MIB)
            if not block:
                return h.hexdigest()
            h.update(block)


def site(root):
    """The scripts folder: public/ (the mount) and a handler using
    resp:file."""
    pub = os.path.join(root, "public")
    os.makedirs(os.path.join(pub, "css"))
    os.makedirs(os.path.join(pub, "docs"))
    os.makedirs(os.path.join(pub, "empty"))
    with open(os.path.join(pub, "css", "site.css"), "wb") as f:
        f.write(b"body { color: red }\n" * 500)  # 10,000 bytes
    with open(os.path.join(pub, "docs", "index.html"), "wb") as f:
        f.write(b"<h1>docs</h1>\n")
    with open(os.path.join(pub, "data.json"), "wb") as f:
        f.write(b'{"a": 1}\n')
    with open(os.path.join(pub, "blob.bin"), "wb") as f:
        f.write(os.urandom(4 * MIB))
    # precompressed siblings: app.js has both, page.html only a .gz
    app = b"function f() { return 42; }\n" * 400
    with open(os.path.join(pub, "app.js"), "wb") as f:
        f.write(app)
    with open(os.path.join(pub, "app.js.gz"), "wb") as f:
        f.write(gzip.compress(app))
    with open(os.path.join(pub, "app.js.br"), "wb") as f:
        f.write(b"br bytes as they are on disk")
    with open(os.path.join(pub, "page.html"), "wb") as f:
        f.write(b"<p>hello</p>\n" * 300)
    with open(os.path.join(pub, "page.html.gz"), "wb") as f:
        f.write(gzip.compress(b"<p>hello</p>\n" * 300))
    with open(os.path.join(root, "secret.txt"), "wb") as f:
        f.write(b"outside the root\n")
    os.symlink(os.path.join(root, "secret.txt"), os.path.join(pub, "out"))
    os.symlink("css/site.css", os.path.join(pub, "in.css"))
    big = os.path.join(pub, "big.bin")
    with open(big, "wb") as f:
        f.truncate(GIB)
        for off, data in MARKS:
            f.seek(off)
            f.write(data)
    with open(os.path.join(root, "file.lua"), "w") as f:
        f.write("""
local mf = require "moonflow"
return function(req, resp)
    local q = req.query
    if q.opt then
        resp:file("public/data.json", { [q.opt] = "x" })
    elseif q.root then
        resp:file(q.p, { root = q.root })
    elseif q.type then
        resp:file(q.p, { type = q.type })
    else
        local status = resp:file(q.p)
        mf.log("warn", "answered " .. tostring(status))
    end
end
""")
    return pub


def start(root, port, tls=None, argv_prefix=(), errors=None):
    conf = os.path.join(root, "conf.lua")
    tls_line = ""
    if tls:
        tls_line = "tls = { cert = %r, key = %r }," % tls
    with open(conf, "w") as f:
        f.write('return { root = ".", %s static = { ["/assets"] = '
                '"public", ["/assets/deep/"] = "public/docs" },'
                ' compress = { precompressed = true } }' % tls_line)
    return Server(list(argv_prefix) + [
        MOONFLOW, "serve", "--config", conf, "--listen",
        "127.0.0.1:%d" % port, "--workers", "1", "--access-log", "off"],
        port, stderr_path=errors)


class Static(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="moonflow-static-")
        cls.pub = site(cls.root)
        cls.port = free_port()
        cls.errors = os.path.join(cls.root, "errors.log")
        try:
            cls.srv = start(cls.root, cls.port, errors=cls.errors)
        except Exception:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise
        cls.base = "http://127.0.0.1:%d" % cls.port

    @classmethod
    def tearDownClass(cls):
        code, _, _ = cls.srv.stop(sig=signal.SIGTERM, timeout=30)
        shutil.rmtree(cls.root, ignore_errors=True)
        if code != 0:
            raise AssertionError("moonflow serve exited with %s" % code)

    def url(self, path):
        return self.base + path

    def head_of(self, *args):
        """curl -D - -o /dev/null: (status, headers dict)."""
        out = curl("-D", "-", "-o", os.devnull, *args)
        text = out.stdout.decode("latin-1")
        blocks = [b for b in text.split("\r\n\r\n") if b.startswith("HTTP/")]
        lines = blocks[-1].split("\r\n")
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        return int(lines[0].split()[1]), headers

    def raw(self, target, extra=b""):
        return request(self.port, b"GET " + target + b" HTTP/1.1\r\n"
                       b"Host: t\r\n" + extra + b"\r\n")

    # ---- whole files, validators, types ----------------------------------

    def test_http2_answers_files_ranges_and_304s(self):
        # h2c by prior knowledge: the file comes as DATA read off the loop
        url = self.url("/assets/blob.bin")
        out_path = os.path.join(self.root, "h2.out")
        out = curl("--http2-prior-knowledge", "-o", out_path, "-w",
                   "%{http_code} %{http_version}", url)
        self.assertEqual((out.returncode, out.stdout), (0, b"200 2"))
        self.assertEqual(sha256_file(out_path),
                         sha256_file(os.path.join(self.pub, "blob.bin")))
        out = curl("--http2-prior-knowledge", "-r", "5-24", url)
        with open(os.path.join(self.pub, "blob.bin"), "rb") as f:
            f.seek(5)
            self.assertEqual(out.stdout, f.read(20))
        _, h = self.head_of("--http2-prior-knowledge",
                            self.url("/assets/css/site.css"))
        out = curl("--http2-prior-knowledge", "-H",
                   "If-None-Match: " + h["etag"], "-w", "%{http_code}",
                   self.url("/assets/css/site.css"))
        self.assertEqual(out.stdout, b"304")
        # a precompressed sibling over HTTP/2 too
        out = curl("--http2-prior-knowledge", "-H", "Accept-Encoding: gzip",
                   "-D", "-", "-o", os.devnull, self.url("/assets/app.js"))
        self.assertIn(b"content-encoding: gzip", out.stdout.lower())

    def body_of(self, *args):
        out = curl(*args)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_a_precompressed_sibling_is_answered_as_it_is(self):
        app = os.path.join(self.pub, "app.js")
        with open(app, "rb") as f:
            plain = f.read()
        with open(app + ".gz", "rb") as f:
            gz = f.read()
        url = self.url("/assets/app.js")
        _, plain_h = self.head_of(url)
        cases = [("gzip", "gzip", gz), ("br, gzip", "br", None),
                 ("br;q=0.5, gzip", "gzip", gz), ("identity", None, plain),
                 ("gzip;q=0, br;q=0", None, plain)]
        for accept, coding, body in cases:
            status, h = self.head_of("-H", "Accept-Encoding: " + accept, url)
            self.assertEqual(status, 200, accept)
            self.assertEqual(h.get("content-encoding"), coding, accept)
            self.assertEqual(h["vary"], "Accept-Encoding", accept)
            self.assertEqual(h["content-type"], plain_h["content-type"])
            if body is not None:
                self.assertEqual(self.body_of(
                    "-H", "Accept-Encoding: " + accept, url), body, accept)
        # none asked: the file itself, still varying
        self.assertEqual(self.body_of(url), plain)
        self.assertEqual(plain_h["vary"], "Accept-Encoding")
        self.assertNotIn("content-encoding", plain_h)
        # the sibling's own validators and ranges
        _, gz_h = self.head_of("-H", "Accept-Encoding: gzip", url)
        self.assertNotEqual(gz_h["etag"], plain_h["etag"])
        self.assertEqual(gz_h["content-length"], str(len(gz)))
        out = curl("-H", "Accept-Encoding: gzip", "-r", "0-9", "-w",
                   "%{http_code}", url)
        self.assertEqual(out.stdout, gz[:10] + b"206")
        # curl --compressed decodes the .gz back to the page
        page = os.path.join(self.pub, "page.html")
        with open(page, "rb") as f:
            self.assertEqual(self.body_of(
                "--compressed", self.url("/assets/page.html")), f.read())
        # a file without siblings does not vary
        _, h = self.head_of("-H", "Accept-Encoding: gzip",
                            self.url("/assets/css/site.css"))
        self.assertNotIn("vary", h)
        self.assertNotIn("content-encoding", h)

    def test_a_file_with_its_validators_and_type(self):
        out = curl("-D", os.path.join(self.root, "h1"), "-o",
                   os.path.join(self.root, "b1"),
                   self.url("/assets/css/site.css"))
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(os.path.join(self.root, "b1"), "rb") as f:
            body = f.read()
        self.assertEqual(body, b"body { color: red }\n" * 500)
        status, h = self.head_of(self.url("/assets/css/site.css"))
        self.assertEqual(status, 200)
        st = os.stat(os.path.join(self.pub, "css", "site.css"))
        self.assertEqual(h["etag"], '"%x-%x"' % (int(st.st_mtime),
                                                  st.st_size))
        self.assertEqual(h["last-modified"],
                         time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                                       time.gmtime(int(st.st_mtime))))
        self.assertEqual(h["content-type"], "text/css")
        self.assertEqual(h["accept-ranges"], "bytes")
        self.assertEqual(h["content-length"], "10000")
        _, h = self.head_of(self.url("/assets/data.json"))
        self.assertEqual(h["content-type"], "application/json")
        _, h = self.head_of(self.url("/assets/blob.bin"))
        self.assertEqual(h["content-type"], "application/octet-stream")

    def test_head_has_the_head_without_the_body(self):
        s = connect(self.port)
        with s:
            s.sendall(b"HEAD /assets/css/site.css HTTP/1.1\r\nHost: t\r\n\r\n"
                      b"GET /assets/data.json HTTP/1.1\r\nHost: t\r\n\r\n")
            r, rest = read_response(s, head_request=True)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("content-length"), "10000")
            self.assertEqual(r.header("content-type"), "text/css")
            r2, _ = read_response(s, rest)  # the next answer starts here
            self.assertEqual(r2.status, 200)
            self.assertEqual(r2.body, b'{"a": 1}\n')

    def test_not_modified_by_etag_and_by_date(self):
        url = self.url("/assets/css/site.css")
        _, h = self.head_of(url)
        status, h2 = self.head_of("-H", "If-None-Match: " + h["etag"], url)
        self.assertEqual(status, 304)
        self.assertEqual(h2["etag"], h["etag"])
        status, _ = self.head_of("-H", 'If-None-Match: W/"x", ' + h["etag"],
                                 url)
        self.assertEqual(status, 304)
        status, _ = self.head_of("-H", 'If-None-Match: "other"', url)
        self.assertEqual(status, 200)
        # curl --etag-compare sends the saved ETag as If-None-Match
        tag_file = os.path.join(self.root, "etag.txt")
        with open(tag_file, "w") as f:
            f.write(h["etag"] + "\n")
        status, _ = self.head_of("--etag-compare", tag_file, url)
        self.assertEqual(status, 304)
        # curl -z FILE: If-Modified-Since the file's time
        path = os.path.join(self.pub, "css", "site.css")
        status, _ = self.head_of("-z", path, url)
        self.assertEqual(status, 304)
        status, _ = self.head_of("-z", "Sun, 06 Nov 1994 08:49:37 GMT", url)
        self.assertEqual(status, 200)
        status, _ = self.head_of("-H", "If-Modified-Since: tomorrow", url)
        self.assertEqual(status, 200)  # not a date: ignored
        # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)
        status, _ = self.head_of("-H", 'If-None-Match: "other"', "-z", path,
                                 url)
        self.assertEqual(status, 200)

    # ---- ranges ----------------------------------------------------------

    def test_one_range_as_curl_asks(self):
        path = os.path.join(self.pub, "blob.bin")
        with open(path, "rb") as f:
            data = f.read()
        url = self.url("/assets/blob.bin")
        for spec, first, last in [("0-99", 0, 99), ("-100", len(data) - 100,
                                                     len(data) - 1),
                                  ("4194000-", 4194000, len(data) - 1),
                                  ("1000-99999999", 1000, len(data) - 1)]:
            out = curl("-r", spec, "-D", "-", "-o",
                       os.path.join(self.root, "part"), url)
            head = out.stdout.decode()
            self.assertIn("HTTP/1.1 206", head)
            self.assertIn("Content-Range: bytes %d-%d/%d\r\n"
                          % (first, last, len(data)), head)
            with open(os.path.join(self.root, "part"), "rb") as f:
                self.assertEqual(f.read(), data[first:last + 1], spec)

    def test_several_ranges_as_multipart_byteranges(self):
        path = os.path.join(self.pub, "css", "site.css")
        with open(path, "rb") as f:
            data = f.read()
        r = self.raw(b"/assets/css/site.css",
                     b"Range: bytes=0-9, 100-119,-5\r\n")
        self.assertEqual(r.status, 206)
        m = re.match(r"multipart/byteranges; boundary=(\S+)$",
                     r.header("content-type"))
        self.assertTrue(m, r.header("content-type"))
        boundary = m.group(1).encode()
        self.assertEqual(int(r.header("content-length")), len(r.body))
        parts = r.body.split(b"--" + boundary)
        self.assertEqual(parts[0], b"\r\n")
        self.assertEqual(parts[-1], b"--\r\n")
        want = [(0, 9), (100, 119), (len(data) - 5, len(data) - 1)]
        self.assertEqual(len(parts) - 2, len(want))
        for part, (first, last) in zip(parts[1:-1], want):
            head, body = part.split(b"\r\n\r\n", 1)
            self.assertIn(b"Content-Type: text/css", head)
            self.assertIn(b"Content-Range: bytes %d-%d/%d"
                          % (first, last, len(data)), head)
            self.assertEqual(body, data[first:last + 1] + b"\r\n")
        # several ranges over 256 KiB together: the whole file instead
        r = self.raw(b"/assets/blob.bin",
                     b"Range: bytes=0-199999,300000-499999\r\n")
        self.assertEqual((r.status, len(r.body)), (200, 4 * MIB))

    def test_if_range_and_unsatisfiable_ranges(self):
        url = self.url("/assets/css/site.css")
        _, h = self.head_of(url)
        status, h2 = self.head_of("-r", "0-9", "-H",
                                  "If-Range: " + h["etag"], url)
        self.assertEqual((status, h2["content-range"]),
                         (206, "bytes 0-9/10000"))
        status, h2 = self.head_of("-r", "0-9", "-H",
                                  "If-Range: " + h["last-modified"], url)
        self.assertEqual(status, 206)
        status, h2 = self.head_of("-r", "0-9", "-H", 'If-Range: "old"', url)
        self.assertEqual((status, h2["content-length"]), (200, "10000"))
        status, h2 = self.head_of("-r", "10000-", url)
        self.assertEqual((status, h2["content-range"]), (416, "bytes */10000"))
        # a Range that is not bytes=, or malformed, is ignored: the whole
        r = self.raw(b"/assets/css/site.css", b"Range: bytes=9-1\r\n")
        self.assertEqual((r.status, len(r.body)), (200, 10000))
        r = self.raw(b"/assets/css/site.css", b"Range: pages=1-2\r\n")
        self.assertEqual(r.status, 200)

    # ---- what a request may not reach ------------------------------------

    def test_traversal_and_escapes_are_refused(self):
        cases = [(b"/assets/../secret.txt", 400),
                 (b"/assets/%2e%2e/secret.txt", 400),
                 (b"/assets/%2E%2e/%2e%2E/etc/passwd", 400),
                 (b"/assets/css/..%2f..%2fsecret.txt", 400),
                 (b"/assets/css%00.css", 400),
                 (b"/assets/%zz", 400),
                 (b"/assets/out", 403),        # a link out of the root
                 (b"/assets/in.css", 200),     # a link inside it
                 (b"/assets/nope.txt", 404),
                 (b"/assets/empty/", 403),     # no listing, no index
                 (b"/assets/", 403),
                 (b"/assets", 301),
                 (b"/assets/docs/", 200),      # its index.html
                 (b"/assets/docs", 301),
                 (b"/assetsx/css/site.css", 404)]  # not the mount
        for target, want in cases:
            r = self.raw(target)
            self.assertEqual(r.status, want, target)
            self.assertNotIn(b"outside the root", r.body)
        r = self.raw(b"/assets/docs")
        self.assertEqual(r.header("location"), "/assets/docs/")
        r = self.raw(b"/assets/docs/")
        self.assertEqual(r.body, b"<h1>docs</h1>\n")
        # the longer mount is tried first
        r = self.raw(b"/assets/deep/index.html")
        self.assertEqual(r.body, b"<h1>docs</h1>\n")
        r = request(self.port, b"POST /assets/data.json HTTP/1.1\r\n"
                    b"Host: t\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual((r.status, r.header("allow")), (405, "GET, HEAD"))

    # ---- resp:file ---------------------------------------------------------

    def test_resp_file_from_a_handler(self):
        r = self.raw(b"/file?p=public/css/site.css")
        self.assertEqual((r.status, len(r.body)), (200, 10000))
        self.assertEqual(r.header("content-type"), "text/css")
        r = self.raw(b"/file?p=public/css/site.css", b"Range: bytes=1-3\r\n")
        self.assertEqual((r.status, r.body), (206, b"ody"))
        r = self.raw(b"/file?p=" + self.pub.encode() + b"/data.json")
        self.assertEqual((r.status, r.body), (200, b'{"a": 1}\n'))
        r = self.raw(b"/file?p=public/data.json&type=text/plain")
        self.assertEqual(r.header("content-type"), "text/plain")
        r = self.raw(b"/file?p=css/site.css&root=/assets")
        self.assertEqual(r.status, 200)
        r = self.raw(b"/file?p=../secret.txt&root=/assets")
        self.assertEqual(r.status, 403)
        r = self.raw(b"/file?p=out&root=/assets")
        self.assertEqual(r.status, 403)
        r = self.raw(b"/file?p=missing.txt")
        self.assertEqual(r.status, 404)
        r = self.raw(b"/file?opt=bogus")
        self.assertEqual(r.status, 500)
        r = self.raw(b"/file?p=x&root=/nomount")
        self.assertEqual(r.status, 500)
        with open(self.errors, "rb") as f:
            log = f.read()
        self.assertIn(b"resp:file: unknown option 'bogus' (root, type)", log)
        self.assertIn(b"resp:file: root '/nomount' is not a mount", log)
        self.assertIn(b"answered 206", log)

    # ---- the open files kept ---------------------------------------------

    def test_a_changed_file_is_answered_anew(self):
        path = os.path.join(self.pub, "change.txt")
        with open(path, "wb") as f:
            f.write(b"one-1")
        for _ in range(2):  # the second from the kept descriptor
            self.assertEqual(self.raw(b"/assets/change.txt").body, b"one-1")
        # written in place: same size, likely the same second, so only the
        # file watcher can tell
        with open(path, "r+b") as f:
            f.write(b"two-2")
        time.sleep(0.3)
        self.assertEqual(self.raw(b"/assets/change.txt").body, b"two-2")
        with open(path + ".tmp", "wb") as f:  # replaced by a rename
            f.write(b"three-33")
        os.rename(path + ".tmp", path)
        time.sleep(0.3)
        self.assertEqual(self.raw(b"/assets/change.txt").body, b"three-33")
        self.assertEqual(self.raw(b"/assets//./change.txt").body, b"three-33")
        os.unlink(path)
        time.sleep(0.3)
        self.assertEqual(self.raw(b"/assets/change.txt").status, 404)
        self.assertEqual(self.raw(b"/assets//./change.txt").status, 404)

    # ---- a 1 GiB file -------------------------------------------------------

    def test_a_gib_file_resumed_is_byte_exact_in_bounded_memory(self):
        url = self.url("/assets/big.bin")
        out_path = os.path.join(self.root, "big.out")
        base = rss_kib(self.srv.proc.pid)
        peak = [base]
        done = threading.Event()

        def sample():
            while not done.wait(0.05):
                peak[0] = max(peak[0], rss_kib(self.srv.proc.pid))
        t = threading.Thread(target=sample)
        t.start()
        try:
            # the first 300 MiB, as an interrupted download leaves it
            first = curl("-r", "0-%d" % (300 * MIB - 1), "-o", out_path, url)
            self.assertEqual(first.returncode, 0, first.stderr)
            self.assertEqual(os.path.getsize(out_path), 300 * MIB)
            # curl -C -: Range: bytes=<size of out>-
            rest = curl("-C", "-", "-o", out_path, "-w", "%{http_code}", url)
            self.assertEqual(rest.returncode, 0, rest.stderr)
            self.assertEqual(rest.stdout, b"206")
        finally:
            done.set()
            t.join()
        self.assertEqual(os.path.getsize(out_path), GIB)
        with open(out_path, "rb") as f:
            for off, data in MARKS:
                f.seek(off)
                self.assertEqual(f.read(len(data)), data)
        self.assertEqual(sha256_file(out_path),
                         sha256_file(os.path.join(self.pub, "big.bin")))
        os.unlink(out_path)
        self.assertLess(peak[0] - base, 16 * 1024)  # KiB: no file in memory


class SendfileAndTls(unittest.TestCase):
    """A server of its own: under strace, then with TLS."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="moonflow-static-")
        self.pub = site(self.root)
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_the_body_goes_with_sendfile_not_through_read_and_write(self):
        if not shutil.which("strace"):
            self.skipTest("strace is not installed")
        port = free_port()
        trace = os.path.join(self.root, "trace.txt")
        srv = start(self.root, port, argv_prefix=[
            "strace", "-f", "-qq", "-e", "trace=sendfile,read,write,writev,"
            "pread64,openat2,dup", "-o", trace])
        try:
            url = "http://127.0.0.1:%d/assets/blob.bin" % port
            out = curl("-o", os.path.join(self.root, "blob.out"), url,
                       "-o", os.devnull, url, "-o", os.devnull, url)
            self.assertEqual(out.returncode, 0, out.stderr)
        finally:
            # strace leaves its tracee running when it is signalled: stop
            # moonflow itself, and strace ends with it
            pid = srv.proc.pid
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                for child in f.read().split():
                    os.kill(int(child), signal.SIGTERM)
            srv.stop(sig=signal.SIGTERM, timeout=30)
        with open(os.path.join(self.root, "blob.out"), "rb") as f, \
                open(os.path.join(self.pub, "blob.bin"), "rb") as g:
            self.assertEqual(f.read(), g.read())
        sent = copied = opens = 0
        with open(trace) as f:
            for line in f:
                if line.split()[1].startswith('openat2(') and \
                        '"blob.bin"' in line:
                    opens += 1
                m = re.search(r"(\w+)\(.*\)\s+=\s+(\d+)", line)
                if not m:
                    continue
                call, n = m.group(1), int(m.group(2))
                if call == "sendfile":
                    sent += n
                elif call in ("read", "write", "writev", "pread64"):
                    copied = max(copied, n)
        self.assertEqual(sent, 3 * 4 * MIB)
        # opened once: the next two answers came from the kept descriptor
        self.assertEqual(opens, 1)
        # nothing body-sized passed through a buffer: the largest read or
        # write is a head or a script, far below the 4 MiB body
        self.assertLess(copied, 256 * 1024)

    def test_tls_answers_the_same_bytes(self):
        port = free_port()
        cert, key = self_signed(self.root)
        srv = start(self.root, port, tls=(cert, key))
        try:
            url = "https://127.0.0.1:%d/assets/blob.bin" % port
            out_path = os.path.join(self.root, "tls.out")
            # HTTP/1.1 over TLS (a reader off the loop), then h2 by ALPN
            # (the same reader, a chunk per DATA frame's worth)
            out = curl("-k", "--http1.1", "-o", out_path, "-w",
                       "%{http_code}", url)
            self.assertEqual((out.returncode, out.stdout), (0, b"200"))
            self.assertEqual(sha256_file(out_path),
                             sha256_file(os.path.join(self.pub, "blob.bin")))
            out = curl("-k", "--http2", "-o", out_path, "-w",
                       "%{http_code} %{http_version}", url)
            self.assertEqual((out.returncode, out.stdout), (0, b"200 2"))
            self.assertEqual(sha256_file(out_path),
                             sha256_file(os.path.join(self.pub, "blob.bin")))
            out = curl("-k", "-r", "1000-70999", "-o", out_path, url)
            with open(os.path.join(self.pub, "blob.bin"), "rb") as f:
                f.seek(1000)
                want = f.read(70000)
            with open(out_path, "rb") as f:
                self.assertEqual(f.read(), want)
        finally:
            code, _, _ = srv.stop(sig=signal.SIGTERM, timeout=30)
        self.assertEqual(code, 0)

    def test_a_mount_of_a_missing_folder_stops_the_start(self):
        conf = os.path.join(self.root, "bad.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", static = { ["/x"] = "nope" } }')
        out = subprocess.run([MOONFLOW, "serve", "--config", conf, "--listen",
                              "127.0.0.1:%d" % free_port(), "--workers", "1"],
                             capture_output=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(b'static["/x"]: ', out.stderr)
        self.assertIn(b"no such file or directory", out.stderr)
        with open(conf, "w") as f:
            f.write('return { root = ".", static = { x = "public" } }')
        out = subprocess.run([MOONFLOW, "serve", "--config", conf, "--listen",
                              "127.0.0.1:%d" % free_port(), "--workers", "1"],
                             capture_output=True, timeout=30)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(b"static: each entry is", out.stderr)


if __name__ == "__main__":
    unittest.main()
