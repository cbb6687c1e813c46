#!/usr/bin/env python3
"""bench/static/compare.py — a static file, moonflow against nginx: server
CPU per request.

The same 16 KiB file is served by nginx (a location with `alias`,
`sendfile on`) and by `moonflow serve` (a `static` mount), each in turn
pinned to core 0 and loaded by one wrk thread pinned to core 1, through
bench/http/compare.py's own pieces: the server's CPU time (utime + stime,
/proc/PID/stat) read right before and after the wrk run, divided by the
requests wrk completed; servers interleaved (nginx, moonflow, nginx ...)
and the medians of the repeats reported, each ratio paired by repeat.
Both answer one GET by hand first: the exact 16 KiB, status 200.

Writes a Markdown table to stdout and bench/results/static.md, and every
raw sample to bench/results/static.json. Exits 1 if any point failed.

  python3 bench/static/compare.py [--build build] [--seconds 3]
                                  [--repeats 3] [--conns 64,256]
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))


def _http_compare():
    """bench/http/compare.py's measurement, loaded by its path (this file
    has the same name)."""
    path = os.path.join(os.path.dirname(HERE), "http", "compare.py")
    spec = importlib.util.spec_from_file_location("http_compare", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


http = _http_compare()

RESULTS = os.path.join(os.path.dirname(HERE), "results")
FILE_SIZE = 16 * 1024
URL_PATH = "/assets/f16k.bin"


def make_site(workdir):
    """The file (bytes that no server could guess) under www/."""
    www = os.path.join(workdir, "www")
    os.makedirs(www, exist_ok=True)
    data = (b"moonflow static " * (FILE_SIZE // 16))[:FILE_SIZE]
    with open(os.path.join(www, "f16k.bin"), "wb") as f:
        f.write(data)
    return www, data


class Nginx:
    """nginx as configured by default (no open_file_cache), or with
    cached=True keeping open files as moonflow does (open_file_cache of
    the same size, revalidated every 60 s instead of watched)."""
    name = "nginx"

    def __init__(self, www, cached=False):
        self.exe = http.shutil.which("nginx")
        self.www = www
        self.cached = cached
        if cached:
            self.name = "nginx-ofc"

    def missing(self):
        return None if self.exe else "not installed (apt-get install nginx-light)"

    def command(self, port, size, conns, workdir):
        site = http.NginxSite(
            server=f"location /assets/ {{ alias {self.www}/; }}",
            http="    sendfile on;\n    tcp_nopush on;\n" +
                 ("    open_file_cache max=256;\n" if self.cached else ""))
        return http.nginx_command(self.exe, workdir,
                                  http.nginx_config(port, conns, site))


class Moonflow:
    name = "moonflow"

    def __init__(self, build, www):
        self.exe = os.path.join(build, "moonflow")
        self.www = www

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else f"{self.exe} not built"

    def command(self, port, size, conns, workdir):
        root = tempfile.mkdtemp(prefix="site-", dir=workdir)
        conf = os.path.join(root, "conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = ".", static = { ["/assets"] = %r } }'
                    % self.www)
        return [self.exe, "serve", "--config", conf, "--listen",
                f"{http.HOST}:{port}", "--workers", "1", "--access-log", "off"]


def measure(peer, conns, seconds, workdir, data):
    def check(port):
        http.check_answer(port, data.decode(), URL_PATH)
    with http.running(peer, FILE_SIZE, conns, workdir, check=check) as (proc, port):
        http.run_wrk(port, conns, http.WARMUP_S, URL_PATH)
        before = http.cpu_seconds(proc.pid)
        w = http.run_wrk(port, conns, seconds, URL_PATH)
        after = http.cpu_seconds(proc.pid)
    w["cpu_s"] = after - before
    w["cpu_us_per_req"] = w["cpu_s"] * 1e6 / w["requests"]
    return w


def run(args):
    with tempfile.TemporaryDirectory(prefix="bench-static-") as workdir:
        return run_in(args, workdir)


def run_in(args, workdir):
    www, data = make_site(workdir)
    peers = [Nginx(www), Nginx(www, cached=True), Moonflow(args.build, www)]
    rows, failed = [], False
    for conns in args.conns:
        samples = {p.name: [] for p in peers}
        errors = {}
        for _ in range(args.repeats):
            for peer in peers:
                why = peer.missing()
                if why or peer.name in errors:
                    errors.setdefault(peer.name, why)
                    continue
                try:
                    samples[peer.name].append(
                        measure(peer, conns, args.seconds, workdir, data))
                except http.PointFailed as e:
                    errors[peer.name] = str(e)
                    failed = True
        rows.append((conns, samples, errors))
    return rows, failed


def ratio(samples, name):
    """name ÷ nginx CPU per request, paired by repeat, median."""
    pairs = zip(samples[name], samples["nginx"])
    return statistics.median(a["cpu_us_per_req"] / b["cpu_us_per_req"]
                             for a, b in pairs)


def table(rows, args):
    cpu = platform.processor() or platform.machine()
    lines = [
        f"## Static file (16 KiB): server CPU per request "
        f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
        f"{os.cpu_count()} cores ({cpu}), Linux {platform.release()}. "
        f"Server on core 0, wrk -t1 on core 1 (taskset); {args.seconds} s per "
        f"run after a {http.WARMUP_S} s warm-up, median of {args.repeats} "
        f"interleaved runs. The same file from nginx (`alias`, `sendfile on`, "
        f"one process; nginx-ofc adds `open_file_cache max=256`) and from "
        f"`moonflow serve` (a `static` mount, one worker, which keeps up to "
        f"256 open files per mount). The machine is shared: req/s and "
        f"latencies move with the other load on it, CPU per request much "
        f"less. Method: bench/static/compare.py.", "",
        "| conns | server | CPU µs/req | spread | ÷ nginx | req/s | p50 ms | p99 ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for conns, samples, errors in rows:
        for name in ("nginx", "nginx-ofc", "moonflow"):
            s = samples[name]
            if not s or name in errors and errors[name]:
                lines.append(f"| {conns} | {name} | – | – | – | – | – | – "
                             f"({errors.get(name, 'no sample')}) |")
                continue
            cpu_us = statistics.median(x["cpu_us_per_req"] for x in s)
            rel = (ratio(samples, name) if samples["nginx"] and
                   len(samples["nginx"]) == len(s) else float("nan"))
            rps = statistics.median(x["rps"] for x in s)
            p50 = statistics.median(x["p50_us"] for x in s) / 1000
            p99 = statistics.median(x["p99_us"] for x in s) / 1000
            lines.append(f"| {conns} | {name} | {cpu_us:.2f} | "
                         f"{http.spread(x['cpu_us_per_req'] for x in s):.0%} | "
                         f"{rel:.2f} | {rps:,.0f} | {p50:.2f} | {p99:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conns", type=lambda s: [int(x) for x in s.split(",")],
                    default=[64, 256])
    args = ap.parse_args()
    rows, failed = run(args)
    text = table(rows, args)
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "static.md"), "w") as f:
        f.write(text)
    with open(os.path.join(RESULTS, "static.json"), "w") as f:
        json.dump([{"conns": c, "samples": s, "errors": e}
                   for c, s, e in rows], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
