"""An HTTP/2 server over cleartext (prior knowledge) on 127.0.0.1, built on
python3-h2, for what nginx will not do on demand: each path picks a
behaviour, so the client's handling of a misbehaving peer is tested
against real frames.

  /echo          200 with the request's body as it arrived (x-got: its
                 length)
  /rst           RST_STREAM INTERNAL_ERROR in answer to the head
  /refuse-once   RST_STREAM REFUSED_STREAM the first time per full path,
                 then 200 "again"
  /refuse-always RST_STREAM REFUSED_STREAM every time
  /goaway-once   the first time per full path: GOAWAY (last stream 0) and
                 the connection closed; then 200 "fresh"
  /slow          no answer at all (the stream stays open)
  /bighead       200 with four 20,000-byte fields (an 80 KB head)
  anything else  200 "ok"

connections counts the TCP connections accepted; paths lists every
request's path in order (as served)."""
import socket
import sys
import threading

try:
    import h2  # noqa: F401
except ImportError:
    # python3-h2 (the Makefile's PACKAGES) is Debian's: a Python built
    # elsewhere (pyenv) does not search Debian's dist-packages.
    sys.path.append("/usr/lib/python3/dist-packages")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.errors  # noqa: E402
import h2.events  # noqa: E402


class H2Peer:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.paths = []
        self.seen = set()
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _first_time(self, path):
        with self.lock:
            first = path not in self.seen
            self.seen.add(path)
            return first

    def _serve(self, sock):
        cfg = h2.config.H2Configuration(client_side=False,
                                        header_encoding="utf-8")
        conn = h2.connection.H2Connection(config=cfg)
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        streams = {}  # stream id -> [path, bytearray body]
        sock.settimeout(30)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                for ev in conn.receive_data(data):
                    if not self._event(sock, conn, streams, ev):
                        sock.sendall(conn.data_to_send())
                        return
                sock.sendall(conn.data_to_send())
        except OSError:
            return
        finally:
            sock.close()

    def _event(self, sock, conn, streams, ev):
        """False when the connection is to be closed."""
        if isinstance(ev, h2.events.RequestReceived):
            path = dict(ev.headers)[":path"]
            streams[ev.stream_id] = [path, bytearray()]
            with self.lock:
                self.paths.append(path)
            return self._on_head(conn, ev.stream_id, path)
        if isinstance(ev, h2.events.DataReceived):
            if ev.stream_id in streams:
                streams[ev.stream_id][1] += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length,
                                           ev.stream_id)
        if isinstance(ev, h2.events.StreamEnded) and ev.stream_id in streams:
            path, body = streams.pop(ev.stream_id)
            if path.startswith("/echo"):
                self._answer(conn, ev.stream_id, bytes(body),
                             [("x-got", str(len(body)))])
        return True

    def _on_head(self, conn, sid, path):
        if path.startswith("/rst"):
            conn.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
        elif path.startswith("/refuse-always") or (
                path.startswith("/refuse-once") and self._first_time(path)):
            conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
        elif path.startswith("/goaway-once") and self._first_time(path):
            conn.close_connection(last_stream_id=0)
            return False
        elif path.startswith("/refuse-once"):
            self._answer(conn, sid, b"again")
        elif path.startswith("/goaway-once"):
            self._answer(conn, sid, b"fresh")
        elif path.startswith("/bighead"):
            self._answer(conn, sid, b"big", [("x-big-%d" % i, "v" * 20000)
                                             for i in range(4)])
        elif path.startswith("/echo") or path.startswith("/slow"):
            pass  # /echo answers at the body's end, /slow never
        else:
            self._answer(conn, sid, b"ok")
        return True

    def _answer(self, conn, sid, body, extra=()):
        conn.send_headers(sid, [(":status", "200"),
                                ("content-length", str(len(body)))] +
                          list(extra))
        # Within the peer's flow-control windows, in frames it accepts.
        while body:
            room = min(conn.local_flow_control_window(sid),
                       conn.max_outbound_frame_size)
            if room <= 0:
                raise RuntimeError("over the flow-control window")
            conn.send_data(sid, body[:room])
            body = body[room:]
        conn.end_stream(sid)


class BrokenPeer:
    """A server that answers each connection's preface with frames made
    from a seeded generator: a SETTINGS most of the time, then HEADERS with
    random or plausible HPACK blocks, DATA, frames of any type and flags on
    streams 0, 1, 3 or the highest, or plain garbage; then it closes. For
    the client's robustness: every request must end with a response or an
    error, the process must not crash."""

    def __init__(self, seed):
        import random
        self.rnd = random.Random(seed)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self):
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            out = self._frames()  # drawn here: one generator, one thread
            threading.Thread(target=self._serve, args=(conn, out),
                             daemon=True).start()

    @staticmethod
    def _frame(kind, flags, sid, payload):
        return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) +
                sid.to_bytes(4, "big") + payload)

    def _junk(self, most):
        rnd = self.rnd
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, most)))

    def _frames(self):
        rnd = self.rnd
        out = self._frame(4, 0, 0, b"") if rnd.random() < 0.8 else b""
        for _ in range(rnd.randint(0, 8)):
            kind = rnd.random()
            sid = rnd.choice([0, 1, 1, 1, 3, 2**31 - 1])
            if kind < 0.3:  # ":status: 200" (0x88) or noise
                block = b"\x88" if rnd.random() < 0.5 else self._junk(40)
                out += self._frame(1, rnd.choice([0, 1, 4, 5, 0x24]), sid,
                                   block)
            elif kind < 0.6:
                out += self._frame(0, rnd.choice([0, 1, 8]), sid,
                                   self._junk(100))
            elif kind < 0.8:
                out += self._frame(rnd.randint(0, 12), rnd.getrandbits(8),
                                   sid, self._junk(20))
            else:
                out += self._junk(50) or b"\x00"
        return out

    def _serve(self, sock, out):
        try:
            sock.settimeout(5)
            sock.recv(65536)
            sock.sendall(out)
        except OSError:
            pass
        finally:
            sock.close()
