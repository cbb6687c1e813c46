#!/usr/bin/env python3
"""bench/http/fixedrate.py — latency at a fixed request rate, side by side.

wrk measures latency at saturation, where it mostly follows connections /
req/s. A service runs below saturation; there what matters is how long each
request waits. Every server here gets the same fixed schedule, half of
nginx's best req/s from the same `make bench` run (compare.py's
http_hello.json), from bench_rate (bench/http/rate.c): constant rate, latency
counted from when each request was due, so a stall is charged to every
request it delayed (no coordinated omission).

Server pinned to core 0, bench_rate to core 1, servers interleaved over the
repeats, medians per percentile. Also the server's CPU per request at that
rate (below saturation a server batches less: this is the cost a lightly
loaded service pays). Writes http_latency.md/json and the latency-by-
percentile plot http_latency.svg to bench/results/. Exits 1 if a point
failed (errors, unanswered requests, a wrong answer).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

import compare as C
from cdf_svg import write_svg

SUMMARY_KEYS = ("p50_us", "p90_us", "p99_us", "p99.9_us", "p99.99_us", "max_us")


def nginx_best_rps(results_dir, size):
    """(req/s, note): the best median req/s of nginx at this body size in
    compare.py's results, or (None, why)."""
    path = os.path.join(results_dir, "http_hello.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"cannot read {path}: {e}"
    best = [(pt["servers"]["nginx"]["median"]["rps"], pt["conns"])
            for pt in data["points"] if pt["body_size"] == size
            and "median" in pt["servers"].get("nginx", {})]
    if not best:
        return None, f"no nginx point for {size} B in {path}"
    rps, conns = max(best)
    return rps, (f"half of nginx's best {rps:,.0f} req/s ({size} B, {conns} "
                 f"conns, http_hello.json of {data['meta']['date']})")


def run_rate(exe, port, args):
    argv = ["taskset", "-c", str(C.CLIENT_CPU), exe, "--connect",
            f"{C.HOST}:{port}", "--rate", str(args.rate), "--conns",
            str(args.conns), "--duration", str(args.duration), "--warmup",
            str(args.warmup)]
    limit = args.duration + args.warmup + 30
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=limit,
                             stdin=subprocess.DEVNULL,
                             preexec_fn=C._die_with_parent)
    except subprocess.TimeoutExpired:
        raise C.PointFailed(f"bench_rate still running {limit} s after start") from None
    if out.returncode != 0 and "rate-summary" not in out.stdout:
        raise C.PointFailed(f"bench_rate exited with {out.returncode}: "
                            f"{out.stderr.strip()[-300:]}")
    return parse_rate(out.stdout)  # fails on unanswered requests


def parse_rate(text):
    summary = re.search(r"^rate-summary (.*)$", text, re.M)
    cdf = re.search(r"^rate-cdf (.*)$", text, re.M)
    if not summary or not cdf:
        raise C.PointFailed(f"no summary from bench_rate:\n{text}")
    r = {k: float(v) for k, v in (kv.split("=") for kv in summary.group(1).split())}
    r["cdf"] = [[float(p), float(us)] for p, us in
                (kv.split("=") for kv in cdf.group(1).split())]
    if r["kept"] != r["scheduled"]:
        raise C.PointFailed(f"{r['unanswered']:.0f} requests (of "
                            f"{r['scheduled']:.0f} kept, plus warm-up) still "
                            "unanswered 2 s after the schedule ended "
                            f"(p50 so far {r['p50_us'] / 1000:.0f} ms): the "
                            "server, or this machine, did not keep up")
    return r


def measure(peer, exe, args, workdir):
    with C.running(peer, args.size, args.conns, workdir) as (proc, port):
        before = C.cpu_seconds(proc.pid)
        r = run_rate(exe, port, args)
        after = C.cpu_seconds(proc.pid)
    # Warm-up included on both sides: the CPU covers every request sent.
    r["cpu_us_per_req"] = (after - before) * 1e6 / r["done"]
    r["late_share"] = r["late_sends"] / r["kept"]
    return r


def run_all(peers, exe, args, workdir):
    rows = C.interleave(
        peers, args.repeats, lambda peer: measure(peer, exe, args, workdir),
        f"{args.rate:,.0f} req/s",
        lambda s: f"p50 {s['p50_us']:.0f} µs, p99 {s['p99_us']:.0f} µs, "
                  f"p99.9 {s['p99.9_us']:.0f} µs")
    for row in rows.values():
        if row["samples"]:
            row["median"] = median_of(row["samples"])
    return rows


