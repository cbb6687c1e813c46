"""The examples rewritten from Sogou Workflow's tutorials (examples/README.md),
each run as a user runs it, against real servers on 127.0.0.1: the test
fixture (spec/fixture) as the web, one redis-server, `moonflow serve` for
the sites. helloworld, http_echo_server and graceful_restart under serve
(a takeover under steady requests costs no error and no non-200 answer);
wget, parallel_wget (side by side: less time than one after the other),
graph_task (the timer first, then both pages' sizes), dns_cli (localhost,
a numeric address, a name that cannot resolve) and redis_subscriber
(channels and a pattern, in redis-cli --raw's layout) under `moonflow run`.
And every example command line, given no arguments or a bad one, prints
its usage on stderr and exits 2 without a traceback.

  MF_MOONFLOW=build/moonflow MF_HTTP_FIXTURE=build/spec/fixture/http_fixture \\
      python3 spec/lua/test_examples.py
"""
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
FIXTURE = os.path.abspath(os.environ["MF_HTTP_FIXTURE"])
EXAMPLES = os.path.join(ROOT, "examples")
check = harness.Checks()


def example(path):
    return os.path.join(EXAMPLES, path)


def run(script, args, timeout=30, env=None):
    return subprocess.run([MOONFLOW, "run", example(script)] + args,
                          capture_output=True, timeout=timeout, env=env)


def serve(site, env=None, port=None, extra=()):
    port = port or harness.free_port()
    return harness.Server([MOONFLOW, "serve", example(site), "--workers", "1",
                           "--listen", "127.0.0.1:%d" % port] + list(extra),
                          port, env=env)


def http(port, method, path, body=b"", headers=()):
    head = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1",
            "Connection: close", "Content-Length: %d" % len(body)]
    raw = ("\r\n".join(head + list(headers)) + "\r\n\r\n").encode() + body
    return harness.request(port, raw, timeout=10)


