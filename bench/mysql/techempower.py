#!/usr/bin/env python3
"""bench/mysql/techempower.py — TechEmpower's database shapes side by side.

One mariadbd (compare_mysql.MariaDB: the tests' mariadbd, pinned to core 0)
holding TechEmpower's World table (world: id 1..10000, randomNumber
1..10000, InnoDB). Three shapes, each a GET answered with JSON:

  db       one random row                       (TechEmpower's "single query")
  queries  20 random rows, each its own select  ("multiple queries", ?queries=20)
  updates  20 random rows read, each given a new random number and written
           by its own UPDATE                    ("updates", ?queries=20)

Peers, each one process pinned to core 0 beside mariadbd, wrk -t1 on core 1:
  blocking      bench_mysql_blocking (bench/mysql/blocking_server.c): POOL
                threads, a connection each on libmariadb's blocking API; a
                request's statements run one after another on its thread
  moonflow-lua  moonflow serve bench/lua --workers 1 (te_db.lua,
                te_queries.lua, te_updates.lua): mf.mysql(url, {pool = POOL});
                the 20 selects of a request side by side in one mf.parallel,
                then the 20 updates side by side
  moonflow-lua-pipelined  the same with {pool = POOL, pipeline =
                MF_BENCH_MYSQL_PIPELINE_DEPTH (16)}: the statements of a
                request (and of other requests) share connections, up to
                16 in flight on each, written together

Per request: the server's CPU, mariadbd's CPU, their sum (utime + stime
over the wrk run ÷ requests), requests/s, latencies. Checks: one request
by hand must give the shape's JSON (an object, or an array of 20 rows
with ids in range); wrk must see no error and no non-2xx; mariadbd's count
of executed statements over the run must cover the requests (1, 20 or 40
per request). Runs interleave over the repeats; ratios are paired by
repeat. Writes bench/results/mysql_techempower.md and .json; exits 1 if any
point failed.
"""

import argparse
import http.client
import json
import os
import signal
import sys
import tempfile
from contextlib import contextmanager

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_mysql as M  # noqa: E402  (mariadbd, the peers' commands)
C, R = M.C, M.R

WORLD_ROWS = 10000
QUERIES = 20
REFERENCE = "blocking"

# shape → (statements per request, blocking's path, moonflow's path)
SHAPES = {
    "db": (1, "/db", "/te_db"),
    "queries": (QUERIES, f"/queries?queries={QUERIES}",
                f"/te_queries?queries={QUERIES}"),
    "updates": (2 * QUERIES, f"/updates?queries={QUERIES}",
                f"/te_updates?queries={QUERIES}"),
}


class Blocking(M.Blocking):
    def path(self, shape):
        return SHAPES[shape][1]


class MoonflowLua(M.MoonflowMysql):
    def path(self, shape):
        return SHAPES[shape][2]


class MoonflowLuaPipelined(M.MoonflowMysqlPipelined):
    """The same handlers on a client with pipeline = depth: a request's
    statements, side by side, share a connection's writes."""
    def path(self, shape):
        return SHAPES[shape][2]


PEERS = {cls.name: cls for cls in (Blocking, MoonflowLua, MoonflowLuaPipelined)}


def create_world(db):
    """TechEmpower's World: 10,000 rows, random numbers in 1..10000."""
    db.sql(f"CREATE TABLE {db.db}.world (id INT NOT NULL PRIMARY KEY, "
           "randomNumber INT NOT NULL DEFAULT 0) ENGINE=InnoDB")
    db.sql(f"INSERT INTO {db.db}.world (id, randomNumber) "
           f"SELECT seq, 1 + FLOOR(RAND(7) * {WORLD_ROWS}) "
           f"FROM {db.db}.seq_1_to_{WORLD_ROWS}")
    n = int(db.sql(f"SELECT COUNT(*) FROM {db.db}.world")[0][0])
    if n != WORLD_ROWS:
        raise SystemExit(f"techempower.py: world holds {n} rows, not {WORLD_ROWS}")


def check_row(row):
    return (isinstance(row, dict) and set(row) == {"id", "randomNumber"}
            and all(isinstance(v, int) and 1 <= v <= WORLD_ROWS
                    for v in row.values()))


