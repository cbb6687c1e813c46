#!/usr/bin/env python3
"""bench/load/compare_engine.py — the load engine beside wrk: requests per
CPU-second of the generator, against bench_ceiling.

bench_ceiling (the least work an HTTP server can do per request) runs pinned
to core 0; each generator in turn, pinned to core 1, loads it with one
thread and the same connections for the same time: bench_load_driver (the
engine of `moonflow bench` alone, bench/load/load_driver.c) and wrk. The
generator's CPU (user + system, from the children's rusage) is read around
each run. Runs alternate (ours, wrk, ours, wrk ...) and the medians of the
repeats are compared, so the drift of a shared machine hits both alike.

Usage: compare_engine.py BUILD_DIR [--connections 64] [--seconds 3]
       [--repeats 5]
Prints a Markdown table; exits 1 if a run failed.
"""

import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    """(stdout, CPU seconds of the command)."""
    before = child_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return out.stdout, child_cpu() - before


def run_ours(build, port, conns, secs):
    out, cpu = timed(["taskset", "-c", "1", f"{build}/bench/bench_load_driver",
                      f"127.0.0.1:{port}", str(conns), str(secs)])
    return int(re.search(r"requests (\d+)", out).group(1)), cpu


def run_wrk(port, conns, secs):
    out, cpu = timed(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}",
                      f"-d{secs}s", f"http://127.0.0.1:{port}/"])
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("wrk saw errors:\n" + out)
    return int(re.search(r"(\d+) requests in", out).group(1)), cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    port = free_port()
    server = subprocess.Popen(
        ["taskset", "-c", "0", f"{a.build}/bench/bench_ceiling", "--listen",
         f"127.0.0.1:{port}", "--body-size", "16"],
        stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        ours, wrk = [], []
        for _ in range(a.repeats):
            n, cpu = run_ours(a.build, port, a.connections, a.seconds)
            ours.append(n / cpu)
            n, cpu = run_wrk(port, a.connections, a.seconds)
            wrk.append(n / cpu)
    except (subprocess.CalledProcessError, RuntimeError) as e:
        print(f"compare_engine: {e}", file=sys.stderr)
        return 1
    finally:
        server.terminate()
        server.wait()
    mo, mw = statistics.median(ours), statistics.median(wrk)
    print(f"| generator (1 thread, {a.connections} connections) "
          "| requests per CPU-second (median) | runs |")
    print("| --- | ---: | --- |")
    print(f"| load engine | {mo:,.0f} | {', '.join(f'{x:,.0f}' for x in ours)} |")
    print(f"| wrk 4.1 | {mw:,.0f} | {', '.join(f'{x:,.0f}' for x in wrk)} |")
    print(f"\nratio {mo / mw:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
