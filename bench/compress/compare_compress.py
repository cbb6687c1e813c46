#!/usr/bin/env python3
"""Response compression: CPU per KiB compressed, the encoders alone and a
server end to end, side by side with nginx's gzip module.

1. The encoders alone (bench_compress_cpu): the server's gzip (levels 1
   and 6) and br (quality 4) encoders over a text page (lua/README.md:
   ~146 KiB of Markdown), whole (a known-length answer) and in flushed
   16 KiB pieces (a streamed one); CPU per KiB of input and the ratio.
2. End to end: one worker of `moonflow serve` answering a 64 KiB
   text/html page (the first 64 KiB of that file) from a Lua handler with
   compress = { level = L }, and nginx (one process, its gzip module,
   gzip_comp_level L) serving the same page as a static file; wrk -t1
   -c4 with Accept-Encoding: identity, gzip and br (br: moonflow only, no
   Debian nginx module) for SECONDS each. The server's CPU (utime + stime
   of /proc/PID/stat over wrk's run) per request and per KiB of the page,
   the identity run's CPU subtracted for the cost of compressing alone.

Usage: bench/compress/compare_compress.py [--build build-release]
       [--seconds 5] [--out bench/results/compress.md]
Loopback only; every run bounded in time; servers stopped by PID."""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "spec", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench", "http"))
from harness import Server, free_port  # noqa: E402
from compare import nginx_command, nginx_config, NginxSite  # noqa: E402

PAGE = os.path.join(ROOT, "lua", "README.md")
PAGE_BYTES = 64 * 1024
TICK = os.sysconf("SC_CLK_TCK")


def encoder_rows(build, seconds):
    exe = os.path.join(build, "bench", "bench_compress_cpu")
    rows = []
    for coding, level in (("gzip", 1), ("gzip", 6), ("br", 4)):
        for piece in (0, 16384):
            out = subprocess.run([exe, PAGE, coding, str(level), str(piece),
                                  str(seconds)], check=True,
                                 capture_output=True, text=True,
                                 timeout=seconds + 60).stdout
            rows.append(json.loads(out))
    return rows


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def wrk(port, accept, seconds):
    out = subprocess.run(["wrk", "-t1", "-c4", "-d%ds" % seconds,
                          "-H", "Accept-Encoding: " + accept,
                          "http://127.0.0.1:%d/" % port],
                         capture_output=True, text=True, timeout=seconds + 60)
    if "Socket errors" in out.stdout or "Non-2xx" in out.stdout:
        raise RuntimeError("wrk saw errors:\n" + out.stdout)
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))


def answer_size(port, accept):
    """Bytes of one answer's body as sent (compressed or not)."""
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w",
                          "%{size_download} %header{content-encoding}",
                          "-H", "Accept-Encoding: " + accept,
                          "http://127.0.0.1:%d/" % port],
                         check=True, capture_output=True, text=True,
                         timeout=30).stdout.split()
    return int(out[0]), out[1] if len(out) > 1 else "identity"


def run_server(argv, port, accepts, seconds):
    srv = Server(argv, port)
    rows = []
    try:
        for accept in accepts:
            size, coding = answer_size(port, accept)
            wrk(port, accept, 1)  # warm-up
            before = cpu_ticks(srv.proc.pid)
            requests = wrk(port, accept, seconds)
            cpu = (cpu_ticks(srv.proc.pid) - before) / TICK
            rows.append({"accept": accept, "coding": coding, "size": size,
                         "requests": requests, "cpu_s": cpu,
                         "us_per_req": cpu * 1e6 / requests})
    finally:
        srv.stop(signal.SIGKILL)
    return rows


def moonflow_rows(build, workdir, level, seconds):
    site = os.path.join(workdir, "mf-%d" % level)
    os.makedirs(site)
    shutil.copy(os.path.join(workdir, "page.html"), site)
    with open(os.path.join(site, "index.lua"), "w") as f:
        f.write('local f = assert(io.open("%s/page.html", "rb"))\n'
                'local page = f:read("*a")\nf:close()\n'
                'return function(req, resp)\n'
                '  resp.headers["Content-Type"] = "text/html"\n'
                '  resp:send(page)\nend\n' % site)
    conf = os.path.join(site, "conf.lua")
    with open(conf, "w") as f:
        f.write('return { root = ".", access_log = "off", compress = '
                '{ level = %d, brotli_level = 4 } }\n' % level)
    port = free_port()
    argv = [os.path.join(build, "moonflow"), "serve", "--config", conf,
            "--listen", "127.0.0.1:%d" % port, "--workers", "1"]
    accepts = ["identity", "gzip"] + (["br"] if level == 6 else [])
    return run_server(argv, port, accepts, seconds)


