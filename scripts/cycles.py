#!/usr/bin/env python3
"""Fails on an import cycle between the modules of any crate.

For every crate under crates/ (or the crate folders given), each module's
references to its sibling modules are read off its source: `crate::a::...`
paths (in `use` lines and in code, `use crate::{a, b::c}` groups included)
and `super::a` from a child of the same parent. Test modules
(`#[cfg(test)] mod ... { }`) and comments are left out: a test may look
anywhere. A reference to a deeper module counts for the sibling that holds
it, so `crate::a::b` from `c` is an edge c -> a at the top level and, inside
`a`, nothing. Sibling modules of every level are checked: the top-level
modules of the crate, then the children of each module folder. Any strongly
connected set of two or more modules is printed with the references that
close it, and the script exits 1.

Run by scripts/test.sh; on its own: python3 scripts/cycles.py [crate dirs]
"""
import collections
import os
import re
import sys


def module_path(src_root, path):
    parts = os.path.relpath(path, src_root)[:-3].split(os.sep)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def strip(src):
    """The source without comments, string contents and #[cfg(test)] modules."""
    src = re.sub(r"//[^\n]*", "", src)
    out, i = [], 0
    pat = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pat.search(src, i)
        if not m:
            out.append(src[i:])
            break
        out.append(src[i : m.start()])
        j, depth = m.end(), 1
        while depth and j < len(src):
            depth += (src[j] == "{") - (src[j] == "}")
            j += 1
        i = j
    return "".join(out)


def use_group_heads(group):
    """First segments of the paths in a `{...}` use group's top level."""
    pieces, depth, cur = [], 0, ""
    for ch in group:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            pieces.append(cur)
            cur = ""
        else:
            cur += ch
    pieces.append(cur)
    return [m.group(1) for m in (re.match(r"\s*(\w+)", p) for p in pieces) if m]


def references(mod, src):
    """Absolute module paths (tuples, maybe too long) that `mod` refers to."""
    refs = set()
    for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", src):
        refs.add(tuple(m.group(1).split("::")))
    for m in re.finditer(r"\bcrate::((?:\w+::)*)\{", src):
        prefix = tuple(p for p in m.group(1).split("::") if p)
        j, depth = m.end(), 1
        while depth and j < len(src):
            depth += (src[j] == "{") - (src[j] == "}")
            j += 1
        for head in use_group_heads(src[m.end() : j - 1]):
            if head != "self":
                refs.add(prefix + (head,))
    for m in re.finditer(r"\b((?:super::)+)((?:\w+::)*\w+)", src):
        ups = m.group(1).count("super::")
        base = mod[: len(mod) - ups] if ups <= len(mod) else ()
        refs.add(base + tuple(m.group(2).split("::")))
    return refs


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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


def check(crate):
    src_root = os.path.join(crate, "src")
    sources = {}
    for folder, _, files in os.walk(src_root):
        for name in files:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                sources[module_path(src_root, path)] = strip(open(path, encoding="utf-8").read())
    modules = set(sources)
    # edges[parent][a][b] = the references of a (or a child of it) to b.
    edges = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(set)))
    for mod, src in sources.items():
        for ref in references(mod, src):
            # The longest prefix of ref that is a module.
            target = None
            for n in range(len(ref), 0, -1):
                if ref[:n] in modules:
                    target = ref[:n]
                    break
            if target is None:
                continue
            # The first level where mod and target part: they are siblings there.
            k = 0
            while k < min(len(mod), len(target)) and mod[k] == target[k]:
                k += 1
            if k >= len(mod) or k >= len(target):
                continue  # one holds the other: parent and child may refer freely
            edges[mod[:k]][mod[k]][target[k]].add("::".join(("crate",) + ref))
    bad = 0
    for parent in sorted(edges):
        graph = {a: set(bs) for a, bs in edges[parent].items()}
        for comp in cycles(graph):
            bad += 1
            where = "::".join(parent) or "(crate root)"
            print(f"{crate}: import cycle among {where}'s modules {', '.join(comp)}")
            for a in comp:
                for b in sorted(edges[parent][a]):
                    if b in comp:
                        refs = sorted(edges[parent][a][b])
                        print(f"    {a} -> {b}: {', '.join(refs[:4])}{' …' if len(refs) > 4 else ''}")
    return bad


def self_test():
    """The check finds what it must: a made-up crate with a cycle between
    two top-level modules (through a `use` group), one between the children
    of a module folder (through `super::`), and none where a child only
    uses its parent or a test module looks back."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "lib.rs": "mod a; mod b; mod c; mod d;",
            "a.rs": "use crate::{b::Thing, c};",
            "b.rs": "pub struct Thing; fn f() { crate::a::g(); }",
            "c.rs": "#[cfg(test)] mod tests { use crate::d::X; }",
            "d/mod.rs": "mod x; mod y; pub struct X;",
            "d/x.rs": "use super::y::Y; use super::X;",
            "d/y.rs": "pub struct Y; fn f() { super::x::h(); }",
        }
        for name, text in files.items():
            path = os.path.join(tmp, "src", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            found = check(tmp)
        text = out.getvalue()
        assert found == 2, text
        assert "(crate root)'s modules a, b" in text, text
        assert "d's modules x, y" in text, text


def main():
    self_test()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    crates = sys.argv[1:] or sorted(
        os.path.join(root, "crates", c) for c in os.listdir(os.path.join(root, "crates"))
    ) + [os.path.join(root, "tests")]
    bad = sum(check(c) for c in crates if os.path.isdir(os.path.join(c, "src")))
    if bad:
        print(f"{bad} import cycle(s): a module and the modules it uses must not use it back "
              "(move the shared item down to a module both may use)")
        sys.exit(1)
    print("no import cycle between the modules of any crate")


main()
