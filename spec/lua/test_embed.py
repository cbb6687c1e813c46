"""examples/embed, run and checked: the default script's output (its own
mf.go function and task kind, alone, in a parallel, timed out), a script
file with arguments, a script whose task description is wrong (exit 1
with the kind's message), and examples/sort and examples/matrix_multiply
on its "sort" and "matmul".

  MF_EMBED=build/examples/embed python3 spec/lua/test_embed.py

With --installed (ctest's embed.installed), the program is first built the
way an embedding project builds it: the build tree (MF_BUILD_DIR) is
installed with `MF_CMAKE --install` into a temporary prefix, and
examples/embed/main.c, copied out of the source tree as app.c, is built by
the commands of core/README.md's embedding section (the sh block between
its `embed commands` markers), run as written with PKG_CONFIG_PATH naming
the prefix only: `# shared` against the shared libraries, `# static`
against the archives. Both programs then pass the same checks, run
without LD_LIBRARY_PATH. The public headers are also compiled and linked
as C++.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))

DEFAULT_OUTPUT = ("reverse: wolfnoom\n"
                  "add: 42\n"
                  "parallel: 3 7\n"
                  "timeout: timeout\n")

SCRIPT = """local mf = require "moonflow"
local a, b = ...
local r = mf.task.add{ a = tonumber(a), b = tonumber(b), ms = 1 }:wait()
return mf.go("reverse", r.sum .. "!"), select("#", ...)
"""

BAD_SCRIPT = """local mf = require "moonflow"
return mf.task.add{ a = "two" }:wait()
"""

CPP_CHECK = """#include <moonflow/lua_go.h>
#include <moonflow/lua_host.h>
#include <moonflow/lua_kind.h>
#include <moonflow/moonflow.h>
#include <cstdio>

int main()
{
    mf_loop_t *loop = mf_loop_create();
    mf_lua_host_t *host = mf_lua_host_create(loop, nullptr);
    lua_State *L = mf_lua_host_state(host);
    lua_pushstring(L, "from C++"); // lua.h, C linkage through our header
    mf_lua_counts_t c;
    mf_lua_host_counts(host, &c);
    bool ok = lua_gettop(L) == 1 && c.coroutines == 0;
    mf_lua_host_destroy(host);
    mf_loop_destroy(loop);
    std::printf("%s\\n", ok ? "c++ ok" : "c++ wrong");
    return ok ? 0 : 1;
}
"""


def run(cmd, env=None, timeout=60):
    return subprocess.run(cmd, env=env, timeout=timeout, capture_output=True,
                          text=True)


def check(cond, what, proc=None):
    if cond:
        return
    detail = ""
    if proc is not None:
        detail = "\n--- stdout\n%s--- stderr\n%s" % (proc.stdout, proc.stderr)
    sys.exit("FAIL %s%s" % (what, detail))


def check_program(embed, workdir, env=None):
    name = os.path.join(*embed.split(os.sep)[-2:])  # shared/app, static/app
    p = run([embed], env)
    check(p.returncode == 0 and p.stdout == DEFAULT_OUTPUT,
          "%s: the default script's output" % name, p)
    script = os.path.join(workdir, "script.lua")
    with open(script, "w") as f:
        f.write(SCRIPT)
    p = run([embed, script, "20", "22"], env)
    check(p.returncode == 0 and p.stdout == "!24\n2\n",
          "%s: a script file with arguments" % name, p)
    bad = os.path.join(workdir, "bad.lua")
    with open(bad, "w") as f:
        f.write(BAD_SCRIPT)
    p = run([embed, bad], env)
    check(p.returncode == 1 and "add task: a must be a number" in p.stderr,
          "%s: a bad description ends the script with exit 1" % name, p)
    check_compute_examples(embed, name, env)
    print("ok %s" % name)


def check_compute_examples(embed, name, env):
    """examples/sort and examples/matrix_multiply on the program's "sort"
    and "matmul" (Workflow's sort and matrix tutorials)."""
    sort = os.path.join(SOURCE, "examples", "sort", "sort.lua")
    p = run([embed, sort, "20000"], env)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 3
          and lines[0].startswith("sorted 20000 integers in one task")
          and lines[1].startswith("sorted them as 4 parts side by side")
          and re.fullmatch(r"smallest -\d+, largest \d+", lines[2]),
          "%s: examples/sort sorts on the pool, whole and in 4 parts" % name, p)
    p = run([embed, sort, "x"], env)
    check(p.returncode == 1 and "usage: embed examples/sort/sort.lua" in p.stderr,
          "%s: examples/sort refuses a count that is not one" % name, p)
    matmul = os.path.join(SOURCE, "examples", "matrix_multiply",
                          "matrix_multiply.lua")
    p = run([embed, matmul], env)
    check(p.returncode == 0 and p.stdout ==
          "[1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]\n"
          "[1 2 3] x [1; 0; -1] = [-2]\n"
          "[1 2; 3 4] x [1 2 3]: nil, invalid argument\n",
          "%s: examples/matrix_multiply's products and refusal" % name, p)


