#!/usr/bin/env python3
"""bench/redis/compare_cluster.py — HTTP → Redis GET → HTTP, one node and a
Redis Cluster side by side.

GET /redis_get on `moonflow serve bench/lua` (redis_get.lua:
mf.redis(url):call("GET", "k"), resp:send), 1 worker pinned to core 0 with
the redis-servers; wrk -t1 on core 1. Two peers, interleaved:

  moonflow-lua           MF_BENCH_REDIS = redis://  one redis-server
  moonflow-lua-cluster   MF_BENCH_REDIS = redis-cluster://  three masters
                         and three replicas (redis-cli --cluster create),
                         every node on core 0; the handler does not change

Per request: the moonflow server's CPU and the CPU of the redis-server that
served the GETs (the single server, or the master of k's slot), as
bench/redis/compare_redis.py measures them (utime + stime from
/proc/PID/stat ÷ requests; every request must have made one GET that hit).
The ratio cluster ÷ single of the server's CPU is the cluster client's cost
(target ≤ 1.15). Writes bench/results/redis_cluster.md and .json; exits 1
if any point failed.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "http"))
sys.path.insert(0, HERE)
import compare as C  # noqa: E402
import compare_redis as R  # noqa: E402

NODES = 6


class ClusterNode(R.RedisServer):
    """A redis-server with --cluster-enabled yes (its own directory and
    nodes.conf), holding nothing until the cluster is made."""

    def __enter__(self):
        self.port = cluster_port()
        log_path = os.path.join(self.dir, "redis.log")
        argv = ["taskset", "-c", str(self.cpu), self.exe,
                "--bind", C.HOST, "--port", str(self.port),
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                "--daemonize", "no", "--loglevel", "warning", "--logfile", ""]
        with open(log_path, "wb") as log:
            self.proc = C.spawn(argv, log)
        C.wait_for_port(self.proc, self.port, log_path)
        self.pid = self.proc.pid
        return self


def cluster_port():
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(50):
        port = C.free_port()
        if port < 55000:
            try:
                with C.socket.socket() as s:
                    s.bind((C.HOST, port + 10000))
                return port
            except OSError:
                continue
    raise C.PointFailed("no free port pair for a cluster node")


class Cluster:
    """Three masters and three replicas; k holds the 16-byte value. For
    measure_http it looks like one server: the master that owns k (its
    stats and PID) and alive while every node is."""

    def __init__(self, workdir):
        self.nodes = [ClusterNode(workdir) for _ in range(NODES)]

    def __enter__(self):
        for n in self.nodes:
            n.__enter__()
        addrs = [f"{C.HOST}:{n.port}" for n in self.nodes]
        subprocess.run(["redis-cli", "--cluster", "create", *addrs,
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        deadline = time.time() + 30
        while not self.ok():
            if time.time() > deadline:
                raise C.PointFailed("the cluster never became ok")
            time.sleep(0.1)
        self.owner = self.owner_of(R.HTTP_KEY)
        if self.owner.command("SET", R.HTTP_KEY, R.VALUE) != "OK":
            raise C.PointFailed("redis: SET failed")
        self.pid = self.owner.pid
        self.url = f"redis-cluster://{addrs[0]},{addrs[1]}"
        return self

    def __exit__(self, *exc):
        for n in self.nodes:
            n.__exit__(*exc)

    def ok(self):
        for n in self.nodes:
            info = n.command("CLUSTER", "INFO").decode()
            if "cluster_state:ok" not in info:
                return False
        out = subprocess.run(["redis-cli", "--cluster", "check",
                              f"{C.HOST}:{self.nodes[0].port}"],
                             capture_output=True, text=True, timeout=30)
        return "All nodes agree" in out.stdout

    def owner_of(self, key):
        slot = self.nodes[0].command("CLUSTER", "KEYSLOT", key)
        for n in self.nodes:
            for line in n.command("CLUSTER", "NODES").decode().splitlines():
                f = line.split()
                if "myself" not in f[2] or "master" not in f[2]:
                    continue
                for r in f[8:]:
                    lo, _, hi = r.partition("-")
                    if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                        return n
        raise C.PointFailed(f"no master owns slot {slot}")

    def stats(self):
        return self.owner.stats()

    def alive(self):
        return all(n.alive() for n in self.nodes)


class MoonflowCluster(R.MoonflowRedis):
    name = "moonflow-lua-cluster"
    _missing = {}


def markdown(meta, points):
    out = [f"## Redis Cluster: HTTP → GET → HTTP, CPU per request "
           f"({meta['date']})", "",
           f"{meta['machine']}. GET {R.PATH}: the handler GETs a 16-byte "
           f"value and answers it; the same handler on one redis-server and "
           f"on a 3-master, 3-replica cluster (redis-cluster:// URL). "
           f"moonflow serve (1 worker) and every redis-server on core "
           f"{C.SERVER_CPU}, wrk -t1 on core {C.CLIENT_CPU}; "
           f"{meta['duration_s']} s per run, median of {meta['repeats']} "
           f"interleaved runs. {meta['versions']}.", "",
           "| conns | server | server CPU µs/req | redis CPU µs/req | spread "
           "| server ÷ single | req/s | p50 ms | p99 ms | redis reads/GET |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |"]
    for pt in points:
        for name, row in pt["servers"].items():
            head = f"| {pt['conns']} | {name} |"
            if "median" not in row:
                out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 7)
                continue
            m = row["median"]
            out.append(
                head + f" {m['cpu_us_per_req']:.2f} | "
                f"{m['redis_cpu_us_per_req']:.2f} | {m['spread']:.0%} | "
                f"{R.fmt(row['server_ratio'])} | {m['rps']:,.0f} | "
                f"{m['p50_us'] / 1000:.2f} | {m['p99_us'] / 1000:.2f} | "
                f"{m['redis_reads_per_get']:.2f} |")
    out += ["", "server CPU: moonflow's utime + stime over the wrk run ÷ "
            "requests; redis CPU: the redis-server that served the GETs (the "
            "master of k's slot in the cluster). ÷ single: median of the "
            "per-repeat ratios to moonflow-lua on one redis-server. spread: "
            "(max − min) / median of server µs/req. Target: cluster ÷ single "
            "≤ 1.15."]
    return "\n".join(out) + "\n"


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--duration", type=int, default=3, help="seconds per wrk run (3)")
    add("--repeats", type=int, default=3, help="interleaved runs per peer (3)")
    add("--conns", type=C.int_list, default=[64, 256],
        help="connection counts (64,256)")
    add("--build", default="build-release", help="CMake build dir (build-release)")
    add("--out", default=C.RESULTS, help="results dir (bench/results)")
    add("--quick", action="store_true", help="1 s runs, 1 repeat, 64 conns")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.repeats, args.conns = 1, 1, [64]
    return args


def main(argv):
    args = parse_args(argv)
    if not shutil.which("redis-cli"):
        sys.exit("compare_cluster.py: redis-cli not found")
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    names = [R.MoonflowRedis.name, MoonflowCluster.name]
    meta = C.machine_meta(argparse.Namespace(
        servers=names, sizes=[len(R.VALUE)], conns=args.conns,
        duration=args.duration, repeats=args.repeats, strace=False))
    meta["versions"] += ", redis-server " + C.tool_version(
        ["redis-server", "--version"], r"v=(\S+)")
    build = os.path.abspath(args.build)
    points = []
    with tempfile.TemporaryDirectory(prefix="mf-bench-rcluster-") as workdir:
        with R.RedisServer(workdir) as single, Cluster(workdir) as cluster:
            peers = [R.MoonflowRedis(build), MoonflowCluster(build)]
            peers[0].redis_url, peers[1].redis_url = single.url, cluster.url
            backend = {peers[0].name: single, peers[1].name: cluster}
            for conns in args.conns:
                rows = C.interleave(
                    peers, args.repeats,
                    lambda p: R.measure_http(p, backend[p.name], conns,
                                             args.duration, workdir),
                    f"http, {conns} conns",
                    lambda s: (f"server {s['cpu_us_per_req']:.2f} + redis "
                               f"{s['redis_cpu_us_per_req']:.2f} µs/req, "
                               f"{s['rps']:,.0f} req/s"))
                keys = ("cpu_us_per_req", "redis_cpu_us_per_req", "rps",
                        "p50_us", "p99_us", "redis_reads_per_get")
                for row in rows.values():
                    R.summarize(row, keys, "cpu_us_per_req")
                base = rows.get(peers[0].name, {})
                for row in rows.values():
                    row["server_ratio"] = R.paired_ratio(row, base,
                                                         "cpu_us_per_req")
                    for s in row["samples"]:
                        s.pop("redis", None)
                points.append({"conns": conns, "servers": rows})
    table = markdown(meta, points)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    C.write_atomically(os.path.join(args.out, "redis_cluster.md"), table)
    C.write_atomically(os.path.join(args.out, "redis_cluster.json"), json.dumps(
        {"meta": meta, "points": points}, indent=1) + "\n")
    rows = [r for pt in points for r in pt["servers"].values()]
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("compare_cluster.py: interrupted; no results written")
