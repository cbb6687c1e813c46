#!/usr/bin/env python3
"""bench/kafka/compare_kafka.py — the Kafka producer side by side.

One librdkafka mock cluster (bench_kafka_mock: spec/fixture/kafka_mock.c,
3 brokers on loopback, a real Kafka protocol implementation in a process
of its own) pinned to core 0. Every run gets a fresh topic of 4
partitions. Two parts:

raw   MESSAGES values of 100 bytes, no key, acks=all and idempotence on,
      as fast as a producer on core 1 can send them:
        plain     bench_kafka_plain (bench/kafka/plain_producer.c):
                  rd_kafka_producev in a loop, a delivery-report callback,
                  rd_kafka_poll, flush (the reference)
        kcat      kcat -P -l FILE (FILE: MESSAGES lines of 100 bytes)
        moonflow  moonflow run bench/kafka/produce_load.lua: CONC
                  messages in flight on one mf.kafka producer, as
                  CONC / 1000 coroutines each looping
                  k:produce_batch(values, {topic = TOPIC}) of 1000 values
                  and checking the outcome of every message
      Per run: messages/s over the whole process's life (start to exit,
      the same clock for every client: kcat has no clock of its own), the
      client's CPU per message (utime + stime of the waited child: every
      thread, librdkafka's included), the mock cluster's CPU per message.
      After each run the topic's high watermarks must add up to MESSAGES
      exactly (no loss, no duplicate).
http  GET /event?<100 bytes> → one message (the query as value, a request
      id as key) → an answer. The server (1 process) is pinned to core 0
      with the mock cluster, wrk -t1 to core 1, at 64 and 256 connections.
      Per request: the server's CPU (utime + stime of the process, every
      thread) and the mock cluster's.
        nginx-lua-resty-kafka  Debian's lua-nginx-kafka 0.07 (lua-resty-
                               kafka) in async mode: p:send queues the
                               message and the answer goes out at once; a
                               timer sends batches (the reference)
        moonflow-lua           moonflow serve examples/kafka_site: k:produce
                               waits for the delivery report, then answers
                               its partition and offset
      The mock cluster refuses every batch lua-resty-kafka 0.07 sends: it
      stores record batches (message format v2) only, and lua-resty-kafka
      writes message sets v0/v1 (Produce v0-v2); the answer is
      UNSUPPORTED_VERSION (35) per partition. lua-resty-kafka's error table
      lacks code 35, and its retry log line then raises (producer.lua:182,
      arithmetic on a nil error), which kills its flush timer for good;
      the nginx config adds the name of code 35 to that table (init_by_lua)
      so the library goes through its normal path: encode, send, read the
      answer, report each batch to error_handle (counted). max_retry = 1:
      no sleep between tries (a refused batch is never retried, it is not
      retryable), one metadata refresh per failed flush. So its row is the
      CPU of doing the producing work, not of storing: nothing lands.

Runs interleave (A B A B ...) over the repeats; tables show medians, ratios
are paired by repeat. Writes bench/results/kafka.md and kafka.json; exits 1
if any point failed.
"""

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(BENCH, "http"))
sys.path.insert(0, os.path.join(BENCH, "redis"))
sys.path.insert(0, os.path.join(ROOT, "spec", "integration"))
import compare as C  # noqa: E402  (bench/http/compare.py: the shared harness)
import compare_redis as R  # noqa: E402  (medians, paired ratios, run_client)
import harness  # noqa: E402  (KafkaMock: the tests' mock cluster process)

VALUE = C.body_of(100)
PATH = "/event?" + VALUE
PARTITIONS = 4
PRODUCE_LOAD = os.path.join(HERE, "produce_load.lua")
SITE = os.path.join(ROOT, "examples", "kafka_site")
REFERENCE, RAW_REFERENCE = "nginx-lua-resty-kafka", "plain"
RESTY_KAFKA = "/usr/share/lua/5.1/nginx/kafka/producer.lua"


