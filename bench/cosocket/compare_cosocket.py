#!/usr/bin/env python3
"""bench/cosocket/compare_cosocket.py — a memcached GET through Debian's
lua-nginx-memcached (nginx.memcached, unchanged) in a handler of each
server: moonflow serve (on require "moonflow.ngx", the library on
mf.socket) beside nginx + libnginx-mod-http-lua (ngx.socket.tcp), one
worker each on core 0, wrk on core 1, memcached unpinned.

Each request takes a connection from the worker's keepalive pool,
sends "get KEY", reads the value (100 bytes), puts the connection back
(set_keepalive) and answers the value. The server's CPU time (utime +
stime of every process of the server, from /proc) is read before and after
each wrk run: µs of server CPU per request = CPU seconds / requests.
Servers run interleaved, each run a fresh start; the median of the
repeats is reported with its spread.

  moonflow-jit: moonflow serve, workers = 1, jit = true (serve's default,
                as nginx-lua)
  moonflow:     the same with jit = false
  nginx-lua:    nginx, worker_processes 1, the same handler text

Writes bench/results/cosocket.md and cosocket.json.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "http"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)

VALUE = "v" * 100

# The handler's body, the same text in both servers; PORT is memcached's.
GET_LUA = """
    local memc = memcached:new()
    memc:set_timeout(1000)
    local ok, err = memc:connect("127.0.0.1", PORT)
    if not ok then error("connect: " .. err) end
    local value, flags, gerr = memc:get("bench")
    if not value then error("get: " .. tostring(gerr)) end
    memc:set_keepalive(10000, 64)
"""


class Moonflow:
    def __init__(self, build, jit):
        self.exe = os.path.join(build, "moonflow")
        self.jit = jit
        self.name = "moonflow-jit" if jit else "moonflow"

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else f"{self.exe} not built"

    def command(self, port, mc_port, workdir):
        site = tempfile.mkdtemp(prefix="mf-cosocket-", dir=workdir)
        with open(os.path.join(site, "get.lua"), "w") as f:
            f.write('require "moonflow.ngx"\n'
                    'local memcached = require "nginx.memcached"\n'
                    f'local PORT = {mc_port}\n'
                    'return function(req, resp)\n' + GET_LUA
                    + '    resp:send(value)\nend\n')
        with open(os.path.join(site, "_conf.lua"), "w") as f:
            f.write(f'return {{ root = ".", workers = 1, '
                    f'jit = {str(self.jit).lower()}, '
                    f'listen = "127.0.0.1:{port}", limits = {{ cpu = 0 }} }}\n')
        return [self.exe, "serve", "--config", os.path.join(site, "_conf.lua")]


class NginxLua(C.NginxLua):
    """bench/http's nginx + Lua peer (its exe and its check that the Lua
    module loads) with this bench's site."""
    name = "nginx-lua"

    def command(self, port, mc_port, workdir):
        site = C.NginxSite(
            main=C.LUA_MODULES,
            http=("    init_by_lua_block {\n"
                  '        memcached = require "nginx.memcached"\n'
                  f"        PORT = {mc_port}\n    }}\n"),
            server=("location = /get { content_by_lua_block {\n"
                    f"{GET_LUA}\n            ngx.print(value)\n        }} }}"))
        return C.nginx_command(self.exe, workdir,
                               C.nginx_config(port, 1024 - 128, site, workers=1))


