#!/usr/bin/env python3
"""bench/lua/jit_fraction.py — how much of a JSON handler's time runs in
compiled code under serve's defaults (the JIT on, loop checks written into
the handler).

One `moonflow serve` worker (serve's defaults otherwise) answers GET /json:
a table of 50 fields (numbers, strings, a nested array of 10 items) built
in Lua and encoded by mf.json.encode. An init_worker script starts
LuaJIT's profiler (jit.profile, mode "i": a sample a millisecond, counted
by VM state); wrk loads /json from 127.0.0.1 for --duration seconds after
a warm-up, then GET /_jit_states stops the profiler and answers the counts.
States: N compiled code, I interpreted, C a C function (mf.json.encode,
the server's own Lua C calls), G garbage collector, J the JIT compiler.

  python3 bench/lua/jit_fraction.py --moonflow build/moonflow [--duration 5]

Builds nothing. Writes bench/results/jit_fraction.md (its first line the
commit, time and machine, as every bench table) and prints it.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)

HANDLER = """local mf = require "moonflow"
return function(req, resp)
    local t = { id = 12345, name = "moonflow", ok = true, items = {} }
    for i = 1, 10 do
        t.items[i] = { n = i, label = "item" .. i, price = i * 1.25 }
    end
    for i = 1, 36 do
        t["field" .. i] = i % 3 == 0 and ("v" .. i) or i * 7
    end
    resp:send(mf.json.encode(t))
end
"""

# jit.profile serves one Lua state a process: one worker.
INIT_WORKER = """local profile = require "jit.profile"
local counts = { N = 0, I = 0, C = 0, G = 0, J = 0 }
package.loaded.jit_states = counts
profile.start("i", function(thread, samples, vmstate)
    counts[vmstate] = (counts[vmstate] or 0) + samples
end)
"""

STATES = """local mf = require "moonflow"
return function(req, resp)
    require("jit.profile").stop()
    resp:send(mf.json.encode(package.loaded.jit_states))
end
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("moonflow serve exited %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("moonflow serve did not listen")


def write_site(site, port):
    files = {"json.lua": HANDLER, "jit_states.lua": STATES,
             "_boot.lua": INIT_WORKER}
    for name, text in files.items():
        with open(os.path.join(site, name), "w") as f:
            f.write(text)
    conf = os.path.join(site, "conf.lua")
    with open(conf, "w") as f:
        f.write('return { root = ".", workers = 1, access_log = "off", '
                'listen = "127.0.0.1:%d", init_worker = "_boot.lua" }\n'
                % port)
    return conf


def get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                timeout=10) as r:
        return r.read()


def wrk(port, seconds, conns):
    subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds,
                    "http://127.0.0.1:%d/json" % port],
                   check=True, capture_output=True, timeout=seconds + 30)


def measure(moonflow, duration, conns):
    with tempfile.TemporaryDirectory(prefix="mf-bench-jit-") as site:
        port = free_port()
        conf = write_site(site, port)
        proc = subprocess.Popen([moonflow, "serve", "--config", conf],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            wait_port(port, proc)
            json.loads(get(port, "/json"))  # the handler answers JSON
            wrk(port, 1, conns)  # warm-up: traces compiled
            wrk(port, duration, conns)
            return json.loads(get(port, "/jit_states"))
        finally:
            proc.terminate()
            proc.wait(10)


def header():
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short",
                                 "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        if subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"]
                          ).returncode:
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return "> make bench at %s, %s, %d cores (%s), Linux %s." % (
        commit, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        os.cpu_count(), cpu, platform.release())


def report(counts, duration, conns):
    total = sum(counts.values()) or 1
    names = [("N", "compiled code"), ("I", "interpreted"),
             ("C", "C functions"), ("G", "garbage collector"),
             ("J", "JIT compiler")]
    lines = [header(),
             "## JIT: where a JSON handler's samples land (%s)" %
             time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "",
             "One `moonflow serve` worker with serve's defaults (the JIT on, "
             "loop checks in the handler), GET /json (a 50-field table built "
             "in Lua, mf.json.encode), wrk -t1 -c%d for %d s from 127.0.0.1 "
             "after a 1 s warm-up; LuaJIT's profiler (jit.profile, mode i) "
             "inside the worker counts samples of its CPU time by VM state. "
             "C counts C functions Lua calls (mf.json.encode, resp:send) and "
             "the server's own C code between handlers (the state reads C "
             "whenever Lua is not running). "
             "`bench/lua/jit_fraction.py --moonflow build/moonflow`."
             % (conns, duration), "",
             "| VM state | samples | share |", "| --- | ---: | ---: |"]
    for key, name in names:
        n = counts.get(key, 0)
        lines.append("| %s (%s) | %d | %.1f %% |" % (name, key, n,
                                                     100.0 * n / total))
    lua = counts.get("N", 0) + counts.get("I", 0)
    lines += ["", "Of the samples in Lua bytecode (N + I), %.1f %% ran "
              "compiled." % (100.0 * counts.get("N", 0) / (lua or 1))]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moonflow", default=os.path.join(ROOT, "build",
                                                       "moonflow"))
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--out", default=os.path.join(BENCH, "results"))
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("jit_fraction: wrk not found")
    duration = max(1, min(args.duration, 60))  # bounded
    counts = measure(args.moonflow, duration, args.conns)
    text = report(counts, duration, args.conns)
    with open(os.path.join(args.out, "jit_fraction.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