class Mock:
    """The mock cluster pinned to core 0 (every thread: taskset at exec),
    a fresh topic per run."""

    def __init__(self, build):
        exe = os.path.join(build, "bench", "bench_kafka_mock")
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"compare_kafka.py: {exe} not built")
        self.counter_exe = os.path.join(build, "bench", "bench_kafka_plain")
        self.mock = harness.KafkaMock(
            brokers=3, path=exe, argv_prefix=["taskset", "-c", str(C.SERVER_CPU)])
        self.bootstrap, self.pid = self.mock.bootstrap, self.mock.pid
        self.serial = 0

    def close(self):
        self.mock.close()

    def fresh_topic(self, what):
        self.serial += 1
        name = f"bench-{what}-{self.serial}"
        self.mock.topic(name, PARTITIONS)
        return name

    def count(self, topic):
        out = subprocess.run([self.counter_exe, "--count", self.bootstrap, topic],
                             capture_output=True, text=True, timeout=60)
        m = re.match(r"count (\d+)", out.stdout)
        if out.returncode != 0 or not m:
            raise C.PointFailed(f"counting {topic}: {out.stderr.strip()}")
        return int(m.group(1))

    def alive(self):
        return self.mock.proc is not None and self.mock.proc.poll() is None


# ---- raw: produce throughput from a client on core 1 ----------------------------


class Plain:
    name = "plain"

    def __init__(self, build):
        self.exe = os.path.join(build, "bench", "bench_kafka_plain")

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not built"

    def command(self, mock, topic, args):
        return [self.exe, mock.bootstrap, topic, str(args.messages), str(len(VALUE))]


class Kcat:
    name = "kcat"

    def __init__(self, build):
        self.exe = "/usr/bin/kcat"

    def missing(self):
        return None if os.access(self.exe, os.X_OK) else "not installed (apt-get install kcat)"

    def command(self, mock, topic, args):
        return [self.exe, "-b", mock.bootstrap, "-P", "-t", topic, "-X", "acks=all",
                "-X", "enable.idempotence=true", "-l", args.lines_file]


class MoonflowPeer:
    """A peer run by build/moonflow, which must have mf.kafka (probed once)."""
    _missing = {}

    def __init__(self, build):
        self.exe = os.path.join(build, "moonflow")

    def missing(self):
        return R.moonflow_missing(self.exe, "kafka", MoonflowPeer._missing)


class MoonflowLoad(MoonflowPeer):
    name = "moonflow"

    def command(self, mock, topic, args):
        return [self.exe, "run", PRODUCE_LOAD, mock.bootstrap, topic,
                str(args.messages), str(len(VALUE)), str(args.conc), str(args.max_s)]


RAW_CLIENTS = {cls.name: cls for cls in (Plain, Kcat, MoonflowLoad)}


def own_window(out):
    """The summary line of plain_producer.c and produce_load.lua, if any."""
    m = re.search(r"^bench-summary (.*)$", out, re.M)
    if not m:
        return None
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def measure_raw(client, mock, args):
    topic = mock.fresh_topic(client.name)
    before = C.cpu_seconds(mock.pid)
    t0 = time.monotonic()
    out, cpu = R.run_client(client.command(mock, topic, args), args.max_s + 60)
    wall = time.monotonic() - t0
    mock_cpu = C.cpu_seconds(mock.pid) - before
    if not mock.alive():
        raise C.PointFailed("the mock cluster died")
    landed = mock.count(topic)
    if landed != args.messages:
        raise C.PointFailed(f"{landed} messages in the topic, {args.messages} sent")
    r = {"messages": landed, "seconds": wall, "msgs_per_s": landed / wall,
         "client_cpu_us_per_msg": cpu * 1e6 / landed,
         "mock_cpu_us_per_msg": mock_cpu * 1e6 / landed}
    w = own_window(out)
    if w:
        r["window_msgs_per_s"] = w["messages"] / w["seconds"]
        r["window_cpu_us_per_msg"] = w["cpu_s"] * 1e6 / w["messages"]
    return r


def run_raw(args, mock):
    clients = [RAW_CLIENTS[n](os.path.abspath(args.build)) for n in args.clients]
    rows = C.interleave(
        clients, args.repeats, lambda c: measure_raw(c, mock, args),
        f"raw, {args.messages:,} messages",
        lambda s: (f"{s['msgs_per_s']:,.0f} msgs/s, client "
                   f"{s['client_cpu_us_per_msg']:.2f} µs/msg, mock "
                   f"{s['mock_cpu_us_per_msg']:.2f} µs/msg"))
    for row in rows.values():
        R.summarize(row, ("msgs_per_s", "client_cpu_us_per_msg",
                          "mock_cpu_us_per_msg", "seconds"), "msgs_per_s")
        windows = [s["window_msgs_per_s"] for s in row["samples"]
                   if "window_msgs_per_s" in s]
        if row.get("median"):
            row["median"]["window_msgs_per_s"] = (statistics.median(windows)
                                                  if windows else None)
    base = rows.get(RAW_REFERENCE, {})
    for row in rows.values():
        row["msgs_ratio"] = R.paired_ratio(row, base, "msgs_per_s")
        row["cpu_ratio"] = R.paired_ratio(row, base, "client_cpu_us_per_msg")
    return {"messages": args.messages, "conc": args.conc, "clients": rows}