def fetch_len(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return len(r.read())


# ---- sites under moonflow serve ------------------------------------------------

def test_helloworld():
    site = serve("helloworld")
    try:
        r = http(site.port, "GET", "/")
        check("helloworld: / answers <html>Hello World!</html>",
              r.status == 200 and r.body == b"<html>Hello World!</html>"
              and r.header("content-type") == "text/html", r.raw_head)
    finally:
        site.stop()


def test_http_echo_server():
    site = serve("http_echo_server")
    try:
        r = http(site.port, "POST", "/?a=1", b"hi there", ["X-Two: 2"])
        lines = r.body.decode().split("\n")
        check("http_echo_server: the request line, the headers sorted, the "
              "peer and the body come back",
              r.status == 200 and lines[0] == "POST /?a=1 HTTP/1.1"
              and "content-length: 8" in lines and "x-two: 2" in lines
              and lines.index("connection: close") < lines.index("x-two: 2")
              and any(x.startswith("peer: 127.0.0.1:") for x in lines)
              and lines[-2:] == ["hi there", ""], r.body)
        check("http_echo_server: another path answers 404",
              http(site.port, "GET", "/other").status == 404)
    finally:
        site.stop()


def hammer(port, stop, answers, errors):
    """GET / on new connections until stop is set (at most 20 s)."""
    deadline = time.time() + 20
    while not stop.is_set() and time.time() < deadline:
        try:
            sent = time.time()
            r = http(port, "GET", "/")
            answers.append((r.status, r.body, sent))
        except OSError as e:
            errors.append(repr(e))


def test_graceful_restart():
    port = harness.free_port()
    old = serve("graceful_restart", dict(os.environ, SITE_VERSION="1"), port)
    new = None
    stop, answers, errors = threading.Event(), [], []
    load = threading.Thread(target=hammer, args=(port, stop, answers, errors))
    load.start()
    try:
        time.sleep(0.3)
        new = serve("graceful_restart", dict(os.environ, SITE_VERSION="2"),
                    port, ["--takeover"])
        try:
            old_status = old.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            old_status = None
        old_gone = time.time()
        seen_new = time.time() + 10
        while time.time() < seen_new and \
                not any(sent > old_gone for _, _, sent in answers[-3:]):
            time.sleep(0.05)
        stop.set()
        load.join()
        bodies = [b for _, b, _ in answers]
        # Between the new server's start and the old one's exit both accept
        # on the one listening socket (as nginx's old and new masters do
        # during a binary upgrade), so answers may alternate there; a
        # request sent after the old server exited must meet version 2.
        after = [b for _, b, sent in answers if sent > old_gone]
        check("graceful_restart: the old server exits 0 once taken over",
              old_status == 0, old_status)
        check("graceful_restart: no request fails across the takeover",
              not errors and answers
              and all(s == 200 for s, _, _ in answers), errors[:3])
        check("graceful_restart: version 1 answers first, version 2 only "
              "once the old server has exited",
              bodies and bodies[0] == b"version 1\n"
              and after and all(b == b"version 2\n" for b in after),
              (len(bodies), len(after), set(bodies), set(after)))
    finally:
        stop.set()
        load.join()
        if new:
            new.stop()
        old.stop()


# ---- commands under moonflow run -------------------------------------------------

def test_wget(origin):
    url = "http://127.0.0.1:%d/" % origin
    p = run("wget/wget.lua", [url])
    check("wget: the body on stdout, the status and headers on stderr",
          p.returncode == 0 and p.stdout == harness.body_pattern(1000)
          and p.stderr.startswith(b"HTTP 200 " + url.encode() + b"\n")
          and b"\ncontent-length: 1000\n" in p.stderr.lower(), p.stderr)
    dead = "http://127.0.0.1:%d/" % harness.free_port()
    p = run("wget/wget.lua", [dead])
    check("wget: exit 1 and why when nothing answers, no traceback",
          p.returncode == 1 and p.stderr == ("wget: %s: connection refused: %s\n"
                                             % (dead, dead.rstrip("/"))).encode(),
          p.stderr)


def test_parallel_wget(origin):
    base = "http://127.0.0.1:%d" % origin
    urls = [base + "/sleep?ms=600"] * 4 + [base + "/"]
    t0 = time.time()
    p = run("parallel_wget/parallel_wget.lua", urls)
    took = time.time() - t0
    want = "".join("%s\t200\t%d\n" % (u, fetch_len(u)) for u in urls)
    check("parallel_wget: one line per URL in order: status and size",
          p.returncode == 0 and p.stdout.decode() == want, p)
    check("parallel_wget: the fetches run side by side (4 x 600 ms in "
          "%.2f s)" % took, took < 2.0)
    dead = "http://127.0.0.1:%d/" % harness.free_port()
    p = run("parallel_wget/parallel_wget.lua", [base + "/", dead])
    check("parallel_wget: a failed URL says why, exit 1",
          p.returncode == 1 and p.stdout.decode().endswith(
              "%s\tfailed\tconnection refused: %s\n" % (dead, dead.rstrip("/"))), p)


def test_graph_task(origin):
    a = "http://127.0.0.1:%d/" % origin
    b = "http://127.0.0.1:%d/info" % origin
    t0 = time.time()
    p = run("graph_task/graph_task.lua", [a, b])
    took = time.time() - t0
    want = ("timer task complete (1s).\npage1 size = %d, page2 size = %d\n"
            "graph task complete.\n" % (fetch_len(a), fetch_len(b)))
    check("graph_task: the timer, then both sizes, then the end",
          p.returncode == 0 and p.stdout.decode() == want, p)
    check("graph_task: the fetches wait for the 1 s timer", took >= 1.0, took)
    dead = "http://127.0.0.1:%d/" % harness.free_port()
    p = run("graph_task/graph_task.lua", [a, dead])
    check("graph_task: a failed fetch reports -1",
          p.returncode == 0 and b"page2 size = -1\n" in p.stdout, p)


def test_dns_cli():
    p = run("dns_cli/dns_cli.lua", ["localhost", "127.0.0.1"])
    lines = p.stdout.decode().splitlines()
    check("dns_cli: localhost resolves to 127.0.0.1, a numeric address to "
          "itself, one line per address",
          p.returncode == 0 and "localhost\t127.0.0.1" in lines
          and lines[-1] == "127.0.0.1\t127.0.0.1"
          and all(x.startswith("localhost\t") for x in lines[:-1]), p)
    p = run("dns_cli/dns_cli.lua", ["a..b", "localhost"])
    check("dns_cli: a name that cannot resolve says so, exit 1",
          p.returncode == 1
          and p.stdout.startswith(b"a..b\tfailed\tdns error\nlocalhost\t"), p)


def read_lines(proc, n, timeout=10.0):
    """n lines of proc's stdout, or fewer if timeout passed first."""
    out, deadline = b"", time.time() + timeout
    while out.count(b"\n") < n and time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            out += chunk
    return out


def redis_cli(redis, *args):
    return subprocess.run(["redis-cli", "-p", str(redis.port)] + list(args),
                          capture_output=True, timeout=10).stdout


def test_redis_subscriber(redis):
    argv = [MOONFLOW, "run", example("redis_subscriber/redis_subscriber.lua"),
            "-u", redis.url(), "-n", "3", "news", "-p", "sport.*", "weather"]
    sub = subprocess.Popen(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        confirmations = read_lines(sub, 9)
        for channel, payload in (("news", "one"), ("other", "lost"),
                                 ("sport.tennis", "two"),
                                 ("weather", "three"), ("news", "late")):
            redis_cli(redis, "PUBLISH", channel, payload)
        out, err = sub.communicate(timeout=10)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    want = (b"subscribe\nnews\n1\nsubscribe\nweather\n2\n"
            b"psubscribe\nsport.*\n3\n"
            b"message\nnews\none\npmessage\nsport.*\nsport.tennis\ntwo\n"
            b"message\nweather\nthree\n")
    check("redis_subscriber: confirmations and 3 messages in redis-cli "
          "--raw's layout, then exit 0",
          sub.returncode == 0 and confirmations + out == want,
          (confirmations + out, err))
    p = run("redis_subscriber/redis_subscriber.lua",
            ["-u", "redis://127.0.0.1:%d" % harness.free_port(), "news"])
    check("redis_subscriber: exit 1 and why when Redis cannot be reached",
          p.returncode == 1 and b"connection refused" in p.stderr
          and b"traceback" not in p.stderr, p.stderr)


# ---- usage ------------------------------------------------------------------------

USAGE_CASES = [
    ("wget/wget.lua", []), ("wget/wget.lua", ["ftp://x"]),
    ("parallel_wget/parallel_wget.lua", []),
    ("graph_task/graph_task.lua", []), ("graph_task/graph_task.lua", ["a"]),
    ("dns_cli/dns_cli.lua", []),
    ("redis_subscriber/redis_subscriber.lua", []),
    ("redis_subscriber/redis_subscriber.lua", ["-n", "x", "ch"]),
    ("redis/redis_cli.lua", ["-u"]),  # no arguments: commands on stdin
    ("mysql_cli/mysql_cli.lua", ["-x"]),  # the same
    ("mysql_cli/mysql_cli.lua", ["-e"]),
    ("kafka_cli/kafka_cli.lua", []), ("kafka_cli/kafka_cli.lua", ["bogus"]),
    ("kafka_cli/kafka_cli.lua", ["consume", "-t", "x", "-c", "0"]),
]


def test_usage():
    for script, args in USAGE_CASES:
        p = run(script, args, timeout=20)
        err = p.stderr.decode(errors="replace")
        check("%s %s: the usage on stderr, exit 2, no traceback"
              % (script, " ".join(args) or "(no arguments)"),
              p.returncode == 2 and "usage: " in err
              and "traceback" not in err and p.stdout == b"", err)


def main():
    tmp = tempfile.mkdtemp(prefix="mf-examples-")
    origin = redis = None
    try:
        test_usage()
        origin_port = harness.free_port()
        origin = harness.Server([FIXTURE, "--listen",
                                 "127.0.0.1:%d" % origin_port,
                                 "--body-size", "1000"], origin_port)
        redis = harness.Redis(tmp)
        test_helloworld()
        test_http_echo_server()
        test_wget(origin_port)
        test_parallel_wget(origin_port)
        test_graph_task(origin_port)
        test_dns_cli()
        test_redis_subscriber(redis)
        test_graceful_restart()
    finally:
        if origin:
            origin.stop(signal.SIGTERM)
        if redis:
            redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(check.failures))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