def pkg_config(env, *args):
    p = run(["pkg-config"] + list(args) + ["moonflow"], env)
    check(p.returncode == 0, "pkg-config %s moonflow" % " ".join(args), p)
    return p.stdout.split()


def readme_commands():
    """{"shared": command, "static": command} from core/README.md."""
    with open(os.path.join(SOURCE, "core", "README.md")) as f:
        text = f.read()
    m = re.search(r"<!-- embed commands: begin[^>]*-->\s*```sh\n(.*?)```"
                  r"\s*<!-- embed commands: end -->", text, re.S)
    check(m is not None, "core/README.md: no embed commands block")
    commands = {}
    for line in m.group(1).splitlines():
        command, _, comment = line.partition(" #")
        if command.strip():
            commands[comment.strip()] = command.strip()
    check(sorted(commands) == ["shared", "static"],
          "core/README.md: one `# shared` and one `# static` command, "
          "not %r" % commands)
    return commands


def install(work):
    prefix = os.path.join(work, "prefix")
    p = run([os.environ["MF_CMAKE"], "--install", os.environ["MF_BUILD_DIR"],
             "--prefix", prefix], timeout=120)
    check(p.returncode == 0, "cmake --install into %s" % prefix, p)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib",
                                                         "pkgconfig"))
    env.pop("PKG_CONFIG_LIBDIR", None)
    env.pop("LD_LIBRARY_PATH", None)
    return prefix, env


def build_from_readme(work, env, kind, command):
    """Runs the README's command in a folder of its own; returns ./app."""
    folder = os.path.join(work, kind)
    os.mkdir(folder)
    shutil.copy(os.path.join(SOURCE, "examples", "embed", "main.c"),
                os.path.join(folder, "app.c"))
    p = subprocess.run(["sh", "-c", command], cwd=folder, env=env,
                       timeout=120, capture_output=True, text=True)
    check(p.returncode == 0, "%s: %s" % (kind, command), p)
    return os.path.join(folder, "app")


def build_installed(work):
    """Returns the shared and static programs built from the prefix."""
    prefix, env = install(work)
    cflags = pkg_config(env, "--cflags")
    libs = pkg_config(env, "--libs")
    flags = " ".join(cflags + libs)
    for tree in (SOURCE, os.environ["MF_BUILD_DIR"]):
        check(tree not in flags, "pkg-config names %s: %s" % (tree, flags))
    commands = readme_commands()
    shared = build_from_readme(work, env, "shared", commands["shared"])
    static = build_from_readme(work, env, "static", commands["static"])
    p = run(["ldd", shared], env)
    check(re.search(r"libmoonflow_lua\.so\.0 => %s" %
                    re.escape(os.path.join(prefix, "lib")), p.stdout)
          is not None and "not found" not in p.stdout,
          "the shared program loads the installed libmoonflow_lua.so "
          "without LD_LIBRARY_PATH", p)
    p = run(["ldd", static], env)
    check(p.returncode == 0 and "libmoonflow" not in p.stdout,
          "the static program needs no moonflow shared library", p)
    check_cpp(work, env, cflags, libs)
    return [(shared, env), (static, env)]


def check_cpp(work, env, cflags, libs):
    cxx = shutil.which("c++")
    if not cxx:
        print("skip c++: no C++ compiler")
        return
    src = os.path.join(work, "check.cpp")
    with open(src, "w") as f:
        f.write(CPP_CHECK)
    exe = os.path.join(work, "check_cpp")
    p = run([cxx, "-Wall", "-Wextra", "-Werror", src, "-o", exe] + cflags +
            libs, env, timeout=120)
    check(p.returncode == 0, "c++ with the public headers", p)
    p = run([exe], env)
    check(p.returncode == 0 and p.stdout == "c++ ok\n",
          "a C++ program runs the host", p)
    print("ok c++")


def main():
    work = tempfile.mkdtemp(prefix="mf_embed_")
    try:
        if "--installed" in sys.argv[1:]:
            programs = build_installed(work)
        else:
            programs = [(os.environ["MF_EMBED"], None)]
        for exe, env in programs:
            check_program(exe, work, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