# ---- http: HTTP → produce → HTTP --------------------------------------------------


class NginxRestyKafka(C.NginxLua):
    name = REFERENCE
    _missing = {}

    def site(self, size=0):
        brokers = ", ".join('{host = "%s", port = %s}' % tuple(b.rsplit(":", 1))
                            for b in getattr(self, "bootstrap", "127.0.0.1:9092").split(","))
        topic = getattr(self, "topic", "events")
        init = ('local errors = require "nginx.kafka.errors" '
                'errors[35] = errors[35] or "UnsupportedVersion" '
                'FAILED, BATCHES = 0, 0 '
                f'BROKERS = {{ {brokers} }} '
                'CONF = { producer_type = "async", required_acks = -1, max_retry = 1, '
                'error_handle = function(topic, part, queue, index, err, retryable) '
                'FAILED = FAILED + index / 2 BATCHES = BATCHES + 1 end }')
        event = ('local producer = require "nginx.kafka.producer" '
                 'local p = producer:new(BROKERS, CONF) '
                 f'local ok, err = p:send("{topic}", ngx.var.request_id, ngx.var.args) '
                 'if not ok then ngx.status = 503 ngx.say(err) return ngx.exit(503) end '
                 "ngx.print('{\"queued\":true}')")
        stats = 'ngx.print(string.format(\'{"failed":%d,"batches":%d}\', FAILED, BATCHES))'
        return C.NginxSite(
            main=C.LUA_MODULES,
            http=('    lua_package_path "/usr/share/lua/5.1/?.lua;;";\n'
                  f"    init_by_lua_block {{ {init} }}\n"),
            server=(f"location = /event {{ content_by_lua_block {{ {event} }} }}\n"
                    f"        location = /stats {{ content_by_lua_block {{ {stats} }} }}"))

    def command(self, port, size, conns, workdir):
        return C.nginx_command(self.exe, workdir, C.nginx_config(port, conns, self.site()))

    def missing(self):
        if not os.path.exists(RESTY_KAFKA):
            return "lua-resty-kafka not installed (apt-get install lua-nginx-kafka)"
        if "why" not in self._missing:
            self._missing["why"] = C.probe_nginx(self.exe, self.site())
        return self._missing["why"]

    def check(self, body):
        return body == b'{"queued":true}'


class MoonflowSite(MoonflowPeer):
    """moonflow serve examples/kafka_site: /event answers after the report."""
    name = "moonflow-lua"

    def command(self, port, size, conns, workdir):
        # env execs the server: the PID measured is moonflow's own.
        return ["env", f"KAFKA_BROKERS={self.bootstrap}", f"KAFKA_TOPIC={self.topic}",
                self.exe, "serve", SITE, "--listen", f"{C.HOST}:{port}",
                "--workers", "1", "--access-log", "off"]

    def check(self, body):
        try:
            got = json.loads(body)
        except ValueError:
            return False
        return got.get("topic") == self.topic and got.get("offset", -1) >= 0


HTTP_PEERS = {cls.name: cls for cls in (NginxRestyKafka, MoonflowSite)}


def get(port, path):
    conn = http.client.HTTPConnection(C.HOST, port, timeout=15)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise C.PointFailed(f"no valid answer to GET {path[:40]}: {e!r}") from None
    finally:
        conn.close()


def check_event(peer):
    """check(port) for C.running: one /event must get the peer's answer."""
    def check(port):
        status, body = get(port, PATH)
        if status != 200 or not peer.check(body):
            raise C.PointFailed(f"wrong answer to /event: {status} {body[:200]!r}")
    return check


def thread_cpu(pid):
    """CPU seconds of each thread of pid, summed by its name with digits
    dropped (the loop "moonflow", "rdk:broker", "rdk:bg", "rdk:main"):
    where a request's CPU goes inside the server."""
    by_name = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended: its time is in the process's
        name = re.sub(r"[-\d]+$", "", stat[stat.index("(") + 1:stat.rindex(")")])
        fields = stat[stat.rindex(")") + 2:].split()
        by_name[name] = (by_name.get(name, 0)
                         + (int(fields[11]) + int(fields[12])) / C.CLK_TCK)
    return by_name


