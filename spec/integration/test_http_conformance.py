"""HTTP/1.1 conformance of the server's input side, as raw bytes on a
socket: transfer codings we do not decode (501), Host and target
authorities (400), absolute-form targets without a path, fragments, chunk
extensions, a bad request rejected at its first bad byte (not at its blank
line or the header timeout), a FIN behind a held request, and bodies that
come too slowly (408). Each case gives its status and whether the
connection closes.

One test fixture (spec/fixture/http_fixture.c, path in $MF_HTTP_FIXTURE)
serves the whole file, and one `moonflow serve` ($MF_MOONFLOW) checks the
config keys; the ctest twin runs the ASan+UBSan builds."""
import os
import signal
import socket
import subprocess
import time
import unittest

from harness import (Server, body_pattern, connect, free_port, read_response,
                     read_until_closed, temp_dir)

FIXTURE = os.environ.get("MF_HTTP_FIXTURE", "build/spec/fixture/http_fixture")
MOONFLOW = os.environ.get("MF_MOONFLOW", "build/moonflow")

# The fixture's bounds for slow bodies: a body may take 500 ms + 20 ms per
# byte (50 bytes a second), and 3 s in all.
BODY_TOTAL_MS = 3000
MIN_BODY_RATE = 50
BODY_RATE_GRACE_MS = 500
HEADER_TIMEOUT_MS = 10000

srv = None


def setUpModule():
    global srv
    port = free_port()
    srv = Server([FIXTURE, "--listen", "127.0.0.1:%d" % port, "--workers", "1",
                  "--header-timeout", str(HEADER_TIMEOUT_MS),
                  "--body-total-timeout", str(BODY_TOTAL_MS),
                  "--min-body-rate", str(MIN_BODY_RATE),
                  "--body-rate-grace", str(BODY_RATE_GRACE_MS)], port)


def tearDownModule():
    """Graceful stop; the exit status and stderr prove there was no crash,
    sanitizer report or leak."""
    code, _, err = srv.stop(sig=signal.SIGTERM)
    if code != 0 or b"runtime error" in err:
        raise AssertionError("fixture exit %s: %s" %
                             (code, err.decode(errors="replace")[-2000:]))


def status_of(data):
    """The status code of the first response in data (0: none)."""
    if not data.startswith(b"HTTP/1.1 "):
        return 0
    return int(data[9:12])


def answer_and_close(raw, timeout=5.0):
    """Sends raw, then reads until the server closes: (status, bytes,
    seconds until the close)."""
    with connect(srv.port) as s:
        t0 = time.monotonic()
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = read_until_closed(s, timeout)  # fails if never closed
        return status_of(data), data, time.monotonic() - t0


def info(raw):
    """One request to /info on a new connection: its lines as a dict."""
    with connect(srv.port) as s:
        s.sendall(raw)
        r, _ = read_response(s)
    fields = dict(line.split("=", 1) for line in r.body.decode().splitlines())
    return r, fields


