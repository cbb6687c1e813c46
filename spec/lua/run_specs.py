"""Runs `moonflow test spec/lua` with the test fixture (spec/fixture) listening
on free loopback ports, plain (MF_HTTP_PORT) and TLS with a self-signed
certificate (MF_HTTPS_PORT, MF_CA_FILE), a small Python server for what the
fixture does not do (redirects, a malformed answer, a cut one: MF_ODD_PORT,
and the same over TLS with that certificate: MF_ODD_TLS_PORT), a port
where nothing listens (MF_DEAD_PORT), and `moonflow serve spec/lua/site`
with one worker (MF_SERVE_PORT; stopped with SIGTERM, and its exit status
must be 0: under the ASan build that includes the leak check), and four
redis-servers: a plain one (MF_REDIS_URL, also given to `moonflow serve`),
one with requirepass (MF_REDIS_AUTH_PORT, password MF_REDIS_PASSWORD) and
one the specs may kill -9 and restart (MF_REDIS_FLAKY_URL; GET /redis-kill
and /redis-start on MF_ODD_PORT), and one over TLS only with the self-signed
certificate (MF_REDIS_TLS_URL, rediss://), a Redis Cluster of three
masters and three replicas (MF_REDIS_CLUSTER_URL, redis-cluster://:
harness.RedisCluster), and two mariadbds (fresh
datadirs, unprivileged when run as root): one for the specs and `moonflow
serve` (MF_MYSQL_URL, over TCP; MF_MYSQL_SOCKET_URL, the same server
through its unix socket MF_MYSQL_SOCKET) and one the specs may kill -9 and
start again (MF_MYSQL_FLAKY_URL; GET /mysql-kill and /mysql-start on
MF_ODD_PORT), and librdkafka's mock cluster (spec/fixture/kafka_mock, three
brokers: MF_KAFKA_BROKERS, also given to `moonflow serve`) that the specs
drive with GET /kafka?cmd=COMMAND on MF_ODD_PORT (a kafka_mock command line:
"topic NAME PARTS", "down ID", "up ID", "leader TOPIC PART ID",
"errors APIKEY ERR...", "rtt ID MS"; 204 when done, 500 with the mock's
words when refused), a one-broker Kafka controller that answers
CreateTopics, which the mock cluster does not (spec/fixture/
kafka_controller.py: MF_KAFKA_CONTROLLER), and `moonflow serve --config _conf.lua` on a copy of
spec/lua/shared_site with two workers and shared dicts (MF_SHARED_PORT;
MF_SHARED_SITE, the copy, which shared_spec.lua rewrites to reload it;
stopped and checked as the first), and the cosocket peers of
socket_peers.py (MF_SOCK_PORT, MF_SOCK_TLS_PORT, MF_SOCK_UNIX,
MF_SOCK_UDP_PORT, MF_SOCK_BLACKHOLE_PORT). ctest's lua.specs and
asan.lua.specs.

  MF_MOONFLOW=build/moonflow MF_HTTP_FIXTURE=build/spec/fixture/http_fixture \\
      python3 spec/lua/run_specs.py [busted options...]
"""
import http.server
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402
import socket_peers  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "fixture"))
import kafka_controller  # noqa: E402


class OddHandler(http.server.BaseHTTPRequestHandler):
    """/redirect?to=URL answers 302 to URL (the fixture's / without to=);
    /redirect-loop answers 302 to itself; /cut sends part of a head and
    closes; /garbage answers no HTTP; /redis-kill and /redis-start stop
    (kill -9) and start the flaky redis-server, /mysql-kill and
    /mysql-start the flaky mariadbd, and answer 204 when done;
    /kafka?cmd=COMMAND runs a command of the Kafka mock cluster (204, or
    500 with its refusal)."""
    fixture_port = None
    flaky = None
    flaky_mysql = None
    kafka = None

    def do_GET(self):
        flaky = {"redis": self.flaky, "mysql": self.flaky_mysql}
        name, _, verb = self.path[1:].partition("-")
        if self.path.startswith("/kafka?cmd="):
            self.kafka_command(urllib.parse.unquote_plus(
                self.path[len("/kafka?cmd="):]))
        elif verb in ("kill", "start") and name in flaky:
            getattr(flaky[name], verb)()
            self.send_response(204)
            self.end_headers()
        elif self.path.startswith("/redirect"):
            to = "http://127.0.0.1:%d/" % self.fixture_port
            if self.path.startswith("/redirect-loop"):
                to = "/redirect-loop"
            elif self.path.startswith("/redirect?to="):
                to = urllib.parse.unquote(self.path[len("/redirect?to="):])
            self.send_response(302)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/cut":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Le")
            self.close_connection = True
        else:
            self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
            self.close_connection = True

    def kafka_command(self, cmd):
        try:
            self.kafka.command(cmd)
        except RuntimeError as e:
            body = str(e).encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def start_odd(fixture_port, flaky, flaky_mysql, kafka, tls=None):
    """The odd server; over TLS with tls = (cert, key)."""
    OddHandler.fixture_port = fixture_port
    OddHandler.flaky = flaky
    OddHandler.flaky_mysql = flaky_mysql
    OddHandler.kafka = kafka
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OddHandler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_mariadbs(n):
    """n mariadbds, installed and started side by side (each takes a few
    seconds); the ones that started are closed if another fails."""
    results = [None] * n

    def one(i):
        try:
            results[i] = harness.MariaDB()
        except Exception as e:  # reported below, after the others
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        for r in results:
            if isinstance(r, harness.MariaDB):
                r.close()
        raise failed[0]
    return results


