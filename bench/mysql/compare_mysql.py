#!/usr/bin/env python3
"""bench/mysql/compare_mysql.py — the MySQL client side by side.

One mariadbd (Debian's, started as the tests start it: harness.MariaDB,
mariadb-install-db into a temporary datadir, a free loopback port, its own
socket, as user nobody when run as root) pinned to core 0, holding sysbench's table (`sysbench
oltp_point_select prepare`: sbtest1, TABLE_SIZE rows). Two parts:

http  GET /mysql_point?id=42 → one point select by primary key (a
      server-side prepared statement) → the row as JSON. Each server (1
      process) is pinned to core 0 with mariadbd; wrk -t1 runs on core 1, at
      64 and 256 connections. Per request: the server's CPU, mariadbd's CPU
      and their sum (utime + stime from /proc/PID/stat around the wrk run ÷
      requests completed).
        blocking      bench_mysql_blocking (bench/mysql/blocking_server.c):
                      POOL threads, each with its own MYSQL connection on
                      libmariadb's blocking API (the reference: no MySQL
                      driver for nginx + Lua is packaged in Debian)
        moonflow-lua  moonflow serve bench/lua --workers 1
                      (mysql_point.lua): mf.mysql(url, {pool = POOL}):query(
                      "SELECT id, k, c, pad FROM sbtest1 WHERE id = ?", id),
                      resp:json(res[1])
        moonflow-lua-pipelined  the same with {pool = POOL, pipeline =
                      MF_BENCH_MYSQL_PIPELINE_DEPTH (16)}: statements share
                      connections, several in flight on each
      One request by hand first must get the row (compared as JSON); wrk
      must see no error and no non-2xx; mariadbd's own count of executed
      statements (Com_stmt_execute) over the run must cover every request
      wrk counted.
raw   point selects as fast as a client on core 1 can ask, CONC at a time:
      `sysbench oltp_point_select run --threads=CONC` beside `moonflow run
      bench/mysql/point_load.lua` (CONC coroutines on one mf.mysql client
      with a pool of CONC; moonflow-pipelined: the same client with
      pipeline = MF_BENCH_MYSQL_PIPELINE_DEPTH, 16), the same statement ("SELECT c FROM sbtest1
      WHERE id=?", prepared), ids uniform over the table. Per run:
      queries/s (each client's own clock), the client's CPU per query (the
      whole process: getrusage of the waited child), mariadbd's CPU per
      query (/proc/PID/stat).

Runs interleave (A B A B ...) over the repeats; tables show medians, ratios
are paired by repeat. Writes bench/results/mysql.md and mysql.json; exits 1
if any point failed.
"""

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "http"))
sys.path.insert(0, os.path.join(BENCH, "redis"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)
import compare_redis as R  # noqa: E402  (medians, paired ratios, run_client)
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "spec", "integration"))
import harness  # noqa: E402  (the tests' mariadbd)

POINT_ID = 42
PATH = f"/mysql_point?id={POINT_ID}"
POINT_LOAD = os.path.join(HERE, "point_load.lua")
LUA_SITE = os.path.join(BENCH, "lua")
REFERENCE, RAW_REFERENCE = "blocking", "sysbench"


# ---- mariadbd ------------------------------------------------------------------


