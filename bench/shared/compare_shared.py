#!/usr/bin/env python3
"""bench/shared/compare_shared.py — shared dict operations per second per
worker: moonflow's mf.shared beside nginx-lua's ngx.shared.DICT, the same
Lua loop in a handler of each server, 2 workers each, pinned to cores 0-1.

Each request runs one loop of N operations (get, set or incr; on one hot
key, or over 10,000 keys) on a dict of 64 MiB, then answers "ok". Clients
(Python threads, one keep-alive connection each, 8 by default) send
requests for the run's duration and then wait for every answer, so every
operation counted was done within the window. The server's CPU time
(utime + stime of every process of the server, from /proc) is read before
and after: ops per worker-second = operations / server CPU seconds, the
rate of one worker busy all the time (with both workers busy the server
used ~2 cores: the table shows it). Servers and operations run
interleaved, the median of the repeats is reported.

  moonflow-jit: moonflow serve, workers = 2, serve's defaults otherwise
                (the JIT on, as in nginx-lua; loop checks keep limits.cpu)
  moonflow:     the same with jit = false (the interpreter)
  nginx-lua:    nginx, Debian's libnginx-mod-http-lua (resty.core's FFI
                dict methods), worker_processes 2, lua_shared_dict 64m,
                listen reuseport

Writes bench/results/shared.md and shared.json.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "http"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)

OPS = ("get_hot", "set_hot", "incr_hot", "get_many", "set_many", "incr_many")
CPUS = "0,1"

# The loop, the same text in both servers; D is the dict.
OPS_LUA = """
local KEYS = {}
for i = 1, 10000 do KEYS[i] = "key" .. i end
local OPS = {}
function OPS.fill(n) for i = 1, 10000 do D:set(KEYS[i], i) end D:set("hot", 0) end
function OPS.get_hot(n) for i = 1, n do D:get("hot") end end
function OPS.set_hot(n) for i = 1, n do D:set("hot", i) end end
function OPS.incr_hot(n) for i = 1, n do D:incr("hot", 1, 0) end end
function OPS.get_many(n) for i = 1, n do D:get(KEYS[i % 10000 + 1]) end end
function OPS.set_many(n) for i = 1, n do D:set(KEYS[i % 10000 + 1], i) end end
function OPS.incr_many(n) for i = 1, n do D:incr(KEYS[i % 10000 + 1], 1, 0) end end
"""


class Moonflow:
    def __init__(self, build, jit):
        self.exe = os.path.join(build, "moonflow")
        self.jit = jit
        self.name = "moonflow-jit" if jit else "moonflow"

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else f"{self.exe} not built"

    def command(self, port, workdir):
        site = tempfile.mkdtemp(prefix="mf-shared-", dir=workdir)
        with open(os.path.join(site, "op.lua"), "w") as f:
            f.write('local mf = require "moonflow"\nlocal D = mf.shared.bench\n'
                    + OPS_LUA + """
return function(req, resp)
    OPS[req.query.op](tonumber(req.query.n))
    resp:send("ok")
end
""")
        with open(os.path.join(site, "_conf.lua"), "w") as f:
            # the JIT row: serve's defaults (jit on); the other turns it off
            jit = "" if self.jit else " jit = false,"
            f.write(f'return {{ root = ".", workers = 2,{jit}'
                    f' listen = "127.0.0.1:{port}",'
                    ' shared = { bench = 64 * 1048576 } }\n')
        return [self.exe, "serve", "--config", os.path.join(site, "_conf.lua")]


class NginxLua(C.NginxLua):
    """bench/http's nginx + Lua peer (its exe and its check that the Lua
    module loads) with this bench's site."""
    name = "nginx-lua"

    def command(self, port, workdir):
        site = C.NginxSite(
            main=C.LUA_MODULES,
            http=("    lua_shared_dict bench 64m;\n    init_by_lua_block {\n"
                  f"        D = ngx.shared.bench\n        {OPS_LUA}\n"
                  "        _G.OPS = OPS\n    }\n"),
            server=("location = /op { content_by_lua_block {\n"
                    "            local a = ngx.req.get_uri_args()\n"
                    "            OPS[a.op](tonumber(a.n))\n"
                    '            ngx.print("ok")\n        } }'))
        return C.nginx_command(self.exe, workdir,
                               C.nginx_config(port, 256 - 128, site, workers=2))


