#!/usr/bin/env python3
"""bench/http/fanout.py — a front server calling two backends in parallel
per request: the front's CPU per request, side by side.

Each front answers GET /fanout with two GETs, in parallel, to one shared
backend, and sends both bodies back one after the other:

  moonflow-c    examples/http_hello /fanout --upstream: a parallel of two
                http tasks in the exchange's series (pooled keep-alive
                connections)
  moonflow-lua  moonflow serve bench/lua (fanout.lua): mf.parallel of two
                mf.task.http, waited on once
  nginx-lua  content_by_lua_block with ngx.location.capture_multi over two
             internal proxy_pass locations (upstream keepalive)

The backend is plain nginx (return 200, 16 B), started once, pinned to
core 1 with wrk: the front on core 0 is then the only process there, so its
/proc CPU is its own; the backend's CPU is reported too, per front request,
as a check that both fronts ask it for the same work. Fronts alternate over
the repeats; medians. Writes http_fanout.md/json to bench/results/.
"""

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile

import compare as C

SIZE = 16  # the backend's body; a front answers twice that


class FanoutMoonflow(C.Moonflow):
    name = "moonflow-c"

    def command(self, port, size, conns, workdir):
        return super().command(port, size, conns, workdir) + [
            "--upstream", f"{C.HOST}:{self.backend_port}"]


class FanoutMoonflowLua(C.MoonflowLua):
    """bench/lua/fanout.lua: mf.parallel of two mf.task.http."""
    name = "moonflow-lua"

    def env(self, size):
        return super().env(size) + [
            f"MF_BENCH_UPSTREAM={C.HOST}:{self.backend_port}"]


class FanoutNginxLua(C.NginxLua):
    name = "nginx-lua"

    def site(self, size):
        # Content-Length as moonflow sends it; keepalive 64 idle upstream
        # connections, as moonflow's pool keeps 64 per endpoint.
        proxy = ("internal; proxy_pass http://backend/; "
                 "proxy_http_version 1.1; proxy_set_header Connection \"\";")
        lua = ('local a, b = ngx.location.capture_multi{{"/b1"}, {"/b2"}} '
               'if a.status ~= 200 or b.status ~= 200 then '
               'return ngx.exit(502) end '
               'ngx.header["Content-Length"] = #a.body + #b.body '
               'ngx.print(a.body, b.body)')
        port = getattr(self, "backend_port", 9)  # nginx -t probe: any port
        return C.NginxSite(
            main=C.LUA_MODULES,
            http=f"    upstream backend {{ server {C.HOST}:{port}; "
                 "keepalive 64; }\n",
            server=f"location = /fanout {{ content_by_lua_block {{ {lua} }} }}\n"
                   f"        location = /b1 {{ {proxy} }}\n"
                   f"        location = /b2 {{ {proxy} }}")


FRONTS = {cls.name: cls for cls in
          (FanoutMoonflow, FanoutMoonflowLua, FanoutNginxLua)}


def measure(front, backend_proc, args, workdir):
    want = C.body_of(SIZE) * 2
    with C.running(front, SIZE, args.conns, workdir, path="/fanout",
                   want=want) as (proc, port):
        C.run_wrk(port, args.conns, C.WARMUP_S, path="/fanout")
        before = C.cpu_seconds(proc.pid), C.cpu_seconds(backend_proc.pid)
        w = C.run_wrk(port, args.conns, args.duration, path="/fanout")
        after = C.cpu_seconds(proc.pid), C.cpu_seconds(backend_proc.pid)
    w["cpu_us_per_req"] = (after[0] - before[0]) * 1e6 / w["requests"]
    w["backend_cpu_us_per_req"] = (after[1] - before[1]) * 1e6 / w["requests"]
    return w


