#!/usr/bin/env python3
"""Allocations per request of the C hello server, the whole process counted.

Starts examples/http_hello with bench's malloc_count.so preloaded (pinned to
core 0), warms it up with wrk, reads the malloc count (SIGUSR2), runs wrk
again and reads it again: (after - before) / requests. Loopback only, every
run bounded in time, the server stopped by PID.

Usage: bench/http/mallocs.py [--build build-release] [--seconds 5]"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "spec", "integration"))
from harness import Server, free_port  # noqa: E402


def read_count(srv):
    srv.proc.send_signal(signal.SIGUSR2)
    deadline = time.time() + 5
    line = b""
    while time.time() < deadline:
        line = srv.proc.stderr.readline()
        m = re.match(rb"mallocs (\d+)", line)
        if m:
            return int(m.group(1))
    raise RuntimeError("no count from the server: %r" % line)


def wrk(port, seconds, conns):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c%d" % conns,
                          "-d%ds" % seconds, "http://127.0.0.1:%d/" % port],
                         capture_output=True, text=True, timeout=seconds + 30)
    if "Socket errors" in out.stdout or "Non-2xx" in out.stdout:
        raise RuntimeError("wrk saw errors:\n" + out.stdout)
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--conns", type=int, default=256)
    args = ap.parse_args()
    lib = os.path.abspath(os.path.join(args.build, "bench", "libmalloc_count.so"))
    hello = os.path.join(args.build, "examples", "http_hello")
    port = free_port()
    env = dict(os.environ, LD_PRELOAD=lib)
    srv = Server(["taskset", "-c", "0", hello, "--listen",
                  "127.0.0.1:%d" % port, "--workers", "1"], port, env=env)
    try:
        wrk(port, 1, args.conns)
        before = read_count(srv)
        requests = wrk(port, args.seconds, args.conns)
        after = read_count(srv)
    finally:
        srv.stop()
    per = (after - before) / requests
    line = ("C hello server, whole process: %d mallocs over %d keep-alive "
            "requests = %.4f per request" % (after - before, requests, per))
    print(line)
    out = os.path.join(os.path.dirname(__file__), "..", "results",
                       "http_mallocs.md")
    with open(out, "w") as f:
        f.write("## HTTP server allocations (%s)\n\n%s\n" %
                (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), line))
    return 0 if after - before <= requests // 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