class MariaDB:
    """The tests' mariadbd (spec/integration/harness.py: a fresh datadir in
    a temporary directory, a free loopback port, its own socket, run as
    nobody under root, removed at exit), pinned to core 0 with all its
    threads (the threads it starts later inherit the pin), a bigger buffer
    pool and connection cap, no binary log."""

    ARGS = ["--max-connections=2000", "--innodb-buffer-pool-size=256M",
            "--skip-log-bin"]

    def __init__(self, cpu=C.SERVER_CPU):
        for tool in ("mariadbd", "mariadb-install-db", "mariadb"):
            if not shutil.which(tool):
                raise SystemExit(f"compare_mysql.py: {tool} not found "
                                 "(make bench installs mariadb-server)")
        self.cpu = cpu

    def __enter__(self):
        self.server = harness.MariaDB(self.ARGS)
        self.pid, self.port = self.server.proc.pid, self.server.port
        self.user, self.password, self.db = (self.server.USER,
                                             self.server.PASSWORD, self.server.DB)
        self.url = self.server.url()
        pin = subprocess.run(["taskset", "-a", "-p", "-c", str(self.cpu),
                              str(self.pid)], capture_output=True, text=True)
        if pin.returncode != 0:
            self.server.close()
            raise SystemExit(f"compare_mysql.py: taskset: {pin.stderr.strip()}")
        return self

    def __exit__(self, *exc):
        self.server.close()

    def sql(self, text):
        """Runs SQL as root over the socket; the rows, tab-separated."""
        try:
            out = self.server.sql(text)
        except RuntimeError as e:
            raise C.PointFailed(str(e)) from None
        return [line.split("\t") for line in out.splitlines()]

    def alive(self):
        return self.server.proc is not None and self.server.proc.poll() is None

    def stats(self):
        """The server's counters around a run (SHOW GLOBAL STATUS):
        statements executed, prepared and re-prepared, connections accepted,
        bytes received (what the clients sent it)."""
        names = ("Com_stmt_execute", "Com_stmt_prepare", "Com_stmt_reprepare",
                 "Connections", "Questions", "Bytes_received")
        rows = self.sql("SHOW GLOBAL STATUS WHERE Variable_name IN ("
                        + ",".join(f"'{n}'" for n in names) + ")")
        return {k.lower(): int(v) for k, v in rows}

    def sysbench_args(self, table_size):
        return [f"--mysql-host={C.HOST}", f"--mysql-port={self.port}",
                f"--mysql-user={self.user}", f"--mysql-password={self.password}",
                f"--mysql-db={self.db}", "--tables=1", f"--table-size={table_size}"]

    def prepare_table(self, table_size):
        out = subprocess.run(["sysbench", "oltp_point_select"]
                             + self.sysbench_args(table_size) + ["prepare"],
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit("compare_mysql.py: sysbench prepare failed:\n"
                             + out.stdout[-2000:] + out.stderr[-2000:])
        row = self.sql(f"SELECT id, k, c, pad FROM {self.db}.sbtest1 "
                       f"WHERE id = {POINT_ID}")
        self.point_row = {"id": int(row[0][0]), "k": int(row[0][1]),
                          "c": row[0][2], "pad": row[0][3]}


def stats_delta(before, after):
    d = {k: after[k] - before[k] for k in before}
    d["questions"] -= 1  # the SHOW that read `after`
    d["connections"] -= 1  # its connection
    return d


# ---- http -------------------------------------------------------------------------


class Blocking:
    name = "blocking"

    def __init__(self, build):
        self.exe = os.path.join(build, "bench", "bench_mysql_blocking")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def command(self, port, db, pool):
        return [self.exe, "--listen", f"{C.HOST}:{port}", "--threads", str(pool),
                "--mysql", f"{C.HOST}:{db.port}", "--user", db.user,
                "--password", db.password, "--db", db.db]


class MoonflowMysql:
    """moonflow serve bench/lua: mysql_point.lua answers /mysql_point."""
    name = "moonflow-lua"
    _missing = {}

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        return R.moonflow_missing(self.exe, "mysql", self._missing)

    def command(self, port, db, pool):
        # env execs the server: the PID measured is moonflow's own.
        return ["env", f"MF_BENCH_MYSQL={db.url}", f"MF_BENCH_MYSQL_POOL={pool}",
                self.exe, "serve", LUA_SITE, "--listen", f"{C.HOST}:{port}",
                "--workers", "1", "--access-log", "off"]


def pipeline_depth():
    """The pipelined peers' depth: MF_BENCH_MYSQL_PIPELINE_DEPTH (16)."""
    return int(os.environ.get("MF_BENCH_MYSQL_PIPELINE_DEPTH", "16"))


class MoonflowMysqlPipelined(MoonflowMysql):
    """The same handler on a client with pipeline = depth: the workers'
    statements share connections, several in flight on each."""
    name = "moonflow-lua-pipelined"

    def command(self, port, db, pool):
        argv = super().command(port, db, pool)
        return argv[:1] + [f"MF_BENCH_MYSQL_PIPELINE={pipeline_depth()}"] + argv[1:]


HTTP_PEERS = {cls.name: cls for cls in (Blocking, MoonflowMysql,
                                        MoonflowMysqlPipelined)}


def check_row(port, want):
    """One request by hand: the answer must be the row, as JSON (the peers
    order the keys differently)."""
    conn = http.client.HTTPConnection(C.HOST, port, timeout=10)
    try:
        conn.request("GET", PATH)
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise C.PointFailed(f"no valid answer to one GET: {e!r}") from None
    finally:
        conn.close()
    try:
        got = json.loads(body)
    except ValueError:
        got = None
    if resp.status != 200 or got != want:
        raise C.PointFailed(f"wrong answer to {PATH}: status {resp.status}, "
                            f"body {body[:300]!r}")


@contextmanager
def running(peer, db, pool, workdir):
    """Yields the process of a started, listening server whose answer was
    checked, and its port; stops it on every way out."""
    port = C.free_port()
    log_path = os.path.join(workdir, f"{peer.name}-{port}.log")
    argv = ["taskset", "-c", str(C.SERVER_CPU), *peer.command(port, db, pool)]
    with open(log_path, "wb") as log:
        proc = C.spawn(argv, log)
    try:
        C.wait_for_port(proc, port, log_path)
        check_row(port, db.point_row)
        try:
            yield proc, port
        except C.PointFailed as e:
            raise C.PointFailed(f"{e}{C.death_note(proc, log_path)}") from None
        if proc.poll() is not None:
            raise C.PointFailed("died during the run" + C.death_note(proc, log_path))
    finally:
        C.stop(proc)


def measure_http(peer, db, conns, pool, seconds, workdir):
    with running(peer, db, pool, workdir) as (proc, port):
        C.run_wrk(port, conns, C.WARMUP_S, path=PATH)
        s0 = db.stats()
        before = C.cpu_seconds(proc.pid), C.cpu_seconds(db.pid)
        w = C.run_wrk(port, conns, seconds, path=PATH)
        after = C.cpu_seconds(proc.pid), C.cpu_seconds(db.pid)
        s1 = db.stats()
    if not db.alive():
        raise C.PointFailed("mariadbd died")
    d = stats_delta(s0, s1)
    n = w["requests"]
    # One execute per request; wrk stops with up to `conns` requests in
    # flight, whose statements may have run, and so did the warm-up's.
    if not n <= d["com_stmt_execute"] <= n + 2 * conns:
        raise C.PointFailed(f"{n} requests but mariadbd executed "
                            f"{d['com_stmt_execute']} statements")
    w["cpu_us_per_req"] = (after[0] - before[0]) * 1e6 / n
    w["db_cpu_us_per_req"] = (after[1] - before[1]) * 1e6 / n
    w["total_cpu_us_per_req"] = w["cpu_us_per_req"] + w["db_cpu_us_per_req"]
    # The two status reads' own bytes are in it too: a few hundred bytes
    # over the run, nothing per request.
    w["db_bytes_in_per_req"] = d["bytes_received"] / n
    w["mariadb"] = d
    return w


def run_http(args, db, workdir):
    peers = [HTTP_PEERS[name](os.path.abspath(args.build)) for name in args.servers]
    points = []
    for conns in args.conns:
        rows = C.interleave(
            peers, args.repeats,
            lambda peer: measure_http(peer, db, conns, args.pool, args.duration,
                                      workdir),
            f"http, {conns} conns",
            lambda s: (f"server {s['cpu_us_per_req']:.2f} + mariadbd "
                       f"{s['db_cpu_us_per_req']:.2f} µs/req, "
                       f"{s['rps']:,.0f} req/s"))
        keys = ("cpu_us_per_req", "db_cpu_us_per_req", "total_cpu_us_per_req",
                "rps", "p50_us", "p99_us")
        for row in rows.values():
            R.summarize(row, keys, "total_cpu_us_per_req")
            if row.get("median"):
                for k in ("connections", "com_stmt_prepare",
                          "com_stmt_reprepare"):
                    row["median"][k] = statistics.median(
                        s["mariadb"][k] for s in row["samples"])
                row["median"]["db_bytes_in_per_req"] = statistics.median(
                    s["db_bytes_in_per_req"] for s in row["samples"])
        base = rows.get(REFERENCE, {})
        for row in rows.values():
            row["server_ratio"] = R.paired_ratio(row, base, "cpu_us_per_req")
            row["db_ratio"] = R.paired_ratio(row, base, "db_cpu_us_per_req")
            row["total_ratio"] = R.paired_ratio(row, base, "total_cpu_us_per_req")
        points.append({"conns": conns, "pool": args.pool, "servers": rows})
    return points


# ---- raw: point selects from a client on core 1 ----------------------------------


class Sysbench:
    name = "sysbench"

    def __init__(self, build):
        self.exe = shutil.which("sysbench")

    def missing(self):
        return None if self.exe else "not installed (apt-get install sysbench)"

    def command(self, db, queries, conc, table_size, max_s):
        return [self.exe, "oltp_point_select", *db.sysbench_args(table_size),
                f"--threads={conc}", f"--events={queries}", f"--time={max_s}",
                "--rand-type=uniform", "--db-ps-mode=auto", "run"]

    def parse(self, out, queries):
        q = re.search(r"queries:\s+(\d+)\s+\(([\d.]+) per sec", out)
        errs = re.search(r"ignored errors:\s+(\d+)", out)
        if not q or not errs:
            raise C.PointFailed(f"no query count in sysbench's output:\n{out[-2000:]}")
        if int(errs.group(1)):
            raise C.PointFailed(f"sysbench ignored {errs.group(1)} errors")
        if int(q.group(1)) < queries:
            raise C.PointFailed(f"only {q.group(1)} of {queries} queries in the "
                                "time allowed")
        return {"queries": int(q.group(1)), "qps": float(q.group(2)),
                "warm_up_queries": 0}


class MoonflowLoad:
    name = "moonflow"

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        if not os.access(self.exe, os.X_OK):
            return "not built"
        return MoonflowMysql(os.path.dirname(self.exe)).missing()

    def command(self, db, queries, conc, table_size, max_s):
        return [self.exe, "run", POINT_LOAD, db.url, str(queries), str(conc),
                str(table_size), str(max_s)]

    def parse(self, out, queries):
        m = re.search(r"^bench-summary (.*)$", out, re.M)
        if not m:
            raise C.PointFailed(f"no summary line in point_load.lua's output:\n{out}")
        r = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
        if r["timed_out"]:
            raise C.PointFailed(f"only {r['queries']:.0f} of {queries} queries "
                                "in the time allowed")
        return {"queries": int(r["queries"]), "qps": r["queries"] / r["seconds"],
                "window_cpu_us_per_query": r["cpu_s"] * 1e6 / r["queries"],
                "run_queue_share": r["wait_s"] / r["seconds"],
                "warm_up_queries": None}  # CONC: set by measure_raw


class MoonflowLoadPipelined(MoonflowLoad):
    """point_load.lua on a client with pipeline = depth."""
    name = "moonflow-pipelined"

    def command(self, db, queries, conc, table_size, max_s):
        return super().command(db, queries, conc, table_size, max_s) + [
            str(pipeline_depth())]


RAW_CLIENTS = {cls.name: cls for cls in (Sysbench, MoonflowLoad,
                                         MoonflowLoadPipelined)}


def measure_raw(client, db, args):
    s0 = db.stats()
    before = C.cpu_seconds(db.pid)
    preempted = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw
    out, cpu = R.run_client(client.command(db, args.queries, args.conc,
                                           args.table_size, args.max_s),
                            args.max_s + 60)
    preempted = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw - preempted
    after = C.cpu_seconds(db.pid)
    s1 = db.stats()
    if not db.alive():
        raise C.PointFailed("mariadbd died")
    r = client.parse(out, args.queries)
    warm = args.conc if r["warm_up_queries"] is None else r["warm_up_queries"]
    d = stats_delta(s0, s1)
    executed = d["com_stmt_execute"]
    if executed != r["queries"] + warm:
        raise C.PointFailed(f"{r['queries']} queries reported, mariadbd "
                            f"executed {executed} statements")
    r["client_cpu_us_per_query"] = cpu * 1e6 / r["queries"]
    r["db_cpu_us_per_query"] = (after - before) * 1e6 / executed
    # The client's involuntary context switches (preempted while runnable:
    # the machine's other load taking its core), every thread of it.
    r["preempted_per_1k"] = preempted * 1000 / r["queries"]
    r["mariadb"] = d
    return r


def run_raw(args, db):
    clients = [RAW_CLIENTS[name](os.path.abspath(args.build)) for name in args.clients]
    rows = C.interleave(
        clients, args.repeats, lambda c: measure_raw(c, db, args),
        f"raw, {args.conc} concurrent",
        lambda s: (f"{s['qps']:,.0f} queries/s, client "
                   f"{s['client_cpu_us_per_query']:.2f} µs/query, mariadbd "
                   f"{s['db_cpu_us_per_query']:.2f} µs/query"))
    for row in rows.values():
        R.summarize(row, ("qps", "client_cpu_us_per_query", "db_cpu_us_per_query",
                          "preempted_per_1k"), "qps")
        if row.get("median"):
            row["median"]["connections"] = statistics.median(
                s["mariadb"]["connections"] for s in row["samples"])
            shares = [s["run_queue_share"] for s in row["samples"]
                      if "run_queue_share" in s]
            row["median"]["run_queue_share"] = (statistics.median(shares)
                                                if shares else None)
    base = rows.get(RAW_REFERENCE, {})
    for row in rows.values():
        row["qps_ratio"] = R.paired_ratio(row, base, "qps")
        row["client_cpu_ratio"] = R.paired_ratio(row, base, "client_cpu_us_per_query")
        row["db_cpu_ratio"] = R.paired_ratio(row, base, "db_cpu_us_per_query")
    return {"conc": args.conc, "queries": args.queries, "clients": rows}


# ---- output -----------------------------------------------------------------------


def markdown_http(meta, http):
    out = [f"## MySQL: HTTP → point SELECT → JSON, CPU per request ({meta['date']})",
           "", f"{meta['machine']}. GET {PATH}: the handler runs `SELECT id, k, c, "
           f"pad FROM sbtest1 WHERE id = ?` (prepared) and answers the row as "
           f"JSON (212 bytes). Server (1 process, a pool of {meta['pool']} "
           f"connections) and mariadbd both on core {C.SERVER_CPU}, wrk -t1 on "
           f"core {C.CLIENT_CPU}; {meta['duration_s']} s per run after a "
           f"{C.WARMUP_S} s warm-up, median of {meta['repeats']} interleaved "
           f"runs. {meta['versions']}.", "",
           "| conns | server | server CPU µs/req | mariadbd CPU µs/req "
           "| total µs/req | spread | server ÷ ref | mariadbd ÷ ref | total ÷ ref "
           "| req/s | p50 ms | p99 ms | prepares | re-prepares | mariadbd bytes "
           "in/req | conns opened |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for pt in http:
        for name, row in pt["servers"].items():
            head = f"| {pt['conns']} | {name} |"
            if "median" not in row:
                out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 13)
                continue
            m = row["median"]
            out.append(
                head + f" {m['cpu_us_per_req']:.2f} | {m['db_cpu_us_per_req']:.2f} | "
                f"{m['total_cpu_us_per_req']:.2f} | {m['spread']:.0%} | "
                f"{R.fmt(row['server_ratio'])} | {R.fmt(row['db_ratio'])} | "
                f"{R.fmt(row['total_ratio'])} | {m['rps']:,.0f} | "
                f"{m['p50_us'] / 1000:.2f} | {m['p99_us'] / 1000:.2f} | "
                f"{m['com_stmt_prepare']:.0f} | {m['com_stmt_reprepare']:.0f} | "
                f"{m['db_bytes_in_per_req']:.1f} | {m['connections']:.0f} |")
    out += ["", f"ref: {REFERENCE} (bench/mysql/blocking_server.c: "
            f"{meta['pool']} threads, each with its own connection on "
            "libmariadb's blocking API and its own epoll set of HTTP "
            "connections; the statement prepared once per connection). No MySQL "
            "driver for nginx + Lua is packaged in Debian (lua-resty-mysql is "
            "not: `apt-cache policy lua-resty-mysql` finds nothing; lua-sql-mysql "
            "and lua-dbi-mysql block the worker on each query), hence this "
            "peer. server / mariadbd CPU: utime + stime of each process over "
            "the wrk run ÷ requests completed; total: their sum. ÷ ref: median "
            "of the per-repeat ratios. spread: (max − min) / median of total "
            "µs/req. prepares: COM_STMT_PREPARE mariadbd saw during the "
            "measured run (0: every statement came from a cache); re-prepares: "
            "the server's own (Com_stmt_reprepare); mariadbd bytes in/req: "
            "Bytes_received over the run ÷ requests (COM_STMT_EXECUTE with "
            "its parameters: 24 bytes for one BIGINT without its type, 26 with it); conns "
            "opened: connections it accepted during the run (pools warmed up: "
            "0).", ""]
    return out


def markdown_raw(meta, raw):
    out = [f"## MySQL: raw point-select throughput ({meta['date']})", "",
           f"{meta['machine']}. mariadbd on core {C.SERVER_CPU}, the client on "
           f"core {C.CLIENT_CPU}; `SELECT c FROM sbtest1 WHERE id=?` (prepared), "
           f"ids uniform over {meta['table_size']:,} rows, {raw['conc']} "
           f"concurrent callers, {raw['queries']:,} queries per run; median of "
           f"{meta['repeats']} interleaved runs.", "",
           "| client | queries/s | spread | ÷ sysbench | client CPU µs/query "
           "| client CPU ÷ sysbench | mariadbd CPU µs/query | mariadbd ÷ sysbench "
           "| conns opened | preempted /1k queries | loop run-queue wait |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |"]
    for name, row in raw["clients"].items():
        head = f"| {name} |"
        if "median" not in row:
            out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 9)
            continue
        m = row["median"]
        out.append(
            head + f" {m['qps']:,.0f} | {m['spread']:.0%} | {R.fmt(row['qps_ratio'])} | "
            f"{m['client_cpu_us_per_query']:.2f} | {R.fmt(row['client_cpu_ratio'])} | "
            f"{m['db_cpu_us_per_query']:.2f} | {R.fmt(row['db_cpu_ratio'])} | "
            f"{m['connections']:.0f} | {m['preempted_per_1k']:.1f} | "
            f"{R.fmt(m['run_queue_share'], '.0%')} |")
    out += ["", f"sysbench: `sysbench oltp_point_select --tables=1 "
            f"--table-size={meta['table_size']} --threads={raw['conc']} "
            f"--events={raw['queries']} --rand-type=uniform run` ({raw['conc']} "
            "threads, a connection each); its own queries/s. moonflow: "
            f"`moonflow run bench/mysql/point_load.lua URL {raw['queries']} "
            f"{raw['conc']} {meta['table_size']}`: {raw['conc']} coroutines on one "
            f"mf.mysql client with a pool of {raw['conc']}, each "
            "`db:query(sql, id)` in a loop; queries/s from its own clock. "
            "client CPU: the whole client process (getrusage of the waited "
            "child, start-up and connects included for both) ÷ queries. "
            "mariadbd CPU: /proc/PID/stat ÷ statements it executed "
            "(Com_stmt_execute, checked against the client's count). conns "
            "opened: connections mariadbd accepted during the run. preempted: "
            "the client's involuntary context switches (getrusage "
            "ru_nivcsw, all its threads) per 1,000 queries. loop run-queue "
            "wait: the share of moonflow's window its loop thread spent "
            "runnable but not running (/proc/thread-self/schedstat): other "
            "processes on core 1 took it. A latency-bound client with one "
            "thread loses more queries/s to a busy core than one with "
            "--threads threads (the scheduler shares a core by thread); CPU "
            "per query is the figure that holds. Target: "
            "moonflow ≥ 1.0× sysbench's queries/s at ≤ 0.8× its client CPU "
            "per query."]
    return out


