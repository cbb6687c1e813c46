#!/usr/bin/env python3
"""bench/http/idle_rss.py — memory per idle keep-alive connection.

A server that keeps a read buffer (or a whole request context) per open
connection pays for it in every idle keep-alive connection; ours should hold
no buffer between requests. For each server: start it (core 0), read VmRSS
from /proc/PID/status, open N connections that each send one GET / and read
the whole answer, then stay open and idle; after a short pause read VmRSS
again. KiB per connection = (after - before) / N. Every server is configured
for N + 128 connections (nginx worker_connections, moonflow
--max-connections), and the open-file limit is raised for this script and,
by inheritance, the servers. Writes http_idle_rss.md/json to bench/results/.
"""

import argparse
import json
import os
import re
import resource
import signal
import socket
import sys
import tempfile
import time

import compare as C

BATCH = 500  # connections opened before their answers are read (< backlog)
SETTLE_S = 1.0  # lets the server finish its accepts and any lazy freeing


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s*(\d+) kB", f.read(), re.M).group(1))


def read_answer(sock):
    """Reads one whole answer (Content-Length or chunked, no trailers)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise C.PointFailed("server closed a connection before answering")
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            continue
        if not head.startswith(b"HTTP/1.1 200"):
            raise C.PointFailed(f"not a 200: {head[:40]!r}")
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        if (len(body) >= int(m.group(1))) if m else body.endswith(b"0\r\n\r\n"):
            return


def open_idle(port, n):
    """n connections to port, each after one answered GET /."""
    request = f"GET / HTTP/1.1\r\nHost: {C.HOST}:{port}\r\n\r\n".encode()
    socks = []
    try:
        while len(socks) < n:
            group = []
            for _ in range(min(BATCH, n - len(socks))):
                group.append(socket.create_connection((C.HOST, port), timeout=10))
                group[-1].sendall(request)
            socks += group
            for s in group:
                read_answer(s)
    except OSError as e:
        for s in socks:
            s.close()
        raise C.PointFailed(f"after {len(socks)} connections: {e}") from None
    return socks


def measure(peer, n, workdir):
    with C.running(peer, 16, n, workdir) as (proc, port):
        time.sleep(SETTLE_S)
        before = vm_rss_kib(proc.pid)
        socks = open_idle(port, n)
        try:
            time.sleep(SETTLE_S)
            after = vm_rss_kib(proc.pid)
        finally:
            for s in socks:
                s.close()
    return {"rss_before_kib": before, "rss_after_kib": after,
            "kib_per_conn": (after - before) / n}


def raise_nofile(n):
    need = n + 512
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"idle_rss.py: open-file hard limit {hard} < {need} needed")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def markdown(meta, rows):
    out = [f"## HTTP memory per idle keep-alive connection ({meta['date']})", "",
           f"{meta['machine']}. {meta['connections']:,} connections, each idle "
           "after one answered GET / (16 B body); VmRSS of the server process "
           "before and after. " + meta["versions"] + ".", "",
           "| server | RSS before KiB | RSS after KiB | KiB per connection |",
           "| --- | ---: | ---: | ---: |"]
    for name, r in rows.items():
        if "kib_per_conn" in r:
            out.append(f"| {name} | {r['rss_before_kib']:,} | "
                       f"{r['rss_after_kib']:,} | {r['kib_per_conn']:.2f} |")
        else:
            out.append(f"| {name} | {r['status'].splitlines()[0]} | | |")
    out += ["", "RSS before already holds what a server allocates up front for "
            "its connection cap (nginx: worker_connections × connection and "
            "event structs)."]
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--servers", default=",".join(C.PEERS))
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--out", default=C.RESULTS)
    args = ap.parse_args(argv)
    raise_nofile(args.connections)
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    peers = [C.PEERS[n](os.path.abspath(args.build)) for n in args.servers.split(",")]
    meta = dict(C.machine_meta(argparse.Namespace(
        servers=args.servers.split(","), sizes=[16], conns=[args.connections],
        duration=None, repeats=1, strace=False)), connections=args.connections)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="mf-bench-rss-") as workdir:
        for peer in peers:
            rows[peer.name] = {"status": peer.missing() or "ok"}
            if rows[peer.name]["status"] != "ok":
                continue
            try:
                rows[peer.name].update(measure(peer, args.connections, workdir))
            except C.PointFailed as e:
                rows[peer.name]["status"] = f"FAILED: {e}"
                print(f"\n*** idle RSS, {peer.name}: {e}\n", file=sys.stderr)
                continue
            C.progress(f"idle RSS, {peer.name}: "
                       f"{rows[peer.name]['kib_per_conn']:.2f} KiB/conn")
    table = markdown(meta, rows)
    print(table)
    C.write_atomically(os.path.join(args.out, "http_idle_rss.md"), table)
    C.write_atomically(os.path.join(args.out, "http_idle_rss.json"),
                       json.dumps({"meta": meta, "servers": rows}, indent=1) + "\n")
    return 1 if any(r["status"].startswith("FAILED") for r in rows.values()) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("idle_rss.py: interrupted; no results written")
