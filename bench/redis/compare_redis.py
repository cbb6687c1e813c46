#!/usr/bin/env python3
"""bench/redis/compare_redis.py — the Redis client side by side.

Two parts, each against one redis-server (temporary dir, loopback port,
--save "" --appendonly no) pinned to core 0 and holding a 16-byte value:

http  GET /redis_get → one Redis GET → the value as the body. Each server
      (1 worker) is pinned to core 0 with redis-server; wrk -t1 runs on core
      1, at 64 and 256 connections. Per request: the server's CPU, the
      redis-server's CPU and their sum (utime + stime from /proc/PID/stat,
      before and after the wrk run ÷ requests completed).
        nginx-lua-resty-redis  content_by_lua_block: new, set_timeout,
                               connect, get, set_keepalive(10000, 256),
                               ngx.print (the reference)
        moonflow-lua           moonflow serve bench/lua (redis_get.lua):
                               mf.redis(url):call("GET", "k"), resp:send
      One request by hand first must get exactly the value; wrk must see no
      error and no non-2xx; redis' own GET count (INFO commandstats) must
      cover every request wrk counted, with no miss.
raw   GETs as fast as a client on core 1 can ask: `moonflow run
      bench/redis/get_load.lua` (CONC coroutines on the script's client; one
      GET per call, or r:pipeline of 16) beside `redis-benchmark -t get -n N
      -c CONC [-P 16]`. Per run: ops/s (each client's own clock), the
      client's CPU per op (the whole process: getrusage of the waited
      child), redis-server's CPU per GET (INFO cpu and commandstats, µs
      resolution).

Runs interleave (A B A B ...) over the repeats; tables show medians, ratios
are paired by repeat. Writes bench/results/redis.md and redis.json; exits 1
if any point failed.
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "http"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)

VALUE = C.body_of(16)           # "0123456789abcdef"
HTTP_KEY = "k"
# redis-benchmark -t get asks for this key, literally (no -r: no random
# part); get_load.lua asks for the same one, so both send the same bytes.
RAW_KEY = "key:__rand_int__"
PATH = "/redis_get"
GET_LOAD = os.path.join(HERE, "get_load.lua")
LUA_SITE = os.path.join(os.path.dirname(HERE), "lua")
PIPELINE = 16


# ---- redis-server -----------------------------------------------------------


def resp_command(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def resp_read(f):
    """One reply from a buffered socket file (enough of RESP2 for us)."""
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise C.PointFailed(f"redis: short reply {line!r}")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise C.PointFailed(f"redis: {rest.decode()}")
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        return [resp_read(f) for _ in range(int(rest))]
    raise C.PointFailed(f"redis: unexpected reply {line!r}")


class RedisServer:
    """A redis-server on a free loopback port, stopped by PID on the way out."""

    def __init__(self, workdir, cpu=C.SERVER_CPU):
        self.exe = shutil.which("redis-server")
        if not self.exe:
            raise SystemExit("compare_redis.py: redis-server not found "
                             "(make bench installs redis-server)")
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=workdir)
        self.cpu = cpu
        self.proc = None

    def __enter__(self):
        for attempt in range(3):
            self.port = C.free_port()
            log_path = os.path.join(self.dir, f"redis-{self.port}.log")
            argv = ["taskset", "-c", str(self.cpu), self.exe,
                    "--bind", C.HOST, "--port", str(self.port),
                    "--save", "", "--appendonly", "no", "--dir", self.dir,
                    "--daemonize", "no", "--loglevel", "warning",
                    "--logfile", ""]
            with open(log_path, "wb") as log:
                self.proc = C.spawn(argv, log)
            try:
                C.wait_for_port(self.proc, self.port, log_path)
                break
            except C.PointFailed:
                C.stop(self.proc)
                if attempt == 2:
                    raise
        self.pid = self.proc.pid
        self.url = f"redis://{C.HOST}:{self.port}/0"
        for key in (HTTP_KEY, RAW_KEY):
            if self.command("SET", key, VALUE) != "OK":
                raise C.PointFailed("redis: SET failed")
        return self

    def __exit__(self, *exc):
        C.stop(self.proc)

    def command(self, *args):
        with socket.create_connection((C.HOST, self.port), timeout=5) as s:
            s.sendall(resp_command(*args))
            return resp_read(s.makefile("rb"))

    def alive(self):
        return self.proc.poll() is None

    def stats(self):
        """The counters we read around a run: CPU seconds (getrusage inside
        redis, µs resolution), GETs served, hits, misses, connections
        accepted, reads and writes (redis' reads of client sockets, one per
        readable event, and its writes of replies: a pipeline of 16 that
        arrives at once is one read)."""
        text = self.command("INFO", "everything").decode()
        kv = dict(l.split(":", 1) for l in text.splitlines() if ":" in l)
        calls = re.search(r"calls=(\d+)", kv.get("cmdstat_get", "calls=0"))
        return {"cpu_s": float(kv["used_cpu_sys"]) + float(kv["used_cpu_user"]),
                "gets": int(calls.group(1)),
                "hits": int(kv["keyspace_hits"]),
                "misses": int(kv["keyspace_misses"]),
                "connections": int(kv["total_connections_received"]),
                "reads": int(kv["total_reads_processed"]),
                "writes": int(kv["total_writes_processed"])}


def stats_delta(before, after):
    d = {k: after[k] - before[k] for k in before}
    # The INFO that read `after` (its connection and read) and the reply
    # to the one that read `before`.
    d["connections"] -= 1
    d["reads"] -= 1
    d["writes"] -= 1
    return d


# ---- http: the peers ----------------------------------------------------------

# Debian's lua-nginx-redis is lua-resty-redis installed as nginx/redis.lua.
RESTY_REDIS = "/usr/share/lua/5.1/nginx/redis.lua"


class NginxRestyRedis(C.NginxLua):
    name = "nginx-lua-resty-redis"
    _missing = {}

    def site(self, size):
        port = getattr(self, "redis_port", 6379)  # nginx -t probe: any port
        lua = ('local redis = require "nginx.redis" '
               'local red = redis:new() '
               'red:set_timeout(1000) '
               f'local ok, err = red:connect("{C.HOST}", {port}) '
               'if not ok then ngx.status = 502 ngx.say(err) return ngx.exit(502) end '
               f'local v, err = red:get("{HTTP_KEY}") '
               'if not v or v == ngx.null then ngx.status = 502 ngx.say(err) '
               'return ngx.exit(502) end '
               'red:set_keepalive(10000, 256) '
               'ngx.print(v)')
        return C.NginxSite(
            main=C.LUA_MODULES,
            http='    lua_package_path "/usr/share/lua/5.1/?.lua;;";\n',
            server=f"location = {PATH} {{ content_by_lua_block {{ {lua} }} }}")

    def command(self, port, size, conns, workdir):
        # worker_connections counts the upstream (redis) connections too:
        # up to one per client connection in flight, 256 kept idle.
        return C.nginx_command(self.exe, workdir, C.nginx_config(
            port, 2 * conns + 256, self.site(size)))

    def missing(self):
        if not os.path.exists(RESTY_REDIS):
            return "lua-resty-redis not installed (apt-get install lua-nginx-redis)"
        if "why" not in self._missing:
            self._missing["why"] = super().missing()
        return self._missing["why"]


class MoonflowRedis(C.MoonflowLua):
    """moonflow serve bench/lua: redis_get.lua answers /redis_get."""
    name = "moonflow-lua"
    _missing = {}

    def env(self, size):
        return super().env(size) + [f"MF_BENCH_REDIS={self.redis_url}"]

    def missing(self):
        why = super().missing()
        if why:
            return why
        if "why" not in self._missing:
            self._missing["why"] = probe_moonflow_redis(self.exe)
        return self._missing["why"]


def probe_moonflow(exe, api):
    """None if this build's Lua API has mf.<api>, else why not."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as f:
        f.write(f'assert(require("moonflow").{api}, "no mf.{api}")\n')
        f.flush()
        out = subprocess.run([exe, "run", f.name], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL)
    return None if out.returncode == 0 else f"this build has no mf.{api}"


