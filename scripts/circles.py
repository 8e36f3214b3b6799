#!/usr/bin/env python3
"""Fails when the modules inside a crate import each other in a circle.

    python3 scripts/circles.py [CRATE_DIR ...]   # default: every workspace crate

A file is a module (`src/a/b.rs` and `src/a/b/mod.rs` are both `a::b`). An
edge goes from a module to the module a `crate::…`, `super::…` or
`self::…` path in it names (the longest prefix that is a module). A
module's use of its own submodules is not an edge (a parent owns its
children), nor is a `mod x;` declaration; a child's use of its parent is.
Each strongly connected set of two or more modules is printed, and the exit
status is 1 when there is one. Binaries under `src/bin/` and `main.rs` are
roots of their own and skipped; tests and benches are outside `src/`.

Why a script and not `cargo modules dependencies --acyclic`: that tool
builds rust-analyzer (many minutes on a CI machine) and counts a child's
`use super::…` and its parent's `mod child` as a circle, which every module
tree has; what is checked here is the rule of docs/architecture.md.
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)\b((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)*)(\s*::\s*\{)?")


def modules(src):
    """Module path (tuple) -> file, for every .rs file under `src`."""
    found = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[0] == "bin" or parts == ["main"]:
                continue
            if parts[-1] in ("mod", "lib"):
                parts = parts[:-1]
            found[tuple(parts)] = path
    return found


def without_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def group_items(text, start):
    """The names inside the `{…}` that opens at `start` (nested groups flattened to their heads)."""
    depth, i, names, current = 1, start, [], ""
    while i < len(text) and depth:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if depth == 1 and c in ",}" or depth == 0:
            names.append(current.strip())
            current = ""
        elif depth == 1 or (depth == 2 and c == "{"):
            current += c
        i += 1
    return [n.split("::")[0].strip() for n in names if n.strip()]


def inline_depths(text):
    """For each `{` of an inline `mod name {` block: its span. Returns a
    function giving how many such blocks enclose a position."""
    spans = []
    for m in re.finditer(r"\bmod\s+[A-Za-z_][A-Za-z0-9_]*\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        spans.append((m.end(), i))
    return lambda pos: sum(1 for a, b in spans if a <= pos < b)


def resolve(here, head, tail, known, inline=0):
    """The module a path names, seen from module `here` (from inside
    `inline` nested inline `mod x { … }` blocks of its file, which are part
    of the file's module here: their `super::` first climbs out of them)."""
    if head == "crate":
        base = ()
    elif head == "self":
        base = here
    else:
        climbs = 1
        while tail and tail[0] == "super":
            climbs, tail = climbs + 1, tail[1:]
        climbs -= min(climbs, inline)
        base = here[: len(here) - climbs] if climbs else here
    best = base
    for i in range(1, len(tail) + 1):
        if base + tuple(tail[:i]) in known:
            best = base + tuple(tail[:i])
        else:
            break
    return best


def edges(mods):
    out = {m: set() for m in mods}
    for here, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = without_comments_and_strings(f.read())
        depth_at = inline_depths(text)
        for m in PATH.finditer(text):
            head = m.group(1)
            tail = [p.strip() for p in m.group(2).split("::") if p.strip()]
            inline = depth_at(m.start())
            targets = []
            if m.group(3):
                prefix = tail
                for name in group_items(text, m.end()):
                    targets.append(resolve(here, head, prefix + [name], mods, inline))
            else:
                targets.append(resolve(here, head, tail, mods, inline))
            for target in targets:
                if target not in mods or target == here:
                    continue
                if target[: len(here)] == here:
                    continue  # a module's own submodule
                out[here].add(target)
    return out


def circles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def workspace_crates(root):
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    members = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    return [m for m in re.findall(r'"([^"]+)"', members.group(1))] if members else []


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = argv or [os.path.join(root, c) for c in workspace_crates(root)]
    bad = 0
    for crate in crates:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        mods = modules(src)
        for comp in circles(edges(mods)):
            bad += 1
            names = ", ".join("::".join(m) or "(crate root)" for m in comp)
            print(f"{os.path.relpath(crate, root)}: {len(comp)} modules in a circle: {names}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
