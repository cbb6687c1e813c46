"""The HTTP/1.1 server against real sockets: curl, wrk and raw bytes.

Runs the test fixture, spec/fixture/http_fixture.c (path in
$MF_HTTP_FIXTURE), and for /fanout examples/http_hello (path in
$MF_HTTP_HELLO), on free loopback ports; the ctest twin runs the ASan+UBSan
builds of both."""
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import (Server, body_pattern, connect, free_port, read_response,
                     read_until_closed, request, self_signed, temp_dir)

FIXTURE = os.environ.get("MF_HTTP_FIXTURE", "build/spec/fixture/http_fixture")
HELLO = os.environ.get("MF_HTTP_HELLO", "build/examples/http_hello")


def stop_cleanly(test, srv):
    """Graceful stop; the exit status and stderr prove there was no crash,
    sanitizer report or leak (the ASan twin exits non-zero on a leak)."""
    if srv.proc.poll() is not None and srv.proc.returncode == 0:
        return
    code, _, err = srv.stop(sig=signal.SIGTERM)
    test.assertEqual(code, 0, err.decode(errors="replace")[-2000:])
    test.assertNotIn(b"runtime error", err)


def start(test, *args, workers=1, binary=FIXTURE):
    port = free_port()
    srv = Server([binary, "--listen", "127.0.0.1:%d" % port,
                  "--workers", str(workers)] + list(args), port)
    test.addCleanup(stop_cleanly, test, srv)
    return srv