def median_of(samples):
    """Median per percentile over the repeats (also for the plotted curve)."""
    m = {k: statistics.median(s[k] for s in samples)
         for k in SUMMARY_KEYS + ("cpu_us_per_req", "late_share")}
    m["cdf"] = [[pts[0][0], statistics.median(p[1] for p in pts)]
                for pts in zip(*(s["cdf"] for s in samples))]
    return m


def markdown(meta, rows):
    out = [f"## HTTP latency at a fixed rate ({meta['date']})", "",
           f"{meta['machine']}. {meta['rate']:,.0f} req/s = {meta['rate_source']}; "
           f"{meta['size']} B body, {meta['conns']} connections, "
           f"{meta['duration_s']} s after {meta['warmup_s']} s of warm-up, median "
           f"of {meta['repeats']} interleaved runs. Server on core "
           f"{C.SERVER_CPU}, bench_rate on core {C.CLIENT_CPU}; latency from "
           "the time each request was due (no coordinated omission). Plot: "
           "http_latency.svg.", "",
           "| server | p50 ms | p90 ms | p99 ms | p99.9 ms | p99.99 ms | max ms "
           "| CPU µs/req | client late |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in rows.items():
        if "median" not in row:
            out.append(f"| {name} | {row['status'].splitlines()[0]} |" + " |" * 7)
            continue
        m = row["median"]
        lat = " | ".join(f"{m[k] / 1000:.3f}" for k in SUMMARY_KEYS)
        out.append(f"| {name} | {lat} | {m['cpu_us_per_req']:.2f} | "
                   f"{m['late_share']:.2%} |")
    out += ["", "client late: share of requests that left more than 1 ms after "
            "they were due although their connection was free — bench_rate's "
            "own lag (descheduled by a neighbour, or out of CPU). Above a "
            "fraction of a percent, the row measures the client and the "
            "machine, not the server: run again on a quiet machine."]
    return "\n".join(out) + "\n"


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--rate", type=float, help="req/s (half of nginx's best in http_hello.json)")
    add("--size", type=int, default=16, help="body bytes (16)")
    add("--conns", type=int, default=256, help="connections (256)")
    add("--duration", type=float, default=5, help="measured seconds (5)")
    add("--warmup", type=float, default=1, help="seconds not kept (1)")
    add("--repeats", type=int, default=2, help="interleaved runs per server (2)")
    add("--servers", default=",".join(C.PEERS), help="which, in which order")
    add("--build", default="build-release", help="CMake build dir")
    add("--out", default=C.RESULTS, help="results dir (bench/results)")
    args = ap.parse_args(argv)
    args.servers = args.servers.split(",")
    if any(s not in C.PEERS for s in args.servers):
        ap.error(f"servers: pick from {','.join(C.PEERS)}")
    return args


def main(argv):
    args = parse_args(argv)
    exe = os.path.join(args.build, "bench", "bench_rate")
    if not os.access(exe, os.X_OK):
        sys.exit(f"fixedrate.py: {exe} not built")
    if args.rate:
        source = "given (--rate)"
    else:
        args.rate, source = nginx_best_rps(args.out, args.size)
        if args.rate is None:
            sys.exit(f"fixedrate.py: {source}; run compare.py first or pass --rate")
        args.rate = round(args.rate / 2)
    C.check_machine(argparse.Namespace(strace=False, conns=[args.conns]))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    peers = [C.PEERS[n](os.path.abspath(args.build)) for n in args.servers]
    meta = dict(C.machine_meta(argparse.Namespace(
        servers=args.servers, sizes=[args.size], conns=[args.conns],
        duration=args.duration, repeats=args.repeats, strace=False)),
        rate=args.rate, rate_source=source, size=args.size, conns=args.conns,
        warmup_s=args.warmup)
    with tempfile.TemporaryDirectory(prefix="mf-bench-rate-") as workdir:
        rows = run_all(peers, exe, args, workdir)
    write_results(args.out, meta, rows)
    return 1 if any(r["status"].startswith("FAILED") for r in rows.values()) else 0


def write_results(out_dir, meta, rows):
    table = markdown(meta, rows)
    print(table)
    os.makedirs(out_dir, exist_ok=True)
    C.write_atomically(os.path.join(out_dir, "http_latency.md"), table)
    C.write_atomically(os.path.join(out_dir, "http_latency.json"),
                       json.dumps({"meta": meta, "servers": rows}, indent=1) + "\n")
    write_svg(os.path.join(out_dir, "http_latency.svg"),
              f"Latency by percentile at {meta['rate']:,.0f} req/s "
              f"({meta['size']} B, {meta['conns']} conns)",
              {n: r["median"]["cdf"] for n, r in rows.items() if "median" in r},
              note=f"{meta['date']}; median of {meta['repeats']} runs per "
                   "server; from the scheduled send time")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("fixedrate.py: interrupted; no results written")
