#!/usr/bin/env python3
"""bench/http/compare.py — HTTP/1.1 servers side by side: CPU per request.

For each body size and connection count, each server in turn is started
pinned to core 0, warmed up for 1 s, then loaded by one wrk thread pinned to
core 1. The server's CPU time (utime + stime of the whole process, all
threads, from /proc/PID/stat) is read right before and after the wrk run:
CPU per request = that delta / requests wrk completed. Servers run
interleaved (A B C A B C ...) and the medians of the repeats are reported, so
the slow drift of a shared machine hits every server alike.

Why CPU per request and not req/s: one wrk thread saturates near 155k req/s
on one core, so every fast server shows about the same req/s; the CPU it
spent for those requests still tells them apart. See bench/README.md.

Writes a Markdown table to stdout and bench/results/http_hello.md, and every
raw sample to bench/results/http_hello.json. Exits 1 if any point failed
(socket errors, non-2xx answers, a wrong body, a server that died).
"""

import argparse
import ctypes
import http.client
import json
import os
import platform
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
from contextlib import contextmanager
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "results")
LATENCY_LUA = os.path.join(HERE, "latency.lua")
SERVER_CPU, CLIENT_CPU = 0, 1
HOST = "127.0.0.1"
WARMUP_S = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
PERCENTILES = ("50", "90", "99", "99.9")


class Unavailable(Exception):
    """A server that cannot run here (not built, not installed): its rows
    say so and the others carry on."""


class PointFailed(Exception):
    """A measurement that must not become a number: errors, a wrong answer,
    a server that died."""


