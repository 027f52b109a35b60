#!/usr/bin/env python3
"""The import graph of src/ (docs/development.md, "Where things are").

Files are rooms, `crate::`/`super::`/`self::` paths between them are arrows
(every path in the code, not only `use` lines), and so are plain paths
through a module's own submodules (`child::x`, `use child::X`). An arrow
from a module to one of its own submodules is *containment* (the parent
declares the child and is made of it): counted with the arrows, but not
followed when looking for circles — a module split into files by size is
one responsibility. Every other arrow is. Test code is left out:
files named `tests.rs`, `*_tests.rs`, `proptests.rs`, files under a
`tests/` folder of src, and `#[cfg(test)]` items.

Prints: rooms, arrows, floors (the longest chain of arrows once each circle
is one room), the import circles (strongly connected components of more than
one room), arrows running back up (from a module to one on a higher floor of
LAYERS below), and the largest files by lines of code (not blank, not
comments, not test code). `--dot` prints the graph for Graphviz instead;
`--check` exits 1 on any circle not listed in KEPT_CIRCLES, any arrow back
up, any arrow NEVER forbids, or a file above MAX_LINES lines of code
(deploy/test.sh runs it).

`--folders` prints the same for one room per top-level module.

    deploy/dev/import_graph.py [--top N] [--dot] [--check] [--folders] [SRC]
"""

import os
import re
import sys

# Floors from the bottom up, by module path prefix: an arrow from a module to
# one listed later runs back up. A module may import anything on its own
# floor or below.
LAYERS = [
    ["lsn", "config", "task"],
    ["pgoutput", "pg"],
    ["source", "router", "sink", "checkpoint", "offsets", "telemetry"],
    ["startup", "retention"],
    ["relay", "inbox"],
    ["commands"],
    ["lib", "main"],
]

# A file above this many lines of code (test code and comments left out)
# fails --check: time to split it by responsibility (aim: under ~700).
MAX_LINES = 800

# What each folder must never import (docs/development.md, "Where things
# are"): room prefix -> forbidden room prefixes.
NEVER = {
    "lsn": ["config", "pg", "pgoutput", "source", "router", "sink", "checkpoint",
            "offsets", "telemetry", "startup", "relay", "inbox", "commands"],
    "config": ["pg", "pgoutput", "source", "router", "sink", "checkpoint", "offsets",
               "telemetry", "startup", "relay", "inbox", "commands"],
    "pgoutput": ["pg", "source", "router", "sink", "offsets", "relay", "commands"],
    "pg": ["source", "router", "sink", "offsets", "checkpoint", "relay", "inbox", "commands"],
    "source": ["router", "sink", "offsets", "checkpoint", "relay", "inbox", "commands"],
    "router": ["pg/wire", "pg/catalog", "pg/snapshot", "sink", "offsets",
               "relay", "inbox", "commands"],
    "sink": ["pg", "pgoutput", "source", "checkpoint", "lsn", "offsets", "relay",
             "inbox", "commands"],
    "checkpoint": ["pg", "pgoutput", "source", "router", "sink", "offsets", "relay",
                   "commands"],
    "offsets": ["pg", "pgoutput", "source", "relay", "commands"],
    "telemetry": ["pg", "source", "router", "sink", "offsets", "startup", "relay",
                  "commands"],
    "startup": ["sink", "relay", "inbox", "commands"],
    "retention": ["source", "router", "sink", "checkpoint", "startup", "relay", "inbox",
                  "commands"],
    "relay": ["inbox", "commands"],
    # The inbox's own PostgreSQL connection takes libpq's sslmode meanings
    # from pg/tls (one TLS set-up for every connection), nothing else of pg.
    "inbox": ["pg/catalog", "pg/filter", "pg/params", "pg/replication", "pg/snapshot",
              "pg/wire", "pgoutput", "source", "router", "sink", "checkpoint", "offsets",
              "startup", "relay", "commands"],
    "commands": ["main"],
}

# Circles kept on purpose (each named in docs/development.md with why), as
# sorted tuples of room names.
KEPT_CIRCLES = []


def is_test_file(rel):
    base = os.path.basename(rel)
    return (
        base == "tests.rs"
        or base.endswith("_tests.rs")
        or base == "proptests.rs"
        or "/tests/" in "/" + rel
    )


def module_of(rel):
    """src-relative path -> module path (list of names)."""
    parts = rel[:-3].split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return []
    return parts