def measure_http(peer, mock, conns, seconds, workdir):
    peer.bootstrap, peer.topic = mock.bootstrap, mock.fresh_topic(peer.name)
    with C.running(peer, 0, conns, workdir, check=check_event(peer)) as (proc, port):
        C.run_wrk(port, conns, C.WARMUP_S, path=PATH)
        landed_before = mock.count(peer.topic)
        threads0 = thread_cpu(proc.pid)
        before = C.cpu_seconds(proc.pid), C.cpu_seconds(mock.pid)
        w = C.run_wrk(port, conns, seconds, path=PATH)
        after = C.cpu_seconds(proc.pid), C.cpu_seconds(mock.pid)
        threads1 = thread_cpu(proc.pid)
        time.sleep(1.5)  # lua-resty-kafka flushes its buffer once a second
        status, stats = get(port, "/stats")
        w["landed"] = mock.count(peer.topic) - landed_before
    if not mock.alive():
        raise C.PointFailed("the mock cluster died")
    n = w["requests"]
    w["cpu_us_per_req"] = (after[0] - before[0]) * 1e6 / n
    w["mock_cpu_us_per_req"] = (after[1] - before[1]) * 1e6 / n
    w["threads_us_per_req"] = {
        name: (t - threads0.get(name, 0)) * 1e6 / n
        for name, t in threads1.items()}
    # librdkafka's threads (rdk:*) apart from the rest (the loop): the
    # producer's own cost, which nginx's lua-resty-kafka pays in its worker.
    w["rdk_cpu_us_per_req"] = sum(v for k, v in w["threads_us_per_req"].items()
                                  if k.startswith("rdk:"))
    w["stats"] = json.loads(stats) if status == 200 else None
    # moonflow answers 200 after each delivery: every answer of the run is
    # a message that landed after the first count; requests cut when the
    # warm-up and the run stopped (up to `conns` each) may add theirs.
    # lua-resty-kafka's batches are all refused.
    if peer.name == MoonflowSite.name and not n <= w["landed"] <= n + 2 * conns:
        raise C.PointFailed(f"{n} answers but {w['landed']} messages in the topic")
    # lua-resty-kafka must have taken every message through its send path
    # to the refusal (warm-up included), not dropped them before.
    if peer.name == REFERENCE and not (w["stats"] and w["stats"]["failed"] >= n):
        raise C.PointFailed(f"{n} requests but lua-resty-kafka reported "
                            f"{w['stats']} to its error_handle")
    return w


def run_http(args, mock, workdir):
    peers = [HTTP_PEERS[name](os.path.abspath(args.build)) for name in args.servers]
    points = []
    for conns in args.conns:
        rows = C.interleave(
            peers, args.repeats,
            lambda peer: measure_http(peer, mock, conns, args.duration, workdir),
            f"http, {conns} conns",
            lambda s: (f"server {s['cpu_us_per_req']:.2f} + mock "
                       f"{s['mock_cpu_us_per_req']:.2f} µs/req, "
                       f"{s['rps']:,.0f} req/s, {s['landed']} landed"))
        for row in rows.values():
            R.summarize(row, ("cpu_us_per_req", "mock_cpu_us_per_req", "rdk_cpu_us_per_req", "rps",
                              "p50_us", "p99_us"), "cpu_us_per_req")
        base = rows.get(REFERENCE, {})
        for row in rows.values():
            row["server_ratio"] = R.paired_ratio(row, base, "cpu_us_per_req")
        points.append({"conns": conns, "servers": rows})
    return points


# ---- output -----------------------------------------------------------------------