def body_of(size):
    """The body every server sends: byte i is "0123456789abcdef"[i % 16]."""
    return ("0123456789abcdef" * (size // 16 + 1))[:size]


# ---- the servers ------------------------------------------------------------
#
# A peer knows whether it can run here (missing) and how to start it on a
# port (command). Another peer is one more class and one more PEERS entry.


class Nginx:
    name = "nginx"

    def __init__(self, build):
        self.exe = shutil.which("nginx")

    def missing(self):
        return None if self.exe else "not installed (apt-get install nginx-light)"

    def command(self, port, size, conns, workdir):
        return nginx_command(self.exe, workdir, nginx_config(
            port, conns, nginx_return_locations(size)))


def nginx_command(exe, workdir, config):
    """argv for nginx on config (a function of the prefix dir it gets)."""
    prefix = tempfile.mkdtemp(prefix="nginx-", dir=workdir)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(config(prefix))
    log = os.path.join(prefix, "error.log")
    return [exe, "-p", prefix, "-c", conf, "-e", log]


# nginx's config parser caps one token near 4 KB, so a longer body cannot be
# one literal: it is cut into 2 KB map variables that return concatenates (a
# copy into the request pool per request — small next to the rest, and said
# in bench/README.md).
NGINX_CHUNK = 2048


def nginx_body(size):
    """(map blocks, return text) for a body of size bytes."""
    body = body_of(size)
    if size <= NGINX_CHUNK:
        return "", body
    chunks = [body[i:i + NGINX_CHUNK] for i in range(0, size, NGINX_CHUNK)]
    maps = "".join(f'    map $uri $body_{i} {{ default "{c}"; }}\n'
                   for i, c in enumerate(chunks))
    return maps, "".join(f"${{body_{i}}}" for i in range(len(chunks)))


def nginx_return_locations(size):
    maps, text = nginx_body(size)
    return NginxSite(http=maps, server=f'location / {{ return 200 "{text}"; }}')


class NginxSite:
    """What a peer puts into the common nginx.conf: lines at the top
    (load_module), inside http {} and inside server {}."""

    def __init__(self, server, http="", main=""):
        self.server, self.http, self.main = server, http, main


def nginx_config(port, conns, site, workers=0):
    """A function of the prefix dir returning the whole nginx.conf."""
    # By default one process (master_process off) so /proc/PID/stat is all
    # of nginx's CPU; workers > 0: a master and that many workers on one
    # reuseport listener (their CPU read as a process tree). Temp paths
    # inside the prefix so nothing of the system's is touched.
    master = "on" if workers else "off"
    reuseport = " reuseport" if workers else ""
    def text(prefix):
        temp = "\n".join(f"    {kind}_temp_path {prefix}/{kind}_temp;"
                         for kind in ("client_body", "proxy", "fastcgi",
                                      "uwsgi", "scgi"))
        return f"""{site.main}daemon off;
master_process {master};
worker_processes {workers or 1};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections {conns + 128}; }}
http {{
    access_log off;
    default_type text/plain;
    keepalive_requests 1000000;
{temp}
{site.http}    server {{
        listen {HOST}:{port}{reuseport};
        {site.server}
    }}
}}
"""
    return text


# Debian's libnginx-mod-http-lua (with its dependency, the NDK module); our
# generated config loads them itself, the system's modules-enabled/ is not read.
NGINX_MODULES = "/usr/share/nginx/modules"
LUA_MODULES = "".join(f"load_module {NGINX_MODULES}/{m};\n" for m in
                      ("ndk_http_module.so", "ngx_http_lua_module.so"))


class NginxLua:
    """nginx answering from a content_by_lua_block. The body is built once,
    at load time (init_by_lua), as a handler would keep a constant; without
    Content-Length nginx sends it chunked."""
    name = "nginx-lua"
    content_length = False
    _missing = {}  # one probe per process: nginx -t with the module

    def __init__(self, build):
        self.exe = shutil.which("nginx")

    def site(self, size):
        cl = ('ngx.header["Content-Length"] = #BODY; '
              if self.content_length else "")
        return NginxSite(
            main=LUA_MODULES,
            http=f"    init_by_lua_block {{ BODY = string.rep("
                 f'"0123456789abcdef", {size // 16 + 1}):sub(1, {size}) }}\n',
            server=f"location / {{ content_by_lua_block {{ {cl}ngx.print(BODY) }} }}")

    def missing(self):
        if not self.exe:
            return "not installed (apt-get install nginx-light)"
        if "why" not in NginxLua._missing:
            NginxLua._missing["why"] = probe_nginx(self.exe, self.site(16))
        return NginxLua._missing["why"]

    def command(self, port, size, conns, workdir):
        return nginx_command(self.exe, workdir,
                             nginx_config(port, conns, self.site(size)))


class NginxLuaLength(NginxLua):
    """The same, with an explicit Content-Length: no chunked framing."""
    name = "nginx-lua-cl"
    content_length = True


def probe_nginx(exe, site):
    """None if nginx -t accepts the site (modules load), else why not."""
    with tempfile.TemporaryDirectory(prefix="nginx-probe-") as d:
        argv = nginx_command(exe, d, nginx_config(free_port(), 16, site))
        out = subprocess.run(argv + ["-t"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    if out.returncode == 0:
        return None
    lines = [l for l in out.stderr.splitlines() if "emerg" in l] or [out.stderr]
    return ("nginx -t fails (apt-get install libnginx-mod-http-lua): "
            + lines[0].strip())


class Moonflow:
    """The C hello server (examples/http_hello): the engine without Lua."""
    name = "moonflow-c"

    def __init__(self, build):
        self.exe = os.path.join(build, "examples", "http_hello")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def command(self, port, size, conns, workdir):
        # The connection cap follows nginx's worker_connections (conns + 128).
        return [self.exe, "--listen", f"{HOST}:{port}", "--workers", "1",
                "--body-size", str(size), "--max-connections", str(conns + 128)]


class MoonflowLua:
    """moonflow serve with bench/lua/index.lua: the same answer from a Lua
    handler running in a coroutine per request (the price of Lua)."""
    name = "moonflow-lua"
    site = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "lua")

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def env(self, size):
        return [f"MF_BENCH_BODY_SIZE={size}"]

    def command(self, port, size, conns, workdir):
        # env execs the server: the PID measured is moonflow's own.
        return ["env"] + self.env(size) + [
            self.exe, "serve", self.site, "--listen", f"{HOST}:{port}",
            "--workers", "1", "--access-log", "off"]


class Ceiling:
    name = "ceiling"

    def __init__(self, build):
        self.exe = os.path.join(build, "bench", "bench_ceiling")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def command(self, port, size, conns, workdir):
        return [self.exe, "--listen", f"{HOST}:{port}", "--body-size", str(size)]


PEERS = {cls.name: cls for cls in
         (Nginx, NginxLua, NginxLuaLength, Moonflow, MoonflowLua, Ceiling)}


# ---- processes ----------------------------------------------------------------


def _die_with_parent():
    """Runs in the child before exec: if this script is killed outright, its
    servers and tracers are killed too instead of lingering on core 0."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv, log):
    # A session of its own: a Ctrl-C reaches only this script, which then
    # stops its children itself, in order (tracer before server).
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_die_with_parent)


def stop(proc, sig=signal.SIGTERM, grace=5):
    """Stops one process we started, by its PID; SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def log_tail(path, lines=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:]).rstrip()


def wait_for_port(proc, port, log_path, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PointFailed(f"exited with status {proc.returncode} before "
                              f"listening:\n{log_tail(log_path)}")
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise PointFailed(f"not listening on {HOST}:{port} after {timeout} s")


def check_answer(port, want, path="/"):
    """One request by hand: a server that answers wrongly (or a shorter
    body) must not win on CPU. want: the exact body (str)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        got = resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise PointFailed(f"no valid answer to one GET: {e!r}") from None
    finally:
        conn.close()
    if resp.status != 200 or got != want.encode():
        raise PointFailed(f"wrong answer to {path}: status {resp.status}, "
                          f"{len(got)}-byte body (want 200, {len(want)} bytes)")


@contextmanager
def running(peer, size, conns, workdir, cpu=SERVER_CPU, path="/", want=None,
            check=None):
    """Yields (process, port) of a started, listening, checked server (GET
    path must answer want, by default the body of size bytes; or check(port)
    raises PointFailed); stops it on every way out. A free port can be taken
    between our probe and the server's bind, so a server that fails to
    start is tried on a new port."""
    for attempt in range(3):
        port = free_port()
        log_path = os.path.join(workdir, f"{peer.name}-{port}.log")
        argv = ["taskset", "-c", str(cpu),
                *peer.command(port, size, conns, workdir)]
        with open(log_path, "wb") as log:
            proc = spawn(argv, log)
        try:
            try:
                wait_for_port(proc, port, log_path)
            except PointFailed:
                if attempt == 2:
                    raise
                continue
            if check:
                check(port)
            else:
                check_answer(port, body_of(size) if want is None else want, path)
            try:
                yield proc, port
            except PointFailed as e:
                raise PointFailed(f"{e}{death_note(proc, log_path)}") from None
            if proc.poll() is not None:
                raise PointFailed("died during the run" + death_note(proc, log_path))
            return
        finally:
            stop(proc)


def death_note(proc, log_path):
    if proc.poll() is None:
        return ""
    return f"\nserver exited with status {proc.returncode}:\n{log_tail(log_path)}"


def cpu_seconds(pid):
    """utime + stime of the whole process (all threads, live and exited)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name may hold spaces and parentheses: count fields from
    # the last ')'. After it comes field 3, so fields 14 and 15 are [11], [12].
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_seconds(pid):
    """CPU seconds of pid and its children (nginx's workers)."""
    total = cpu_seconds(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(pid):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                total += cpu_seconds(int(entry))
    return total


# ---- wrk ------------------------------------------------------------------------


def run_wrk(port, conns, seconds, path="/"):
    argv = ["taskset", "-c", str(CLIENT_CPU), "wrk", "-t1", f"-c{conns}",
            f"-d{seconds}s", "--latency", "-s", LATENCY_LUA,
            f"http://{HOST}:{port}{path}"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=seconds + 30, stdin=subprocess.DEVNULL,
                             preexec_fn=_die_with_parent)
    except subprocess.TimeoutExpired:
        raise PointFailed(f"wrk still running {seconds + 30} s after start") from None
    if out.returncode != 0:
        raise PointFailed(f"wrk exited with {out.returncode}: {out.stderr.strip()}")
    result = parse_wrk(out.stdout)
    check_wrk(result)
    return result


def parse_wrk(text):
    """Reads the line latency.lua's done() prints; latencies in µs."""
    match = re.search(r"^bench-summary (.*)$", text, re.M)
    if not match:
        raise PointFailed(f"no summary line in wrk's output:\n{text}")
    r = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
    r["requests"] = int(r["requests"])
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def check_wrk(r):
    errors = {k: int(r[k]) for k in ("connect_errors", "read_errors",
                                      "write_errors", "timeouts",
                                      "status_errors") if r[k]}
    if errors:
        raise PointFailed("wrk saw " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                 for k, v in errors.items()))
    if r["requests"] == 0:
        raise PointFailed("wrk completed no request")


# ---- one sample -----------------------------------------------------------------


def measure(peer, size, conns, seconds, workdir):
    with running(peer, size, conns, workdir) as (proc, port):
        run_wrk(port, conns, WARMUP_S)
        before = cpu_seconds(proc.pid)
        w = run_wrk(port, conns, seconds)
        after = cpu_seconds(proc.pid)
    w["cpu_s"] = after - before
    w["cpu_us_per_req"] = w["cpu_s"] * 1e6 / w["requests"]
    return w


def wait_traced(pid, tracer, err_path, timeout=10):
    """strace -f attaches to every thread; wait until each has a tracer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tracer.poll() is not None:
            raise Unavailable(f"strace could not attach: {log_tail(err_path, 3)}")
        tids = os.listdir(f"/proc/{pid}/task")
        if all(tracer_of(pid, tid) != 0 for tid in tids):
            return
        time.sleep(0.05)
    raise Unavailable(f"strace did not attach within {timeout} s")


def tracer_of(pid, tid):
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            return int(re.search(r"^TracerPid:\s*(\d+)", f.read(), re.M).group(1))
    except FileNotFoundError:  # the thread exited meanwhile
        return -1


def parse_strace(path):
    """{syscall: calls} from strace -c's table (the 'calls' column)."""
    calls = {}
    with open(path) as f:
        for line in f:
            tokens = line.split()
            if len(tokens) >= 5 and re.match(r"^\d+\.\d+$", tokens[0]):
                calls[tokens[-1]] = int(tokens[3])
    if "total" not in calls:
        raise Unavailable(f"no summary in strace's output {path}")
    return calls


def measure_syscalls(peer, size, conns, seconds, workdir):
    """A separate, shorter run under strace -c: it slows the server many
    times, so its CPU numbers are not kept; the counts per request are."""
    with running(peer, size, conns, workdir) as (proc, port):
        run_wrk(port, conns, WARMUP_S)
        out = os.path.join(workdir, f"strace-{peer.name}-{port}.txt")
        err = out + ".log"
        with open(err, "wb") as log:
            tracer = spawn(["strace", "-c", "-f", "-o", out, "-p", str(proc.pid)], log)
        try:
            wait_traced(proc.pid, tracer, err)
            w = run_wrk(port, conns, seconds)
        finally:
            stop(tracer, signal.SIGINT, grace=30)  # SIGINT: detach, write summary
    calls = parse_strace(out)
    total = calls.pop("total")
    return {"requests": w["requests"], "syscalls": total,
            "per_request": total / w["requests"],
            "by_name": {k: v / w["requests"] for k, v in
                        sorted(calls.items(), key=lambda kv: -kv[1])}}


# ---- a point: one body size, one connection count ----------------------------


def interleave(peers, repeats, measure_one, label, describe):
    """Measures each peer `repeats` times, interleaved (A B C A B C ...), so
    a shared machine's drift hits every peer alike. A peer that fails once
    is reported and left out of the remaining rounds. Returns
    {name: {"status": "ok" or why not, "samples": [...]}}."""
    rows = {p.name: {"status": p.missing() or "ok", "samples": []} for p in peers}
    for rep in range(repeats):
        for peer in peers:
            row = rows[peer.name]
            if row["status"] != "ok":
                continue
            try:
                s = measure_one(peer)
            except PointFailed as e:
                row["status"] = f"FAILED: {e}"
                print(f"\n*** {label}, {peer.name}: {e}\n", file=sys.stderr)
                continue
            row["samples"].append(s)
            progress(f"{label}, {peer.name} #{rep + 1}: {describe(s)}")
    return rows


def run_point(peers, size, conns, args, workdir):
    rows = interleave(
        peers, args.repeats,
        lambda peer: measure(peer, size, conns, args.duration, workdir),
        f"{size} B, {conns} conns",
        lambda s: f"{s['cpu_us_per_req']:.2f} µs/req, {s['rps']:,.0f} req/s")
    for peer in peers:
        if (args.strace and conns in args.strace_conns
                and rows[peer.name]["status"] == "ok"):
            rows[peer.name]["syscalls"] = syscalls_or_reason(
                peer, size, conns, args, workdir)
    summarize(rows)
    return {"body_size": size, "conns": conns, "servers": rows}


def syscalls_or_reason(peer, size, conns, args, workdir):
    try:
        sc = measure_syscalls(peer, size, conns, args.strace_duration, workdir)
    except (Unavailable, PointFailed) as e:
        progress(f"{size} B, {conns} conns, {peer.name}: no syscall count: {e}")
        return {"error": str(e)}
    progress(f"{size} B, {conns} conns, {peer.name}: "
             f"{sc['per_request']:.2f} syscalls/req under strace")
    return sc


def spread(values):
    """(max - min) / median of a run's repeats (0 for none): how far the
    repeats of one point disagree."""
    v = list(values)
    return (max(v) - min(v)) / statistics.median(v) if v else 0


def summarize(rows):
    """Medians over the repeats; ratios paired by repeat (sample r of a
    server against sample r of nginx, which ran moments apart), then the
    median of those, so drift between repeats cancels out."""
    for row in rows.values():
        samples = row["samples"]
        if row["status"] != "ok" or not samples:
            continue
        keys = ["cpu_us_per_req", "rps"] + [f"p{p}_us" for p in PERCENTILES]
        row["median"] = {k: statistics.median(s[k] for s in samples) for k in keys}
        row["median"]["cpu_spread"] = spread(s["cpu_us_per_req"] for s in samples)
    for base in ("nginx", "nginx-lua", "ceiling"):
        for row in rows.values():
            row[f"ratio_vs_{base}"] = paired_ratio(row, rows.get(base))


def paired_ratio(row, base):
    if not base or "median" not in row or "median" not in base:
        return None
    pairs = zip(row["samples"], base["samples"])
    return statistics.median(a["cpu_us_per_req"] / b["cpu_us_per_req"]
                             for a, b in pairs)


# ---- output ---------------------------------------------------------------------


def markdown(meta, points):
    out = [f"## HTTP hello: server CPU per request ({meta['date']})", "",
           f"{meta['machine']}. Server on core {SERVER_CPU}, wrk -t1 on core "
           f"{CLIENT_CPU}; {meta['duration_s']} s per run, median of "
           f"{meta['repeats']} interleaved runs. {meta['versions']}.", "",
           "| body | conns | server | CPU µs/req | spread | ÷ nginx "
           "| ÷ nginx-lua | ÷ ceiling "
           "| req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | syscalls/req |",
           "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | ---: |"]
    for pt in points:
        for name, row in pt["servers"].items():
            out.append(table_row(pt, name, row))
    out += ["", "spread: (max − min) / median of CPU µs/req over the repeats. "
            "÷ nginx, ÷ nginx-lua, ÷ ceiling: median of the per-repeat ratios "
            "(nginx-lua: content_by_lua_block with ngx.print). syscalls/req: "
            "a separate run under strace -c (which slows the server and so "
            "batches more: compare servers, not absolute values)."]
    out += syscall_lines(points)
    return "\n".join(out) + "\n"


def table_row(pt, name, row):
    head = f"| {pt['body_size']} B | {pt['conns']} | {name} |"
    if "median" not in row:
        reason = row["status"].splitlines()[0]
        return head + f" {reason} |" + " |" * 10
    m = row["median"]
    ratio = lambda r: f"{r:.2f}" if r is not None else "n/a"
    lat = " | ".join(f"{m[f'p{p}_us'] / 1000:.2f}" for p in PERCENTILES)
    sc = row.get("syscalls", {}).get("per_request")
    return (head + f" {m['cpu_us_per_req']:.2f} | {m['cpu_spread']:.0%} | "
            f"{ratio(row['ratio_vs_nginx'])} | "
            f"{ratio(row.get('ratio_vs_nginx-lua'))} | "
            f"{ratio(row['ratio_vs_ceiling'])} | "
            f"{m['rps']:,.0f} | {lat} | "
            + (f"{sc:.2f} |" if sc is not None else "– |"))


def syscall_lines(points):
    lines = []
    for pt in points:
        for name, row in pt["servers"].items():
            by_name = row.get("syscalls", {}).get("by_name")
            if by_name:
                top = ", ".join(f"{k} {v:.2f}" for k, v in list(by_name.items())[:6])
                lines.append(f"- {pt['body_size']} B, {pt['conns']} conns, "
                             f"{name}: {top}")
    if not lines:
        return []
    return ["", "Syscalls per request, most frequent first:", ""] + lines


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_tables(out, name, lines, data, rows):
    """Prints the tables (lines), writes them to OUT/NAME.md and data to
    OUT/NAME.json; returns the exit status: 1 if a row (a dict with a
    "status") failed."""
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(out, exist_ok=True)
    write_atomically(os.path.join(out, name + ".md"), table)
    write_atomically(os.path.join(out, name + ".json"),
                     json.dumps(data, indent=1) + "\n")
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


# ---- setup ----------------------------------------------------------------------


def tool_version(argv, pattern):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except OSError:
        return "?"
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else "?"


def machine_meta(args):
    with open("/proc/cpuinfo") as f:
        model = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores ({model.group(1) if model else '?'}), "
                   f"Linux {platform.release()}",
        "versions": "wrk " + tool_version(["wrk", "-v"], r"wrk (\S+)")
                    + ", nginx " + tool_version(["nginx", "-v"], r"nginx/(\S+)")
                    + ", lua-nginx-module " + tool_version(
                        ["dpkg-query", "-W", "libnginx-mod-http-lua"],
                        r"libnginx-mod-http-lua\s+(\S+)"),
        "argv": sys.argv[1:], "servers": args.servers, "sizes": args.sizes,
        "conns": args.conns, "duration_s": args.duration, "repeats": args.repeats,
        "strace_duration_s": args.strace_duration if args.strace else None,
        "strace_conns": args.strace_conns if args.strace else None,
        "server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU, "warmup_s": WARMUP_S,
    }


def check_machine(args):
    for tool in ("wrk", "taskset") + (("strace",) if args.strace else ()):
        if not shutil.which(tool):
            sys.exit(f"compare.py: {tool} not found (make bench installs it)")
    if not {SERVER_CPU, CLIENT_CPU} <= os.sched_getaffinity(0):
        sys.exit(f"compare.py: needs cores {SERVER_CPU} and {CLIENT_CPU}: the "
                 "server and wrk must not share a core")
    # wrk and the servers inherit this: 1024 connections need more than the
    # usual 1024 descriptors.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(args.conns) + 256
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit(f"compare.py: open-file limit {hard} < {need} needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def int_list(text):
    values = [int(x) for x in text.split(",") if x]
    if not values or min(values) < 0:
        raise ValueError(text)
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add = ap.add_argument
    add("--duration", type=int, help="seconds per measured wrk run (3)")
    add("--repeats", type=int, help="interleaved runs per server (3)")
    add("--conns", type=int_list, default=[64, 256, 1024],
        help="connection counts (64,256,1024)")
    add("--strace-conns", type=int_list, default=[256],
        help="points that also get a strace run (256)")
    add("--sizes", type=int_list, default=[16, 4096], help="body bytes (16,4096)")
    add("--servers", default=",".join(PEERS),
        help=f"which, in which order ({','.join(PEERS)})")
    add("--build", default="build-release", help="CMake build dir (build-release)")
    add("--no-strace", dest="strace", action="store_false",
        help="skip the syscall counts (separate runs under strace)")
    add("--quick", action="store_true", help="2 s runs, 1 repeat: a smoke test")
    add("--out", default=RESULTS, help="results dir (bench/results)")
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 2 if args.quick else 3
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    args.strace_duration = 2 if args.quick else 3
    args.servers = args.servers.split(",")
    unknown = [s for s in args.servers if s not in PEERS]
    if unknown:
        ap.error(f"unknown server {', '.join(unknown)}")
    if args.duration < 1 or args.repeats < 1 or min(args.conns) < 1:
        ap.error("--duration, --repeats and --conns must be at least 1")
    return args


def _exit_on_sigterm(signum, frame):
    sys.exit(128 + signum)  # SystemExit unwinds the finally blocks: cleanup runs


def progress(msg):
    print(f"  {msg}", file=sys.stderr, flush=True)


def announce(args, peers, meta):
    """What will run and for about how long (make bench has 15 minutes)."""
    points = len(args.sizes) * len(args.conns)
    ready = sum(1 for p in peers if not p.missing())
    runs = points * ready * args.repeats
    seconds = runs * (args.duration + WARMUP_S + 0.5)
    if args.strace:
        traced = len(args.sizes) * len(set(args.conns) & set(args.strace_conns))
        seconds += traced * ready * (args.strace_duration + WARMUP_S + 1.5)
    print(f"compare.py: {runs} runs of {args.duration} s (+{WARMUP_S} s warm-up)"
          f"{', + strace runs' if args.strace else ''}; about "
          f"{seconds / 60:.0f} min on {meta['machine']}", file=sys.stderr)


def write_results(out_dir, meta, points):
    table = markdown(meta, points)
    print(table)
    os.makedirs(out_dir, exist_ok=True)
    write_atomically(os.path.join(out_dir, "http_hello.md"), table)
    write_atomically(os.path.join(out_dir, "http_hello.json"),
                     json.dumps({"meta": meta, "points": points}, indent=1) + "\n")


def main(argv):
    args = parse_args(argv)
    check_machine(args)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    peers = [PEERS[name](os.path.abspath(args.build)) for name in args.servers]
    meta = machine_meta(args)
    announce(args, peers, meta)
    points = []
    with tempfile.TemporaryDirectory(prefix="mf-bench-http-") as workdir:
        for size in args.sizes:
            for conns in args.conns:
                points.append(run_point(peers, size, conns, args, workdir))
    write_results(args.out, meta, points)
    failed = [f"{pt['body_size']} B/{pt['conns']} conns/{name}"
              for pt in points for name, row in pt["servers"].items()
              if row["status"].startswith("FAILED")]
    if failed:
        print(f"compare.py: FAILED points: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # servers were stopped on the way out
        sys.exit("compare.py: interrupted; no results written")