def strip_comments(text):
    """Comments removed, string and char literals emptied (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "/" and nxt == "*":
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 20]) if c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if m:
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def strip_cfg_test(text):
    """Removes `#[cfg(test)]` items (a `mod` block or a single item)."""
    out = []
    i = 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = j + len("#[cfg(test)]")
        # The item ends at the first `;` before any `{`, or at the `}`
        # closing the first `{`.
        depth = 0
        while k < len(text):
            c = text[k]
            if c == ";" and depth == 0:
                k += 1
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            k += 1
        i = k


def code_lines(text):
    return sum(1 for line in strip_comments(text).split("\n") if line.strip())


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    if tree.count("{") != tree.count("}"):
        return []
    depth = 0
    for i, c in enumerate(tree):
        if c == "{":
            if depth == 0:
                prefix = tree[:i]
                inner = tree[i + 1 : tree.rindex("}")]
                items, cur, d = [], "", 0
                for ch in inner:
                    if ch == "," and d == 0:
                        items.append(cur)
                        cur = ""
                        continue
                    if ch == "{":
                        d += 1
                    elif ch == "}":
                        d -= 1
                    cur += ch
                items.append(cur)
                out = []
                for item in items:
                    if item:
                        out += expand_use(prefix + item)
                return out
            depth += 1
    return [tree]


PATH = re.compile(r"\b(crate|super|self|walrelay)((?:::\w+)+)")


def absolute(module, is_dir_module, path):
    """A `crate::`/`super::`/`self::` path as a path from the crate root."""
    head, rest = path[0], path[1:]
    if head in ("crate", "walrelay"):
        base = []
    elif head == "self":
        base = list(module) if is_dir_module else list(module)
    else:  # super (possibly repeated)
        base = list(module)
        while True:
            base = base[:-1]
            if rest and rest[0] == "super":
                rest = rest[1:]
                continue
            break
    return base + rest


def resolve(module, is_dir_module, path, modules, reexports, depth=0):
    """The file module a path names (following re-exports), or None."""
    full = absolute(module, is_dir_module, path)
    for n in range(len(full), -1, -1):
        key = tuple(full[:n])
        if key in modules:
            if n < len(full) and depth < 8:
                target = reexports.get(key, {}).get(full[n])
                if target is not None:
                    return resolve([], True, ["crate"] + target + full[n + 1 :],
                                   modules, reexports, depth + 1)
            return key
    return None


def main():
    args = sys.argv[1:]
    top = 12
    dot = "--dot" in args
    check = "--check" in args
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
    src = next((a for a in args if not a.startswith("--") and not a.isdigit()), "src")
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(root, name), src)
                if not is_test_file(rel):
                    files[rel] = open(os.path.join(root, name)).read()
    modules = {}
    for rel in files:
        key = ("<main>",) if rel == "main.rs" else tuple(module_of(rel))
        modules[key] = rel
    # `pub use` re-exports: name -> the path it stands for, per file, so
    # that an arrow goes to the room that defines the name, not to the
    # module that re-exports it.
    reexports = {}
    for rel, text in files.items():
        code = strip_comments(text)
        module = module_of(rel)
        is_dir = rel.endswith("mod.rs") or rel in ("lib.rs", "main.rs")
        for m in re.finditer(r"\bpub(?:\([\w:]+\))?\s+use\s+([^;]+);", code):
            for p in expand_use(m.group(1)):
                parts = [x for x in p.split("::") if x]
                if not parts:
                    continue
                if parts[0] not in ("crate", "super", "self"):
                    parts = ["self"] + parts
                base = absolute(module, is_dir, parts)
                if base is not None:
                    reexports.setdefault(tuple(module), {})[parts[-1]] = base
    # main.rs is the binary: a room of its own.
    names = {rel: ("main" if rel == "main.rs" else (rel[:-3])) for rel in files}
    edges = set()
    loc = {}
    for rel, text in files.items():
        code = strip_cfg_test(strip_comments(text))
        loc[rel] = code_lines(code)
        module = module_of(rel)
        is_dir = rel.endswith("mod.rs") or rel in ("lib.rs", "main.rs")
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for p in expand_use(m.group(1)):
                paths.append(p)
        for m in PATH.finditer(code):
            paths.append(m.group(0))
        # Plain paths through this module's own submodules.
        children = re.findall(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;", code, re.M)
        for child in children:
            for m in re.finditer(r"(?<![\w:])" + child + r"((?:::\w+)+)", code):
                paths.append("self::" + child + m.group(1))
            for m in re.finditer(r"\buse\s+(" + child + r"\b[^;]*);", code):
                for p in expand_use(m.group(1)):
                    paths.append("self::" + p)
        for p in paths:
            parts = [x for x in p.split("::") if x]
            if not parts or parts[0] not in ("crate", "super", "self", "walrelay"):
                continue
            if rel == "main.rs" and parts[0] == "crate":
                continue
            if parts[0] == "self" and not is_dir:
                # `self::` in a file module names its own children.
                pass
            target = resolve(module, is_dir, parts, modules, reexports)
            if target is None:
                continue
            trel = modules[target]
            if trel != rel and trel != "lib.rs":
                edges.add((rel, trel))
    if "--folders" in args:
        # One room per top-level module (`relay`, `config`, `lsn`, ...).
        top_of = {rel: names[rel].split("/")[0] for rel in files}
        fedges = {(top_of[a], top_of[b]) for a, b in edges if top_of[a] != top_of[b]}
        frooms = sorted(set(top_of.values()))
        fgraph = {r: [b for a, b in fedges if a == r] for r in frooms}
        seen, order, comp = set(), [], {}

        def visit(v):
            seen.add(v)
            for w in fgraph[v]:
                if w not in seen:
                    visit(w)
            order.append(v)

        for r in frooms:
            if r not in seen:
                visit(r)
        rgraph = {r: [a for a, b in fedges if b == r] for r in frooms}
        for v in reversed(order):
            if v in comp:
                continue
            stack = [v]
            comp[v] = v
            while stack:
                x = stack.pop()
                for w in rgraph[x]:
                    if w not in comp:
                        comp[w] = v
                        stack.append(w)
        groups = {}
        for r, c in comp.items():
            groups.setdefault(c, []).append(r)
        fcircles = [sorted(g) for g in groups.values() if len(g) > 1]
        print(f"folders {len(frooms)}, arrows between them {len(fedges)}, "
              f"circles {len(fcircles)}")
        for c in fcircles:
            print("  circle: " + " <-> ".join(c))
        return 0
    rooms = sorted(files)
    if dot:
        print("digraph imports {")
        for a, b in sorted(edges):
            print(f'  "{names[a]}" -> "{names[b]}";')
        print("}")
        return 0
    # Strongly connected components (Tarjan).
    def module_key(rel):
        return ("<main>",) if rel == "main.rs" else tuple(module_of(rel))

    def contains(a, b):
        """Whether room b is a submodule (at any depth) of room a."""
        ka, kb = module_key(a), module_key(b)
        return len(kb) > len(ka) and kb[: len(ka)] == ka and rel_is_module(a)

    def rel_is_module(rel):
        return rel != "main.rs"

    containment = {(a, b) for a, b in edges if contains(a, b)}
    graph = {r: [] for r in rooms}
    for a, b in edges:
        if (a, b) not in containment:
            graph[a].append(b)
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for r in rooms:
        if r not in index:
            strong(r)
    comp_of = {r: i for i, c in enumerate(sccs) for r in c}
    # Floors: longest path in the condensation.
    cedges = {
        (comp_of[a], comp_of[b])
        for a, b in edges
        if comp_of[a] != comp_of[b] and (a, b) not in containment
    }
    floor = {}

    def height(c):
        if c not in floor:
            floor[c] = 1 + max((height(d) for (s, d) in cedges if s == c), default=0)
        return floor[c]

    floors = max((height(c) for c in range(len(sccs))), default=0)
    circles = [c for c in sccs if len(c) > 1]

    def layer(rel):
        name = names[rel]
        first = name.split("/")[0]
        for i, group in enumerate(LAYERS):
            if first in group:
                return i
        return None

    back_up = sorted(
        (a, b)
        for a, b in edges
        if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)
    )
    def never(a, b):
        na, nb = names[a], names[b]
        for prefix, forbidden in NEVER.items():
            if na == prefix or na.startswith(prefix + "/"):
                if any(nb == f or nb.startswith(f + "/") for f in forbidden):
                    return True
        return False

    forbidden = sorted((a, b) for a, b in edges if never(a, b))
    print(f"rooms {len(rooms)}, arrows {len(edges)} ({len(containment)} of them a module "
          f"to its own submodule), floors {floors}, circles {len(circles)}, "
          f"arrows back up {len(back_up)}, forbidden arrows {len(forbidden)}")
    unkept = [c for c in circles if tuple(names[r] for r in c) not in KEPT_CIRCLES]
    for c in circles:
        kept = "" if c in unkept else " (kept)"
        print(f"  circle{kept}: " + " <-> ".join(names[r] for r in c))
    for a, b in back_up:
        print(f"  back up: {names[a]} -> {names[b]}")
    for a, b in forbidden:
        print(f"  forbidden: {names[a]} -> {names[b]}")
    over = sorted(((n, r) for r, n in loc.items()), reverse=True)
    print(f"largest files (lines of code, test code left out):")
    for n, r in over[:top]:
        print(f"  {n:5d} {r}")
    print(f"files above 700 lines of code: {sum(1 for n, _ in over if n > 700)}")
    too_big = [r for n, r in over if n > MAX_LINES]
    for r in too_big:
        print(f"  above {MAX_LINES} lines of code: {r}")
    if check and (unkept or back_up or forbidden or too_big):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