def probe_moonflow_redis(exe):
    return probe_moonflow(exe, "redis")


def moonflow_missing(exe, api, cache):
    """Why a moonflow peer cannot run here (not built, no mf.<api>), or
    None; the probe runs once per cache (a peer class's dict)."""
    if not os.access(exe, os.X_OK):
        return "not built"
    if "why" not in cache:
        cache["why"] = probe_moonflow(exe, api)
    return cache["why"]


HTTP_PEERS = {cls.name: cls for cls in (NginxRestyRedis, MoonflowRedis)}
REFERENCE = NginxRestyRedis.name


def measure_http(peer, redis, conns, seconds, workdir):
    with C.running(peer, len(VALUE), conns, workdir, path=PATH,
                   want=VALUE) as (proc, port):
        C.run_wrk(port, conns, C.WARMUP_S, path=PATH)
        s0 = redis.stats()
        before = C.cpu_seconds(proc.pid), C.cpu_seconds(redis.pid)
        w = C.run_wrk(port, conns, seconds, path=PATH)
        after = C.cpu_seconds(proc.pid), C.cpu_seconds(redis.pid)
        s1 = redis.stats()
    if not redis.alive():
        raise C.PointFailed("redis-server died")
    d = stats_delta(s0, s1)
    n = w["requests"]
    # Every request wrk counted made one GET that hit. wrk stops with up to
    # `conns` requests in flight, whose GETs redis may have served, and so
    # did the warm-up run just before `s0` was read.
    if d["misses"] or not n <= d["gets"] <= n + 2 * conns:
        raise C.PointFailed(f"{n} requests but redis served {d['gets']} GETs "
                            f"({d['misses']} misses)")
    w["cpu_us_per_req"] = (after[0] - before[0]) * 1e6 / n
    w["redis_cpu_us_per_req"] = (after[1] - before[1]) * 1e6 / n
    w["total_cpu_us_per_req"] = w["cpu_us_per_req"] + w["redis_cpu_us_per_req"]
    w["redis"] = d
    w["redis_reads_per_get"] = d["reads"] / d["gets"]
    return w