def post_chunked(body):
    return (b"POST /echo HTTP/1.1\r\nHost: h\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + body)


def te(codings, version=b"1.1", extra=b""):
    return (b"POST /echo HTTP/" + version + b"\r\nHost: h\r\n" +
            b"".join(b"Transfer-Encoding: " + c + b"\r\n" for c in codings) +
            extra + b"\r\n0\r\n\r\n")


def host(value):
    return b"GET /info HTTP/1.1\r\nHost: " + value + b"\r\n\r\n"


# (name, raw request, status): each answered so, with Connection: close,
# and then closed.
REFUSED = [
    # transfer codings (RFC 9112 §6.1): 501 for one we do not decode
    ("gzip then chunked", te([b"gzip, chunked"]), 501),
    ("deflate then chunked", te([b"deflate, chunked"]), 501),
    ("compress then chunked", te([b"compress, chunked"]), 501),
    ("x-gzip then chunked", te([b"x-gzip, chunked"]), 501),
    ("an unknown coding then chunked", te([b"foo, chunked"]), 501),
    ("gzip and chunked in two fields", te([b"gzip", b"chunked"]), 501),
    # ... and every smuggling verdict stays 400
    ("chunked twice", te([b"chunked, chunked"]), 400),
    ("chunked in two fields", te([b"chunked", b"chunked"]), 400),
    ("gzip alone", te([b"gzip"]), 400),
    ("chunked then gzip", te([b"chunked, gzip"]), 400),
    ("gzip, chunked with Content-Length",
     te([b"gzip, chunked"], extra=b"Content-Length: 5\r\n"), 400),
    ("chunked with Content-Length",
     te([b"chunked"], extra=b"Content-Length: 5\r\n"), 400),
    ("chunked in HTTP/1.0", te([b"chunked"], version=b"1.0"), 400),
    # Host and target authorities (RFC 9112 §3.2, RFC 3986 §3.2)
    ("Host with a letter in the port", host(b"localhost:80x"), 400),
    ("Host with two colons", host(b"a:b:c"), 400),
    ("Host with an unclosed IPv6 literal", host(b"[::1"), 400),
    ("Host with bytes after an IPv6 literal", host(b"[::1]x"), 400),
    ("Host with an IPv4 address in brackets", host(b"[127.0.0.1]"), 400),
    ("Host with an IPv6 zone", host(b"[fe80::1%25eth0]"), 400),
    ("Host without a host", host(b":80"), 400),
    ("Host with a port over 65535", host(b"h:65536"), 400),
    ("Host with a bad escape", host(b"a%zz"), 400),
    ("Host with userinfo", host(b"u@h"), 400),
    ("absolute-form with two colons",
     b"GET http://localhost::80/ HTTP/1.1\r\nHost: localhost\r\n\r\n", 400),
    ("absolute-form with a bad port",
     b"GET http://h:8x/ HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute-form with a valid target but a bad Host",
     b"GET http://h/ HTTP/1.1\r\nHost: a:b:c\r\n\r\n", 400),
    ("HTTP/1.1 without Host", b"GET /info HTTP/1.1\r\n\r\n", 400),
    ("CONNECT with two colons",
     b"CONNECT a:b:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    # fragments and chunk extensions
    ("a fragment in the target", b"GET /info#top HTTP/1.1\r\nHost: h\r\n\r\n",
     400),
    ("a fragment in an absolute-form target",
     b"GET http://h/info#top HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("a chunk extension without a name", post_chunked(b"2;\r\nab\r\n0\r\n\r\n"),
     400),
    ("a chunk extension with an empty value",
     post_chunked(b"2;a=\r\nab\r\n0\r\n\r\n"), 400),
    ("a chunk extension with a bad quoted value",
     post_chunked(b"2;a=\"q\r\nab\r\n0\r\n\r\n"), 400),
    ("whitespace before the end of a chunk size line",
     post_chunked(b"2;a=b \r\nab\r\n0\r\n\r\n"), 400),
]

# (name, the bytes up to and including the first bad one, no blank line,
# status): answered at once, then closed, long before the header timeout.
EARLY = [
    ("a bare CR in a field value", b"GET / HTTP/1.1\r\nHost: h\rX", 400),
    ("a bare CR in the request line", b"GET / HTTP/1.1\rX", 400),
    ("a space-led first field line", b"GET / HTTP/1.1\r\n Host: h", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb", 400),
    ("an invalid method byte", b"G(T", 400),
    ("an invalid target byte", b"GET /a\x01", 400),
    ("a space in the target", b"GET /a b", 400),
    ("a fragment", b"GET /a#", 400),
    ("a lowercase version", b"GET / http", 400),
    ("an invalid field-name byte", b"GET / HTTP/1.1\r\nHo(", 400),
    ("a DEL in a field value", b"GET / HTTP/1.1\r\nX: a\x7f", 400),
    ("a bare LF", b"GET / HTTP/1.1\nHost", 400),
    ("a duplicate, differing Content-Length",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
     b"Content-Length: 6\r\n", 400),
    ("Transfer-Encoding after Content-Length",
     b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n", 400),
    ("a second Host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n", 400),
    ("a bad Host", b"GET / HTTP/1.1\r\nHost: a:b:c\r\n", 400),
    ("HTTP/2.0", b"GET / HTTP/2.0\r\n", 505),
    ("a request line over 8 KiB", b"GET /" + b"a" * 8200, 414),
]


class Refused(unittest.TestCase):
    def refused(self, name, raw, status):
        """raw is answered with status and Connection: close, then closed;
        returns the seconds that took."""
        got, data, seconds = answer_and_close(raw)
        self.assertEqual(got, status, "%s: %r" % (name, data[:80]))
        self.assertIn(b"\r\nConnection: close\r\n", data)
        return seconds

    def test_each_refused_request_gets_its_status_and_a_close(self):
        for name, raw, status in REFUSED:
            with self.subTest(name):
                self.refused(name, raw, status)

    def test_a_bad_request_is_answered_at_its_first_bad_byte(self):
        for name, raw, status in EARLY:
            with self.subTest(name):
                # The header timeout is 10 s: the answer and the close come
                # because of the bad byte, not because time ran out.
                self.assertLess(self.refused(name, raw, status), 1.5, name)


class Accepted(unittest.TestCase):
    def test_valid_hosts_reach_the_handler_unchanged(self):
        for value in [b"[::1]:8080", b"example.com", b"example.com:8080",
                      b"127.0.0.1:65535", b"example.com:", b"[v7.a:b]",
                      b"[::ffff:192.0.2.1]", b"a-b.c_d~e%41"]:
            with self.subTest(value):
                r, fields = info(host(value))
                self.assertEqual(r.status, 200)
                self.assertEqual(fields["host"], value.decode())

    def test_an_absolute_form_authority_takes_precedence_over_host(self):
        r, fields = info(b"GET http://a.test:8080/info?x=1 HTTP/1.1\r\n"
                         b"Host: other.test\r\n\r\n")
        self.assertEqual(fields["host"], "a.test:8080")
        self.assertEqual(fields["path"], "/info")
        self.assertEqual(fields["query"], "x=1")

    def test_an_absolute_form_target_without_a_path_routes_as_slash(self):
        for target in [b"http://localhost", b"http://localhost?x=1",
                       b"http://[::1]:8080"]:
            with self.subTest(target), connect(srv.port) as s:
                s.sendall(b"GET " + target + b" HTTP/1.1\r\n"
                          b"Host: localhost\r\n\r\n")
                r, _ = read_response(s)
                self.assertEqual(r.status, 200)  # "/" answers the hello body
                self.assertEqual(r.body, body_pattern(len(r.body)))

    def test_a_higher_http1_minor_version_is_answered_as_1_1(self):
        # RFC 9110 section 2.5: HTTP/1.2 is handled as 1.1, persistent by
        # default, and the answer says HTTP/1.1.
        with connect(srv.port) as s:
            for _ in range(2):
                s.sendall(b"GET /info HTTP/1.2\r\nHost: h\r\n\r\n")
                r, _ = read_response(s)
                self.assertEqual(r.status, 200)
                self.assertTrue(r.raw_head.startswith(b"HTTP/1.1 200 "), r.raw_head)
                self.assertNotIn("connection", r.headers)

    def test_chunk_extensions_that_follow_the_grammar_are_skipped(self):
        for ext in [b"2;name=value", b'2;a="q"', b'2 ; a = "x\\"y" ;b',
                    b"2;flag;x=1"]:
            with self.subTest(ext), connect(srv.port) as s:
                s.sendall(post_chunked(ext + b"\r\nab\r\n0\r\n\r\n"))
                r, _ = read_response(s)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, b"ab")


class HalfClose(unittest.TestCase):
    def test_a_fin_behind_a_held_request_keeps_the_answer_before_it(self):
        for i in range(50):
            with connect(srv.port) as s:
                s.sendall(b"GET /info?one HTTP/1.1\r\nHost: h\r\n\r\n"
                          b"GET /held?ms=10000 HTTP/1.1\r\nHost: h\r\n\r\n")
                s.shutdown(socket.SHUT_WR)
                data = read_until_closed(s)
                self.assertTrue(data.startswith(b"HTTP/1.1 200 OK"),
                                "try %d: %r" % (i, data[:60]))
                self.assertIn(b"query=one\n", data)
                self.assertNotIn(b"held", data)  # aborted by the close
        r, _ = info(b"GET /info HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 200)


class SlowBody(unittest.TestCase):
    def trickle(self, size, piece, every=0.1, limit=10.0):
        """Sends a Content-Length body of `size` bytes, `piece` bytes every
        `every` seconds, until the server answers or closes: (status,
        bytes, seconds from the head to the answer)."""
        with connect(srv.port) as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: %d\r\n\r\n" % size)
            t0 = time.monotonic()
            s.settimeout(every)
            data = b""
            while time.monotonic() - t0 < limit and not data:
                try:
                    s.sendall(b"x" * piece)
                except OSError:
                    pass
                try:
                    data = s.recv(4096) or b"closed"
                except socket.timeout:
                    pass
            seconds = time.monotonic() - t0
            if data != b"closed":
                data += read_until_closed(s)
            return status_of(data), data, seconds

    def test_a_byte_every_100_ms_is_cut_by_the_minimum_rate(self):
        # 10 bytes a second against 50: the allowance (500 ms + 20 ms a
        # byte) runs out after about 7 bytes, 0.7 s.
        status, data, seconds = self.trickle(1000, 1)
        self.assertEqual(status, 408, data[:80])
        self.assertIn(b"\r\nConnection: close\r\n", data)
        self.assertGreater(seconds, 0.5)
        self.assertLess(seconds, 2.5)

    def test_a_body_fast_enough_but_too_long_is_cut_at_the_total(self):
        # 1000 bytes a second is well above the rate: the 3 s total ends it.
        status, data, seconds = self.trickle(100000, 100)
        self.assertEqual(status, 408, data[:80])
        self.assertGreater(seconds, BODY_TOTAL_MS / 1000.0 - 0.2)
        self.assertLess(seconds, BODY_TOTAL_MS / 1000.0 + 2.5)

    def test_a_slow_body_that_keeps_the_rate_arrives_whole(self):
        # 25 bytes every 100 ms (250 B/s) for 1 s: within both bounds.
        with connect(srv.port) as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                      b"Content-Length: 250\r\n\r\n")
            for _ in range(10):
                s.sendall(b"y" * 25)
                time.sleep(0.1)
            r, _ = read_response(s)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"y" * 250)


class ServeConfig(unittest.TestCase):
    """`moonflow serve` reads the keys and checks them."""

    def write(self, text):
        d = temp_dir(self)
        with open(os.path.join(d, "echo.lua"), "w") as f:
            f.write("return function(req, resp) resp:send(req.body) end\n")
        conf = os.path.join(d, "c.lua")
        with open(conf, "w") as f:
            f.write(text)
        return conf

    def test_body_total_applies_under_serve(self):
        conf = self.write('return { root = ".", timeouts = { body_total = '
                          '800, body_rate_grace = 60000 }, limits = { '
                          'min_body_rate = 0 } }')
        port = free_port()
        served = Server([MOONFLOW, "serve", "--config", conf, "--listen",
                         "127.0.0.1:%d" % port, "--workers", "1"], port)
        try:
            with connect(port) as s:
                s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                          b"Content-Length: 100\r\n\r\n")
                t0 = time.monotonic()
                s.settimeout(0.1)
                data = b""
                while time.monotonic() - t0 < 5 and not data:
                    try:
                        s.sendall(b"z")
                        data = s.recv(4096)
                    except (socket.timeout, OSError):
                        pass
                self.assertEqual(status_of(data), 408, data[:80])
                self.assertGreater(time.monotonic() - t0, 0.6)
        finally:
            code, _, err = served.stop(sig=signal.SIGTERM)
            self.assertEqual(code, 0, err.decode(errors="replace")[-2000:])

    def test_bad_values_are_named(self):
        for text, key in [
                ('timeouts = { body_total = 1.5 }', "timeouts.body_total"),
                ('timeouts = { body_rate_grace = "x" }',
                 "timeouts.body_rate_grace"),
                ('timeouts = { body_total = -1 }', "timeouts.body_total"),
                ('limits = { min_body_rate = 5e9 }', "limits.min_body_rate")]:
            with self.subTest(key):
                conf = self.write('return { root = ".", %s }' % text)
                out = subprocess.run([MOONFLOW, "serve", "--config", conf],
                                     capture_output=True, text=True,
                                     timeout=10)
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertIn(key, out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