def run_all(fronts, backend_proc, args, workdir):
    rows = C.interleave(
        fronts, args.repeats,
        lambda front: measure(front, backend_proc, args, workdir), "fan-out",
        lambda s: f"{s['cpu_us_per_req']:.2f} µs/req, {s['rps']:,.0f} req/s")
    for row in rows.values():
        if row["samples"]:
            row["median"] = {k: statistics.median(s[k] for s in row["samples"])
                             for k in ("cpu_us_per_req", "backend_cpu_us_per_req",
                                       "rps", "p50_us", "p99_us")}
            cpu = [s["cpu_us_per_req"] for s in row["samples"]]
            row["median"]["cpu_spread"] = (max(cpu) - min(cpu)) / statistics.median(cpu)
    base = rows.get("nginx-lua", {})
    for row in rows.values():
        row["ratio_vs_nginx_lua"] = paired_ratio(row, base)
    return rows


def paired_ratio(row, base):
    if "median" not in row or "median" not in base:
        return None
    return statistics.median(a["cpu_us_per_req"] / b["cpu_us_per_req"]
                             for a, b in zip(row["samples"], base["samples"]))


def markdown(meta, rows):
    out = [f"## HTTP fan-out: front CPU per request ({meta['date']})", "",
           f"{meta['machine']}. GET /fanout: the front makes 2 parallel GETs "
           f"to one backend (nginx, return 200, {SIZE} B, on core "
           f"{C.CLIENT_CPU} with wrk) and answers both bodies. Front on core "
           f"{C.SERVER_CPU}; wrk -t1 -c{meta['conns']}; {meta['duration_s']} s "
           f"per run, median of {meta['repeats']} interleaved runs. "
           f"{meta['versions']}.", "",
           "| front | CPU µs/req | spread | ÷ nginx-lua | backend CPU µs/req "
           "| req/s | p50 ms | p99 ms |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    out += [table_row(name, row) for name, row in rows.items()]
    out += ["", "CPU µs/req: the front's own (utime + stime) per /fanout request, "
            "which includes its two upstream exchanges. backend CPU µs/req: "
            "the backend's, per front request (two backend requests)."]
    return "\n".join(out) + "\n"


def table_row(name, row):
    if "median" not in row:
        return f"| {name} | {row['status'].splitlines()[0]} |" + " |" * 6
    m, r = row["median"], row["ratio_vs_nginx_lua"]
    return (f"| {name} | {m['cpu_us_per_req']:.2f} | {m['cpu_spread']:.0%} | "
            + (f"{r:.2f}" if r is not None else "n/a")
            + f" | {m['backend_cpu_us_per_req']:.2f} | {m['rps']:,.0f} | "
            f"{m['p50_us'] / 1000:.2f} | {m['p99_us'] / 1000:.2f} |")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--conns", type=int, default=32,
        help="front connections (32: at most 64 upstream requests in flight, "
             "within both fronts' 64 pooled connections)")
    add("--duration", type=int, default=4, help="seconds per run (4)")
    add("--repeats", type=int, default=3, help="interleaved runs per front (3)")
    add("--build", default="build-release", help="CMake build dir")
    add("--out", default=C.RESULTS, help="results dir (bench/results)")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=[args.conns]))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    build = os.path.abspath(args.build)
    fronts = [cls(build) for cls in FRONTS.values()]
    backend = C.Nginx(build)
    if backend.missing():
        sys.exit(f"fanout.py: backend nginx {backend.missing()}")
    meta = dict(C.machine_meta(argparse.Namespace(
        servers=list(FRONTS), sizes=[SIZE], conns=[args.conns],
        duration=args.duration, repeats=args.repeats, strace=False)),
        conns=args.conns)
    with tempfile.TemporaryDirectory(prefix="mf-bench-fanout-") as workdir:
        # The backend's worker_connections cover both fronts' pools.
        with C.running(backend, SIZE, 1024, workdir, cpu=C.CLIENT_CPU) as (bproc, bport):
            for f in fronts:
                f.backend_port = bport
            rows = run_all(fronts, bproc, args, workdir)
    table = markdown(meta, rows)
    print(table)
    C.write_atomically(os.path.join(args.out, "http_fanout.md"), table)
    C.write_atomically(os.path.join(args.out, "http_fanout.json"),
                       json.dumps({"meta": meta, "fronts": rows}, indent=1) + "\n")
    return 1 if any(r["status"].startswith("FAILED") for r in rows.values()) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("fanout.py: interrupted; no results written")
