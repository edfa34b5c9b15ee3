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
    src = re.sub(r'r(#*)".*?"\1', '""', src, flags=re.S)  # raw strings
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)  # strings
    src = re.sub(r"'(?:\\.|[^'\\])'", "' '", src)  # char literals
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
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


def group_end(src, start):
    """The index after the `}` closing the group opened just before `start`."""
    j, depth = start, 1
    while depth and j < len(src):
        depth += (src[j] == "{") - (src[j] == "}")
        j += 1
    return j


def absolute(mod, ups, rest):
    """`super::` × ups then `rest` (a tuple), from module `mod`."""
    base = mod[: len(mod) - ups] if ups <= len(mod) else ()
    return base + rest


def references(mod, src):
    """Absolute paths (tuples, maybe longer than a module path) that `mod`
    refers to: `crate::…` and `super::…` paths, and the paths of their
    `{…}` use groups."""
    refs = set()
    for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", src):
        refs.add(tuple(m.group(1).split("::")))
    for m in re.finditer(r"\bcrate::((?:\w+::)*)\{", src):
        prefix = tuple(p for p in m.group(1).split("::") if p)
        j = group_end(src, m.end())
        for head in use_group_heads(src[m.end() : j - 1]):
            if head != "self":
                refs.add(prefix + (head,))
    for m in re.finditer(r"\b((?:super::)+)((?:\w+::)*\w+)", src):
        refs.add(absolute(mod, m.group(1).count("super::"), tuple(m.group(2).split("::"))))
    for m in re.finditer(r"\b((?:super::)+)((?:\w+::)*)\{", src):
        prefix = tuple(p for p in m.group(2).split("::") if p)
        j = group_end(src, m.end())
        for head in use_group_heads(src[m.end() : j - 1]):
            if head != "self":
                refs.add(absolute(mod, m.group(1).count("super::"), prefix + (head,)))
    return refs


def reexports(mod, src):
    """What `mod` re-exports (`pub use …`, `pub(crate) use …`): the name it
    gives each item and the item's absolute path (a tuple)."""
    out = {}
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", src):
        path = m.group(1).strip()
        if path.startswith("crate::"):
            base, path = (), path[len("crate::") :]
        elif path.startswith("self::"):
            base, path = mod, path[len("self::") :]
        elif path.startswith("super::"):
            ups = 0
            while path.startswith("super::"):
                ups, path = ups + 1, path[len("super::") :]
            base = absolute(mod, ups, ())
        elif re.match(r"\w+::", path) and path.split("::")[0] not in ("std", "core", "alloc"):
            base = mod  # a child module (or an extern crate, found by no module)
        else:
            continue
        g = re.match(r"((?:\w+::)*)\{(.*)\}$", path, re.S)
        items = []
        if g:
            prefix = tuple(p for p in g.group(1).split("::") if p)
            for piece in re.split(r",(?![^{]*\})", g.group(2)):
                piece = piece.strip()
                if not piece or "{" in piece:
                    continue
                name = piece.split(" as ")[-1].strip()
                items.append((name, prefix + tuple(piece.split(" as ")[0].strip().split("::"))))
        else:
            name = path.split(" as ")[-1].strip().split("::")[-1]
            items.append((name, tuple(path.split(" as ")[0].strip().split("::"))))
        for name, rel in items:
            if rel and rel[-1] not in ("self", "*"):
                out[name] = base + rel
    return out


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
    exported = {m: reexports(m, src) for m, src in sources.items()}

    def resolve(ref, depth=0):
        """The module `ref` names or names an item of; an item a module
        re-exports counts for the module that defines it."""
        for n in range(len(ref), -1, -1):
            if ref[:n] in modules:
                target = ref[:n]
                if n < len(ref) and depth < 8:
                    inner = exported[target].get(ref[n])
                    if inner is not None and inner != ref[: n + 1]:
                        deeper = resolve(inner + ref[n + 1 :], depth + 1)
                        if deeper is not None:
                            return deeper
                return target if target else None
        return None

    # edges[parent][a][b] = the references of a (or a child of it) to b.
    edges = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(set)))
    for mod, src in sources.items():
        for ref in references(mod, src):
            target = resolve(ref)
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
