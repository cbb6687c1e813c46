#!/usr/bin/env python3
"""make soak: SOAK_SECONDS (default 600) of mixed traffic against
`moonflow serve`, with the server's RSS and open fds sampled every second.

The site (spec/soak/site, copied to a temporary folder) has a hello route,
a fan-out to this server over HTTP and to Redis side by side, Redis calls,
a chunked stream and a Lua error; a redis-server runs on a free loopback
port in the temporary folder. The traffic, all to 127.0.0.1:
  wrk          -t1 -c16 through spec/soak/mix.lua: /hello, /fanout, /redis,
               /stream and /missing (404), counted by the X-Kind header each
               handler sets and by status
  errors       GET /error (a Lua error: 500) every 50 ms, and a request with
               a bad Content-Length (400) every 500 ms
  slow request a request head sent 8 bytes at a time, 30 ms apart
  slow reader  a 1 MiB stream read 16 KiB every 10 ms through a small
               receive buffer
  slowloris    four heads that never end, every 2.5 s: the server must
               close them after its header timeout (2 s here)
  reload       /hello rewritten every 0.5 s (hot reload under load); every
               20th version must answer within 2 s
The 404s, 500s, 400s and slowloris closes are the injected errors; any
other outcome of any kind is an unexpected error.

Bounds, asserted:
  - no unexpected outcome, no wrk socket error (connect, read, write,
    timeout), every Lua error logged once;
  - RSS: after the warm-up (the first fifth, at most 60 s: free lists,
    buffers, pools, the JIT and the Lua heaps grow to the load's high-water
    mark) it grows by at most SOAK_RSS_MIB (default 4) MiB, against a
    whole process of about 7 MiB: in ten minutes here (about 8 million
    requests, 1,200 reloads) a leak of half a byte per request, or of
    3.5 KiB per reload, passes it. The slope of RSS after the warm-up is
    printed too (KiB per minute), for smaller leaks;
  - fds: after the warm-up they stay within 8 of the warm-up's maximum
    (connections are bounded by the clients above), and once the traffic
    has stopped and the keep-alive timeout (5 s here) has passed they come
    back to the idle count before the traffic plus one Redis connection
    per worker (and 2 spare).
The summary table prints requests by kind, errors, and RSS and fds at the
start, at the end of the warm-up, their maximum after it, and at the end.

Usage: spec/soak/soak.py [--moonflow build/moonflow] [--seconds N]
       [--workers 2]"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import Redis, connect, free_port, read_response, wait_port  # noqa

HEADER_TIMEOUT_MS = 2000
KEEPALIVE_MS = 5000
RELOAD_EVERY = 0.5
RELOAD_CHECK_EVERY = 20


class Tally:
    """Outcomes by kind, expected or not, from every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.expected = {}
        self.unexpected = {}
        self.examples = []

    def add(self, kind, ok, n=1, detail=None):
        with self.lock:
            table = self.expected if ok else self.unexpected
            table[kind] = table.get(kind, 0) + n
            if not ok and len(self.examples) < 10:
                self.examples.append("%s: %s" % (kind, detail))

    def kinds(self):
        with self.lock:
            return sorted(set(self.expected) | set(self.unexpected))


class Driver(threading.Thread):
    """A loop of one kind of traffic until stop is set (or its deadline)."""

    def __init__(self, soak, name, step):
        super().__init__(name=name, daemon=True)
        self.soak = soak
        self.step = step

    def run(self):
        while not self.soak.stop.is_set() and \
                time.time() < self.soak.deadline:
            try:
                self.step()
            except Exception as e:  # a socket that failed: unexpected
                self.soak.tally.add(self.name, False, detail=repr(e))
                self.soak.stop.wait(0.1)


def raw_exchange(port, data, timeout=10.0):
    with connect(port, timeout) as s:
        s.sendall(data)
        return read_response(s)[0]


