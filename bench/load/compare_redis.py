#!/usr/bin/env python3
"""bench/load/compare_redis.py — `moonflow bench` scenario mode beside
redis-benchmark: GETs per client CPU-second.

One redis-server (bench/redis/compare_redis.py's: temporary dir, loopback
port, no persistence) pinned to core 0 holds a 3-byte value under
redis-benchmark's literal key; each client runs on core 1 (taskset):

  redis-benchmark  -t get -n N -c CONC [-P P]
  moonflow-bench   moonflow bench -t 1 -c CONC -d Ds bench/load/redis_get.lua
                   -- URL P KEY CONNS: CONC virtual users, each iteration one
                   GET task (P 1) or one task of P GETs sent together (P >
                   1), on the thread's mf.redis client with 1 pipelined
                   connection (the users' GETs of one loop iteration go out
                   in one write) or CONC (about one per user)

with the same concurrency and pipelining (P 1, then P 16). Per run: GETs
served (redis-server's INFO commandstats, before and after), the client's
CPU (utime + stime of the whole waited process: getrusage of the child, the
same counters as /proc/PID/stat) and GETs per client CPU-second. Runs are
interleaved (A B A B ...); tables show medians of --repeats runs (3),
ratios paired by repeat. Writes bench/results/load_redis.md and .json;
exits 1 if a run failed. Target: moonflow-bench ≥ 1.0x redis-benchmark's
GETs per client CPU-second.
"""

import argparse
import importlib.util
import json
import os
import signal
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "http"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)

# bench/redis/compare_redis.py: the redis-server, the client runner and
# redis-benchmark's command line are shared with the raw GET comparison.
_spec = importlib.util.spec_from_file_location(
    "redis_compare", os.path.join(BENCH, "redis", "compare_redis.py"))
R = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(R)

VALUE = "abc"
SCENARIO = os.path.join(HERE, "redis_get.lua")


class MoonflowBench:
    """conns: the client's pipelined connections (1: every user's GETs share
    one connection, those of one loop iteration in one write; CONC: about
    one per user, as redis-benchmark's)."""

    def __init__(self, build, seconds, conns):
        self.exe = os.path.join(build, "moonflow")
        self.seconds = seconds
        self.conns = conns
        self.name = f"moonflow-bench, {conns} conn{'s' if conns > 1 else ''}"

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else f"{self.exe} not built"

    def command(self, redis, ops, conc, pipeline, max_s):
        return [self.exe, "bench", "-t", "1", "-c", str(conc), "-d",
                f"{self.seconds}s", "--no-progress", SCENARIO, "--",
                redis.url, str(pipeline), R.RAW_KEY, str(self.conns)]


def measure(client, redis, ops, conc, pipeline, max_s):
    s0 = redis.stats()
    _out, cpu = R.run_client(client.command(redis, ops, conc, pipeline, max_s),
                             max_s + 30)
    s1 = redis.stats()
    if not redis.alive():
        raise C.PointFailed("redis-server died")
    d = R.stats_delta(s0, s1)
    if d["misses"] or d["gets"] <= 0:
        raise C.PointFailed(f"redis served {d['gets']} GETs, "
                            f"{d['misses']} misses")
    if isinstance(client, R.RedisBenchmark) and d["gets"] != ops:
        raise C.PointFailed(f"redis-benchmark asked {ops}, redis served "
                            f"{d['gets']}")
    return {"gets": d["gets"], "client_cpu_s": cpu,
            "gets_per_cpu_s": d["gets"] / cpu,
            "redis_cpu_us_per_get": d["cpu_s"] * 1e6 / d["gets"]}


def summarize(row):
    s = row["samples"]
    if not s:
        row["median"] = None
        return
    row["median"] = {k: statistics.median(x[k] for x in s)
                     for k in ("gets", "client_cpu_s", "gets_per_cpu_s",
                               "redis_cpu_us_per_get")}


def ratio(row, base):
    pairs = list(zip(row["samples"], base.get("samples", [])))
    if not pairs:
        return None
    return statistics.median(a["gets_per_cpu_s"] / b["gets_per_cpu_s"]
                             for a, b in pairs)