def run_http(args, redis, workdir):
    peers = [HTTP_PEERS[name](os.path.abspath(args.build))
             for name in args.servers]
    for p in peers:
        p.redis_port, p.redis_url = redis.port, redis.url
    points = []
    for conns in args.conns:
        rows = C.interleave(
            peers, args.repeats,
            lambda peer: measure_http(peer, redis, conns, args.duration, workdir),
            f"http, {conns} conns",
            lambda s: (f"server {s['cpu_us_per_req']:.2f} + redis "
                       f"{s['redis_cpu_us_per_req']:.2f} µs/req, "
                       f"{s['rps']:,.0f} req/s"))
        keys = ("cpu_us_per_req", "redis_cpu_us_per_req",
                "total_cpu_us_per_req", "rps", "p50_us", "p99_us",
                "redis_reads_per_get")
        for row in rows.values():
            summarize(row, keys, "total_cpu_us_per_req")
            if row.get("median"):
                row["median"]["redis_connections"] = statistics.median(
                    s["redis"]["connections"] for s in row["samples"])
        base = rows.get(REFERENCE, {})
        for row in rows.values():
            row["server_ratio"] = paired_ratio(row, base, "cpu_us_per_req")
            row["total_ratio"] = paired_ratio(row, base, "total_cpu_us_per_req")
        points.append({"conns": conns, "servers": rows})
    return points


def summarize(row, keys, spread_key):
    samples = row["samples"]
    if row["status"] != "ok" or not samples:
        return
    row["median"] = {k: statistics.median(s[k] for s in samples) for k in keys}
    v = [s[spread_key] for s in samples]
    row["median"]["spread"] = (max(v) - min(v)) / statistics.median(v)


def paired_ratio(row, base, key):
    if "median" not in row or "median" not in base:
        return None
    return statistics.median(a[key] / b[key] for a, b in
                             zip(row["samples"], base["samples"]))


# ---- raw: GET load from a client on core 1 ----------------------------------------


class RedisBenchmark:
    name = "redis-benchmark"

    def __init__(self, build):
        self.exe = shutil.which("redis-benchmark")

    def missing(self):
        return None if self.exe else "not installed (apt-get install redis-tools)"

    def command(self, redis, ops, conc, pipeline, max_s):
        argv = [self.exe, "-h", C.HOST, "-p", str(redis.port), "-t", "get",
                "-n", str(ops), "-c", str(conc), "--csv"]
        return argv + (["-P", str(pipeline)] if pipeline > 1 else [])

    def parse(self, out, ops):
        rows = [l for l in out.splitlines() if l.startswith('"GET"')]
        if not rows:
            raise C.PointFailed(f"no GET line in redis-benchmark's output:\n{out}")
        fields = [f.strip('"') for f in rows[0].split(",")]
        return {"ops": ops, "ops_per_s": float(fields[1]),
                "p50_ms": float(fields[4]), "p99_ms": float(fields[6])}