class Basics(unittest.TestCase):
    def setUp(self):
        self.srv = start(self, "--body-size", "16", workers=2)

    def test_curl_gets_the_hello_body(self):
        out = subprocess.run(["curl", "-sS", "-i", "http://127.0.0.1:%d/" %
                              self.srv.port], capture_output=True, check=True)
        head, body = out.stdout.split(b"\r\n\r\n", 1)
        self.assertTrue(head.startswith(b"HTTP/1.1 200 OK"))
        self.assertIn(b"Content-Length: 16", head)
        self.assertIn(b"Server: moonflow", head)
        self.assertIn(b"Date: ", head)
        self.assertEqual(body, body_pattern(16))

    def test_unknown_path_is_404(self):
        r = request(self.srv.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(r.status, 404)

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        with connect(self.srv.port) as s:
            buf = b""
            for i in range(50):
                s.sendall(b"GET /info?i=%d HTTP/1.1\r\nHost: h\r\n\r\n" % i)
                r, buf = read_response(s, buf)
                self.assertEqual(r.status, 200)
                self.assertIn(b"query=i=%d\n" % i, r.body)

    def test_pipelined_requests_are_answered_in_order(self):
        reqs = b"".join(b"GET /info?n=%d HTTP/1.1\r\nHost: h\r\n\r\n" % i
                        for i in range(20))
        reqs += b"GET /sleep?ms=30 HTTP/1.1\r\nHost: h\r\n\r\n"
        reqs += b"GET /info?n=last HTTP/1.1\r\nHost: h\r\n\r\n"
        with connect(self.srv.port) as s:
            s.sendall(reqs)
            buf = b""
            for i in range(20):
                r, buf = read_response(s, buf)
                self.assertIn(b"query=n=%d\n" % i, r.body)
            r, buf = read_response(s, buf)
            self.assertEqual(r.body, b"slept success\n")
            r, buf = read_response(s, buf)
            self.assertIn(b"query=n=last\n", r.body)

    def test_pipelined_requests_then_half_close_still_get_answers(self):
        with connect(self.srv.port) as s:
            s.sendall(b"GET /info?a HTTP/1.1\r\nHost: h\r\n\r\n"
                      b"GET /info?b HTTP/1.1\r\nHost: h\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            data = read_until_closed(s)
            self.assertEqual(data.count(b"HTTP/1.1 200 OK"), 2)

    def test_http10_without_keep_alive_closes_after_the_answer(self):
        with connect(self.srv.port) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = read_until_closed(s)
            self.assertTrue(data.startswith(b"HTTP/1.1 200 OK"))
            self.assertIn(b"Connection: close", data)

    def test_http10_keep_alive_is_honoured(self):
        with connect(self.srv.port) as s:
            buf = b""
            for _ in range(3):
                s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                r, buf = read_response(s, buf)
                self.assertEqual(r.header("connection"), "keep-alive")

    def test_head_gets_length_but_no_body(self):
        with connect(self.srv.port) as s:
            s.sendall(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"
                      b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            r, buf = read_response(s, head_request=True)
            self.assertEqual(r.header("content-length"), "16")
            r, buf = read_response(s, buf)
            self.assertEqual(r.body, body_pattern(16))

    def test_a_flow_and_a_held_exchange_answer_later(self):
        r = request(self.srv.port, b"GET /sleep?ms=50 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.body, b"slept success\n")
        r = request(self.srv.port, b"GET /held?ms=50 HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.body, b"held\n")

    def test_a_client_leaving_while_its_request_is_held_harms_nobody(self):
        for _ in range(20):
            s = connect(self.srv.port)
            s.sendall(b"GET /held?ms=200 HTTP/1.1\r\nHost: h\r\n\r\n")
            s.close()
        time.sleep(0.3)
        r = request(self.srv.port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 200)


class FanOut(unittest.TestCase):
    def test_a_parallel_of_two_backend_calls_answers_with_both(self):
        backend = start(self, "--body-size", "20", binary=HELLO)
        front = start(self, "--upstream", "127.0.0.1:%d" % backend.port,
                      binary=HELLO)
        with connect(front.port) as s:
            buf = b""
            for _ in range(20):
                s.sendall(b"GET /fanout HTTP/1.1\r\nHost: h\r\n\r\n")
                r, buf = read_response(s, buf)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, body_pattern(20) * 2)

    def test_a_dead_backend_gives_502(self):
        front = start(self, "--upstream", "127.0.0.1:%d" % free_port(),
                      binary=HELLO)
        r = request(front.port, b"GET /fanout HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 502)


class Bodies(unittest.TestCase):
    def setUp(self):
        self.srv = start(self, "--max-body", "100000")

    def test_content_length_body_is_echoed(self):
        body = os.urandom(50000)
        r = request(self.srv.port, b"POST /echo HTTP/1.1\r\nHost: h\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.assertEqual(r.body, body)
        self.assertEqual(r.header("x-method"), "POST")

    def test_chunked_request_body_round_trips(self):
        raw = (b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked"
               b"\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n"
               b"X-Trailer: yes\r\n\r\n"
               b"GET /info?after HTTP/1.1\r\nHost: h\r\n\r\n")
        with connect(self.srv.port) as s:
            for i in range(0, len(raw), 7):  # in small pieces
                s.sendall(raw[i:i + 7])
                time.sleep(0.001)
            r, buf = read_response(s)
            self.assertEqual(r.body, b"hello world")
            self.assertEqual(r.header("x-body-length"), "11")
            r, _ = read_response(s, buf)
            self.assertIn(b"query=after", r.body)

    def test_chunked_response_is_streamed(self):
        with connect(self.srv.port) as s:
            s.sendall(b"GET /stream?n=4 HTTP/1.1\r\nHost: h\r\n\r\n")
            r, _ = read_response(s)
            self.assertEqual(r.header("transfer-encoding"), "chunked")
            self.assertEqual(r.body, b"chunk 0\nchunk 1\nchunk 2\nchunk 3\n")
        out = subprocess.run(["curl", "-sS", "http://127.0.0.1:%d/stream?n=3"
                              % self.srv.port], capture_output=True, check=True)
        self.assertEqual(out.stdout, b"chunk 0\nchunk 1\nchunk 2\n")

    def test_expect_100_continue_upload(self):
        body = b"x" * 4000
        with connect(self.srv.port) as s:
            s.sendall(b"PUT /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 4000"
                      b"\r\nExpect: 100-continue\r\n\r\n")
            s.settimeout(5)
            interim = s.recv(4096)
            self.assertTrue(interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"))
            s.sendall(body)
            r, _ = read_response(s, interim[len(b"HTTP/1.1 100 Continue\r\n\r\n"):])
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body)
        path = os.path.join(temp_dir(self), "up")
        with open(path, "wb") as f:
            f.write(os.urandom(60000))
        out = subprocess.run(["curl", "-sS", "-H", "Expect: 100-continue",
                              "--data-binary", "@" + path,
                              "http://127.0.0.1:%d/echo" % self.srv.port],
                             capture_output=True, check=True)
        with open(path, "rb") as f:
            self.assertEqual(out.stdout, f.read())


BAD_INPUTS = [
    ("garbage request line", b"HELLO\r\n\r\n", 400),
    ("content-length and transfer-encoding",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("differing content-lengths",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
     b"Content-Length: 4\r\n\r\nabcd", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  folded\r\n\r\n", 400),
    ("bare LF", b"GET / HTTP/1.1\nHost: h\n\n", 400),
    ("bare CR", b"GET / HTTP/1.1\rHost: h\r\n\r\n", 400),
    ("space before colon", b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
    ("bad header name", b"GET / HTTP/1.1\r\nHo(st: h\r\n\r\n", 400),
    ("control char in target", b"GET /a\x01b HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("missing host in 1.1", b"GET / HTTP/1.1\r\n\r\n", 400),
    ("bad chunk size",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"zz\r\nabc\r\n0\r\n\r\n", 400),
    ("unsupported version", b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    ("request line too long",
     b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414),
    ("head too large",
     b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X-Big: " + b"b" * 9000 + b"\r\n\r\n",
     431),
    ("too many headers",
     b"GET / HTTP/1.1\r\nHost: h\r\n" +
     b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n", 431),
    ("body too large",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 200000\r\n\r\n", 413),
    ("chunked body too large",
     b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"30000\r\n" + b"z" * 0x30000 + b"\r\n0\r\n\r\n", 413),
]


class BadInput(unittest.TestCase):
    def setUp(self):
        self.srv = start(self, "--max-body", "100000")

    def test_each_bad_input_gets_its_status_and_a_closed_connection(self):
        for name, raw, status in BAD_INPUTS:
            with self.subTest(name):
                with connect(self.srv.port) as s:
                    try:
                        s.sendall(raw)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    data = read_until_closed(s)  # fails if never closed
                    self.assertTrue(
                        data.startswith(b"HTTP/1.1 %d " % status),
                        "%s: got %r" % (name, data[:60]))
                    self.assertIn(b"Connection: close", data)
                # the server goes on serving others
                r = request(self.srv.port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                self.assertEqual(r.status, 200)


class Timeouts(unittest.TestCase):
    def test_a_slowloris_client_is_cut_at_the_header_timeout(self):
        srv = start(self, "--header-timeout", "400")
        with connect(srv.port) as s:
            start_t = time.monotonic()
            s.sendall(b"GET / HTTP/1.1\r\n")
            closed = False
            for i in range(40):  # a header byte every 50 ms, never finishing
                try:
                    s.sendall(b"X")
                except OSError:
                    closed = True
                    break
                s.settimeout(0.05)
                try:
                    if s.recv(1024) == b"":
                        closed = True
                        break
                except socket.timeout:
                    pass
            elapsed = time.monotonic() - start_t
            self.assertTrue(closed, "connection still open after %.1fs" % elapsed)
            self.assertLess(elapsed, 1.5)
            self.assertGreaterEqual(elapsed, 0.35)

    def test_idle_keep_alive_connections_are_closed(self):
        srv = start(self, "--keepalive-timeout", "300")
        with connect(srv.port) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            r, _ = read_response(s)
            t0 = time.monotonic()
            self.assertEqual(read_until_closed(s, timeout=3), b"")
            self.assertLess(time.monotonic() - t0, 2)


    def test_a_stalled_body_is_cut_at_the_body_timeout(self):
        srv = start(self, "--body-timeout", "300")
        with connect(srv.port) as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100"
                      b"\r\n\r\n0123456789")
            t0 = time.monotonic()
            self.assertEqual(read_until_closed(s, timeout=3), b"")
            self.assertLess(time.monotonic() - t0, 2)

    def test_a_client_that_stops_reading_is_cut_at_the_write_timeout(self):
        size = 32 << 20
        srv = start(self, "--write-timeout", "300", "--body-size", str(size))
        with connect(srv.port) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
            time.sleep(1.0)  # never read: the server's writes stall
            got = 0
            try:
                got = len(read_until_closed(s, timeout=5))
            except ConnectionResetError:
                pass
            self.assertLess(got, size)  # cut short, and closed
        r = request(srv.port, b"GET /info HTTP/1.1\r\nHost: h\r\n\r\n")
        self.assertEqual(r.status, 200)


class Limits(unittest.TestCase):
    def test_connections_over_the_maximum_wait_until_one_closes(self):
        srv = start(self, "--max-connections", "3")
        held = [connect(srv.port) for _ in range(3)]
        for s in held:  # make sure the server has accepted all three
            s.sendall(b"GET /info HTTP/1.1\r\nHost: h\r\n\r\n")
            read_response(s)
        extra = connect(srv.port)  # the kernel queues it; we do not accept
        extra.sendall(b"GET /info?extra HTTP/1.1\r\nHost: h\r\n\r\n")
        extra.settimeout(0.4)
        with self.assertRaises(socket.timeout):
            extra.recv(100)
        held[0].close()
        extra.settimeout(5)
        r, _ = read_response(extra)
        self.assertIn(b"query=extra", r.body)
        for s in held[1:] + [extra]:
            s.close()


class GracefulStop(unittest.TestCase):
    def test_stop_finishes_in_flight_requests_and_refuses_new_ones(self):
        srv = start(self, workers=2)
        results = []

        def slow(i):
            try:
                r = request(srv.port, b"GET /sleep?ms=400 HTTP/1.1\r\nHost: h"
                            b"\r\n\r\n", timeout=5)
                results.append((r.status, r.body, r.header("connection")))
            except Exception as e:  # recorded: the assertion below fails
                results.append(("error", repr(e), None))

        threads = [threading.Thread(target=slow, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.15)
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        code, out, _ = srv.stop(sig=signal.SIGTERM)
        self.assertEqual(code, 0)
        self.assertIn(b"stopped", out)
        self.assertEqual(len(results), 8)
        for status, body, conn in results:
            self.assertEqual((status, body), (200, b"slept success\n"))
            self.assertEqual(conn, "close")
        with self.assertRaises(OSError):
            connect(srv.port, timeout=1)


class Https(unittest.TestCase):
    def test_curl_and_raw_tls_requests(self):
        tmp = temp_dir(self)
        cert, key = self_signed(tmp, "localhost")
        srv = start(self, "--tls-cert", cert, "--tls-key", key)
        url = "https://localhost:%d/" % srv.port
        out = subprocess.run(["curl", "-sS", "--cacert", cert, "--resolve",
                              "localhost:%d:127.0.0.1" % srv.port, url, url],
                             capture_output=True, check=True)
        self.assertEqual(out.stdout, body_pattern(16) * 2)
        body = b"y" * 30000
        out = subprocess.run(["curl", "-sS", "-k", "--data-binary", "@-",
                              "https://127.0.0.1:%d/echo" % srv.port],
                             input=body, capture_output=True, check=True)
        self.assertEqual(out.stdout, body)


    def test_sni_selects_the_certificate_by_server_name(self):
        tmp = temp_dir(self)
        cert, key = self_signed(tmp, "localhost")
        other_cert, other_key = self_signed(tmp, "other.test")
        srv = start(self, "--tls-cert", cert, "--tls-key", key,
                    "--sni", "other.test:%s:%s" % (other_cert, other_key))

        def subject(name):
            out = subprocess.run(
                ["openssl", "s_client", "-connect", "127.0.0.1:%d" % srv.port,
                 "-servername", name], input=b"", capture_output=True,
                timeout=10)
            return out.stdout

        self.assertIn(b"CN = other.test", subject("other.test"))
        self.assertIn(b"CN = localhost", subject("localhost"))
        out = subprocess.run(["curl", "-sS", "--cacert", other_cert, "--resolve",
                              "other.test:%d:127.0.0.1" % srv.port,
                              "https://other.test:%d/" % srv.port],
                             capture_output=True, check=True)
        self.assertEqual(out.stdout, body_pattern(16))


class Load(unittest.TestCase):
    def test_wrk_gets_only_good_answers(self):
        srv = start(self, workers=2)
        out = subprocess.run(["wrk", "-t1", "-c32", "-d2s",
                              "http://127.0.0.1:%d/" % srv.port],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("Socket errors", out.stdout)
        self.assertNotIn("Non-2xx", out.stdout)
        requests = int(out.stdout.split(" requests in ")[0].split()[-1])
        self.assertGreater(requests, 1000)

    def test_wrk_over_tls(self):
        tmp = temp_dir(self)
        cert, key = self_signed(tmp, "localhost")
        srv = start(self, "--tls-cert", cert, "--tls-key", key)
        out = subprocess.run(["wrk", "-t1", "-c16", "-d1s",
                              "https://127.0.0.1:%d/" % srv.port],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("Socket errors", out.stdout)
        self.assertNotIn("Non-2xx", out.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
