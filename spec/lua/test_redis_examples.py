"""examples/redis against a redis-server on a free loopback port:
wget_to_redis.lua under `moonflow serve` (a miss fetches from the test
fixture, spec/fixture, and stores the body with a TTL; a hit is answered
from Redis even once the fixture is gone; with Redis down it fetches again
and says "bypass"), and
redis_cli.lua under `moonflow run`, whose output must equal
`redis-cli --no-raw` for the same commands, as arguments and on stdin.
Also: `moonflow run` whose main chunk raises while other coroutines wait in
r:call, sub:next and a redis flow, with a subscriber left open, exits 1
at once (and clean under ASan).

  MF_MOONFLOW=build/moonflow MF_HTTP_FIXTURE=build/spec/fixture/http_fixture \\
      python3 spec/lua/test_redis_examples.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
FIXTURE = os.path.abspath(os.environ["MF_HTTP_FIXTURE"])
CLI = os.path.join(ROOT, "examples", "redis", "redis_cli.lua")
check = harness.Checks()
failures = check.failures


def get(port, path):
    raw = ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
           % path).encode()
    return harness.request(port, raw, timeout=10)


def redis_cli(port, args, stdin=None):
    return subprocess.run(["redis-cli", "--no-raw", "-p", str(port)] + args,
                          input=stdin, capture_output=True, timeout=30).stdout


def our_cli(url, args, stdin=None):
    return subprocess.run([MOONFLOW, "run", CLI, "-u", url] + args,
                          input=stdin, capture_output=True, timeout=30)


def test_wget_to_redis(tmp, redis):
    origin_port = harness.free_port()
    origin = harness.Server([FIXTURE, "--listen",
                             "127.0.0.1:%d" % origin_port], origin_port)
    port = harness.free_port()
    env = dict(os.environ, REDIS_URL=redis.url(), CACHE_TTL="100")
    serve = harness.Server([MOONFLOW, "serve",
                            os.path.join(ROOT, "examples", "redis"),
                            "--workers", "1", "--listen",
                            "127.0.0.1:%d" % port], port, env=env)
    try:
        target = "http://127.0.0.1:%d/" % origin_port
        path = "/wget_to_redis?url=" + urllib.parse.quote(target, safe="")
        first = get(port, path)
        check("wget_to_redis: the first request is a miss",
              first.status == 200 and first.header("x-cache") == "miss",
              first.raw_head)
        stored = redis_cli(redis.port, ["GET", "wget_to_redis:" + target])
        check("wget_to_redis: the body is stored in Redis",
              len(first.body) > 0 and first.body.decode() in stored.decode())
        ttl = redis_cli(redis.port, ["TTL", "wget_to_redis:" + target])
        check("wget_to_redis: with the TTL",
              ttl.startswith(b"(integer) ") and 0 < int(ttl.split()[1]) <= 100,
              ttl)
        origin.stop()
        second = get(port, path)
        check("wget_to_redis: a later request is a hit served from Redis",
              second.status == 200 and second.header("x-cache") == "hit"
              and second.body == first.body, second.raw_head)
        check("wget_to_redis: a bad request gets 400",
              get(port, "/wget_to_redis?url=ftp%3A%2F%2Fx").status == 400)
        check("redis_cli.lua served as a route answers 404",
              get(port, "/redis_cli").status == 404)
        failed = get(port, "/wget_to_redis?url=" +
                     urllib.parse.quote(target + "info", safe=""))
        check("wget_to_redis: a failed fetch gets 502", failed.status == 502,
              failed.raw_head)
        origin = harness.Server([FIXTURE, "--listen",
                                 "127.0.0.1:%d" % origin_port], origin_port)
        redis.kill()
        down = get(port, path)
        check("wget_to_redis: with Redis down the URL is fetched (bypass)",
              down.status == 200 and down.header("x-cache") == "bypass"
              and down.body == first.body, down.raw_head)
        redis.start()
    finally:
        serve.stop()
        origin.stop()


CLI_CASES = [
    ["SET", "a", "1"], ["GET", "a"], ["INCR", "a"], ["GET", "missing"],
    ["RPUSH", "l", "x", "y z", "w\x01"], ["LRANGE", "l", "0", "-1"],
    ["LRANGE", "none", "0", "-1"], ["INCR", "l"],
    ["EVAL", "return {1, {2, {'x', false}}, 'y'}", "0"],
    ["EVAL", "return {{1,2,3,4,5,6,7,8,9,10,11}, 'z'}", "0"],
    ["BLPOP", "none", "0.05"], ["PING"], ["NOSUCH"],
]

CLI_STDIN = (b'SET "k 1" "a\\x00b\\n"\nGET "k 1"\n\nGET \'k 1\'\n'
             b'HSET h f v\nHGETALL h\nSET x\n')


def test_redis_cli(redis):
    # The same sequence from an empty database with each tool.
    redis_cli(redis.port, ["FLUSHALL"])
    ours = [our_cli(redis.url(), args) for args in CLI_CASES]
    redis_cli(redis.port, ["FLUSHALL"])
    theirs = [redis_cli(redis.port, args) for args in CLI_CASES]
    for args, o, t in zip(CLI_CASES, ours, theirs):
        check("redis_cli: %r prints what redis-cli prints" % " ".join(args),
              o.returncode == 0 and o.stdout == t,
              "%r\n%r\n%s" % (o.stdout, t, o.stderr))
    redis_cli(redis.port, ["FLUSHALL"])
    o = our_cli(redis.url(), [], CLI_STDIN)
    redis_cli(redis.port, ["FLUSHALL"])
    t = redis_cli(redis.port, [], CLI_STDIN)
    check("redis_cli: commands on stdin print what redis-cli prints",
          o.returncode == 0 and o.stdout == t,
          "%r\n%r\n%s" % (o.stdout, t, o.stderr))
    dead = our_cli("redis://127.0.0.1:%d" % harness.free_port(), ["PING"])
    check("redis_cli: exits 1 when nothing listens",
          dead.returncode == 1 and b"connection refused" in dead.stderr,
          dead.stderr)


ABANDON = """
local mf = require "moonflow"
local r = mf.redis(...)
mf.timer.at(0, function() r:call("BLPOP", "abandon:none", 30) end)
mf.timer.at(0, function() r:subscribe("abandon:ch"):next() end)
mf.timer.at(0, function() mf.task.redis(r, "BLPOP", "abandon:x", 30):wait() end)
local open = r:subscribe("abandon:open") -- never closed, never collected
mf.sleep(50)
error("main failed")
"""


def test_run_abandon(tmp, redis):
    script = os.path.join(tmp, "abandon.lua")
    with open(script, "w") as f:
        f.write(ABANDON)
    p = subprocess.run([MOONFLOW, "run", script, redis.url()],
                       capture_output=True, timeout=20)
    check("moonflow run ends waiting calls and subscribers when the main "
          "chunk raises", p.returncode == 1 and b"main failed" in p.stderr,
          p.stderr.decode(errors="replace")[-3000:])


def main():
    tmp = tempfile.mkdtemp(prefix="mf-redis-examples-")
    redis = None
    try:
        redis = harness.Redis(tmp)
        test_wget_to_redis(tmp, redis)
        test_redis_cli(redis)
        test_run_abandon(tmp, redis)
    finally:
        if redis:
            redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
