"""examples/kafka_cli and examples/kafka_site against librdkafka's mock
cluster (harness.KafkaMock: spec/fixture/kafka_mock, 3 brokers on
loopback, one for the whole run, a fresh topic per case), checked with
kcat (Debian's, a librdkafka client of its own):

kafka_cli.lua under `moonflow run`: the same lines produced by it and by
`kcat -P` read back by `kcat -C` identically (partition, offset, key,
value), also through injected produce errors (retried without
duplicates); a topic written by kcat consumed by it and by `kcat -C` with
the same format, identically; messages given as arguments to one partition;
its metadata agrees with `kcat -L` (brokers, topics, partitions, leaders,
replicas, in-sync replicas); a produce nobody receives fails with
librdkafka's error and exit status 1.

kafka_site under `moonflow serve`: GET and POST answer 200 with the
message's partition and offset, where kcat finds it; other methods 405;
under `wrk -c 256` every 2xx answered is one message in the topic (no
loss: the topic holds at least every delivery the server counted; no
duplicate: every key once), and no answer failed; with every broker down,
503 and librdkafka's error after message.timeout.ms (10 s, and no more
than 11 s), then 200 once they are back; SIGTERM stops it with status 0.

  MF_MOONFLOW=build/moonflow MF_KAFKA_MOCK=build/spec/fixture/kafka_mock \\
      python3 spec/lua/test_kafka_examples.py
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
CLI = os.path.join(ROOT, "examples", "kafka_cli", "kafka_cli.lua")
SITE = os.path.join(ROOT, "examples", "kafka_site")
FORMAT = "%p %o %k %s\\n"
check = harness.Checks()
failures = check.failures


def kcat(mock, *args, stdin=None, timeout=60):
    return subprocess.run(["kcat", "-b", mock.bootstrap] + list(args),
                          input=stdin, capture_output=True, timeout=timeout)


def kcat_read(mock, topic, fmt=FORMAT, *extra):
    """Every message of topic as kcat -C prints them with fmt, sorted."""
    done = kcat(mock, "-C", "-t", topic, "-e", "-q", "-f", fmt, *extra)
    if done.returncode != 0:
        raise RuntimeError("kcat -C %s: %s" % (topic, done.stderr.decode()))
    return sorted(done.stdout.decode().splitlines())


def cli(mock, *args, stdin=None, timeout=120, brokers=None):
    argv = [MOONFLOW, "run", CLI, "-b", brokers or mock.bootstrap] + list(args)
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)


# ---- kafka_cli -----------------------------------------------------------------

LINES = "".join("key%d:value %d \u00e9\n" % (i % 37, i) for i in range(2000)).encode()


def test_produce(mock):
    mock.topic("cli-ours", 4)
    mock.topic("cli-kcat", 4)
    ours = cli(mock, "produce", "-t", "cli-ours", "-K", ":", stdin=LINES)
    check("kafka_cli produce: exit 0, nothing printed",
          ours.returncode == 0 and ours.stdout == b"", ours)
    theirs = kcat(mock, "-P", "-t", "cli-kcat", "-K", ":", stdin=LINES)
    check("kcat -P: exit 0", theirs.returncode == 0, theirs)
    a, b = kcat_read(mock, "cli-ours"), kcat_read(mock, "cli-kcat")
    check("kafka_cli produce: kcat -C reads what it reads of kcat -P's "
          "(partition, offset, key, value)", a == b and len(a) == 2000,
          "ours %d lines, kcat's %d; first difference: %r" % (
              len(a), len(b), next(((x, y) for x, y in zip(a, b) if x != y), None)))

    # The same through refused and cut produce requests: librdkafka
    # retries, idempotence keeps each line once and in order.
    mock.topic("cli-faults", 4)
    mock.errors("Produce", "NOT_LEADER_FOR_PARTITION", "_TRANSPORT",
                "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS")
    ours = cli(mock, "produce", "-t", "cli-faults", "-K", ":", stdin=LINES)
    c = kcat_read(mock, "cli-faults")
    check("kafka_cli produce through request errors: the same lines once each",
          ours.returncode == 0 and c == b, "exit %d, %d lines; %r" % (
              ours.returncode, len(c), ours.stderr[-500:]))

    mock.topic("cli-args", 3)
    ours = cli(mock, "produce", "-t", "cli-args", "-p", "2", "one", "two", "three")
    check("kafka_cli produce MESSAGE...: exit 0", ours.returncode == 0, ours)
    got = kcat_read(mock, "cli-args", "%p %o %s\\n")
    check("kafka_cli produce -p 2: in order on partition 2",
          got == ["2 0 one", "2 1 two", "2 2 three"], got)


def test_consume(mock):
    mock.topic("cli-read", 4)
    done = kcat(mock, "-P", "-t", "cli-read", "-K", ":", stdin=LINES)
    check("kcat -P (for consume): exit 0", done.returncode == 0, done)
    theirs = kcat_read(mock, "cli-read")
    ours = cli(mock, "consume", "-t", "cli-read", "-c", "2000", "-f", FORMAT)
    check("kafka_cli consume -c 2000: exit 0", ours.returncode == 0, ours)
    got = sorted(ours.stdout.decode().splitlines())
    check("kafka_cli consume: the same lines as kcat -C with the same -f",
          got == theirs and len(got) == 2000,
          "ours %d lines, kcat's %d; first difference: %r" % (
              len(got), len(theirs),
              next(((x, y) for x, y in zip(got, theirs) if x != y), None)))
    ends = cli(mock, "consume", "-t", "cli-read", "-e", "-w", "2000", "-f", "%t\\n")
    check("kafka_cli consume -e: every message, then exit 0 when idle",
          ends.returncode == 0 and ends.stdout == b"cli-read\n" * 2000,
          "%d %r" % (ends.returncode, ends.stderr[-500:]))


def parse_listing(text):
    """kcat -L's layout, without its first line (which broker answered):
    (sorted broker lines, {topic line: partition lines})."""
    brokers, topics, current = [], {}, None
    for line in text.splitlines()[1:]:
        if line.startswith("  broker "):
            brokers.append(line.replace(" (controller)", ""))
        elif line.startswith("  topic "):
            current = topics.setdefault(line, [])
        elif line.startswith("    partition ") and current is not None:
            current.append(line)
    return sorted(brokers), topics


def test_metadata(mock):
    mock.topic("cli-meta", 5)
    mock.leader("cli-meta", 3, 2)
    ours = cli(mock, "metadata")
    theirs = kcat(mock, "-L")
    check("kafka_cli metadata: exit 0", ours.returncode == 0, ours)
    a, b = parse_listing(ours.stdout.decode()), parse_listing(theirs.stdout.decode())
    check("kafka_cli metadata: the brokers and topics of kcat -L",
          a == b and len(a[0]) == 3 and any("cli-meta" in t for t in a[1]),
          "ours:\n%s\nkcat:\n%s" % (ours.stdout.decode(), theirs.stdout.decode()))
    one = cli(mock, "metadata", "-t", "cli-meta")
    a = parse_listing(one.stdout.decode())
    b = parse_listing(kcat(mock, "-L", "-t", "cli-meta").stdout.decode())
    check("kafka_cli metadata -t: one topic, as kcat -L -t",
          a == b and len(a[1]) == 1 and "    partition 3, leader 2," in
          one.stdout.decode(), one.stdout.decode())


def test_failures(mock):
    dead = "127.0.0.1:%d" % harness.free_port()
    done = cli(mock, "-X", "message.timeout.ms=1500", "produce", "-t", "x",
               "lost", brokers=dead)
    err = done.stderr.decode(errors="replace")
    check("kafka_cli produce to no broker: exit 1 and librdkafka's error",
          done.returncode == 1 and "kafka _MSG_TIMED_OUT" in err, err[-1000:])
    for cmd in ("down 9", "leader nosuch", "errors Produce NO_SUCH_ERROR",
                "bogus"):
        try:
            mock.command(cmd)
            refused = None
        except RuntimeError as e:
            refused = str(e)
        check("kafka_mock refuses %r with why" % cmd,
              refused is not None and "error " in refused, refused)
    bad = cli(mock, "consume", "-t", "x")
    check("kafka_cli consume without -c or -e: exit 2 and why, no traceback",
          bad.returncode == 2 and b"-c COUNT or -e" in bad.stderr
          and b"traceback" not in bad.stderr, bad.stderr)
    bad = cli(mock, "-X", "no.such.property=1", "metadata")
    check("kafka_cli -X with an unknown property: exit 1 naming it",
          bad.returncode == 1 and b"no.such.property" in bad.stderr, bad.stderr)


# ---- kafka_site ----------------------------------------------------------------


def http(port, method, path, body=b""):
    raw = ("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           "Content-Length: %d\r\n\r\n" % (method, path, len(body))).encode() + body
    resp = harness.request(port, raw, timeout=30)
    try:
        resp.json = json.loads(resp.body)
    except ValueError:
        resp.json = None
    return resp


def find(mock, topic, key):
    """(partition, offset, value) of the message with key, as kcat reads it."""
    for line in kcat_read(mock, topic, "%k %p %o %s\\n"):
        k, p, o, v = (line.split(" ", 3) + [""])[:4]
        if k == key:
            return int(p), int(o), v
    return None


def test_site_answers(mock, port, topic):
    got = http(port, "GET", "/event?a=1&b=two")
    j = got.json or {}
    check("GET /event: 200 with id, topic, partition, offset",
          got.status == 200 and j.get("topic") == topic and
          isinstance(j.get("id"), str) and j.get("offset", -1) >= 0, got.body)
    check("GET /event: kcat finds the query at that partition and offset",
          find(mock, topic, j.get("id")) == (j.get("partition"), j.get("offset"),
                                             "a=1&b=two"), got.body)
    posted = http(port, "POST", "/event", b"a posted body")
    j2 = posted.json or {}
    check("POST /event: 200, and the body is the value",
          posted.status == 200 and j2.get("id") != j.get("id") and
          find(mock, topic, j2.get("id")) == (j2.get("partition"),
                                              j2.get("offset"), "a posted body"),
          posted.body)
    check("PUT /event: 405", http(port, "PUT", "/event").status == 405)


def run_wrk(port, seconds, conns=256):
    out = subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % seconds,
                          "--timeout", "20s",
                          "http://127.0.0.1:%d/event?load" % port],
                         capture_output=True, text=True, timeout=seconds + 60)
    total = re.search(r"(\d+) requests in", out.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    errors = re.search(r"Socket errors: (.*)", out.stdout)
    if out.returncode != 0 or not total:
        raise RuntimeError("wrk: %s %s" % (out.stdout, out.stderr))
    return (int(total.group(1)), int(non2xx.group(1)) if non2xx else 0,
            errors.group(1) if errors else None)


def test_site_load(mock, port, topic):
    before = http(port, "GET", "/stats").json
    total, non2xx, errors = run_wrk(port, 5)
    ok = total - non2xx
    time.sleep(0.5)
    stats = http(port, "GET", "/stats").json
    check("wrk -c256: many answers, every one 2xx, no socket error",
          ok > 1000 and non2xx == 0 and errors is None,
          "%d requests, %d non-2xx, errors %s" % (total, non2xx, errors))
    keys = kcat_read(mock, topic, "%k\\n")
    print("wrk -c256 5 s: %d answers (%d non-2xx); server %r; topic %d "
          "messages, %d keys" % (total, non2xx, stats, len(keys), len(set(keys))))
    check("wrk -c256: no duplicate (each key once in the topic)",
          len(set(keys)) == len(keys), "%d keys, %d distinct" % (len(keys), len(set(keys))))
    # Counts since the server started (test_site_answers' two included).
    # A request wrk cut when it stopped may still have been delivered: the
    # topic may hold more than the deliveries answered, never more than the
    # requests that reached the handler.
    check("wrk -c256: no loss (the topic holds every delivery the server "
          "answered; wrk's 2xx are among them)",
          before["delivered"] + ok <= stats["delivered"] <= len(keys) <= stats["requests"]
          and stats["failed"] == 0,
          "wrk 2xx %d; server before %r, after %r; topic %d"
          % (ok, before, stats, len(keys)))


def test_site_brokers_down(mock, port):
    for broker in (1, 2, 3):
        mock.down(broker)
    t0 = time.time()
    try:
        down = http(port, "GET", "/event?while-down")
        took = time.time() - t0
    finally:
        for broker in (1, 2, 3):
            mock.up(broker)
    check("every broker down: 503 with librdkafka's error, after "
          "message.timeout.ms (10 s) and within a tenth of it",
          down.status == 503 and down.json and
          down.json.get("error", "").startswith("kafka _MSG_TIMED_OUT") and
          9.9 <= took <= 11.0, "%d %r after %.2f s" % (down.status, down.body, took))
    deadline = time.time() + 30
    back = down
    while back.status != 200 and time.time() < deadline:
        time.sleep(0.5)
        back = http(port, "GET", "/event?back")
    check("brokers back: 200 again", back.status == 200, back.body)


def test_site_clients_leave(mock, port, topic):
    """Clients that close while their handler waits for the delivery report
    (every broker answers 1 s late): as in OpenResty, the handlers go on,
    get their delivery reports and count them (their answers go nowhere),
    the server answers the next request, and the messages land once each."""
    before = http(port, "GET", "/stats").json
    for broker in (1, 2, 3):
        mock.rtt(broker, 1000)
    try:
        socks = []
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /event?left-%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
            socks.append(s)
        deadline = time.time() + 10
        while time.time() < deadline:
            if http(port, "GET", "/stats").json["requests"] >= before["requests"] + 20:
                break
            time.sleep(0.05)
        for s in socks:
            s.close()
    finally:
        for broker in (1, 2, 3):
            mock.rtt(broker, 0)
    deadline = time.time() + 20
    after = http(port, "GET", "/stats").json
    while after["delivered"] + after["failed"] < \
            before["delivered"] + before["failed"] + 20 and time.time() < deadline:
        time.sleep(0.2)
        after = http(port, "GET", "/stats").json
    check("20 clients gone while waiting: every handler went on to its "
          "delivery report",
          after["requests"] == before["requests"] + 20 and
          after["delivered"] == before["delivered"] + 20 and
          after["failed"] == before["failed"], "before %r after %r" % (before, after))
    got = http(port, "GET", "/event?after-the-left")
    check("the next request is answered 200", got.status == 200, got.body)
    deadline = time.time() + 20
    values = []
    while time.time() < deadline:
        values = [v for v in kcat_read(mock, topic, "%s\\n") if v.startswith("left-")]
        if len(values) >= 20:
            break
        time.sleep(0.5)
    check("their 20 messages still landed, once each",
          sorted(values) == sorted("left-%d" % i for i in range(20)),
          "%d found: %r" % (len(values), values[:25]))


def test_site(mock):
    topic = "site-events"
    mock.topic(topic, 8)
    port = harness.free_port()
    env = dict(os.environ, KAFKA_BROKERS=mock.bootstrap, KAFKA_TOPIC=topic)
    serve = harness.Server([MOONFLOW, "serve", SITE, "--workers", "1",
                            "--access-log", "off", "--listen",
                            "127.0.0.1:%d" % port], port, env=env)
    stopped = False
    try:
        test_site_answers(mock, port, topic)
        test_site_load(mock, port, topic)
        test_site_clients_leave(mock, port, topic)
        test_site_brokers_down(mock, port)
        code, _, err = serve.stop(sig=signal.SIGTERM, timeout=60)
        stopped = True
        check("SIGTERM: moonflow serve exits 0", code == 0, err[-3000:])
        check("the failure is on the error log",
              b"kafka_site: event " in err and b"_MSG_TIMED_OUT" in err, err[-2000:])
    finally:
        if not stopped:
            serve.stop()


def main():
    mock = harness.KafkaMock(brokers=3)
    try:
        test_produce(mock)
        test_consume(mock)
        test_metadata(mock)
        test_failures(mock)
        test_site(mock)
    finally:
        code = mock.close()
        check("the mock cluster stopped cleanly", code == 0, mock.stderr())
    if failures:
        print("%d failed: %s" % (len(failures), ", ".join(failures)))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
