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
- a listener that never accepts, its backlog full (MF_SOCK_BLACKHOLE_PORT):
  a connect to it waits until it times out.

Run alone (python3 spec/lua/socket_peers.py CERT KEY) it prints the
variables and serves until killed: for running one spec by hand."""
import os
import socket
import socketserver
import ssl
import struct
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
        ]

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
        tcp, tls, _, udp = self.servers
        return dict(MF_SOCK_PORT=str(tcp.server_address[1]),
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