def check_shape(port, path, shape):
    """One request by hand: the shape's JSON."""
    conn = http.client.HTTPConnection(C.HOST, port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise C.PointFailed(f"no valid answer to GET {path}: {e!r}") from None
    finally:
        conn.close()
    try:
        got = json.loads(body)
    except ValueError:
        got = None
    ok = (check_row(got) if shape == "db" else
          isinstance(got, list) and len(got) == QUERIES
          and all(check_row(r) for r in got))
    if resp.status != 200 or not ok:
        raise C.PointFailed(f"wrong answer to {path}: status {resp.status}, "
                            f"body {body[:300]!r}")


@contextmanager
def running(peer, db, pool, workdir, shape):
    port = C.free_port()
    log_path = os.path.join(workdir, f"{peer.name}-{port}.log")
    argv = ["taskset", "-c", str(C.SERVER_CPU), *peer.command(port, db, pool)]
    with open(log_path, "wb") as log:
        proc = C.spawn(argv, log)
    try:
        C.wait_for_port(proc, port, log_path)
        check_shape(port, peer.path(shape), shape)
        try:
            yield proc, port
        except C.PointFailed as e:
            raise C.PointFailed(f"{e}{C.death_note(proc, log_path)}") from None
        if proc.poll() is not None:
            raise C.PointFailed("died during the run" + C.death_note(proc, log_path))
    finally:
        C.stop(proc)


def measure(peer, db, shape, conns, pool, seconds, workdir):
    path = peer.path(shape)
    per_req = SHAPES[shape][0]
    with running(peer, db, pool, workdir, shape) as (proc, port):
        C.run_wrk(port, conns, C.WARMUP_S, path=path)
        s0 = db.stats()
        before = C.cpu_seconds(proc.pid), C.cpu_seconds(db.pid)
        w = C.run_wrk(port, conns, seconds, path=path)
        after = C.cpu_seconds(proc.pid), C.cpu_seconds(db.pid)
        s1 = db.stats()
    if not db.alive():
        raise C.PointFailed("mariadbd died")
    d = M.stats_delta(s0, s1)
    n = w["requests"]
    # wrk stops with up to `conns` requests in flight, whose statements may
    # have run, as did the warm-up's.
    if not n * per_req <= d["com_stmt_execute"] <= (n + 2 * conns) * per_req:
        raise C.PointFailed(f"{n} requests of {per_req} statements but "
                            f"mariadbd executed {d['com_stmt_execute']}")
    w["cpu_us_per_req"] = (after[0] - before[0]) * 1e6 / n
    w["db_cpu_us_per_req"] = (after[1] - before[1]) * 1e6 / n
    w["total_cpu_us_per_req"] = w["cpu_us_per_req"] + w["db_cpu_us_per_req"]
    w["mariadb"] = d
    return w


def run(args, db, workdir):
    peers = [PEERS[name](os.path.abspath(args.build)) for name in args.servers]
    points = []
    for shape in args.shapes:
        for conns in args.conns:
            rows = C.interleave(
                peers, args.repeats,
                lambda peer: measure(peer, db, shape, conns, args.pool,
                                     args.duration, workdir),
                f"{shape}, {conns} conns",
                lambda s: (f"server {s['cpu_us_per_req']:.1f} + mariadbd "
                           f"{s['db_cpu_us_per_req']:.1f} µs/req, "
                           f"{s['rps']:,.0f} req/s"))
            for row in rows.values():
                R.summarize(row, ("cpu_us_per_req", "db_cpu_us_per_req",
                                  "total_cpu_us_per_req", "rps", "p50_us",
                                  "p99_us"), "total_cpu_us_per_req")
            base = rows.get(REFERENCE, {})
            for row in rows.values():
                row["server_ratio"] = R.paired_ratio(row, base, "cpu_us_per_req")
                row["db_ratio"] = R.paired_ratio(row, base, "db_cpu_us_per_req")
                row["total_ratio"] = R.paired_ratio(row, base, "total_cpu_us_per_req")
                row["rps_ratio"] = R.paired_ratio(row, base, "rps")
            points.append({"shape": shape, "conns": conns, "pool": args.pool,
                           "servers": rows})
    return points


def markdown(meta, points):
    out = [f"## MySQL: TechEmpower's database shapes ({meta['date']})", "",
           f"{meta['machine']}. TechEmpower's World table (10,000 rows) in "
           f"mariadbd; db: one random row; queries: {QUERIES} random rows, "
           f"a select each; updates: {QUERIES} rows read, each written back "
           f"with a new random number by its own UPDATE. Server (1 process, "
           f"a pool of {meta['pool']} connections) and mariadbd on core "
           f"{C.SERVER_CPU}, wrk -t1 on core {C.CLIENT_CPU}; "
           f"{meta['duration_s']} s per run after a {C.WARMUP_S} s warm-up, "
           f"median of {meta['repeats']} interleaved runs. {meta['versions']}.",
           "",
           "| shape | conns | server | server CPU µs/req | mariadbd CPU µs/req "
           "| total µs/req | spread | server ÷ ref | mariadbd ÷ ref "
           "| total ÷ ref | req/s | req/s ÷ ref | p50 ms | p99 ms |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | ---: |"]
    for pt in points:
        for name, row in pt["servers"].items():
            head = f"| {pt['shape']} | {pt['conns']} | {name} |"
            if "median" not in row:
                out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 10)
                continue
            m = row["median"]
            out.append(
                head + f" {m['cpu_us_per_req']:.1f} | {m['db_cpu_us_per_req']:.1f} | "
                f"{m['total_cpu_us_per_req']:.1f} | {m['spread']:.0%} | "
                f"{R.fmt(row['server_ratio'])} | {R.fmt(row['db_ratio'])} | "
                f"{R.fmt(row['total_ratio'])} | {m['rps']:,.0f} | "
                f"{R.fmt(row['rps_ratio'])} | {m['p50_us'] / 1000:.2f} | "
                f"{m['p99_us'] / 1000:.2f} |")
    out += ["", f"ref: {REFERENCE} (bench/mysql/blocking_server.c: "
            f"{meta['pool']} threads, a connection each on libmariadb's "
            "blocking API; a request's statements one after another on its "
            "thread, every statement prepared once per connection). "
            "moonflow-lua: bench/lua/te_*.lua, the statements of a request "
            "side by side (mf.parallel of mf.task.mysql) over a pool of "
            f"{meta['pool']} connections. CPU: utime + stime of each process "
            "over the wrk run ÷ requests completed. ÷ ref: the median of the "
            "per-repeat ratios. spread: (max − min) / median of total µs/req.",
            ""]
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--build", default="build-release", help="the release build (build-release)")
    add("--out", default=os.path.join(os.path.dirname(HERE), "results"),
        help="where the tables go (bench/results)")
    add("--shapes", default=",".join(SHAPES), help="db,queries,updates")
    add("--servers", default=",".join(PEERS), help=",".join(PEERS))
    add("--conns", type=C.int_list, default=[64],
        help="connection counts (64: at 256, the blocking server's 20 updates "
             "per request queue past wrk's 2 s timeout)")
    add("--pool", type=int, default=16,
        help="connections per server: moonflow's pool, the blocking "
             "server's threads (16)")
    add("--duration", type=int, help="seconds per wrk run (3)")
    add("--repeats", type=int, help="interleaved runs per peer (3)")
    add("--quick", action="store_true", help="1 s runs, 1 repeat: a smoke test")
    args = ap.parse_args(argv)
    args.duration = args.duration or (1 if args.quick else 3)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.shapes, args.servers = args.shapes.split(","), args.servers.split(",")
    for given, known in ((args.shapes, SHAPES), (args.servers, PEERS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            ap.error(f"unknown: {', '.join(unknown)} (known: {', '.join(known)})")
    if args.pool < 1:
        ap.error("--pool must be at least 1")
    return args


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    meta = C.machine_meta(argparse.Namespace(
        servers=args.servers, sizes=[], conns=args.conns,
        duration=args.duration, repeats=args.repeats, strace=False))
    meta.update(shapes=args.shapes, pool=args.pool, queries=QUERIES)
    meta["versions"] = (
        "wrk " + C.tool_version(["wrk", "-v"], r"wrk (\S+)")
        + ", mariadbd " + C.tool_version(["mariadbd", "--version"], r"Ver (\S+)")
        + ", libmariadb " + C.tool_version(["dpkg-query", "-W", "libmariadb3"],
                                           r"libmariadb3\S*\s+(\S+)"))
    with tempfile.TemporaryDirectory(prefix="mf-bench-te-") as workdir:
        with M.MariaDB() as db:
            create_world(db)
            points = run(args, db, workdir)
    rows = [r for pt in points for r in pt["servers"].values()]
    return C.write_tables(args.out, "mysql_techempower", markdown(meta, points),
                          {"meta": meta, "points": points}, rows)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("techempower.py: interrupted; no results written")
