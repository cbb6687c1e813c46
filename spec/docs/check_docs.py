#!/usr/bin/env python3
"""The documentation against the code (ctest: docs.check).

Fails, naming what disagrees, when
  (a) the layer table of core/README.md (between the `layers: begin` and
      `layers: end` comments: one row per core folder, lowest first, with
      the public headers it owns) disagrees with the build: the folders of
      core/ that hold sources, their order in core/CMakeLists.txt
      (MF_CORE_LAYERS), the headers of core/include/moonflow, or the
      includes (a layer's .c/.h files, and the public headers it owns,
      include nothing from a higher layer);
  (b) core/include/moonflow/moonflow.h misses a public header;
  (c) README.md is longer than 400 lines;
  (d) a relative link in README.md, core/README.md or lua/README.md points
      at a file that does not exist.
Python's standard library only; reads the source tree, builds nothing.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PUBLIC = os.path.join("core", "include", "moonflow")
README_MAX_LINES = 400
LINKED_DOCS = ["README.md", os.path.join("core", "README.md"),
               os.path.join("lua", "README.md")]

failures = []


def fail(msg):
    failures.append(msg)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def public_headers():
    return sorted(n for n in os.listdir(os.path.join(ROOT, PUBLIC))
                  if n.endswith(".h"))


def documented_layers():
    """[(folder, [public headers])] from core/README.md's layer table."""
    text = read(os.path.join("core", "README.md"))
    m = re.search(r"<!-- layers: begin -->(.*?)<!-- layers: end -->", text, re.S)
    if not m:
        fail("core/README.md: no layer table (<!-- layers: begin --> ... "
             "<!-- layers: end -->)")
        return []
    layers = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue  # the head and the rule
        folder = re.fullmatch(r"`?core/([a-z_]+)/?`?", cells[1])
        if not folder:
            fail("core/README.md: layer table row %r: a folder core/NAME/ "
                 "expected in its second column" % line.strip())
            continue
        headers = re.findall(r"([a-z_0-9]+\.h)", cells[2])
        layers.append((folder.group(1), headers))
    return layers


def built_layers():
    """The MF_CORE_LAYERS list of core/CMakeLists.txt."""
    m = re.search(r"set\(MF_CORE_LAYERS([^)]*)\)",
                  read(os.path.join("core", "CMakeLists.txt")))
    return m.group(1).split() if m else []


def source_folders():
    core = os.path.join(ROOT, "core")
    return sorted(d for d in os.listdir(core)
                  if os.path.isdir(os.path.join(core, d))
                  and any(n.endswith(".c") for n in os.listdir(os.path.join(core, d))))


INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def check_includes(order, owner):
    """No file of layer i includes a folder or public header of layer j > i."""
    rank = {folder: i for i, folder in enumerate(order)}

    def layer_of(include, here):
        parts = include.split("/")
        if len(parts) == 2 and parts[0] == "moonflow":
            return owner.get(parts[1])
        if len(parts) == 2 and parts[0] in rank:
            return parts[0]
        if len(parts) == 1 and here == PUBLIC:
            return owner.get(parts[0])  # public headers include each other bare
        return None  # a file beside it, or the system's

    files = []
    for folder in order:
        d = os.path.join("core", folder)
        for n in sorted(os.listdir(os.path.join(ROOT, d))):
            if n.endswith((".c", ".h")):
                files.append((folder, d, os.path.join(d, n)))
    for header, folder in owner.items():
        files.append((folder, PUBLIC, os.path.join(PUBLIC, header)))
    for folder, here, rel in files:
        for inc in INCLUDE.findall(read(rel)):
            target = layer_of(inc, here)
            if target is not None and rank[target] > rank[folder]:
                fail("%s (layer core/%s/) includes \"%s\" of the higher layer "
                     "core/%s/ (core/README.md's layer table: a layer includes "
                     "only the layers below it)" % (rel, folder, inc, target))


def check_layers():
    layers = documented_layers()
    if not layers:
        return
    order = [f for f, _ in layers]
    built = built_layers()
    if order != built:
        fail("core/README.md's layer table lists %s; core/CMakeLists.txt's "
             "MF_CORE_LAYERS is %s" % (" < ".join(order), " < ".join(built)))
    sources = source_folders()
    if sorted(order) != sources:
        fail("core/README.md's layer table lists the folders %s; the folders "
             "of core/ holding sources are %s" % (sorted(order), sources))
    owner = {}
    for folder, headers in layers:
        for h in headers:
            if h in owner:
                fail("core/README.md: %s is listed under core/%s/ and core/%s/"
                     % (h, owner[h], folder))
            owner[h] = folder
    public = [h for h in public_headers() if h != "moonflow.h"]
    for h in public:
        if h not in owner:
            fail("core/README.md's layer table names no layer for the public "
                 "header moonflow/%s" % h)
    for h in owner:
        if h not in public:
            fail("core/README.md's layer table names moonflow/%s, which is "
                 "not in %s" % (h, PUBLIC))
    order = [f for f in order if f in sources]
    owner = {h: f for h, f in owner.items() if h in public and f in order}
    check_includes(order, owner)


def check_umbrella():
    text = read(os.path.join(PUBLIC, "moonflow.h"))
    included = set(os.path.basename(i) for i in INCLUDE.findall(text))
    for h in public_headers():
        if h != "moonflow.h" and h not in included:
            fail("%s does not include \"%s\" (it must include every public "
                 "header of %s)" % (os.path.join(PUBLIC, "moonflow.h"), h, PUBLIC))


def check_readme_length():
    n = len(read("README.md").splitlines())
    if n > README_MAX_LINES:
        fail("README.md has %d lines; at most %d (references go beside what "
             "they describe)" % (n, README_MAX_LINES))


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def check_links():
    for doc in LINKED_DOCS:
        text = read(doc)
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # code is not links
        base = os.path.dirname(os.path.join(ROOT, doc))
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # another site, or a place in the same file
            path = target.split("#", 1)[0]
            if not os.path.exists(os.path.normpath(os.path.join(base, path))):
                fail("%s: the link (%s) points at a file that does not exist"
                     % (doc, target))


def main():
    check_layers()
    check_umbrella()
    check_readme_length()
    check_links()
    if failures:
        for f in failures:
            print("FAIL: " + f)
        print("%d documentation check(s) failed" % len(failures))
        return 1
    print("the documentation agrees with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