def run(args, redis):
    build = os.path.abspath(args.build)
    points = []
    for pipeline in (1, args.pipeline):
        ops = args.ops * pipeline
        clients = [R.RedisBenchmark(build),
                   MoonflowBench(build, args.seconds, 1),
                   MoonflowBench(build, args.seconds, args.conc)]
        rows = C.interleave(
            clients, args.repeats,
            lambda c: measure(c, redis, ops, args.conc, pipeline,
                              args.seconds + 30),
            f"pipeline {pipeline}",
            lambda s: (f"{s['gets']:,} GETs, {s['gets_per_cpu_s']:,.0f} "
                       "GETs per client CPU-second"))
        for row in rows.values():
            summarize(row)
        base = rows[R.RedisBenchmark.name]
        for row in rows.values():
            row["ratio"] = ratio(row, base)
        points.append({"pipeline": pipeline, "conc": args.conc, "rows": rows})
    return points


def markdown(meta, points):
    lines = [f"## moonflow bench: Redis GET scenario beside redis-benchmark "
             f"({meta['date']})", "",
             f"{meta['machine']}. redis-server on core 0, the client on "
             f"core 1; GET of one {len(VALUE)}-byte value, {meta['conc']} "
             f"concurrent clients / virtual users; median of "
             f"{meta['repeats']} interleaved runs.", "",
             "| pipeline | client | GETs | client CPU s | GETs per client "
             "CPU-second | ÷ redis-benchmark | redis CPU µs/GET | status |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for pt in points:
        for name, row in pt["rows"].items():
            m = row["median"] or {}
            lines.append(
                f"| {pt['pipeline']} | {name} | {m.get('gets', 0):,.0f} | "
                f"{R.fmt(m.get('client_cpu_s'))} | "
                f"{R.fmt(m.get('gets_per_cpu_s'), ',.0f')} | "
                f"{R.fmt(row['ratio'])} | "
                f"{R.fmt(m.get('redis_cpu_us_per_get'), '.3f')} | "
                f"{row['status']} |")
    lines += ["", f"redis-benchmark: `-t get -n N -c {meta['conc']}` (and "
              f"`-P {meta['pipeline']}`), N = {meta['ops']:,} × P. "
              f"moonflow-bench: `moonflow bench -t 1 -c {meta['conc']} -d "
              f"{meta['seconds']}s bench/load/redis_get.lua -- URL P KEY "
              "CONNS` (each iteration one GET task, or one task of P GETs; "
              "the users share one mf.redis client of CONNS pipelined "
              "connections: with 1, the GETs of one loop iteration go out "
              f"in one write; with {meta['conc']}, about one connection per "
              "user as redis-benchmark's clients). GETs: "
              "served by redis-server during the run (INFO commandstats). "
              "client CPU: utime + stime of the whole client process "
              "(getrusage of the waited child), startup included. "
              "÷ redis-benchmark: median of the per-repeat ratios of GETs "
              "per client CPU-second. Target ≥ 1.0."]
    return "\n".join(lines)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--out", default=os.path.join(BENCH, "results"))
    ap.add_argument("--conc", type=int, default=50)
    ap.add_argument("--ops", type=int, default=300000,
                    help="redis-benchmark -n per pipeline step (300000)")
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=5,
                    help="moonflow bench -d (5)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="1 s runs, 1 repeat, a fifth of the GETs")
    args = ap.parse_args(argv)
    if args.quick:
        args.ops, args.seconds, args.repeats = args.ops // 5, 1, 1
    return args


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=[args.conc]))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    meta = C.machine_meta(argparse.Namespace(
        servers=[], sizes=[len(VALUE)], conns=[args.conc],
        duration=args.seconds, repeats=args.repeats, strace=False))
    meta.update(conc=args.conc, ops=args.ops, pipeline=args.pipeline,
                seconds=args.seconds)
    R.VALUE = VALUE  # the value RedisServer sets under the keys
    with tempfile.TemporaryDirectory(prefix="mf-bench-load-") as workdir:
        with R.RedisServer(workdir) as redis:
            points = run(args, redis)
    rows = [r for pt in points for r in pt["rows"].values()]
    return C.write_tables(args.out, "load_redis", [markdown(meta, points)],
                          {"meta": meta, "points": points}, rows)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("compare_redis.py: interrupted; no results written")
