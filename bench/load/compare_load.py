#!/usr/bin/env python3
"""bench/load/compare_load.py — `moonflow bench` beside wrk as load
generators: requests per CPU-second of the generator, and system calls per
request.

The server is bench_ceiling (bench/http/ceiling.c: the least work an HTTP
keep-alive server can do per request) pinned to core 0, so that the
generator on core 1 is the bottleneck. Each generator runs -t1 -c CONNS -d
DURATION against it:
    wrk       wrk -t1 -cCONNS -dDURATIONs URL
    moonflow  moonflow bench -t1 -cCONNS -dDURATIONs URL
Per run: requests completed (each generator's own count, from its output),
the generator's CPU (utime + stime of the waited child: every thread),
requests per CPU-second; median of REPEATS interleaved runs, and the
per-repeat ratio moonflow ÷ wrk. Then one run of each under `perf stat`
counting system calls (raw_syscalls:sys_enter and the calls that carry
requests), per request.

    python3 bench/load/compare_load.py [--build build-release] [--conns 64,256]
        [--duration 5] [--repeats 3] [--out bench/results]

Writes OUT/load.md and OUT/load.json. Target (the acceptance): moonflow ≥
1.25× wrk's requests per CPU-second.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(BENCH, "http"))
import compare as C  # noqa: E402  (processes, CPU, tables)

SYSCALLS = ("read", "write", "recvfrom", "sendto", "readv", "writev",
            "epoll_wait", "epoll_ctl", "connect", "close")


class Wrk:
    name = "wrk"

    def __init__(self, build):
        self.exe = "wrk"

    def missing(self):
        return None if shutil.which(self.exe) else "wrk not found"

    def command(self, url, conns, seconds):
        return [self.exe, "-t1", f"-c{conns}", f"-d{seconds}s", url]


class Moonflow:
    name = "moonflow"

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def command(self, url, conns, seconds):
        return [self.exe, "bench", "-t1", f"-c{conns}", f"-d{seconds}s",
                "--no-progress", url]


def requests_of(out):
    """Both print wrk's "N requests in Xs, Y read" line."""
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(m?s)", out, re.M)
    if not m:
        raise C.PointFailed(f"no request count in:\n{out}")
    return int(m.group(1))


def errors_of(out):
    m = re.search(r"Socket errors: (.*)$", out, re.M)
    return m.group(1).strip() if m else ""