def start_memcached(workdir):
    port = C.free_port()
    argv = ["memcached", "-l", C.HOST, "-p", str(port), "-U", "0", "-t", "1"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    log_path = os.path.join(workdir, "memcached.log")
    with open(log_path, "ab") as log:
        proc = C.spawn(argv, log)
    C.wait_for_port(proc, port, log_path)
    with socket.create_connection((C.HOST, port)) as s:
        s.sendall(f"set bench 0 0 {len(VALUE)}\r\n{VALUE}\r\n".encode())
        if not s.recv(64).startswith(b"STORED"):
            raise C.PointFailed("memcached did not store the value")
    return proc, port


def measure(peer, mc_port, args, workdir):
    """(µs of server CPU per request, requests per second) of one start."""
    port = C.free_port()
    log_path = os.path.join(workdir, peer.name + ".log")
    with open(log_path, "ab") as log:
        proc = C.spawn(["taskset", "-c", str(C.SERVER_CPU)]
                       + peer.command(port, mc_port, workdir), log)
    try:
        C.wait_for_port(proc, port, log_path)
        C.check_answer(port, VALUE, path="/get")
        C.run_wrk(port, args.conns, C.WARMUP_S, path="/get")
        cpu0 = C.tree_cpu_seconds(proc.pid)
        r = C.run_wrk(port, args.conns, args.duration, path="/get")
        cpu = C.tree_cpu_seconds(proc.pid) - cpu0
        if proc.poll() is not None:
            raise C.PointFailed(C.death_note(proc, log_path))
        return cpu * 1e6 / r["requests"], r["rps"]
    finally:
        C.stop(proc, sig=15)


def markdown(meta, rows, names):
    ref = "nginx-lua"
    med = {n: statistics.median(r[0] for r in rows[n]) if rows[n] else None
           for n in names}
    lines = [f"## Cosockets: a memcached GET through lua-nginx-memcached "
             f"({meta['date']})", "",
             f"{meta['machine']}. {meta['versions']}. Each server with one "
             f"worker on core {C.SERVER_CPU}, wrk on core {C.CLIENT_CPU} "
             f"({meta['conns']} connections, {meta['duration_s']} s), "
             f"memcached unpinned; median of {meta['repeats']} interleaved "
             f"runs. Load average {meta['load_start']:.2f} at the start, "
             f"{meta['load_end']:.2f} at the end.", "",
             "| server | µs server CPU / request | requests/s | ÷ nginx-lua (CPU) |",
             "| --- | ---: | ---: | ---: |"]
    for n in names:
        if not rows[n]:
            lines.append(f"| {n} | n/a | n/a | n/a |")
            continue
        rps = statistics.median(r[1] for r in rows[n])
        ratio = f"{med[n] / med[ref]:.2f}" if med.get(ref) else "n/a"
        lines.append(f"| {n} | {med[n]:.1f} ({C.spread(r[0] for r in rows[n]):.0%})"
                     f" | {rps:,.0f} | {ratio} |")
    lines += ["", "Each request: nginx.memcached's new, connect (from the "
              "worker's keepalive pool after the first), get of a 100-byte "
              "value, set_keepalive, and the value as the body. CPU cell: "
              "the median and, in parentheses, the spread ((max - min) ÷ "
              "median). `bench/cosocket/compare_cosocket.py --build build`."]
    return lines


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(BENCH, "results"))
    args = p.parse_args(argv)
    for tool in ("wrk", "taskset", "memcached"):
        if not shutil.which(tool):
            sys.exit(f"compare_cosocket.py: {tool} not found (make bench-deps)")
    peers = [Moonflow(args.build, True), Moonflow(args.build, False),
             NginxLua(args.build)]
    names = [peer.name for peer in peers]
    rows = {n: [] for n in names}
    meta = C.machine_meta(argparse.Namespace(
        servers=names, sizes=[], conns=[args.conns], duration=args.duration,
        repeats=args.repeats, strace=False, strace_duration=0, strace_conns=0))
    meta.update(conns=args.conns, load_start=os.getloadavg()[0])
    status = 0
    with tempfile.TemporaryDirectory(prefix="mf-bench-cosocket-") as workdir:
        mc, mc_port = start_memcached(workdir)
        try:
            for rep in range(args.repeats):
                for peer in peers:
                    why = peer.missing()
                    if why:
                        print(f"{peer.name}: {why}", file=sys.stderr)
                        continue
                    try:
                        r = measure(peer, mc_port, args, workdir)
                    except C.PointFailed as e:
                        print(f"{peer.name}: FAILED {e}", file=sys.stderr)
                        status = 1
                        continue
                    rows[peer.name].append(r)
                    print(f"run {rep + 1} {peer.name}: {r[0]:.1f} µs CPU/request, "
                          f"{r[1]:,.0f} requests/s", file=sys.stderr, flush=True)
        finally:
            C.stop(mc, sig=15)
    meta["load_end"] = os.getloadavg()[0]
    table = "\n".join(markdown(meta, rows, names)) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    C.write_atomically(os.path.join(args.out, "cosocket.md"), table)
    C.write_atomically(os.path.join(args.out, "cosocket.json"),
                       json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
