#!/usr/bin/env python3
"""What an upstream group and a rate limit cost a proxied request.

One `moonflow serve` (one worker) proxies GET / to two C hello servers
(examples/http_hello) by three routes of one config:

  /bare      resp:proxy("http://127.0.0.1:PORT")  the bare proxy
  /upstream  resp:proxy("http://api")  a consistent-hash group of the two,
             health-checked (HTTP GET / every second)
  /full      /upstream behind a route limit.req on the client's address
             (its rate out of reach: every request passes)

Two gauges, side by side in one run:
  instructions  user-space instructions per request of the proxy, counted
                by callgrind (bench/http/instructions.py's method), each
                route in the same process, counters zeroed between them
  cpu           the proxy's CPU time (utime + stime, /proc) per request
                under wrk, pinned: proxy on core 0, wrk and the backends
                on core 1; routes alternated, --repeats rounds, medians

The ratios are the figure: /full ÷ /bare (target <= 1.10; Kong's two
plugins cost about 24%). Writes bench/results/upstream_cost.{md,json}
unless --no-write. Loopback only; every run bounded in time; servers
stopped by PID.

Usage: bench/upstream/cost.py [--build build-release] [--seconds 3]
       [--repeats 3] [--conns 16] [--no-write]"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "spec", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench", "http"))
from harness import Server, free_port  # noqa: E402
import instructions  # noqa: E402

ROUTES = ("/bare", "/upstream", "/full")


def write_site(root, backends):
    servers = ", ".join('"127.0.0.1:%d"' % p for p in backends)
    with open(os.path.join(root, "conf.lua"), "w") as f:
        f.write('''return {
    root = ".", access_log = "off", shared = { limits = 1048576 },
    upstreams = { api = { servers = { %s }, policy = "consistent_hash",
                          health = { type = "http", path = "/", interval = 1 } } },
    routes = {
        ["/bare"] = "bare.lua", ["/upstream"] = "group.lua",
        ["/full"] = { file = "group.lua", limit = { req = {
            rate = 1000000000, burst = 1000000000, key = "remote_addr",
            dict = "limits" } } },
    },
}
''' % servers)
    with open(os.path.join(root, "bare.lua"), "w") as f:
        f.write('return function(req, resp) resp:proxy("http://127.0.0.1:%d/")'
                ' end\n' % backends[0])
    with open(os.path.join(root, "group.lua"), "w") as f:
        f.write('return function(req, resp) resp:proxy("http://api/") end\n')


def start_backends(build, n):
    out = []
    for _ in range(n):
        port = free_port()
        argv = ["taskset", "-c", "1", os.path.join(build, "examples",
                                                   "http_hello"),
                "--listen", "127.0.0.1:%d" % port, "--workers", "1"]
        out.append(Server(argv, port))
    return out


def serve_argv(build, site, port, pin):
    argv = [os.path.join(build, "moonflow"), "serve", site, "--config",
            os.path.join(site, "conf.lua"), "--listen", "127.0.0.1:%d" % port,
            "--workers", "1"]
    return (["taskset", "-c", "0"] + argv) if pin else argv


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(port, path, seconds, conns, pin=True):
    argv = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds,
            "http://127.0.0.1:%d%s" % (port, path)]
    if pin:
        argv = ["taskset", "-c", "1"] + argv
    out = subprocess.run(argv, capture_output=True, text=True,
                         timeout=seconds + 60)
    if "Socket errors" in out.stdout or "Non-2xx" in out.stdout:
        raise RuntimeError("wrk saw errors:\n" + out.stdout)
    import re
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))


def measure_instructions(build, site, seconds, conns):
    port = free_port()
    res = {}
    with tempfile.TemporaryDirectory() as outdir:
        argv = ["valgrind", "--tool=callgrind",
                "--callgrind-out-file=" + os.path.join(outdir,
                                                       "callgrind.out.%p")]
        srv = Server(argv + serve_argv(build, site, port, False), port)
        try:
            for path in ROUTES:
                wrk(port, path, 1, conns, pin=False)  # warm-up
                instructions.callgrind_control("-z", srv.proc.pid)
                n = wrk(port, path, seconds, conns, pin=False)
                instructions.callgrind_control("-d", srv.proc.pid)
                res[path] = instructions.dumped_instructions(
                    outdir, srv.proc.pid) / n
        finally:
            srv.stop(signal.SIGKILL)
    return res


def measure_cpu(build, site, seconds, conns, repeats):
    port = free_port()
    srv = Server(serve_argv(build, site, port, True), port)
    per = {p: [] for p in ROUTES}
    try:
        for path in ROUTES:
            wrk(port, path, 1, conns)
        for _ in range(repeats):
            for path in ROUTES:
                before = cpu_seconds(srv.proc.pid)
                n = wrk(port, path, seconds, conns)
                per[path].append((cpu_seconds(srv.proc.pid) - before) / n * 1e6)
    finally:
        srv.stop(signal.SIGKILL)
    return {p: statistics.median(v) for p, v in per.items()}


def report(ins, cpu, args):
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    lines = ["# What an upstream group and a rate limit cost a proxied request",
             "",
             "%s, %s, commit %s, %s UTC. `python3 bench/upstream/cost.py "
             "--build %s --seconds %d --repeats %d --conns %d`." % (
                 platform.node(), platform.processor() or platform.machine(),
                 head, time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                 args.build, args.seconds, args.repeats, args.conns),
             "",
             "| route | instructions / request | ÷ bare | CPU µs / request | ÷ bare |",
             "| --- | --- | --- | --- | --- |"]
    for p in ROUTES:
        lines.append("| `%s` | %.0f | %.3f | %.2f | %.3f |" % (
            p, ins[p], ins[p] / ins["/bare"], cpu[p], cpu[p] / cpu["/bare"]))
    lines += ["", "`/full` is a health-checked consistent-hash upstream plus "
              "a route `limit.req`; target: ≤ 1.10 × `/bare`."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as site:
        backends = start_backends(args.build, 2)
        try:
            write_site(site, [b.port for b in backends])
            ins = measure_instructions(args.build, site, args.seconds,
                                       args.conns)
            cpu = measure_cpu(args.build, site, args.seconds, args.conns,
                              args.repeats)
        finally:
            for b in backends:
                b.stop(signal.SIGKILL)
    text = report(ins, cpu, args)
    print(text)
    if not args.no_write:
        out = os.path.join(ROOT, "bench", "results", "upstream_cost")
        with open(out + ".md", "w") as f:
            f.write(text)
        with open(out + ".json", "w") as f:
            json.dump({"instructions": ins, "cpu_us": cpu}, f, indent=1)


if __name__ == "__main__":
    main()
