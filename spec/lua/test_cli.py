"""The moonflow binary's command line: run (exit codes, the status the
main chunk returns, arguments, timers keeping it alive, tracebacks), test (the summary line and exit code), serve
(the placeholder), --help, help [COMMAND], --version, and bad commands and
flags. Runs from a temporary directory: the Lua modules are embedded,
nothing is read from the current directory."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MOONFLOW = os.path.abspath(os.environ["MF_MOONFLOW"])
failures = []
passed = []


def moonflow(args, cwd):
    return subprocess.run([MOONFLOW] + args, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def check(name, cond, proc=None):
    if cond:
        print("ok", name)
        passed.append(name)
        return
    failures.append(name)
    print("FAIL", name)
    if proc is not None:
        print(proc.stdout, proc.stderr, sep="\n")


def write(d, name, text):
    with open(os.path.join(d, name), "w") as f:
        f.write(text)


def json_failures(text):
    """How many failures busted's json output lists; None if it is not one
    JSON document."""
    try:
        return len(json.loads(text)["failures"])
    except ValueError:
        return None


def main():
    d = tempfile.mkdtemp(prefix="mf-cli-")
    write(d, "ok.lua", 'local mf = require "moonflow"\n'
          'local a, b = ...\nmf.sleep(5)\n'
          'print(arg[0], a, b, #arg)\n')
    p = moonflow(["run", "ok.lua", "x", "y"], d)
    check("run passes arguments and exits 0",
          p.returncode == 0 and p.stdout == "ok.lua\tx\ty\t2\n", p)

    os.mkdir(os.path.join(d, "app"))
    write(d, "app/helper.lua", 'return { answer = 42 }\n')
    write(d, "app/main.lua", 'print(require("helper").answer)\n')
    p = moonflow(["run", os.path.join(d, "app", "main.lua")], "/")
    check("run finds modules beside the script from any directory",
          p.returncode == 0 and p.stdout == "42\n", p)

    write(d, "boom.lua", 'local function f() error("boom") end\nf()\n')
    p = moonflow(["run", "boom.lua"], d)
    check("run exits 1 with a traceback on error",
          p.returncode == 1 and "boom.lua:1: boom" in p.stderr
          and "stack traceback" in p.stderr, p)

    write(d, "status.lua", 'local mf = require "moonflow"\n'
          'mf.timer.at(20, function() print("timer") end)\n'
          'io.stderr:write("usage: status.lua\\n")\nreturn 2\n')
    p = moonflow(["run", "status.lua"], d)
    check("run exits with the status the main chunk returns, after its "
          "timers, without a traceback",
          p.returncode == 2 and p.stdout == "timer\n"
          and p.stderr == "usage: status.lua\n", p)
    for value, status in (("256", 1), ("-1", 1), ("1.5", 1), ('"2"', 0),
                          ("0", 0)):
        write(d, "status.lua", "return %s\n" % value)
        p = moonflow(["run", "status.lua"], d)
        check("run: the main chunk returns %s: exit %d" % (value, status),
              p.returncode == status, p)

    write(d, "timers.lua", 'local mf = require "moonflow"\n'
          'mf.timer.at(30, function() mf.sleep(5) print("late") end)\n'
          'print("main done")\n')
    p = moonflow(["run", "timers.lua"], d)
    check("run waits for timers started by the script",
          p.returncode == 0 and p.stdout == "main done\nlate\n", p)

    write(d, "bgfail.lua", 'require("moonflow").timer.at(1, function() '
          'error("in timer") end)\n')
    p = moonflow(["run", "bgfail.lua"], d)
    check("run exits 1 when a background coroutine raised",
          p.returncode == 1 and "in timer" in p.stderr, p)

    write(d, "abandon.lua", 'local mf = require "moonflow"\n'
          'mf.timer.every(5, function() mf.sleep(100) end)\n'
          'mf.timer.at(1, function()\n'
          '  mf.parallel { mf.task.go("sleep_ms", 50),\n'
          '                mf.task.timer(60000) }:wait()\n'
          '  print("flow done")\n'
          'end)\n'
          'mf.sleep(20)\n'
          'error("main failed")\n')
    t0 = time.time()
    p = moonflow(["run", "abandon.lua"], d)
    check("run stops timers and flows when the main chunk raises",
          p.returncode == 1 and "main failed" in p.stderr
          and "flow done" not in p.stdout and time.time() - t0 < 10, p)

    p = moonflow(["run", "missing.lua"], d)
    check("run exits 1 for a missing file",
          p.returncode == 1 and "missing.lua" in p.stderr, p)

    os.mkdir(os.path.join(d, "specs"))
    write(d, "specs/a_spec.lua", 'local mf = require "moonflow"\n'
          'describe("a", function()\n'
          '  it("waits", function() mf.sleep(1) end)\n'
          '  it("fails", function() assert.are.equal(1, 2) end)\n'
          'end)\n')
    p = moonflow(["test", "specs"], d)
    check("test prints the summary and exits 1 on a failure",
          p.returncode == 1 and
          p.stdout.rstrip().splitlines()[-1] == "1 passed, 1 failed", p)
    p = moonflow(["test", "specs", "--filter=waits"], d)
    check("test passes options to busted",
          p.returncode == 0 and
          p.stdout.rstrip().splitlines()[-1] == "1 passed, 0 failed", p)

    for handler, shape in (("TAP", "not ok 2 - a fails"),
                           ("json", '"failures"'), ("junit", "<testsuites"),
                           ("plainTerminal", "a fails")):
        p = moonflow(["test", "specs", "-o", handler], d)
        check("test -o %s counts the failure and exits 1" % handler,
              p.returncode == 1 and shape in p.stdout and
              p.stderr.rstrip().splitlines()[-1:] == ["1 passed, 1 failed"],
              p)
    p = moonflow(["test", "specs", "--output=json"], d)
    check("test --output=json keeps stdout one JSON document",
          p.returncode == 1 and json_failures(p.stdout) == 1, p)
    p = moonflow(["test", "specs", "-o", "nosuch"], d)
    check("test -o with an unknown handler exits 1 naming it",
          p.returncode == 1 and "-o nosuch: no such output handler"
          in p.stderr, p)

    os.mkdir(os.path.join(d, "modspecs"))
    write(d, "modspecs/util.lua", 'return { twice = function(x) '
          'return 2 * x end }\n')
    os.mkdir(os.path.join(d, "modspecs", "pkg"))
    write(d, "modspecs/pkg/init.lua", 'return { name = "pkg" }\n')
    write(d, "modspecs/m_spec.lua", 'describe("m", function()\n'
          '  it("requires", function()\n'
          '    assert.are.equal(4, require("util").twice(2))\n'
          '    assert.are.equal("pkg", require("pkg").name)\n'
          '  end)\nend)\n')
    p = moonflow(["test", os.path.join(d, "modspecs")], "/")
    check("test DIR puts DIR and DIR/?/init.lua on the module path",
          p.returncode == 0 and
          p.stdout.rstrip().splitlines()[-1] == "1 passed, 0 failed", p)
    p = moonflow(["test", os.path.join(d, "modspecs", "m_spec.lua")], "/")
    check("test FILE puts the spec file's folder on the module path",
          p.returncode == 0 and
          p.stdout.rstrip().splitlines()[-1] == "1 passed, 0 failed", p)

    p = moonflow(["serve", "no-such-dir"], d)
    check("serve refuses a missing scripts folder with exit 2",
          p.returncode == 2 and "no-such-dir" in p.stderr, p)

    for args in (["--help"], ["run", "--help"], ["test", "--help"],
                 ["serve", "--help"]):
        p = moonflow(args, d)
        check(" ".join(args) + " prints usage",
              p.returncode == 0 and "usage: moonflow" in p.stdout, p)
    p = moonflow(["frobnicate"], d)
    check("an unknown command exits 2", p.returncode == 2, p)

    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "..", "core", "include", "moonflow", "moonflow.h")
    with open(header) as f:
        version = re.search(r'#define MOONFLOW_VERSION "([0-9.]+)"',
                            f.read()).group(1)
    p = moonflow(["--version"], d)
    check("--version prints the version and exits 0",
          p.returncode == 0 and p.stdout == "moonflow %s\n" % version, p)

    top = moonflow(["--help"], d)
    p = moonflow(["help"], d)
    check("help prints the same as --help",
          p.returncode == 0 and p.stdout == top.stdout
          and "help [COMMAND]" in p.stdout, p)
    for cmd in ("run", "test", "serve", "kafka-mock"):
        own = moonflow([cmd, "--help"], d)
        p = moonflow(["help", cmd], d)
        check("help %s prints the same as %s --help" % (cmd, cmd),
              p.returncode == 0 and p.stdout == own.stdout
              and p.stdout.startswith("usage: moonflow " + cmd), p)
    p = moonflow(["help", "frobnicate"], d)
    check("help of an unknown command exits 2 naming it",
          p.returncode == 2 and "'frobnicate'" in p.stderr, p)
    p = moonflow(["--frobnicate"], d)
    check("an unknown option exits 2 naming it",
          p.returncode == 2 and "unknown option '--frobnicate'" in p.stderr,
          p)

    os.mkdir(os.path.join(d, "site"))
    for args, flag in ((["--workers", "two"], "--workers"),
                       (["--workers", "-1"], "--workers"),
                       (["--listen"], "--listen"),
                       (["--listn", "x"], "--listn"),
                       (["--bogus"], "unknown option --bogus"),
                       (["--listen", "--workers", "2"],
                        "--listen needs a value"),
                       (["--listen", "foo:80"], "--listen: HOST:PORT"),
                       (["--listen", "127.0.0.1:65536"], "--listen: HOST:PORT"),
                       (["other-dir"], "other-dir")):
        p = moonflow(["serve", "site"] + args, d)
        check("serve %s exits 2 naming %s" % (" ".join(args), flag),
              p.returncode == 2 and flag in p.stderr, p)

    print("%d passed, %d failed" % (len(passed), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
