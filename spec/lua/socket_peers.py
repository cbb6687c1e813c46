"""Peers for the cosocket specs (socket_spec.lua), each in a thread of the
process that runs the specs, on 127.0.0.1:

- a TCP server (MF_SOCK_PORT), the same over TLS with the specs'
  self-signed certificate (MF_SOCK_TLS_PORT) and on a unix socket
  (MF_SOCK_UNIX), each answering a connection as its first line asks:
    echo         echoes every line until the end of the stream
    reset        sends "partial" then resets the connection (RST)
    silent       reads and never answers
    pieces       sends "ab", "c--bou", "ndary-", "-def\\r\\nlast" in pieces
                 40 ms apart, then closes
    all          sends "hello world" and closes
    close-later  answers "ok\\n" and closes 200 ms later
    stall        neither reads nor answers for 5 s (its buffers fill up)
- a UDP echo (MF_SOCK_UDP_PORT);
- a WebSocket server (MF_WS_PORT): the opening handshake, then text frames
  echoed, pings answered, a close answered and the connection closed;
- a DNS server on UDP (MF_DNS_PORT) answering A questions for
  mf-test.example (127.0.0.42, TTL 60) and NXDOMAIN for any other name;
- memcached (MF_MEMCACHED_PORT), its own process;
- a listener that never accepts, its backlog full (MF_SOCK_BLACKHOLE_PORT):
  a connect to it waits until it times out.

Run alone (python3 spec/lua/socket_peers.py CERT KEY) it prints the
variables and serves until killed: for running one spec by hand."""
import base64
import hashlib
import os
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time


class ScriptHandler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline().strip().decode()
        getattr(self, "do_" + line.replace("-", "_"), self.do_unknown)()

    def do_unknown(self):
        self.wfile.write(b"unknown\n")

    def do_echo(self):
        for line in self.rfile:
            self.wfile.write(line)
            self.wfile.flush()

    def do_reset(self):
        self.wfile.write(b"partial")
        self.wfile.flush()
        time.sleep(0.05)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        # closed here: socketserver's own close shuts writing down first,
        # which would send a FIN before the reset
        self.wfile.close()
        self.rfile.close()
        self.connection.close()

    def do_silent(self):
        while self.rfile.read(1):
            pass

    def do_pieces(self):
        for piece in (b"ab", b"c--bou", b"ndary-", b"-def\r\nlast"):
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.04)

    def do_all(self):
        self.wfile.write(b"hello world")

    def do_stall(self):
        time.sleep(5)

    def do_close_later(self):
        self.wfile.write(b"ok\n")
        self.wfile.flush()
        time.sleep(0.2)


class Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class ThreadedUnix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class TLSThreaded(Threaded):
    def __init__(self, addr, handler, ctx):
        self.ctx = ctx
        super().__init__(addr, handler)

    def get_request(self):
        conn, addr = self.socket.accept()
        conn.settimeout(10)
        return self.ctx.wrap_socket(conn, server_side=True), addr


class UDPEcho(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(data, self.client_address)


WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WebSocketEcho(socketserver.StreamRequestHandler):
    def handle(self):
        key = None
        for line in self.rfile:
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "sec-websocket-key":
                key = value.strip().encode()
        if key is None:
            self.wfile.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\n"
                         b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        self.wfile.flush()
        while True:
            frame = self.read_frame()
            if frame is None:
                return
            opcode, payload = frame
            if opcode == 8:
                self.send_frame(8, payload[:2])
                return
            self.send_frame(10 if opcode == 9 else opcode, payload)

    def read_frame(self):
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.rfile.read(8))[0]
        mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = self.rfile.read(n)
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def send_frame(self, opcode, payload):
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()


class DNSStub(socketserver.BaseRequestHandler):
    NAME, ADDRESS = "mf-test.example", bytes([127, 0, 0, 42])

    def handle(self):
        data, sock = self.request
        qid, _flags, qdcount = struct.unpack("!HHH", data[:6])
        labels, i = [], 12
        while data[i]:
            labels.append(data[i + 1:i + 1 + data[i]].decode())
            i += 1 + data[i]
        qtype = struct.unpack("!H", data[i + 1:i + 3])[0]
        question = data[12:i + 5]
        found = ".".join(labels).lower() == self.NAME
        answers = b""
        if found and qtype == 1:
            answers = (struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) +
                       self.ADDRESS)
        rcode = 0 if found else 3
        head = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1,
                           1 if answers else 0, 0, 0)
        sock.sendto(head + question + answers, self.client_address)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_memcached():
    port = _free_port()
    argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("memcached exited %s" % proc.returncode)
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("memcached does not listen")


def _serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Peers:
    def __init__(self, tmp, cert, key):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.unix_path = os.path.join(tmp, "sock-peer.sock")
        self.servers = [
            _serve(Threaded(("127.0.0.1", 0), ScriptHandler)),
            _serve(TLSThreaded(("127.0.0.1", 0), ScriptHandler, ctx)),
            _serve(ThreadedUnix(self.unix_path, ScriptHandler)),
            _serve(socketserver.ThreadingUDPServer(("127.0.0.1", 0), UDPEcho)),
            _serve(Threaded(("127.0.0.1", 0), WebSocketEcho)),
            _serve(socketserver.ThreadingUDPServer(("127.0.0.1", 0), DNSStub)),
        ]
        self.memcached, self.memcached_port = _start_memcached()

        # backlog 0 holds one connection; the fillers take it, and later
        # SYNs are dropped
        self.hole = socket.socket()
        self.hole.bind(("127.0.0.1", 0))
        self.hole.listen(0)
        self.fillers = []
        for _ in range(3):
            f = socket.socket()
            f.setblocking(False)
            f.connect_ex(self.hole.getsockname())
            self.fillers.append(f)

    def env(self):
        tcp, tls, _, udp, ws, dns = self.servers
        return dict(MF_SOCK_PORT=str(tcp.server_address[1]),
                    MF_WS_PORT=str(ws.server_address[1]),
                    MF_DNS_PORT=str(dns.server_address[1]),
                    MF_MEMCACHED_PORT=str(self.memcached_port),
                    MF_SOCK_BLACKHOLE_PORT=str(self.hole.getsockname()[1]),
                    MF_SOCK_TLS_PORT=str(tls.server_address[1]),
                    MF_SOCK_UNIX=self.unix_path,
                    MF_SOCK_UDP_PORT=str(udp.server_address[1]))

    def close(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()
        for f in self.fillers + [self.hole]:
            f.close()
        self.memcached.kill()
        self.memcached.wait()


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="mf-sock-peers-")
    peers = Peers(tmp, sys.argv[1], sys.argv[2])
    for k, v in peers.env().items():
        print("export %s=%s" % (k, v))
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    finally:
        peers.close()