class Soak:
    def __init__(self, args):
        self.args = args
        self.tally = Tally()
        self.stop = threading.Event()
        self.samples = []  # (seconds since the traffic began, rss KiB, fds)
        self.t0 = None
        self.deadline = 0.0
        self.version = 0
        self.reloads = 0

    # ---- the server ------------------------------------------------------

    def start(self, tmp):
        self.site = os.path.join(tmp, "site")
        shutil.copytree(os.path.join(HERE, "site"), self.site)
        conf = os.path.join(tmp, "soak.conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = "site", workers = %d, access_log = "off",'
                    ' timeouts = { header = %d, keepalive = %d } }\n'
                    % (self.args.workers, HEADER_TIMEOUT_MS, KEEPALIVE_MS))
        self.redis = Redis(tmp)
        self.port = free_port()
        self.log = os.path.join(tmp, "moonflow.stderr")
        env = dict(os.environ, SOAK_REDIS_URL=self.redis.url())
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [self.args.moonflow, "serve", "--config", conf, "--listen",
                 "127.0.0.1:%d" % self.port], stdout=subprocess.DEVNULL,
                stderr=err, env=env)
        wait_port(self.port, self.proc)

    def stop_server(self):
        code = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.redis.kill()
        return code

    def sample(self):
        pid = self.proc.pid
        with open("/proc/%d/status" % pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        fds = len(os.listdir("/proc/%d/fd" % pid))
        t = time.time() - self.t0 if self.t0 else 0.0
        self.samples.append((t, rss, fds))
        return rss, fds

    # ---- traffic besides wrk ----------------------------------------------

    def errors_step(self):
        for i in range(10):
            r = raw_exchange(self.port, b"GET /error HTTP/1.1\r\nHost: h\r\n"
                             b"\r\n")
            self.tally.add("lua error 500", r.status == 500, detail=r.status)
            self.stop.wait(0.05)
        r = raw_exchange(self.port, b"GET /hello HTTP/1.1\r\nHost: h\r\n"
                         b"Content-Length: 1x\r\n\r\n")
        self.tally.add("bad request 400", r.status == 400, detail=r.status)

    def slow_request_step(self):
        head = b"GET /hello HTTP/1.1\r\nHost: h\r\nUser-Agent: slow\r\n\r\n"
        with connect(self.port, 10.0) as s:
            for i in range(0, len(head), 8):
                s.sendall(head[i:i + 8])
                time.sleep(0.03)
            r, _ = read_response(s)
        self.tally.add("slow request 200", r.status == 200 and
                       r.body.startswith(b"hello v"), detail=r.status)

    def slow_reader_step(self):
        n, size = 64, 16384
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.settimeout(10.0)
        with s:
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"GET /stream?n=%d&size=%d HTTP/1.1\r\nHost: h\r\n"
                      b"Connection: close\r\n\r\n" % (n, size))
            data = b""
            for _ in range(100000):  # bounded: ~1.1 MiB in 16 KiB reads
                chunk = s.recv(16384)
                if not chunk:
                    break
                data += chunk
                time.sleep(0.01)
        complete = data.startswith(b"HTTP/1.1 200") and \
            data.endswith(b"\r\n0\r\n\r\n") and \
            data.count(b"s" * 1024) >= n * size // 1024
        self.tally.add("slow reader 200", complete, detail=data[:40])

    def slowloris_step(self):
        socks = []
        for _ in range(4):
            s = connect(self.port, (HEADER_TIMEOUT_MS / 1000.0) + 4.0)
            s.sendall(b"GET /hello HTTP/1.1\r\nHost: h\r\n")
            socks.append(s)
        t0 = time.time()
        for s in socks:
            with s:
                try:
                    data = s.recv(4096)
                except socket.timeout:
                    data = None
            waited = time.time() - t0
            # Closed by the server after its header timeout, with no
            # answer or a 408.
            ok = data is not None and (data == b"" or
                                       data.startswith(b"HTTP/1.1 408"))
            self.tally.add("slowloris closed", ok and waited >= 1.0,
                           detail="%r after %.1fs" % (data, waited))
        self.stop.wait(0.5)

    def write_hello(self):
        self.version += 1
        path = os.path.join(self.site, "hello.lua")
        tmp = os.path.join(self.site, ".hello.lua.tmp")
        with open(tmp, "w") as f:
            f.write('return function(req, resp)\n'
                    '    resp.headers["X-Kind"] = "hello"\n'
                    '    resp:send("hello v%d\\n")\n'
                    'end\n' % self.version)
        os.rename(tmp, path)  # as editors save
        self.reloads += 1
        return b"hello v%d\n" % self.version

    def reload_step(self):
        body = self.write_hello()
        if self.version % RELOAD_CHECK_EVERY == 0:
            t0 = time.time()
            got = None
            while time.time() - t0 < 2.0:
                got = raw_exchange(self.port, b"GET /hello HTTP/1.1\r\n"
                                   b"Host: h\r\n\r\n").body
                if got == body:
                    break
                time.sleep(0.01)
            self.tally.add("reload applied", got == body,
                           detail="%r after 2 s" % got)
        self.stop.wait(RELOAD_EVERY)

    def sampler_step(self):
        self.sample()
        self.stop.wait(1.0)

    # ---- the run ----------------------------------------------------------

    def wrk(self, seconds):
        out = subprocess.run(
            ["wrk", "-t1", "-c16", "-d%ds" % seconds, "--timeout", "10s",
             "-s", os.path.join(HERE, "mix.lua"),
             "http://127.0.0.1:%d" % self.port],
            capture_output=True, text=True, timeout=seconds + 120)
        if out.returncode != 0:
            raise RuntimeError("wrk failed: %s" % out.stderr)
        return out.stdout

    def count_wrk(self, out):
        expected = {"hello 200", "fanout 200", "redis 200", "stream 200",
                    "- 404"}
        for kind, n in re.findall(r"^kind (.+) (\d+)$", out, re.M):
            self.tally.add("wrk " + kind, kind in expected, int(n),
                           detail="%s responses" % n)
        m = re.search(r"Socket errors: connect (\d+), read (\d+), "
                      r"write (\d+), timeout (\d+)", out)
        errors = [int(x) for x in m.groups()] if m else [0, 0, 0, 0]
        for name, n in zip(("connect", "read", "write", "timeout"), errors):
            if n:
                self.tally.add("wrk socket " + name, False, n,
                               detail="%d errors" % n)
        return int(re.search(r"(\d+) requests in", out).group(1))

    def run(self, tmp):
        self.start(tmp)
        for _ in range(3):  # idle, before any traffic
            self.sample()
            time.sleep(1.0)
        idle_fds = min(s[2] for s in self.samples)
        start_rss = self.samples[-1][1]
        self.samples = []
        seconds = self.args.seconds
        self.t0 = time.time()
        self.deadline = self.t0 + seconds + 5
        drivers = [Driver(self, name, step) for name, step in (
            ("errors", self.errors_step),
            ("slow request", self.slow_request_step),
            ("slow reader", self.slow_reader_step),
            ("slowloris", self.slowloris_step),
            ("reload", self.reload_step),
            ("sampler", self.sampler_step))]
        for d in drivers:
            d.start()
        try:
            out = self.wrk(seconds)
        finally:
            self.stop.set()
            for d in drivers:
                d.join(timeout=30)
        requests = self.count_wrk(out)
        stuck = [d.name for d in drivers if d.is_alive()]
        if stuck:
            self.tally.add("driver stuck", False, detail=stuck)
        end_fds = self.settle(idle_fds)
        code = self.stop_server()
        self.tally.add("server exit 0", code == 0, detail=code)
        self.check_log()
        return self.report(requests, out, start_rss, idle_fds, end_fds)

    def settle(self, idle_fds):
        """fds once the traffic is over and idle connections timed out:
        sampled until back within the bound, for at most 90 s (past the
        keep-alive and the client pool's idle timeouts)."""
        bound = idle_fds + self.args.workers + 2
        fds = None
        for _ in range(90):
            _, fds = self.sample()
            if fds <= bound:
                break
            time.sleep(1.0)
        return fds

    def check_log(self):
        with open(self.log, errors="replace") as f:
            text = f.read()
        logged = text.count("boom from the soak")
        errors = self.tally.expected.get("lua error 500", 0)
        self.tally.add("lua errors logged", logged == errors,
                       detail="%d logged for %d answered 500"
                       % (logged, errors))
        for bad in ("runtime error", "AddressSanitizer", "out of memory",
                    "cannot", "lost"):
            if bad in text:
                self.tally.add("stderr: " + bad, False,
                               detail=text[text.index(bad) - 200:][:400])

    # ---- the verdict --------------------------------------------------------

    def report(self, requests, wrk_out, start_rss, idle_fds, end_fds):
        seconds = self.args.seconds
        warmup = min(60.0, seconds / 5.0)
        warm = [s for s in self.samples if s[0] <= warmup]
        after = [s for s in self.samples if warmup < s[0] <= seconds]
        if not warm or not after:
            print("soak: too few samples")
            return 1
        warm_rss, warm_fds_max = warm[-1][1], max(s[2] for s in warm)
        max_rss = max(s[1] for s in after)
        max_fds = max(s[2] for s in after)
        slope = rss_slope(after)
        end_rss = self.samples[-1][1]
        rss_bound = self.args.rss_mib * 1024
        fd_bound = warm_fds_max + 8
        end_bound = idle_fds + self.args.workers + 2

        print("\nsoak: %d s, %d workers, wrk %d requests (%.0f/s), %d "
              "reloads" % (seconds, self.args.workers, requests,
                           requests / seconds, self.reloads))
        print("\n%-26s %12s %12s" % ("kind", "expected", "unexpected"))
        for kind in self.tally.kinds():
            print("%-26s %12d %12d" % (kind, self.tally.expected.get(kind, 0),
                                      self.tally.unexpected.get(kind, 0)))
        print("\n%-10s %10s %12s %12s %10s %10s" % (
            "", "start", "warm-up end", "max after", "end", "bound"))
        print("%-10s %10.1f %12.1f %12.1f %10.1f %10s" % (
            "RSS MiB", start_rss / 1024, warm_rss / 1024, max_rss / 1024,
            end_rss / 1024, "+%d" % self.args.rss_mib))
        print("%-10s %10d %12d %12d %10d %10s" % (
            "fds", idle_fds, warm_fds_max, max_fds, end_fds,
            "%d / %d" % (fd_bound, end_bound)))
        print("RSS after the warm-up: %+.0f KiB at most, slope %+.0f KiB/min"
              % (max_rss - warm_rss, slope))
        for line in wrk_out.splitlines():
            if "Latency" in line or "Req/Sec" in line:
                print("wrk" + line)

        failures = ["%s: %d" % (k, n) for k, n in
                    sorted(self.tally.unexpected.items())]
        if max_rss - warm_rss > rss_bound:
            failures.append("RSS grew %d KiB after the warm-up (bound %d)"
                            % (max_rss - warm_rss, rss_bound))
        if max_fds > fd_bound:
            failures.append("fds reached %d after the warm-up (bound %d)"
                            % (max_fds, fd_bound))
        if end_fds > end_bound:
            failures.append("fds at the end %d (bound %d)"
                            % (end_fds, end_bound))
        for needed in ("wrk hello 200", "wrk fanout 200", "wrk redis 200",
                       "wrk stream 200", "wrk - 404", "lua error 500",
                       "bad request 400", "slow request 200",
                       "slow reader 200", "slowloris closed",
                       "reload applied"):
            if not self.tally.expected.get(needed):
                failures.append("no %s at all" % needed)
        if failures:
            print("\nsoak FAILED:\n  " + "\n  ".join(failures))
            for example in self.tally.examples:
                print("  e.g. " + example)
            return 1
        print("\nsoak passed")
        return 0


def rss_slope(samples):
    """Least-squares slope of RSS over time, KiB per minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(s[0] for s in samples) / n
    mr = sum(s[1] for s in samples) / n
    var = sum((s[0] - mt) ** 2 for s in samples)
    cov = sum((s[0] - mt) * (s[1] - mr) for s in samples)
    return cov / var * 60 if var else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--moonflow", default=os.path.join("build", "moonflow"))
    p.add_argument("--seconds", type=int,
                   default=int(os.environ.get("SOAK_SECONDS", "600")))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rss-mib", type=int,
                   default=int(os.environ.get("SOAK_RSS_MIB", "4")))
    args = p.parse_args()
    if args.seconds < 10:
        p.error("--seconds: at least 10")
    soak = Soak(args)
    tmp = tempfile.mkdtemp(prefix="moonflow-soak-")
    try:
        status = soak.run(tmp)
    finally:
        soak.stop.set()
        if getattr(soak, "proc", None) is not None and \
                soak.proc.poll() is None:
            soak.proc.kill()
            soak.proc.wait()
        if getattr(soak, "redis", None) is not None:
            soak.redis.kill()
        shutil.rmtree(tmp, True)
    sys.exit(status)


if __name__ == "__main__":
    main()