class MoonflowLoad:
    name = "moonflow"
    _missing = {}

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        return moonflow_missing(self.exe, "redis", self._missing)

    def command(self, redis, ops, conc, pipeline, max_s):
        return [self.exe, "run", GET_LOAD, redis.url, str(ops), str(conc),
                str(pipeline), str(max_s), RAW_KEY, VALUE]

    def parse(self, out, ops):
        m = re.search(r"^bench-summary (.*)$", out, re.M)
        if not m:
            raise C.PointFailed(f"no summary line in get_load.lua's output:\n{out}")
        r = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
        if r["timed_out"]:
            raise C.PointFailed(f"only {r['ops']:.0f} of {ops} GETs in the "
                                "time allowed")
        return {"ops": int(r["ops"]), "ops_per_s": r["ops"] / r["seconds"],
                "window_cpu_us_per_op": r["cpu_s"] * 1e6 / r["ops"]}


RAW_CLIENTS = {cls.name: cls for cls in (RedisBenchmark, MoonflowLoad)}


def run_client(argv, timeout):
    """Runs a client to its end on core 1; returns (stdout, CPU seconds of
    the whole process: utime + stime of the waited child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(["taskset", "-c", str(C.CLIENT_CPU)] + argv,
                             capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL,
                             preexec_fn=C._die_with_parent)
    except subprocess.TimeoutExpired:
        raise C.PointFailed(f"client still running {timeout} s after start") from None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise C.PointFailed(f"exited with {out.returncode}: "
                            f"{(out.stderr or out.stdout).strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.stdout, cpu


def measure_raw(client, redis, ops, conc, pipeline, max_s):
    s0 = redis.stats()
    out, cpu = run_client(client.command(redis, ops, conc, pipeline, max_s),
                          max_s + 30)
    s1 = redis.stats()
    if not redis.alive():
        raise C.PointFailed("redis-server died")
    r = client.parse(out, ops)
    d = stats_delta(s0, s1)
    # get_load.lua makes one GET before its clock starts.
    if d["misses"] or not r["ops"] <= d["gets"] <= r["ops"] + 1:
        raise C.PointFailed(f"{r['ops']} GETs reported, redis served "
                            f"{d['gets']} ({d['misses']} misses)")
    r["client_cpu_us_per_op"] = cpu * 1e6 / r["ops"]
    r["redis_cpu_us_per_op"] = d["cpu_s"] * 1e6 / d["gets"]
    r["redis"] = d
    r["redis_reads_per_get"] = d["reads"] / d["gets"]
    return r


def run_raw(args, redis):
    clients = [RAW_CLIENTS[name](os.path.abspath(args.build))
               for name in args.clients]
    points = []
    for pipeline, ops in ((1, args.ops), (PIPELINE, args.pipelined_ops)):
        label = f"raw, {'pipeline ' + str(pipeline) if pipeline > 1 else 'no pipeline'}"
        rows = C.interleave(
            clients, args.repeats,
            lambda c: measure_raw(c, redis, ops, args.conc, pipeline, args.max_s),
            label,
            lambda s: (f"{s['ops_per_s']:,.0f} ops/s, client "
                       f"{s['client_cpu_us_per_op']:.2f} µs/op, redis "
                       f"{s['redis_cpu_us_per_op']:.3f} µs/op"))
        keys = ("ops_per_s", "client_cpu_us_per_op", "redis_cpu_us_per_op",
                "redis_reads_per_get")
        for row in rows.values():
            summarize(row, keys, "ops_per_s")
            if row.get("median"):
                row["median"]["redis_connections"] = statistics.median(
                    s["redis"]["connections"] for s in row["samples"])
        base = rows.get(RedisBenchmark.name, {})
        for row in rows.values():
            row["ops_ratio"] = paired_ratio(row, base, "ops_per_s")
            row["redis_cpu_ratio"] = paired_ratio(row, base, "redis_cpu_us_per_op")
        points.append({"pipeline": pipeline, "ops": ops, "conc": args.conc,
                       "clients": rows})
    return points


# ---- output -----------------------------------------------------------------------


def fmt(v, spec=".2f"):
    return "n/a" if v is None else format(v, spec)


def markdown(meta, http, raw):
    out = []
    if http is not None:
        out += [f"## Redis: HTTP → GET → HTTP, CPU per request ({meta['date']})", "",
                f"{meta['machine']}. GET {PATH}: the handler GETs a 16-byte value "
                f"from redis-server and answers it. Server (1 worker) and "
                f"redis-server both on core {C.SERVER_CPU}, wrk -t1 on core "
                f"{C.CLIENT_CPU}; {meta['duration_s']} s per run, median of "
                f"{meta['repeats']} interleaved runs. {meta['versions']}.", "",
                "| conns | server | server CPU µs/req | redis CPU µs/req "
                "| total µs/req | spread | server ÷ ref | total ÷ ref | req/s "
                "| p50 ms | p99 ms | redis reads/GET | redis conns opened |",
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                "| ---: | ---: | ---: | ---: |"]
        for pt in http:
            for name, row in pt["servers"].items():
                head = f"| {pt['conns']} | {name} |"
                if "median" not in row:
                    out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 10)
                    continue
                m = row["median"]
                out.append(
                    head + f" {m['cpu_us_per_req']:.2f} | "
                    f"{m['redis_cpu_us_per_req']:.2f} | "
                    f"{m['total_cpu_us_per_req']:.2f} | {m['spread']:.0%} | "
                    f"{fmt(row['server_ratio'])} | {fmt(row['total_ratio'])} | "
                    f"{m['rps']:,.0f} | {m['p50_us'] / 1000:.2f} | "
                    f"{m['p99_us'] / 1000:.2f} | {m['redis_reads_per_get']:.2f} | "
                    f"{m['redis_connections']:.0f} |")
        out += ["", f"ref: {REFERENCE} (content_by_lua_block: new, set_timeout, "
                "connect, get, set_keepalive(10000, 256), ngx.print). server / "
                "redis CPU: utime + stime of each process over the wrk run ÷ "
                "requests completed; total: their sum. ÷ ref: median of the "
                "per-repeat ratios. spread: (max − min) / median of total "
                "µs/req. redis reads/GET: redis-server's reads of client sockets "
                "(INFO total_reads_processed) per GET served: 1 when every "
                "GET comes alone, 1/k when k arrive in one read. redis conns "
                "opened: connections redis-server accepted during the measured "
                "run (after a 1 s warm-up). Targets: "
                "moonflow server ÷ ref ≤ 0.8, total ÷ ref ≤ 0.6.", ""]
    if raw is not None:
        out += [f"## Redis: raw GET throughput ({meta['date']})", "",
                f"{meta['machine']}. redis-server on core {C.SERVER_CPU}, the "
                f"client on core {C.CLIENT_CPU}; GET of one 16-byte value, "
                f"{meta['conc']} concurrent callers; median of "
                f"{meta['repeats']} interleaved runs.", "",
                "| mode | client | GETs | ops/s | spread | ÷ redis-benchmark "
                "| client CPU µs/op | redis CPU µs/op | redis CPU ÷ redis-benchmark "
                "| redis reads/GET | redis conns |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                "| ---: | ---: |"]
        for pt in raw:
            mode = (f"pipeline {pt['pipeline']}" if pt["pipeline"] > 1
                    else "1 command per call")
            for name, row in pt["clients"].items():
                head = f"| {mode} | {name} | {pt['ops']:,} |"
                if "median" not in row:
                    out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 7)
                    continue
                m = row["median"]
                out.append(
                    head + f" {m['ops_per_s']:,.0f} | {m['spread']:.0%} | "
                    f"{fmt(row['ops_ratio'])} | {m['client_cpu_us_per_op']:.2f} | "
                    f"{m['redis_cpu_us_per_op']:.3f} | "
                    f"{fmt(row['redis_cpu_ratio'])} | "
                    f"{m['redis_reads_per_get']:.3f} | {m['redis_connections']:.0f} |")
        out += ["", f"redis-benchmark: `-t get -n GETs -c {meta['conc']}` (and "
                f"`-P {PIPELINE}`), its own ops/s. moonflow: `moonflow run "
                f"bench/redis/get_load.lua`, {meta['conc']} coroutines on one "
                f"mf.redis client, each `r:call(\"GET\", k)` (or `r:pipeline` of "
                f"{PIPELINE} GETs) in a loop; ops/s from its own clock. client "
                "CPU: the whole client process (getrusage of the waited child) "
                "÷ GETs. redis CPU: redis-server's getrusage (INFO cpu) ÷ GETs "
                "it served (INFO commandstats). redis reads/GET: as above. "
                "redis conns: connections "
                "redis-server accepted during the run (redis-benchmark opens "
                "one per client; moonflow's calls share the client's "
                "connection, which pipelines the calls of one loop iteration)."]
    return "\n".join(out) + "\n"


def two_part_parser(doc, http_peers, raw_clients):
    """The options every two-part comparison (http, raw) has; the caller
    adds its own, then calls two_part_args."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--parts", default="http,raw", help="which parts (http,raw)")
    add("--duration", type=int, help="http: seconds per wrk run (3)")
    add("--repeats", type=int, help="interleaved runs per peer (3)")
    add("--conns", type=C.int_list, default=[64, 256],
        help="http: connection counts (64,256)")
    add("--servers", default=",".join(http_peers),
        help=f"http: which servers ({','.join(http_peers)})")
    add("--clients", default=",".join(raw_clients),
        help=f"raw: which clients ({','.join(raw_clients)})")
    add("--build", default="build-release", help="CMake build dir (build-release)")
    add("--out", default=C.RESULTS, help="results dir (bench/results)")
    return ap


