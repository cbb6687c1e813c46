"""Runs `moonflow test spec/lua` with examples/http_hello listening on free
loopback ports, plain (MF_HTTP_PORT) and TLS with a self-signed certificate
(MF_HTTPS_PORT, MF_CA_FILE), and a port where nothing listens
(MF_DEAD_PORT). ctest's lua.specs and asan.lua.specs.

  MF_MOONFLOW=build/moonflow MF_HTTP_HELLO=build/examples/http_hello \\
      python3 spec/lua/run_specs.py [busted options...]
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402


def start(hello, *extra):
    port = harness.free_port()
    argv = [hello, "--listen", "127.0.0.1:%d" % port] + list(extra)
    return harness.Server(argv, port)


def main():
    moonflow = os.environ["MF_MOONFLOW"]
    hello = os.environ["MF_HTTP_HELLO"]
    tmp = tempfile.mkdtemp(prefix="mf-lua-specs-")
    cert, key = harness.self_signed(tmp)
    servers = [start(hello)]
    try:
        servers.append(start(hello, "--tls-cert", cert, "--tls-key", key))
        env = dict(os.environ, MF_HTTP_PORT=str(servers[0].port),
                   MF_HTTPS_PORT=str(servers[1].port), MF_CA_FILE=cert,
                   MF_DEAD_PORT=str(harness.free_port()))
        root = os.path.dirname(os.path.dirname(HERE))
        proc = subprocess.run([moonflow, "test", "spec/lua"] + sys.argv[1:],
                              cwd=root, env=env, timeout=240)
        return proc.returncode
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