def start(fixture, *extra):
    port = harness.free_port()
    argv = [fixture, "--listen", "127.0.0.1:%d" % port] + list(extra)
    return harness.Server(argv, port)


def main():
    moonflow = os.environ["MF_MOONFLOW"]
    fixture = os.environ["MF_HTTP_FIXTURE"]
    tmp = tempfile.mkdtemp(prefix="mf-lua-specs-")
    cert, key = harness.self_signed(tmp)
    redis = []
    servers = []
    mysql = []
    odd = odd_tls = serve = shared = kafka = peers = controller = None
    cluster = None
    try:
        peers = socket_peers.Peers(tmp, cert, key)
        kafka = harness.KafkaMock(brokers=3)
        controller = kafka_controller.Controller()
        mysql = start_mariadbs(2)
        for password in (None, "s3cret", None):
            redis.append(harness.Redis(tmp, password=password))
        redis.append(harness.Redis(tmp, tls=(cert, key)))
        cluster = harness.RedisCluster(tmp)
        servers.append(start(fixture))
        odd = start_odd(servers[0].port, redis[2], mysql[1], kafka)
        odd_tls = start_odd(servers[0].port, redis[2], mysql[1], kafka,
                            tls=(cert, key))
        servers.append(start(fixture, "--tls-cert", cert, "--tls-key", key))
        serve_port = harness.free_port()
        redis_env = dict(MF_REDIS_URL=redis[0].url(),
                         MF_REDIS_AUTH_PORT=str(redis[1].port),
                         MF_REDIS_PASSWORD=redis[1].password,
                         MF_REDIS_FLAKY_URL=redis[2].url(),
                         MF_REDIS_TLS_URL=redis[3].url(),
                         MF_REDIS_CLUSTER_URL=cluster.url(),
                         MF_MYSQL_URL=mysql[0].url(),
                         MF_MYSQL_SOCKET=mysql[0].socket,
                         MF_MYSQL_SOCKET_URL=mysql[0].socket_url(),
                         MF_MYSQL_FLAKY_URL=mysql[1].url(),
                         MF_KAFKA_BROKERS=kafka.bootstrap)
        serve = harness.Server([moonflow, "serve", os.path.join(HERE, "site"),
                                "--workers", "1", "--listen",
                                "127.0.0.1:%d" % serve_port], serve_port,
                               env=dict(os.environ, **redis_env))
        shared_site = os.path.join(tmp, "shared_site")
        shutil.copytree(os.path.join(HERE, "shared_site"), shared_site)
        shared_port = harness.free_port()
        shared = harness.Server([moonflow, "serve", "--config",
                                 os.path.join(shared_site, "_conf.lua"),
                                 "--listen", "127.0.0.1:%d" % shared_port],
                                shared_port)
        env = dict(os.environ, MF_HTTP_PORT=str(servers[0].port),
                   MF_HTTPS_PORT=str(servers[1].port), MF_CA_FILE=cert,
                   MF_ODD_PORT=str(odd.server_address[1]),
                   MF_ODD_TLS_PORT=str(odd_tls.server_address[1]),
                   MF_DEAD_PORT=str(harness.free_port()),
                   MF_SERVE_PORT=str(serve_port),
                   MF_SHARED_PORT=str(shared_port), MF_SHARED_SITE=shared_site,
                   MF_KAFKA_CONTROLLER=controller.bootstrap,
                   **dict(redis_env, **peers.env()))
        root = os.path.dirname(os.path.dirname(HERE))
        proc = subprocess.run([moonflow, "test", "spec/lua"] + sys.argv[1:],
                              cwd=root, env=env, timeout=240)
        if kafka.proc.poll() is not None:
            sys.stderr.write("kafka_mock exited %s during the specs:\n%s\n" %
                             (kafka.proc.returncode, kafka.stderr()))
            return 1
        for server in (serve, shared):
            code, _, err = server.stop(sig=signal.SIGTERM)
            if code != 0:
                sys.stderr.write("moonflow serve exited %d:\n%s\n" %
                                 (code, err.decode(errors="replace")[-4000:]))
                return 1
        serve = shared = None
        return proc.returncode
    finally:
        for server in (serve, shared):
            if server:
                server.stop()
        for server in (odd, odd_tls):
            if server:
                server.shutdown()
        for server in servers:
            server.stop()
        for r in redis:
            r.kill()
        if cluster:
            cluster.kill()
        for m in mysql:
            m.close()
        if kafka:
            kafka.close()
        if controller:
            controller.close()
        if peers:
            peers.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
