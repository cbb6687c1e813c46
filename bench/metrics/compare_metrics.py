#!/usr/bin/env python3
"""bench/metrics/compare_metrics.py — what /metrics costs a request: the
Lua hello of bench/lua (index.lua, 16 bytes) served by `moonflow serve`
with metrics off and with `metrics = { path = "/metrics" }` (every request
counted by route, method and status, timed into a histogram, its body
bytes added up), beside the epoll ceiling (bench/http's C server that
answers from a static buffer). Server on core 0, wrk -t1 on core 1,
interleaved runs, server CPU per request from /proc (bench/http/compare.py's
harness). The target: metrics on within 3 % of off.

  python3 bench/metrics/compare_metrics.py --build build-release [--repeats 5]

Writes bench/results/metrics.md and metrics.json.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "http"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)


class MetricsOff(C.MoonflowLua):
    name = "metrics-off"


class MetricsOn(C.MoonflowLua):
    """The same server and site, with the page configured."""
    name = "metrics-on"

    def command(self, port, size, conns, workdir):
        conf = os.path.join(workdir, "metrics_conf.lua")
        with open(conf, "w") as f:
            f.write('return { root = %r, access_log = "off", '
                    'metrics = { path = "/metrics" } }\n' % self.site)
        return ["env"] + self.env(size) + [
            self.exe, "serve", "--config", conf, "--listen",
            f"{C.HOST}:{port}", "--workers", "1"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5, help="seconds per run")
    ap.add_argument("--conns", type=int, nargs="+", default=[50, 256])
    args = ap.parse_args()
    peers = [MetricsOff(args.build), MetricsOn(args.build), C.Ceiling(args.build)]
    points = []
    with tempfile.TemporaryDirectory(prefix="mf-bench-metrics-") as workdir:
        for conns in args.conns:
            rows = C.interleave(
                peers, args.repeats,
                lambda p: C.measure(p, 16, conns, args.duration, workdir),
                f"{conns} conns",
                lambda s: f"{s['cpu_us_per_req']:.2f} µs/req, {s['rps']:,.0f} req/s")
            C.summarize(rows)
            for row in rows.values():
                row["ratio_vs_off"] = C.paired_ratio(row, rows["metrics-off"])
            points.append({"conns": conns, "servers": rows})
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load "
                       f"{os.getloadavg()[0]:.2f} at the end",
            "repeats": args.repeats, "duration_s": args.duration}
    out = [f"## Metrics on and off: Lua hello, server CPU per request "
           f"({meta['date']})", "",
           f"{meta['machine']}. Server on core {C.SERVER_CPU}, wrk -t1 on core "
           f"{C.CLIENT_CPU}; {args.duration} s per run, median of "
           f"{args.repeats} interleaved runs; ratios paired by run.", "",
           "| conns | server | CPU µs/req | spread | ÷ metrics-off | ÷ ceiling | req/s |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for pt in points:
        for name, row in pt["servers"].items():
            if "median" not in row:
                out.append(f"| {pt['conns']} | {name} | {row['status']} | | | | |")
                continue
            m = row["median"]
            r = lambda v: f"{v:.3f}" if v is not None else "n/a"
            out.append(f"| {pt['conns']} | {name} | {m['cpu_us_per_req']:.2f} | "
                       f"{m['cpu_spread']:.0%} | {r(row['ratio_vs_off'])} | "
                       f"{r(row['ratio_vs_ceiling'])} | {m['rps']:,.0f} |")
    text = "\n".join(out) + "\n"
    results = os.path.join(BENCH, "results")
    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "metrics.md"), "w") as f:
        f.write(text)
    with open(os.path.join(results, "metrics.json"), "w") as f:
        json.dump({"meta": meta, "points": points}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