def markdown_raw(meta, raw):
    out = [f"## Kafka: produce throughput ({meta['date']})", "",
           f"{meta['machine']}. librdkafka's mock cluster (3 brokers, one "
           f"process) on core {C.SERVER_CPU}, the producer on core "
           f"{C.CLIENT_CPU}; {raw['messages']:,} messages of {len(VALUE)} bytes "
           f"per run, no key, to a fresh topic of {PARTITIONS} partitions, "
           f"acks=all, idempotence on; median of {meta['repeats']} "
           f"interleaved runs. {meta['versions']}.", "",
           "| client | messages/s | spread | ÷ plain | own window msgs/s "
           "| client CPU µs/msg | client CPU ÷ plain | mock CPU µs/msg |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in raw["clients"].items():
        head = f"| {name} |"
        if "median" not in row:
            out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 6)
            continue
        m = row["median"]
        out.append(head + f" {m['msgs_per_s']:,.0f} | {m['spread']:.0%} | "
                   f"{R.fmt(row['msgs_ratio'])} | "
                   f"{R.fmt(m['window_msgs_per_s'], ',.0f')} | "
                   f"{m['client_cpu_us_per_msg']:.2f} | {R.fmt(row['cpu_ratio'])} | "
                   f"{m['mock_cpu_us_per_msg']:.2f} |")
    out += ["", "plain: `bench_kafka_plain BOOTSTRAP TOPIC "
            f"{raw['messages']} {len(VALUE)}` (bench/kafka/plain_producer.c: "
            "rd_kafka_producev in a loop with RD_KAFKA_MSG_F_COPY, a "
            "dr_msg_cb that counts, rd_kafka_poll(rk, 0) after each message, "
            "rd_kafka_flush at the end). kcat: `kcat -b BOOTSTRAP -P -t TOPIC -X "
            "acks=all -X enable.idempotence=true -l FILE` (FILE: "
            f"{raw['messages']:,} lines of {len(VALUE)} bytes). moonflow: "
            f"`moonflow run bench/kafka/produce_load.lua BOOTSTRAP TOPIC "
            f"{raw['messages']} {len(VALUE)} {raw['conc']}`: {raw['conc']} "
            "messages in flight on one mf.kafka producer, as "
            f"{raw['conc'] // 1000} coroutines each looping "
            "`k:produce_batch(values, {topic = TOPIC})` of 1,000 values "
            "(one wait for all their delivery reports, every outcome "
            "checked). Every "
            "client uses librdkafka's defaults otherwise (linger.ms 5, "
            "batch.num.messages 10000). messages/s: messages ÷ the client "
            "process's life, start to exit (connecting and the final flush "
            "included, for every client alike); own window: the first "
            "produce to the last report, by the client's own clock (kcat "
            "has none). client CPU: utime + stime of the waited child, every "
            "thread (librdkafka's too) ÷ messages. mock CPU: the mock "
            "cluster's process over the run. After each run the topic's high "
            "watermarks add up to exactly the messages sent (checked). "
            "Target: moonflow ≥ 0.9× plain's messages/s.", ""]
    return out


def markdown_http(meta, http):
    out = [f"## Kafka: HTTP → produce → HTTP, CPU per request ({meta['date']})",
           "", f"{meta['machine']}. GET /event?<{len(VALUE)} bytes>: one "
           "message per request (the query as value, a request id as key). "
           f"Server (1 process) and the mock cluster on core {C.SERVER_CPU}, "
           f"wrk -t1 on core {C.CLIENT_CPU}; {meta['duration_s']} s per run "
           f"after a {C.WARMUP_S} s warm-up, median of {meta['repeats']} "
           f"interleaved runs, a fresh topic of {PARTITIONS} partitions each.", "",
           "| conns | server | server CPU µs/req | of which librdkafka's "
           "threads | spread | server ÷ ref | mock CPU µs/req | req/s "
           "| p50 ms | p99 ms |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |"]
    for pt in http:
        for name, row in pt["servers"].items():
            head = f"| {pt['conns']} | {name} |"
            if "median" not in row:
                out.append(head + f" {row['status'].splitlines()[0]} |" + " |" * 7)
                continue
            m = row["median"]
            rdk = (f"{m['rdk_cpu_us_per_req']:.2f}" if m.get("rdk_cpu_us_per_req")
                   else "–")
            out.append(head + f" {m['cpu_us_per_req']:.2f} | {rdk} | "
                       f"{m['spread']:.0%} | "
                       f"{R.fmt(row['server_ratio'])} | "
                       f"{m['mock_cpu_us_per_req']:.2f} | {m['rps']:,.0f} | "
                       f"{m['p50_us'] / 1000:.2f} | {m['p99_us'] / 1000:.2f} |")
    out += ["", "moonflow-lua: `KAFKA_BROKERS=... moonflow serve examples/kafka_site "
            "--workers 1 --access-log off` (its producer sets linger.ms 1 and "
            "message.timeout.ms 10000): `k:produce{topic=, key=, value=}` "
            "waits for the delivery report (acks=all, idempotence), then "
            "answers `{\"id\":..,\"topic\":..,\"partition\":..,\"offset\":..}`; "
            "each run checks that the topic holds at least one message per "
            "answer. ref: nginx-lua-resty-kafka (nginx with Debian's "
            "libnginx-mod-http-lua and lua-nginx-kafka 0.07, master_process "
            "off, 1 worker): `producer:new(brokers, {producer_type = "
            "\"async\", required_acks = -1, max_retry = 1, error_handle = "
            "...})` and `p:send(topic, ngx.var.request_id, ngx.var.args)`, "
            "answering `{\"queued\":true}` at once, without waiting for the "
            "broker, as lua-resty-kafka's async mode does. The mock cluster "
            "refuses every batch lua-resty-kafka 0.07 writes (message "
            "format v0/v1; it stores v2 record batches only: "
            "UNSUPPORTED_VERSION, 35), so that row is the cost of encoding, "
            "sending and reading the answer of each batch (plus one "
            "metadata refresh per refused flush), not of storing: nothing "
            "lands; the config names error 35 in lua-resty-kafka's error "
            "table, without which its retry log line raises and its flush "
            "timer stops for good. server CPU: utime + stime of the server "
            "process, every thread (librdkafka's included) over the wrk run "
            "÷ requests completed; of which librdkafka's threads: the "
            "rdk:* threads' share of it (/proc/PID/task: the broker threads "
            "that build, send and read each produce request, the background "
            "thread that hands delivery reports to the loop); mock CPU the "
            "same for the mock cluster. "
            "÷ ref: median of the per-repeat ratios. Target: moonflow ≤ 0.7× "
            "the reference's server CPU per request.", ""]
    return out


