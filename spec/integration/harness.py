"""Shared helpers for the integration tests: free ports, processes that are
always stopped, raw HTTP over sockets, self-signed certificates, and
redis-server and mariadbd instances of their own, and librdkafka's mock
cluster in a process (spec/fixture/kafka_mock).

Every server a test starts listens on 127.0.0.1 and is killed by PID when
the test ends, whatever happens."""
import atexit
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %s" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("port %d not listening" % port)


class Server:
    """A server process started for one test and stopped by PID. Its
    stderr is piped, or written to the file stderr_path (to be read while
    it runs)."""

    def __init__(self, argv, port, env=None, stderr_path=None):
        self.port = port
        err = open(stderr_path, "wb") if stderr_path else subprocess.PIPE
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                         stderr=err, env=env)
        finally:
            if stderr_path:
                err.close()
        try:
            wait_port(port, self.proc)
        except Exception:
            self.stop()
            raise

    def stop(self, sig=signal.SIGKILL, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def connect(port, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_until_closed(sock, timeout=5.0):
    """Everything the server sends until it closes; raises on timeout, so a
    server that fails to close makes the test fail."""
    sock.settimeout(timeout)
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


class Response:
    def __init__(self, status, headers, body, raw_head):
        self.status = status
        self.headers = headers
        self.body = body
        self.raw_head = raw_head

    def header(self, name):
        return self.headers.get(name.lower())


def _read_chunked(buf, sock):
    body = b""
    while True:
        while b"\r\n" not in buf:
            buf += _recv(sock)
        line, buf = buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        while len(buf) < size + 2:
            buf += _recv(sock)
        body += buf[:size]
        buf = buf[size + 2:]
        if size == 0:
            return body, buf


def _recv(sock):
    data = sock.recv(65536)
    if not data:
        raise EOFError("connection closed mid-response")
    return data


def read_response(sock, buf=b"", head_request=False):
    """Reads one response; returns (Response, leftover bytes)."""
    while b"\r\n\r\n" not in buf:
        buf += _recv(sock)
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(b":", 1)
        headers[name.decode().lower()] = value.strip().decode()
    if head_request or status in (204, 304) or status < 200:
        return Response(status, headers, b"", head), buf
    if headers.get("transfer-encoding") == "chunked":
        body, buf = _read_chunked(buf, sock)
        return Response(status, headers, body, head), buf
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            buf += _recv(sock)
        return Response(status, headers, buf[:n], head), buf[n:]
    body = buf + read_until_closed(sock)
    return Response(status, headers, body, head), b""


def request(port, raw, timeout=5.0):
    with connect(port, timeout) as s:
        s.sendall(raw)
        resp, _ = read_response(s)
        return resp


def self_signed(tmpdir, cn="localhost"):
    """A key and self-signed certificate for CN (and SAN) from openssl."""
    cert = os.path.join(tmpdir, cn + ".crt")
    key = os.path.join(tmpdir, cn + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2",
                    "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=DNS:%s,IP:127.0.0.1" % cn],
                   check=True, capture_output=True)
    return cert, key


def rss_kib(pid):
    """The resident memory of process pid, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def temp_dir(test):
    path = tempfile.mkdtemp(prefix="moonflow-test-")
    test.addCleanup(shutil.rmtree, path, True)
    return path


def body_pattern(n):
    return (b"0123456789abcdef" * (n // 16 + 1))[:n]


class Checks:
    """check(name, cond, detail=""): prints "ok NAME" or "FAIL NAME" (and
    the detail) and goes on; failures lists the names that failed, for
    scripts that run every case before they exit."""

    def __init__(self):
        self.failures = []

    def __call__(self, name, cond, detail=""):
        print(("ok " if cond else "FAIL ") + name)
        if not cond:
            self.failures.append(name)
            if detail:
                print(detail)


class Redis:
    """A redis-server for one test run: a free loopback port, its own
    directory, no persistence, a log file instead of a pipe (a full pipe
    would stall it). kill() is kill -9; start() again on the same port."""

    def __init__(self, tmpdir, password=None, tls=None):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(dir=tmpdir, prefix="redis-")
        self.password = password
        self.tls = tls  # (cert, key): TLS only, no client certificates
        self.server = None
        self.start()

    def start(self):
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port),
                     "--tls-cert-file", self.tls[0],
                     "--tls-key-file", self.tls[1],
                     "--tls-auth-clients", "no"]
        else:
            ports = ["--port", str(self.port)]
        argv = ["redis-server"] + ports + [
                "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
                "--appendonly", "no",
                "--logfile", os.path.join(self.dir, "redis.log")]
        if self.password:
            argv += ["--requirepass", self.password]
        self.server = Server(argv, self.port)

    def kill(self):
        if self.server:
            self.server.stop()
            self.server = None

    def url(self, db=0):
        auth = ":%s@" % self.password if self.password else ""
        return "%s://%s127.0.0.1:%d/%d" % ("rediss" if self.tls else "redis",
                                           auth, self.port, db)


def free_cluster_port():
    """A free port whose cluster bus port (+10000) is free too."""
    for _ in range(50):
        port = free_port()
        if port >= 55000:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster:
    """A Redis Cluster for one test run: six redis-servers (--cluster-enabled
    yes, each in its own directory) made three masters with a replica each
    by `redis-cli --cluster create`, ready (cluster_state:ok everywhere, all
    nodes agreeing, every replica through its first sync) when the
    constructor returns. kill() stops them all."""

    def __init__(self, tmpdir, nodes=6):
        self.servers = []
        try:
            for _ in range(nodes):
                port = free_cluster_port()
                d = tempfile.mkdtemp(dir=tmpdir, prefix="rcluster-")
                self.servers.append(Server(
                    ["redis-server", "--port", str(port), "--bind",
                     "127.0.0.1", "--dir", d, "--save", "", "--appendonly",
                     "no", "--cluster-enabled", "yes",
                     "--cluster-node-timeout", "2000",
                     "--logfile", os.path.join(d, "redis.log")], port))
            addrs = ["127.0.0.1:%d" % s.port for s in self.servers]
            subprocess.run(["redis-cli", "--cluster", "create"] + addrs +
                           ["--cluster-replicas", "1", "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
            self.wait_ok()
        except Exception:
            self.kill()
            raise

    def cli(self, port, *args):
        return subprocess.run(["redis-cli", "-p", str(port)] + list(args),
                              capture_output=True, text=True,
                              timeout=30).stdout

    def wait_ok(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in self.cli(s.port, "cluster", "info")
                   for s in self.servers):
                out = subprocess.run(
                    ["redis-cli", "--cluster", "check",
                     "127.0.0.1:%d" % self.servers[0].port],
                    capture_output=True, text=True, timeout=30).stdout
                synced = sum(self.cli(s.port, "info", "replication")
                             .count("state=online") for s in self.servers)
                if "All nodes agree" in out and synced == len(self.servers) // 2:
                    return
            time.sleep(0.1)
        raise RuntimeError("the redis cluster never became ok")

    def url(self):
        return "redis-cluster://127.0.0.1:%d,127.0.0.1:%d" % (
            self.servers[0].port, self.servers[1].port)

    def kill(self):
        for s in self.servers:
            s.stop()
        self.servers = []


class MariaDB:
    """A mariadbd for one test run: a fresh datadir (mariadb-install-db) in a
    temp directory of its own, listening on a free loopback port and on a
    unix socket in that directory, run as an unprivileged user when we are
    root (the directory is chowned to it), no defaults files read. It has a
    database and a user with a password for the tests; root (no password)
    is reachable on the socket only, for sql(). kill() is kill -9, stop()
    a clean shutdown, start() again on the same port and datadir; restart()
    is both. The server is stopped and the directory removed at close(),
    and at exit whatever happened."""

    USER = "mf"
    PASSWORD = "mf-secret"
    DB = "mf_test"
    START_TIMEOUT = 60.0

    def __init__(self, args=()):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="moonflow-mariadb-")
        self.datadir = os.path.join(self.dir, "data")
        # Its own tmpdir: servers sharing /tmp (other test runs) must not
        # meet over temporary table files.
        self.tmpdir = os.path.join(self.dir, "tmp")
        self.socket = os.path.join(self.dir, "mysqld.sock")
        self.log = os.path.join(self.dir, "error.log")
        self.args = list(args)
        self.proc = None
        self.run_as = "nobody" if os.geteuid() == 0 else None
        atexit.register(self.close)
        try:
            self._install()
            self.start()
            self.sql("CREATE DATABASE %s; "
                     "CREATE USER '%s'@'%%' IDENTIFIED BY '%s'; "
                     "GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%'"
                     % (self.DB, self.USER, self.PASSWORD, self.USER))
        except Exception:
            self.close()
            raise

    def _install(self):
        argv = ["mariadb-install-db", "--no-defaults",
                "--auth-root-authentication-method=normal",
                "--skip-test-db", "--datadir=" + self.datadir,
                "--tmpdir=" + self.tmpdir]
        os.mkdir(self.tmpdir)
        if self.run_as:
            shutil.chown(self.dir, self.run_as)
            shutil.chown(self.tmpdir, self.run_as)
            argv.append("--user=" + self.run_as)
        done = subprocess.run(argv, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError("mariadb-install-db failed:\n%s" %
                               (done.stdout + done.stderr).decode(
                                   errors="replace")[-2000:])

    def start(self):
        argv = ["mariadbd", "--no-defaults", "--datadir=" + self.datadir,
                "--tmpdir=" + self.tmpdir,
                "--port=%d" % self.port, "--bind-address=127.0.0.1",
                "--socket=" + self.socket,
                "--pid-file=" + os.path.join(self.dir, "mysqld.pid"),
                "--log-error=" + self.log, "--skip-name-resolve",
                "--performance-schema=OFF", "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=2"] + self.args
        if self.run_as:
            argv.append("--user=" + self.run_as)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError("mariadbd exited with %s:\n%s" %
                                   (code, self.log_tail()))
            if self._accepts():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("mariadbd did not accept connections "
                                   "within %ds:\n%s" %
                                   (self.START_TIMEOUT, self.log_tail()))
            time.sleep(0.05)

    def _accepts(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port),
                                          timeout=0.5):
                pass
        except OSError:
            return False
        done = subprocess.run(self._client_argv() + ["-e", "SELECT 1"],
                              capture_output=True, timeout=30)
        return done.returncode == 0

    def _client_argv(self):
        return ["mariadb", "--no-defaults", "--user=root",
                "--socket=" + self.socket, "--batch", "--skip-column-names"]

    def sql(self, stmt, db=None, timeout=60):
        """Runs stmt (one or more statements) as root through the mariadb
        client on the socket; returns its output (tab-separated rows, no
        header). Raises with the client's message when it fails."""
        argv = self._client_argv() + ["-e", stmt]
        if db:
            argv.append(db)
        done = subprocess.run(argv, capture_output=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError("mariadb: %s" %
                               done.stderr.decode(errors="replace").strip())
        return done.stdout.decode()

    def url(self, db=None, user=None, password=None):
        """mysql://user:pass@127.0.0.1:PORT/db (the test database unless db
        is given; db="" for none)."""
        db = self.DB if db is None else db
        user = self.USER if user is None else user
        password = self.PASSWORD if password is None else password
        return "mysql://%s:%s@127.0.0.1:%d/%s" % (user, password,
                                                  self.port, db)

    def socket_url(self, db=None):
        """The same through the unix socket: mysql://user:pass@unix:PATH:/db."""
        db = self.DB if db is None else db
        return "mysql://%s:%s@unix:%s:/%s" % (self.USER, self.PASSWORD,
                                              self.socket, db)

    def kill(self):
        """kill -9: the server dies mid-whatever; start() brings it back."""
        if self.proc:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self, timeout=60):
        """A clean shutdown (SIGTERM), kill -9 past timeout seconds."""
        if self.proc:
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def log_tail(self, n=4000):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return "(no error log)"

    def close(self):
        """Stops the server and removes its directory (safe to repeat)."""
        self.kill()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def kafka_mock_path():
    """The kafka_mock fixture: MF_KAFKA_MOCK, or beside MF_HTTP_FIXTURE
    (both are built in spec/fixture)."""
    path = os.environ.get("MF_KAFKA_MOCK")
    if path:
        return path
    fixture = os.environ.get("MF_HTTP_FIXTURE")
    if not fixture:
        raise RuntimeError("neither MF_KAFKA_MOCK nor MF_HTTP_FIXTURE is set")
    return os.path.join(os.path.dirname(fixture), "kafka_mock")


class KafkaMock:
    """librdkafka's mock cluster in a process of its own (spec/fixture/
    kafka_mock): `brokers` mock brokers on loopback ports, topics given as
    {name: partitions}. bootstrap is its bootstrap.servers list. The
    methods send one command each and raise with the fixture's words when
    it refuses; the process is stopped at close(), and at exit whatever
    happened. argv_prefix runs it under another command (taskset -c N)."""

    START_TIMEOUT = 30.0

    def __init__(self, brokers=3, topics=None, argv_prefix=(), path=None):
        argv = list(argv_prefix) + [path or kafka_mock_path(),
                                    "--brokers", str(brokers)]
        argv += ["%s:%d" % (name, parts)
                 for name, parts in (topics or {}).items()]
        self.brokers = brokers
        self.log = tempfile.TemporaryFile()
        # Unbuffered: select() must see every answer line still unread.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log,
                                     bufsize=0)
        self.lock = threading.Lock()
        atexit.register(self.close)
        try:
            line = self._read_line(self.START_TIMEOUT)
            if not line.startswith("bootstrap "):
                raise RuntimeError("kafka_mock said %r" % line)
            self.bootstrap = line.split(" ", 1)[1]
        except Exception:
            self.close()
            raise

    @property
    def pid(self):
        return self.proc.pid

    def _read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("kafka_mock did not answer within %gs:\n%s" %
                               (timeout, self.stderr()))
        line = self.proc.stdout.readline().decode().strip()
        if not line:
            raise RuntimeError("kafka_mock exited (%s):\n%s" %
                               (self.proc.poll(), self.stderr()))
        return line

    def command(self, line, timeout=10.0):
        """Sends one command line; returns when it is done. Raises
        RuntimeError with the fixture's refusal, or with its exit status
        and stderr when it is gone."""
        with self.lock:
            if self.proc is None:
                raise RuntimeError("kafka_mock is closed")
            try:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except OSError as e:
                raise RuntimeError("kafka_mock is gone (%s, exit status %s):\n%s"
                                   % (e, self.proc.poll(), self.stderr())) from None
            answer = self._read_line(timeout)
        if answer != "ok":
            raise RuntimeError("kafka_mock %r: %s" % (line, answer))

    def topic(self, name, partitions, replication=None):
        self.command("topic %s %d%s" % (name, partitions,
                                        "" if replication is None
                                        else " %d" % replication))

    def down(self, broker):
        self.command("down %d" % broker)

    def up(self, broker):
        self.command("up %d" % broker)

    def leader(self, topic, partition, broker):
        self.command("leader %s %d %d" % (topic, partition, broker))

    def errors(self, api, *errs):
        """The next len(errs) requests of kind api (a number or a name:
        Produce, Fetch ...) fail with errs (numbers or librdkafka's names:
        NOT_LEADER_FOR_PARTITION, _TRANSPORT ...), in turn."""
        self.command("errors %s %s" % (api, " ".join(str(e) for e in errs)))

    def rtt(self, broker, ms):
        self.command("rtt %d %d" % (broker, ms))

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def close(self):
        """Stops the cluster (stdin closed, then kill past 10 s); safe to
        repeat. Returns the exit status."""
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        return proc.returncode
