"""A newcomer's first Kafka, from the READMEs alone: the commands of
README.md ("Trying Kafka without a Kafka") and of the "Run it" sections of
examples/kafka_cli and examples/kafka_site are read out of the READMEs and
run as written (by bash, from the repository's root, `moonflow` on PATH),
so the docs and this test cannot drift apart. Only their ports change:
127.0.0.1:9092 (and --port 9092) becomes a free port P, 127.0.0.1:8080 a
free port S; nothing else is rewritten.

A line starting `moonflow kafka-mock` or `moonflow serve` (after VAR=value
words) is a server: it is started, waited for (the mock's bootstrap line:
127.0.0.1:P,P+1,P+2; serve's port), and stopped at the end of its README
with SIGTERM, which must end it with exit status 0. Every other line must
exit 0, and its output is checked: the messages produced come back from
the consume, the metadata lists the brokers, each curl's partition and
offset hold its value. The mock is started anew for each README on the
same P (fixed ports across restarts).

moonflow kafka-mock's own edges: a bad flag exits 2 naming it, a taken
port exits 1 naming it, without --port it prints the brokers' own
addresses, and SIGINT stops it with 0.

  MF_MOONFLOW=build/moonflow python3 spec/lua/test_kafka_try.py
"""
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
BROKERS = 3
check = harness.Checks()
failures = check.failures


# ---- the READMEs' commands -----------------------------------------------------

def section_commands(readme, heading):
    """The lines of the ```sh blocks under heading (up to the next heading
    of the same or a higher level), blank lines left out."""
    with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
        text = f.read()
    level = heading.split(" ")[0]
    start = text.index("\n" + heading + "\n")
    end = re.compile(r"\n#{1,%d} " % len(level)).search(text, start + 1)
    section = text[start:end.start() if end else len(text)]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines += [line for line in block.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("%s: no ```sh block under %r" % (readme, heading))
    return lines


def is_server(line):
    words = [w for w in line.split() if not re.match(r"^[A-Z_]+=", w)]
    return words[:2] in (["moonflow", "kafka-mock"], ["moonflow", "serve"])


def localize(line, mock_port, serve_port):
    """The line with the documented ports replaced by this run's."""
    out = line.replace("--port 9092", "--port %d" % mock_port)
    out = out.replace("127.0.0.1:9092", "127.0.0.1:%d" % mock_port)
    out = out.replace("127.0.0.1:8080", "127.0.0.1:%d" % serve_port)
    if "9092" in out or "8080" in out:
        raise RuntimeError("a documented port this test cannot move: %r" % line)
    return out


def free_port_run(n):
    """A free port P with P+1 .. P+n-1 free too."""
    for _ in range(50):
        p = harness.free_port()
        if p + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p + i))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d free ports in a row" % n)


class Shell:
    """bash from the repository's root with `moonflow` (MF_MOONFLOW) first
    on PATH, and the servers it started."""

    def __init__(self, tmp):
        self.tmp = tmp
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir, exist_ok=True)
        link = os.path.join(bindir, "moonflow")
        if not os.path.exists(link):
            os.symlink(MOONFLOW, link)
        self.env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
        self.servers = []

    def run(self, line, timeout=120):
        return subprocess.run(["bash", "-c", line], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, line, name=None):
        """Starts a server line (named name in the checks: the line as
        documented); bash runs a single command by exec, so the process is
        moonflow's own (checked) and takes the signals."""
        n = len(self.servers)
        out = open(os.path.join(self.tmp, "server%d.out" % n), "w+")
        err = open(os.path.join(self.tmp, "server%d.err" % n), "w+")
        proc = subprocess.Popen(["bash", "-c", line], cwd=ROOT, env=self.env,
                                stdout=out, stderr=err)
        server = {"line": name or line, "proc": proc, "out": out, "err": err}
        self.servers.append(server)
        return server

    def stop_all(self):
        """SIGTERM to each server, the last started first: [(line, status,
        stderr)]."""
        done = []
        for s in reversed(self.servers):
            proc = s["proc"]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = "still running 30 s after SIGTERM"
            s["err"].seek(0)
            done.append((s["line"], code, s["err"].read()))
        self.servers = []
        return done