def parse_args(argv):
    ap = R.two_part_parser(__doc__, HTTP_PEERS, RAW_CLIENTS)
    add = ap.add_argument
    add("--pool", type=int, default=16,
        help="http: connections per server: moonflow's pool, the blocking "
             "server's threads (16)")
    add("--queries", type=int, help="raw: queries per run (100000)")
    add("--conc", type=int, default=16,
        help="raw: concurrent callers = sysbench --threads (16)")
    add("--table-size", type=int, default=10000, help="rows in sbtest1 (10000)")
    add("--max-s", type=int, default=60,
        help="raw: a client run stops after this many seconds (60)")
    add("--quick", action="store_true",
        help="1 s runs, 1 repeat, a fifth of the queries: a smoke test")
    args = R.two_part_args(ap, argv, HTTP_PEERS, RAW_CLIENTS)
    args.queries = args.queries or (20000 if args.quick else 100000)
    if min(args.pool, args.conc) < 1 or args.table_size < POINT_ID:
        ap.error(f"--pool and --conc must be at least 1, --table-size at least {POINT_ID}")
    return args


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    meta = C.machine_meta(argparse.Namespace(
        servers=args.servers, sizes=[], conns=args.conns,
        duration=args.duration, repeats=args.repeats, strace=False))
    meta.update(parts=args.parts, clients=args.clients, conc=args.conc,
                queries=args.queries, pool=args.pool, table_size=args.table_size)
    meta["versions"] = (
        "wrk " + C.tool_version(["wrk", "-v"], r"wrk (\S+)")
        + ", mariadbd " + C.tool_version(["mariadbd", "--version"], r"Ver (\S+)")
        + ", libmariadb " + C.tool_version(["dpkg-query", "-W", "libmariadb3"],
                                           r"libmariadb3\S*\s+(\S+)")
        + ", sysbench " + C.tool_version(["sysbench", "--version"], r"sysbench (\S+)"))
    http = raw = None
    with tempfile.TemporaryDirectory(prefix="mf-bench-mysql-") as workdir:
        with MariaDB() as db:
            db.prepare_table(args.table_size)
            if "http" in args.parts:
                http = run_http(args, db, workdir)
            if "raw" in args.parts:
                raw = run_raw(args, db)
    lines = markdown_http(meta, http) if http is not None else []
    lines += markdown_raw(meta, raw) if raw is not None else []
    rows = [r for pt in http or [] for r in pt["servers"].values()]
    rows += list(raw["clients"].values()) if raw else []
    return C.write_tables(args.out, "mysql", lines,
                          {"meta": meta, "http": http, "raw": raw}, rows)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("compare_mysql.py: interrupted; no results written")
