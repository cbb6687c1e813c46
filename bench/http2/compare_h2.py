#!/usr/bin/env python3
"""bench/http2/compare_h2.py — HTTP/2 servers side by side: CPU per request.

moonflow serve answering a Lua hello (16 bytes) over h2c, and nginx
answering the same 16 bytes with `return 200` on a `listen ... http2`
(h2c by prior knowledge). Each server in turn is started pinned to core 0
(one worker, one process), warmed up for 1 s, then loaded by one h2load
thread pinned to core 1: `h2load -c 64 -m 32 -n N` (64 connections, 32
streams in flight on each). The server's CPU time (utime + stime of the
process, from /proc/PID/stat) is read right before and after the run:
CPU per request = that delta / requests h2load completed. Servers run
interleaved (A B A B ...) and the medians of the repeats are reported, as
bench/http/compare.py does for HTTP/1.1.

Writes a Markdown table to stdout and bench/results/http2_hello.md, and
every sample to bench/results/http2_hello.json. Exits 1 if any run had a
failed, errored or non-2xx request, or a server died.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "results")
SERVER_CPU, CLIENT_CPU = 0, 1
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
BODY = "0123456789abcdef"


class PointFailed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise PointFailed("server exited with %s" % proc.returncode)
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise PointFailed("port %d not listening" % port)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def moonflow_command(build, port, workdir):
    site = os.path.join(workdir, "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "hello.lua"), "w") as f:
        f.write('return function(req, resp) resp:send("%s") end\n' % BODY)
    return [os.path.join(build, "moonflow"), "serve", site, "--listen",
            "%s:%d" % (HOST, port), "--workers", "1", "--access-log", "off"]


def nginx_command(build, port, workdir):
    exe = shutil.which("nginx")
    if not exe:
        return None
    prefix = tempfile.mkdtemp(prefix="nginx-", dir=workdir)
    temp = "\n".join("    %s_temp_path %s/%s_temp;" % (k, prefix, k)
                     for k in ("client_body", "proxy", "fastcgi", "uwsgi",
                               "scgi"))
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off;
master_process off;
worker_processes 1;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    default_type text/plain;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
%(temp)s
    server {
        listen %(host)s:%(port)d http2;
        location / { return 200 "%(body)s"; }
    }
}
""" % {"p": prefix, "temp": temp, "host": HOST, "port": port, "body": BODY})
    return [exe, "-p", prefix, "-c", conf, "-e", os.path.join(prefix,
                                                               "error.log")]


SERVERS = {"moonflow": moonflow_command, "nginx": nginx_command}


def h2load(port, path, n, conns, streams):
    argv = ["taskset", "-c", str(CLIENT_CPU), "h2load", "-n", str(n), "-c",
            str(conns), "-m", str(streams), "-t", "1",
            "http://%s:%d%s" % (HOST, port, path)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, "
                  r"(\d+) succeeded, (\d+) failed, (\d+) errored", out.stdout)
    codes = re.search(r"status codes: (\d+) 2xx", out.stdout)
    rate = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out.stdout)
    if not (m and codes and rate):
        raise PointFailed("h2load said: " + out.stdout + out.stderr)
    total, done, ok, failed, errored = map(int, m.groups())
    if failed or errored or ok != n or int(codes.group(1)) != n:
        raise PointFailed("h2load: %d failed, %d errored, %s 2xx of %d" % (
            failed, errored, codes.group(1), n))
    return ok, float(rate.group(1))


def one_run(name, build, n, conns, streams, workdir):
    port = free_port()
    argv = SERVERS[name](build, port, workdir)
    if argv is None:
        return None
    proc = subprocess.Popen(["taskset", "-c", str(SERVER_CPU)] + argv,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        path = "/hello" if name == "moonflow" else "/"
        h2load(port, path, max(n // 10, 1000), conns, streams)  # warm-up
        cpu0 = cpu_seconds(proc.pid)
        ok, rate = h2load(port, path, n, conns, streams)
        cpu = cpu_seconds(proc.pid) - cpu0
        if proc.poll() is not None:
            raise PointFailed("%s died" % name)
        return {"server": name, "requests": ok, "req_per_s": rate,
                "server_cpu_s": cpu, "cpu_us_per_req": cpu / ok * 1e6}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-n", type=int, default=400000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--streams", type=int, default=32)
    args = ap.parse_args()
    samples = []
    with tempfile.TemporaryDirectory(prefix="mf-h2bench-") as workdir:
        for _ in range(args.repeats):
            for name in SERVERS:
                s = one_run(name, args.build, args.n, args.conns,
                            args.streams, workdir)
                if s:
                    samples.append(s)
    rows = []
    for name in SERVERS:
        mine = [s for s in samples if s["server"] == name]
        if not mine:
            rows.append("| %s | not installed | | |" % name)
            continue
        cpu = statistics.median(s["cpu_us_per_req"] for s in mine)
        rate = statistics.median(s["req_per_s"] for s in mine)
        spread = (min(s["cpu_us_per_req"] for s in mine),
                  max(s["cpu_us_per_req"] for s in mine))
        rows.append("| %s | %.2f (%.2f–%.2f) | %.0f | %d |" % (
            name, cpu, spread[0], spread[1], rate, len(mine)))
    moon = [s for s in samples if s["server"] == "moonflow"]
    ngx = [s for s in samples if s["server"] == "nginx"]
    ratio = ""
    if moon and ngx:
        ratio = "\nmoonflow ÷ nginx, server CPU per request: %.2f\n" % (
            statistics.median(s["cpu_us_per_req"] for s in moon) /
            statistics.median(s["cpu_us_per_req"] for s in ngx))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = ("## HTTP/2 hello, 16 B (%s, h2load -c %d -m %d -n %d, server "
             "on core 0, h2load on core 1, median of %d)\n\n%s\n\n"
             "| server | server CPU µs / request (min–max) | req/s | runs |\n"
             "| --- | --- | --- | --- |\n%s\n%s" % (
                 when, args.conns, args.streams, args.n, args.repeats,
                 machine(args.build), "\n".join(rows), ratio))
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "http2_hello.md"), "w") as f:
        f.write(table)
    with open(os.path.join(RESULTS, "http2_hello.json"), "w") as f:
        json.dump({"when": when, "samples": samples}, f, indent=1)
    return 0


def machine(build):
    """The line that says where and on what the numbers were taken."""
    commit = subprocess.run(["git", "-C", os.path.dirname(RESULTS),
                             "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    nginx = subprocess.run(["nginx", "-v"], capture_output=True,
                           text=True).stderr.strip().split("/")[-1]
    return ("%d cores, Linux %s; commit %s, build %s; nginx %s; "
            "moonflow serves a Lua handler, nginx `return 200`." % (
                os.cpu_count(), os.uname().release, commit or "?",
                os.path.basename(os.path.abspath(build)), nginx))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except PointFailed as e:
        print("compare_h2: %s" % e, file=sys.stderr)
        sys.exit(1)