def nginx_rows(workdir, level, seconds):
    port = free_port()
    root = os.path.join(workdir, "nginx-root")
    os.makedirs(root, exist_ok=True)
    shutil.copy(os.path.join(workdir, "page.html"),
                os.path.join(root, "index.html"))
    site = NginxSite(server="location / { root %s; gzip on; "
                     "gzip_comp_level %d; gzip_types text/html; "
                     "gzip_min_length 1024; gzip_vary on; }" % (root, level))
    argv = nginx_command(shutil.which("nginx"), workdir,
                         nginx_config(port, 4, site))
    return run_server(argv, port, ["identity", "gzip"], seconds)


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short",
                             "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    nginx = subprocess.run(["nginx", "-v"], capture_output=True,
                           text=True).stderr.strip().split("/")[-1]
    return ("%d cores (%s), Linux %s; commit %s; nginx %s; zlib and "
            "libbrotli from Debian." % (os.cpu_count(), model,
                                        platform.release(), commit, nginx))


def report(enc, e2e, seconds):
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["## Response compression: CPU per KiB (%s)" % now, "",
             machine(), "",
             "### The encoders alone (bench_compress_cpu, %s: %d bytes)"
             % (os.path.relpath(PAGE, ROOT), enc[0]["bytes_in"]), "",
             "| coding | level | pieces | CPU µs per KiB | MiB/s | ratio |",
             "| --- | ---: | --- | ---: | ---: | ---: |"]
    for r in enc:
        lines.append("| %s | %d | %s | %.2f | %.0f | %.3f |" % (
            r["coding"], r["level"],
            "whole" if not r["piece"] else "%d KiB, flushed" % (
                r["piece"] // 1024),
            r["ns_per_kib"] / 1000, 1e9 / r["ns_per_kib"] / 1024,
            r["ratio"]))
    lines += ["", "### End to end: a 64 KiB text/html page, wrk -t1 -c4, "
              "%d s a run, one server process" % seconds, "",
              "| server | level | answer | bytes sent | req/s | server CPU "
              "µs/req | µs per KiB of page | compressing: µs per KiB |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (server, level), rows in e2e:
        base = rows[0]["us_per_req"]  # the identity run
        for r in rows:
            extra = (r["us_per_req"] - base) / (PAGE_BYTES / 1024)
            lines.append("| %s | %d | %s | %d | %.0f | %.1f | %.2f | %s |" % (
                server, level, r["coding"], r["size"],
                r["requests"] / seconds, r["us_per_req"],
                r["us_per_req"] / (PAGE_BYTES / 1024),
                "–" if r["coding"] == "identity" else "%.2f" % extra))
    lines += ["", "Method: the encoder figures are CPU time "
              "(CLOCK_PROCESS_CPUTIME_ID) over repeated runs of the whole "
              "file through one warm encoder pool. End to end, the server's "
              "utime + stime over wrk's run divided by the requests wrk "
              "completed; \"compressing\" is that minus the same server's "
              "identity run, per KiB of the page. wrk shares the machine's "
              "cores with the server: compare rows of one table, not "
              "across machines.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  "compress.md"))
    args = ap.parse_args()
    enc = encoder_rows(args.build, 1)
    with tempfile.TemporaryDirectory(prefix="moonflow-compress-") as work:
        with open(PAGE, "rb") as f:
            page = f.read(PAGE_BYTES)
        with open(os.path.join(work, "page.html"), "wb") as f:
            f.write(page)
        e2e = []
        for level in (1, 6):
            e2e.append((("moonflow", level),
                        moonflow_rows(args.build, work, level, args.seconds)))
            e2e.append((("nginx", level),
                        nginx_rows(work, level, args.seconds)))
    text = report(enc, e2e, args.seconds)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