def get(port, path):
    conn = http.client.HTTPConnection(C.HOST, port, timeout=60)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def load(port, path, conns, seconds):
    """Requests on conns keep-alive connections until seconds have passed,
    each waited for; how many were answered "ok"."""
    counts, errors = [0] * conns, []
    deadline = time.monotonic() + seconds

    def one(i):
        conn = http.client.HTTPConnection(C.HOST, port, timeout=60)
        try:
            while time.monotonic() < deadline:
                conn.request("GET", path)
                r = conn.getresponse()
                if r.status != 200 or r.read() != b"ok":
                    errors.append(r.status)
                    return
                counts[i] += 1
        except OSError as e:
            errors.append(str(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise C.PointFailed(f"{len(errors)} failed requests: {errors[:3]}")
    return sum(counts)


def measure(peer, args, workdir):
    """{op: (ops per worker-second, cores used)} for one server start."""
    port = C.free_port()
    log_path = os.path.join(workdir, peer.name + ".log")
    with open(log_path, "ab") as log:
        proc = C.spawn(["taskset", "-c", CPUS] + peer.command(port, workdir), log)
    try:
        C.wait_for_port(proc, port, log_path)
        status, body = get(port, "/op?op=fill&n=0")
        if status != 200:
            raise C.PointFailed(f"fill: {status} {body[:200]!r}")
        load(port, f"/op?op=get_hot&n={args.n}", args.conns, 1)  # warm-up
        out = {}
        for op in OPS:
            cpu0, t0 = C.tree_cpu_seconds(proc.pid), time.monotonic()
            requests = load(port, f"/op?op={op}&n={args.n}", args.conns,
                            args.duration)
            cpu, wall = C.tree_cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
            if proc.poll() is not None:
                raise C.PointFailed(C.death_note(proc, log_path))
            out[op] = (requests * args.n / cpu, cpu / wall)
        return out
    finally:
        C.stop(proc, sig=15)


def load_note(meta):
    """The machine's load average around the runs: other work on the two
    cores widens the spread."""
    if "load_start" not in meta:
        return ""
    return (f" Load average {meta['load_start']:.2f} at the start, "
            f"{meta['load_end']:.2f} at the end.")


def markdown(meta, rows, names):
    ref = "nginx-lua"
    lines = [f"## Shared dict: operations per worker-second ({meta['date']})", "",
             f"{meta['machine']}. {meta['versions']}. Each server on cores "
             f"{CPUS} with 2 workers; a request runs {meta['n']:,} operations "
             f"in a Lua loop of its handler; {meta['conns']} client connections, "
             f"{meta['duration_s']} s per operation, median of "
             f"{meta['repeats']} interleaved runs." + load_note(meta), "",
             "| operation | " + " | ".join(f"{n} ops/s per worker" for n in names)
             + " | " + " | ".join(f"{n} ÷ {ref}" for n in names if n != ref)
             + " | cores used (" + ", ".join(names) + ") |",
             "| --- | " + " | ".join("---:" for _ in names)
             + " | " + " | ".join("---:" for n in names if n != ref) + " | --- |"]
    for op in OPS:
        med = {n: statistics.median(r[0] for r in rows[n][op]) if rows[n][op]
               else None for n in names}
        cores = {n: statistics.median(r[1] for r in rows[n][op]) if rows[n][op]
                 else None for n in names}
        cells = [f"{med[n]:,.0f} ({C.spread(r[0] for r in rows[n][op]):.0%})" if med[n]
                 else "n/a" for n in names]
        ratios = [f"{med[n] / med[ref]:.2f}" if med[n] and med.get(ref) else "n/a"
                  for n in names if n != ref]
        used = ", ".join(f"{cores[n]:.2f}" if cores[n] else "n/a" for n in names)
        lines.append(f"| {op} | " + " | ".join(cells) + " | " + " | ".join(ratios)
                     + f" | {used} |")
    lines += ["", "Each cell: the median, and in parentheses the spread of "
              "the runs ((max - min) ÷ median). get/set/incr_hot: one key (one stripe lock in moonflow, the "
              "zone's one lock in nginx, both workers on it); _many: 10,000 "
              "keys, i-th operation on key (i mod 10000)+1; values are numbers; "
              "incr with init 0. ops per worker-second: operations ÷ the "
              "server's CPU seconds over the window (utime + stime of every "
              "process and thread of the server), every request of the window "
              "waited for. moonflow-jit runs with serve's defaults (LuaJIT's "
              "compiler on, as in nginx-lua, with the loop checks that let "
              "limits.cpu stop compiled loops); moonflow with `jit = false` "
              "(the interpreter). `bench/shared/compare_shared.py --build "
              "build`."]
    return lines


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--n", type=int, default=20000, help="operations a request")
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--duration", type=float, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(BENCH, "results"))
    p.add_argument("--table-only", action="store_true",
                   help="rewrite shared.md from OUT/shared.json, no run")
    args = p.parse_args(argv)
    if args.table_only:
        with open(os.path.join(args.out, "shared.json")) as f:
            data = json.load(f)
        names = list(data["rows"])
        table = "\n".join(markdown(data["meta"], data["rows"], names)) + "\n"
        print(table)
        C.write_atomically(os.path.join(args.out, "shared.md"), table)
        return 0
    peers = [Moonflow(args.build, True), Moonflow(args.build, False),
             NginxLua(args.build)]
    names = [peer.name for peer in peers]
    rows = {n: {op: [] for op in OPS} for n in names}
    meta = C.machine_meta(argparse.Namespace(
        servers=names, sizes=[], conns=[args.conns], duration=args.duration,
        repeats=args.repeats, strace=False, strace_duration=0, strace_conns=0))
    meta.update(n=args.n, conns=args.conns, load_start=os.getloadavg()[0])
    status = 0
    with tempfile.TemporaryDirectory(prefix="mf-bench-shared-") as workdir:
        for rep in range(args.repeats):
            for peer in peers:
                why = peer.missing()
                if why:
                    print(f"{peer.name}: {why}", file=sys.stderr)
                    continue
                try:
                    for op, r in measure(peer, args, workdir).items():
                        rows[peer.name][op].append(r)
                        print(f"run {rep + 1} {peer.name} {op}: {r[0]:,.0f} "
                              f"ops/s per worker ({r[1]:.2f} cores)",
                              file=sys.stderr, flush=True)
                except C.PointFailed as e:
                    print(f"{peer.name}: FAILED {e}", file=sys.stderr)
                    status = 1
    meta["load_end"] = os.getloadavg()[0]
    lines = markdown(meta, rows, names)
    data = {"meta": meta, "rows": rows}
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    C.write_atomically(os.path.join(args.out, "shared.md"), table)
    C.write_atomically(os.path.join(args.out, "shared.json"),
                       json.dumps(data, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