def run_generator(gen, url, conns, seconds, prefix=()):
    argv = [*prefix, "taskset", "-c", str(C.CLIENT_CPU),
            *gen.command(url, conns, seconds)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise C.PointFailed(f"{gen.name} still running {seconds + 60} s after start")
    return proc.returncode, out, err


def measure(gen, port, conns, seconds):
    url = f"http://{C.HOST}:{port}/"
    argv = ["taskset", "-c", str(C.CLIENT_CPU), *gen.command(url, conns, seconds)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise C.PointFailed(f"{gen.name} exited with {proc.returncode}: {err.strip()}")
    n = requests_of(out)
    if errors_of(out):
        raise C.PointFailed(f"{gen.name}: socket errors: {errors_of(out)}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"requests": n, "cpu_s": cpu, "req_per_cpu_s": n / cpu,
            "rps": n / seconds}


def count_syscalls(gen, port, conns, seconds):
    url = f"http://{C.HOST}:{port}/"
    events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{s}" for s in SYSCALLS]
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as f:
        rc, out, err = run_generator(
            gen, url, conns, seconds,
            prefix=("perf", "stat", "-x", ",", "-o", f.name, "-e", ",".join(events)))
        if rc != 0:
            raise C.PointFailed(f"{gen.name} under perf exited with {rc}: {err.strip()}")
        counts = {}
        for line in f.read().splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
    n = requests_of(out)
    total = counts.pop("sys_enter", None)
    if total is None:
        raise C.Unavailable("perf stat counted no system calls")
    return {"per_request": total / n,
            "by_name": {k: v / n for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}}


def run_point(gens, conns, args, workdir):
    ceiling = C.Ceiling(args.build)
    with C.running(ceiling, 0, conns, workdir) as (proc, port):
        rows = C.interleave(gens, args.repeats,
                            lambda g: measure(g, port, conns, args.duration),
                            f"{conns} connections",
                            lambda s: f"{s['rps']:,.0f} req/s, "
                                      f"{s['req_per_cpu_s']:,.0f} req per CPU-s")
        for g in gens:
            row = rows[g.name]
            if row["status"] == "ok" and row["samples"]:
                row["req_per_cpu_s"] = statistics.median(
                    s["req_per_cpu_s"] for s in row["samples"])
                row["rps"] = statistics.median(s["rps"] for s in row["samples"])
                row["spread"] = C.spread(s["req_per_cpu_s"] for s in row["samples"])
                try:
                    row["syscalls"] = count_syscalls(g, port, conns, args.syscall_duration)
                except (C.PointFailed, C.Unavailable) as e:
                    row["syscalls"] = {"error": str(e)}
        base = rows["wrk"]
        for g in gens:
            row = rows[g.name]
            if row["status"] == "ok" and base["status"] == "ok":
                row["ratio"] = statistics.median(
                    a["req_per_cpu_s"] / b["req_per_cpu_s"]
                    for a, b in zip(row["samples"], base["samples"]))
    return {"conns": conns, "generators": rows}


def markdown(meta, points):
    out = [f"## Load generators: requests per CPU-second ({meta['date']})", "",
           f"{meta['machine']}. bench_ceiling on core {C.SERVER_CPU}, the generator "
           f"(-t1) on core {C.CLIENT_CPU}; {meta['duration_s']} s per run, median of "
           f"{meta['repeats']} interleaved runs; {meta['versions']}.", "",
           "| conns | generator | req/s | req per CPU-s | spread | ÷ wrk | syscalls/req | by call |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for pt in points:
        for name, row in pt["generators"].items():
            if row["status"] != "ok":
                out.append(f"| {pt['conns']} | {name} | {row['status']} | | | | | |")
                continue
            sc = row.get("syscalls", {})
            per = f"{sc['per_request']:.2f}" if "per_request" in sc else sc.get("error", "")
            by = ", ".join(f"{k} {v:.2f}" for k, v in sc.get("by_name", {}).items() if v >= 0.01)
            out.append(f"| {pt['conns']} | {name} | {row['rps']:,.0f} | "
                       f"{row['req_per_cpu_s']:,.0f} | {row['spread']:.0%} | "
                       f"{row.get('ratio', float('nan')):.2f} | {per} | {by} |")
    out += ["", "wrk: `wrk -t1 -cCONNS -dDs URL`; moonflow: `moonflow bench -t1 -cCONNS "
            "-dDs --no-progress URL`. req per CPU-s: the generator's requests (its own "
            "count) ÷ its utime + stime (every thread, from wait4). ÷ wrk: median of the "
            "per-repeat ratios. syscalls/req: `perf stat -e raw_syscalls:sys_enter` over "
            f"one {meta['syscall_duration_s']} s run ÷ its requests. Target: moonflow ≥ "
            "1.25× wrk's requests per CPU-second.", ""]
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-release"))
    ap.add_argument("--conns", type=C.int_list, default=[64, 256])
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--syscall-duration", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--generators", default="wrk,moonflow")
    ap.add_argument("--out", default=C.RESULTS)
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    args.build = os.path.abspath(args.build)
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns))
    kinds = {"wrk": Wrk, "moonflow": Moonflow}
    gens = [kinds[n](args.build) for n in args.generators.split(",")]
    meta = C.machine_meta(argparse.Namespace(
        servers=["ceiling"], sizes=[0], conns=args.conns, duration=args.duration,
        repeats=args.repeats, strace=False))
    meta["syscall_duration_s"] = args.syscall_duration
    with tempfile.TemporaryDirectory(prefix="mf-bench-load-") as workdir:
        points = [run_point(gens, conns, args, workdir) for conns in args.conns]
    rows = [r for pt in points for r in pt["generators"].values()]
    return C.write_tables(args.out, "load", markdown(meta, points),
                          {"meta": meta, "points": points}, rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
