"""Shared helpers for the integration tests: free ports, processes that are
always stopped, raw HTTP over sockets, self-signed certificates.

Every server a test starts listens on 127.0.0.1 and is killed by PID when
the test ends, whatever happens."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc=None, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("server exited with %s" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("port %d not listening" % port)


class Server:
    """A server process started for one test and stopped by PID."""

    def __init__(self, argv, port, env=None):
        self.port = port
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
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


def temp_dir(test):
    path = tempfile.mkdtemp(prefix="moonflow-test-")
    test.addCleanup(shutil.rmtree, path, True)
    return path


def body_pattern(n):
    return (b"0123456789abcdef" * (n // 16 + 1))[:n]


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
