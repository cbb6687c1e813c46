#!/usr/bin/env python3
"""User-space instructions per request of a server, counted by callgrind.

Wall-clock and CPU figures on a shared machine drift by tens of percent;
callgrind's instruction count for the same binary and the same requests
does not. This runs one server under `valgrind --tool=callgrind` with one
worker, warms it up with wrk, zeroes the counters (callgrind_control -z),
runs wrk again, dumps the counters (callgrind_control -d) and divides the
instructions of that window by the requests wrk completed in it. The kernel's
work (syscalls) is not counted: compare like with like.

  c      examples/http_hello (GET /, 16 B)
  lua    moonflow serve bench/lua (GET /, the same body from a Lua handler)
  site   moonflow serve scripts/site --path /hello (or any other route)

  --config FILE  serve's config for lua/site (bench/lua/_limit_conf.lua:
                 /limited is the Lua hello behind a rate limit)

Usage: bench/http/instructions.py [--build build-release] [--server c|lua|site]
       [--path /] [--seconds 4] [--conns 16] [--config FILE]
Loopback only; every run bounded in time; the server stopped by PID."""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "spec", "integration"))
from harness import Server, free_port  # noqa: E402


def server_argv(build, kind, port, config=None):
    listen = ["--listen", "127.0.0.1:%d" % port, "--workers", "1"]
    if kind == "c":
        return [os.path.join(build, "examples", "http_hello")] + listen
    site = os.path.join(ROOT, "bench", "lua") if kind == "lua" else \
        os.path.join(ROOT, "scripts", "site")
    conf = ["--config", os.path.abspath(config)] if config else []
    return [os.path.join(build, "moonflow"), "serve", site] + conf + listen


def wrk(port, path, seconds, conns):
    out = subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds,
                          "http://127.0.0.1:%d%s" % (port, path)],
                         capture_output=True, text=True, timeout=seconds + 60)
    if "Socket errors" in out.stdout or "Non-2xx" in out.stdout:
        raise RuntimeError("wrk saw errors:\n" + out.stdout)
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))


def callgrind_control(flag, pid):
    subprocess.run(["callgrind_control", flag, str(pid)], check=True,
                   capture_output=True, timeout=60)


def dumped_instructions(outdir, pid):
    """Ir of the newest dump of pid (callgrind.out.PID.N)."""
    dumps = sorted(glob.glob(os.path.join(outdir, "callgrind.out.%d.*" % pid)),
                   key=lambda p: int(p.rsplit(".", 1)[1]))
    if not dumps:
        raise RuntimeError("callgrind wrote no dump")
    with open(dumps[-1]) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in " + dumps[-1])


def measure(build, kind, path, seconds, conns, config=None):
    port = free_port()
    with tempfile.TemporaryDirectory() as outdir:
        argv = ["valgrind", "--tool=callgrind",
                "--callgrind-out-file=" + os.path.join(outdir,
                                                       "callgrind.out.%p")]
        srv = Server(argv + server_argv(build, kind, port, config), port)
        try:
            wrk(port, path, 1, conns)  # warm-up: free lists, JIT, caches
            callgrind_control("-z", srv.proc.pid)
            requests = wrk(port, path, seconds, conns)
            callgrind_control("-d", srv.proc.pid)
            ir = dumped_instructions(outdir, srv.proc.pid)
        finally:
            srv.stop(signal.SIGKILL)
    return ir, requests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--server", choices=["c", "lua", "site"], default="c")
    ap.add_argument("--path", default="/")
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--config")
    args = ap.parse_args()
    ir, requests = measure(args.build, args.server, args.path, args.seconds,
                           args.conns, args.config)
    print("%s %s: %d instructions / %d requests = %.0f per request"
          % (args.server, args.path, ir, requests, ir / requests))


if __name__ == "__main__":
    main()