def two_part_args(ap, argv, http_peers, raw_clients):
    """Parses argv; fills the defaults --quick changes; splits and checks
    the lists."""
    args = ap.parse_args(argv)
    args.duration = args.duration or (1 if args.quick else 3)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.parts = args.parts.split(",")
    args.servers = args.servers.split(",")
    args.clients = args.clients.split(",")
    for given, known in ((args.parts, ("http", "raw")), (args.servers, http_peers),
                         (args.clients, raw_clients)):
        unknown = [x for x in given if x not in known]
        if unknown:
            ap.error(f"unknown: {', '.join(unknown)}")
    return args


def parse_args(argv):
    ap = two_part_parser(__doc__, HTTP_PEERS, RAW_CLIENTS)
    add = ap.add_argument
    add("--ops", type=int, help="raw: GETs per unpipelined run (300000)")
    add("--pipelined-ops", type=int,
        help=f"raw: GETs per run with pipeline {PIPELINE} (3000000)")
    add("--conc", type=int, default=50,
        help="raw: concurrent callers / redis-benchmark -c (50)")
    add("--max-s", type=int, default=20,
        help="raw: a moonflow run stops after this many seconds (20)")
    add("--quick", action="store_true",
        help="1 s runs, 1 repeat, a fifth of the GETs: a smoke test")
    args = two_part_args(ap, argv, HTTP_PEERS, RAW_CLIENTS)
    q = args.quick
    args.ops = args.ops or (60000 if q else 300000)
    args.pipelined_ops = args.pipelined_ops or (600000 if q else 3000000)
    return args


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns + [args.conc]))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    meta = C.machine_meta(argparse.Namespace(
        servers=args.servers, sizes=[len(VALUE)], conns=args.conns,
        duration=args.duration, repeats=args.repeats, strace=False))
    meta.update(parts=args.parts, clients=args.clients, conc=args.conc,
                ops=args.ops, pipelined_ops=args.pipelined_ops,
                pipeline=PIPELINE)
    meta["versions"] += (", redis-server " + C.tool_version(
        ["redis-server", "--version"], r"v=(\S+)") + ", lua-resty-redis "
        + C.tool_version(["dpkg-query", "-W", "lua-nginx-redis"],
                         r"lua-nginx-redis\s+(\S+)"))
    http = raw = None
    with tempfile.TemporaryDirectory(prefix="mf-bench-redis-") as workdir:
        with RedisServer(workdir) as redis:
            if "http" in args.parts:
                http = run_http(args, redis, workdir)
            if "raw" in args.parts:
                raw = run_raw(args, redis)
    table = markdown(meta, http, raw)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    C.write_atomically(os.path.join(args.out, "redis.md"), table)
    C.write_atomically(os.path.join(args.out, "redis.json"), json.dumps(
        {"meta": meta, "http": http, "raw": raw}, indent=1) + "\n")
    rows = [r for pt in http or [] for r in pt["servers"].values()]
    rows += [r for pt in raw or [] for r in pt["clients"].values()]
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("compare_redis.py: interrupted; no results written")