def wait_first_line(server, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        server["out"].seek(0)
        text = server["out"].read()
        if "\n" in text:
            return text.split("\n", 1)[0]
        if server["proc"].poll() is not None:
            break
        time.sleep(0.05)
    server["err"].seek(0)
    raise RuntimeError("%r printed no line (status %s): %s" % (
        server["line"], server["proc"].poll(), server["err"].read()))


def is_moonflow(pid):
    try:
        return os.path.basename(os.readlink("/proc/%d/exe" % pid)).startswith("moonflow")
    except OSError:
        return False


def run_readme(shell, readme, heading, mock_port, serve_port):
    """Runs a README section's commands: {line as documented: result} for
    the lines that run to their end."""
    results = {}
    try:
        for doc_line in section_commands(readme, heading):
            line = localize(doc_line, mock_port, serve_port)
            if not is_server(line):
                results[doc_line] = shell.run(line)
                continue
            server = shell.start(line, doc_line)
            if "kafka-mock" in line:
                want = ",".join("127.0.0.1:%d" % (mock_port + i)
                                for i in range(BROKERS))
                got = wait_first_line(server)
                check("%s: `%s` prints the bootstrap list %s" % (
                    readme, doc_line, want), got == want, got)
            else:
                harness.wait_port(serve_port, server["proc"], timeout=30)
            check("%s: `%s` is moonflow itself (signals reach it)" % (
                readme, doc_line), is_moonflow(server["proc"].pid))
    finally:
        for line, code, err in shell.stop_all():
            check("%s: `%s` exits 0 on SIGTERM" % (readme, line), code == 0,
                  "status %s; stderr: %s" % (code, err[-2000:]))
    return results


def ran_ok(readme, line, result):
    check("%s: `%s` exits 0" % (readme, line), result.returncode == 0,
          "status %d\nstdout: %s\nstderr: %s" % (
              result.returncode, result.stdout[-2000:], result.stderr[-2000:]))


# ---- the READMEs ---------------------------------------------------------------

def test_readme(shell, mock_port):
    readme = "README.md"
    results = run_readme(shell, readme, "## Trying Kafka without a Kafka",
                         mock_port, 0)
    lines = list(results)
    check("README.md: a produce and a consume", len(lines) == 2, lines)
    for line in lines:
        ran_ok(readme, line, results[line])
    got = sorted(results[lines[-1]].stdout.splitlines())
    check("README.md: the consume prints one, two and three",
          got == ["one", "three", "two"], got)


def test_kafka_cli(shell, mock_port):
    readme = "examples/kafka_cli/README.md"
    results = run_readme(shell, readme, "## Run it", mock_port, 0)
    lines = list(results)
    check("kafka_cli: produce, consume, metadata", len(lines) == 3, lines)
    for line in lines:
        ran_ok(readme, line, results[line])
    produce, consume, metadata = (results[line] for line in lines[:3])
    check("kafka_cli: the produce prints nothing", produce.stdout == "",
          produce.stdout)
    got = sorted(consume.stdout.splitlines())
    check("kafka_cli: the consume prints the two keyed lines",
          got == ["user42 login", "user7 logout"], got)
    brokers = [l for l in metadata.stdout.splitlines() if l.startswith("  broker ")]
    check("kafka_cli: the metadata lists 3 brokers and the topic",
          len(brokers) == BROKERS and
          'topic "events" with 4 partitions' in metadata.stdout, metadata.stdout)


def test_kafka_site(shell, mock_port):
    readme = "examples/kafka_site/README.md"
    serve_port = harness.free_port()
    results = run_readme(shell, readme, "## Run it", mock_port, serve_port)
    lines = list(results)
    check("kafka_site: two curls and a consume", len(lines) == 3, lines)
    for line in lines:
        ran_ok(readme, line, results[line])
    answers = []
    for line, value in zip(lines[:2], ("user=42&action=login", "a body")):
        try:
            j = json.loads(results[line].stdout)
        except ValueError:
            j = {}
        check("kafka_site: `%s` answers the id, topic, partition, offset" % line,
              j.get("topic") == "events" and isinstance(j.get("id"), str) and
              isinstance(j.get("partition"), int) and j.get("offset", -1) >= 0,
              results[line].stdout)
        answers.append("%s %s %s %s" % (j.get("id"), j.get("partition"),
                                        j.get("offset"), value))
    got = results[lines[-1]].stdout.splitlines() if len(lines) == 3 else []
    check("kafka_site: the consume finds each value at its answer's "
          "partition and offset", sorted(got) == sorted(answers),
          "consumed %r, answered %r" % (got, answers))


def test_docs_agree():
    mocks = {readme: [l for l in section_commands(readme, heading)
                      if "kafka-mock" in l]
             for readme, heading in (
                 ("README.md", "## Trying Kafka without a Kafka"),
                 ("examples/kafka_cli/README.md", "## Run it"),
                 ("examples/kafka_site/README.md", "## Run it"))}
    check("the three READMEs start the same mock",
          all(m == ["moonflow kafka-mock --port 9092"] for m in mocks.values()),
          mocks)


# ---- moonflow kafka-mock's edges ----------------------------------------------

def test_mock_edges(shell):
    for args, status, says in (
            ("--brokers 0", 2, "--brokers takes 1..64, not '0'"),
            ("--brokers", 2, "--brokers needs a value"),
            ("--port x", 2, "--port takes a port"),
            ("--port 65535", 2, "--port 65535 leaves no room for 3 brokers"),
            ("--bogus", 2, "unknown option --bogus"),
            ("events", 2, "bad topic 'events'")):
        r = shell.run("moonflow kafka-mock " + args, timeout=30)
        check("kafka-mock %s exits %d saying %r" % (args, status, says),
              r.returncode == status and says in r.stderr,
              "%d %r" % (r.returncode, r.stderr))
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    r = shell.run("moonflow kafka-mock --brokers 1 --port %d" % port, timeout=30)
    taken.close()
    check("kafka-mock on a taken port exits 1 naming it",
          r.returncode == 1 and "127.0.0.1:%d: Address already in use" % port
          in r.stderr, "%d %r" % (r.returncode, r.stderr))
    r = shell.run("moonflow help kafka-mock", timeout=30)
    check("moonflow help kafka-mock prints its usage",
          r.returncode == 0 and r.stdout.startswith("usage: moonflow kafka-mock"),
          r.stdout)
    r = shell.run("moonflow --help", timeout=30)
    check("moonflow --help lists kafka-mock", "  kafka-mock " in r.stdout, r.stdout)

    server = shell.start("moonflow kafka-mock --brokers 2")
    line = wait_first_line(server)
    check("kafka-mock without --port prints its 2 brokers' own addresses",
          re.fullmatch(r"127\.0\.0\.1:\d+,127\.0\.0\.1:\d+", line), line)
    server["proc"].send_signal(signal.SIGINT)
    try:
        code = server["proc"].wait(timeout=30)
    except subprocess.TimeoutExpired:
        server["proc"].kill()
        code = "still running"
    shell.servers = []
    check("kafka-mock: SIGINT (Ctrl-C) stops it with 0", code == 0, code)


def main():
    with tempfile.TemporaryDirectory(prefix="mf-kafka-try-") as tmp:
        shell = Shell(tmp)
        try:
            test_docs_agree()
            test_mock_edges(shell)
            mock_port = free_port_run(BROKERS)
            test_readme(shell, mock_port)
            test_kafka_cli(shell, mock_port)
            test_kafka_site(shell, mock_port)
        finally:
            for line, code, err in shell.stop_all():
                print("stopped %r: %s" % (line, code))
    if failures:
        print("%d failed: %s" % (len(failures), ", ".join(failures)))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