def parse_args(argv):
    ap = R.two_part_parser(__doc__, HTTP_PEERS, RAW_CLIENTS)
    add = ap.add_argument
    add("--messages", type=int, help="raw: messages per run (500000)")
    add("--conc", type=int, default=20000,
        help="raw: moonflow's messages in flight, CONC / 1000 coroutines (20000)")
    add("--max-s", type=int, default=120,
        help="raw: a client run stops after this many seconds (120)")
    add("--quick", action="store_true",
        help="1 s runs, 1 repeat, a fifth of the messages: a smoke test")
    args = R.two_part_args(ap, argv, HTTP_PEERS, RAW_CLIENTS)
    args.messages = args.messages or (100000 if args.quick else 500000)
    return args


def main(argv):
    args = parse_args(argv)
    C.check_machine(argparse.Namespace(strace=False, conns=args.conns))
    signal.signal(signal.SIGTERM, C._exit_on_sigterm)
    meta = C.machine_meta(argparse.Namespace(
        servers=args.servers, sizes=[], conns=args.conns,
        duration=args.duration, repeats=args.repeats, strace=False))
    meta.update(parts=args.parts, clients=args.clients, messages=args.messages,
                conc=args.conc)
    meta["versions"] = (
        "librdkafka " + C.tool_version(["dpkg-query", "-W", "librdkafka1"],
                                       r"librdkafka1\S*\s+(\S+)")
        + ", kcat " + C.tool_version(["dpkg-query", "-W", "kcat"], r"kcat\s+(\S+)")
        + ", lua-nginx-kafka " + C.tool_version(["dpkg-query", "-W", "lua-nginx-kafka"],
                                                r"lua-nginx-kafka\s+(\S+)")
        + ", " + meta["versions"])
    http = raw = None
    with tempfile.TemporaryDirectory(prefix="mf-bench-kafka-") as workdir:
        args.lines_file = os.path.join(workdir, "lines")
        with open(args.lines_file, "w") as f:
            f.write((VALUE + "\n") * args.messages)
        mock = Mock(os.path.abspath(args.build))
        try:
            if "raw" in args.parts:
                raw = run_raw(args, mock)
            if "http" in args.parts:
                http = run_http(args, mock, workdir)
        finally:
            mock.close()
    lines = markdown_raw(meta, raw) if raw is not None else []
    lines += markdown_http(meta, http) if http is not None else []
    rows = [r for pt in http or [] for r in pt["servers"].values()]
    rows += list(raw["clients"].values()) if raw else []
    return C.write_tables(args.out, "kafka", lines,
                          {"meta": meta, "raw": raw, "http": http}, rows)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit("compare_kafka.py: interrupted; no results written")
