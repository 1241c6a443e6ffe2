#!/usr/bin/env python3
"""Import loops between the modules of each crate of the workspace.

    python3 scripts/import_loops.py            # every crate with a src/lib.rs or src/main.rs
    python3 scripts/import_loops.py host/cli   # some crates

A module is one `.rs` file (inline `mod x { ... }` blocks count as their file). Module A
depends on module B when code in A names a path into B: `use crate::...`, `use super::...`,
`use self::...` trees and the same paths written inline (`crate::b::f(x)`); comments are
skipped. A path through a re-export (`pub use b::X;` in the crate root or any `mod.rs`) is
followed to the module that defines the name. Edges between a module and its own ancestors or
descendants are left out: a parent declares its children, so a child naming its parent is no
loop. Test-only code (`#[cfg(test)]` modules, inline or in their own file) is left out too:
tests may name any module. What remains must be acyclic; every strongly connected component of two or more modules
is printed (as the modules and the edges between them), and the exit status is 1 if there is
one.
"""

import re
import sys
from pathlib import Path

ROOT = Path.cwd()  # the repository root to check (run from it)
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text):
    """The code without `//` and `/* */` comments; string literals are kept but blanked."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:]) and not re.match(r"\w", text[i - 1 : i] or " ")):
            m = re.match(r'r(#*)"', text[i:])
            if m:
                end = text.find('"' + m.group(1), i + len(m.group(0)))
                i = n if end < 0 else end + 1 + len(m.group(1))
            else:
                i += 1
                while i < n and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


TEST_ONLY = re.compile(r"#\[cfg\(test\)\]\s*$")


def drop_test_blocks(code):
    """`code` without its `#[cfg(test)]` inline modules (their braces kept balanced)."""
    out, i = [], 0
    for m in re.finditer(rf"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+{IDENT}\s*\{{", code):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        out.append(code[i : m.start()])
        i = j
    out.append(code[i:])
    return "".join(out)


def expand_tree(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (renames and globs kept as paths)."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def go(s):
        i = s.find("{")
        if i < 0:
            return [s.split("as")[0] if re.search(r"\bas\b", s.replace("::", " ")) else s]
        prefix, inner = s[:i], s[i + 1 : s.rfind("}")]
        return [prefix + p for part in split_top(inner) for p in go(part)]

    return [p for p in go(tree) if p]


class Crate:
    def __init__(self, root_file):
        self.modules = {}  # tuple path -> file
        self.reexports = {}  # tuple path -> {name: full path tuple}
        self.uses = {}  # tuple path -> list of (inline-mod depth, path string)
        self.discover((), root_file, is_dir_owner=True)

    def discover(self, path, file, is_dir_owner):
        self.modules[path] = file
        code = strip_comments(file.read_text())
        base = file.parent if is_dir_owner else file.parent / file.stem
        for m in re.finditer(rf"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*;", code, re.M):
            name = m.group(1)
            if TEST_ONLY.search(code[: m.start()].rstrip()[-40:]):
                continue
            for cand, owner in ((base / f"{name}.rs", False), (base / name / "mod.rs", True)):
                if cand.exists():
                    self.discover(path + (name,), cand, owner)
                    break
        self.scan(path, code)

    def scan(self, path, code):
        uses, reexp = [], {}
        code = drop_test_blocks(code)
        # Inline `mod x {` blocks shift what `super` means inside them.
        depth_marks, stack, brace = [], [], 0
        for m in re.finditer(rf"\bmod\s+{IDENT}\s*\{{|\{{|\}}", code):
            tok = m.group(0)
            if tok.startswith("mod"):
                brace += 1
                stack.append(brace)
                depth_marks.append((m.start(), len(stack)))
            elif tok == "{":
                brace += 1
            else:
                if stack and stack[-1] == brace:
                    stack.pop()
                    depth_marks.append((m.start(), len(stack)))
                brace -= 1

        def inline_depth(pos):
            d = 0
            for at, depth in depth_marks:
                if at > pos:
                    break
                d = depth
            return d

        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            depth = inline_depth(m.start())
            for p in expand_tree(m.group(2)):
                uses.append((depth, p))
                if m.group(1) and depth == 0:
                    name = p.split("::")[-1]
                    if name not in ("*", "self"):
                        reexp[name] = p
        for m in re.finditer(rf"(?<![\w:])(?:crate|super|self)(?:::{IDENT})+", code):
            uses.append((inline_depth(m.start()), m.group(0)))
        self.uses[path] = uses
        self.reexports[path] = reexp

    def absolute(self, module, depth, p):
        """The absolute path tuple of path string `p` written in `module` at inline depth."""
        parts = p.split("::")
        if parts[0] == "crate":
            return tuple(parts[1:])
        if parts[0] in ("super", "self"):
            cur = list(module)
            up = 0
            i = 0
            if parts[0] == "self":
                i = 1
            while i < len(parts) and parts[i] == "super":
                up += 1
                i += 1
            # Inside inline modules, `super` first climbs out of them.
            up = max(0, up - depth) if parts[0] == "super" else 0
            cur = cur[: len(cur) - up] if up else cur
            return tuple(cur) + tuple(parts[i:])
        if parts[0] in self.child_names(module):
            return tuple(module) + tuple(parts)
        return None  # another crate or std

    def child_names(self, module):
        n = len(module)
        return {m[n] for m in self.modules if len(m) == n + 1 and m[:n] == module}

    def target(self, path, seen=0):
        """The module that defines what `path` names, following re-exports."""
        best = ()
        for k in range(len(path), -1, -1):
            if path[:k] in self.modules:
                best = path[:k]
                break
        rest = path[len(best) :]
        if rest and seen < 8:
            via = self.reexports.get(best, {}).get(rest[0])
            if via:
                resolved = self.absolute(best, 0, via)
                if resolved and resolved != path:
                    return self.target(resolved + rest[1:], seen + 1)
        return best

    def edges(self):
        out = {}
        for module, uses in self.uses.items():
            for depth, p in uses:
                a = self.absolute(module, depth, p)
                if a is None:
                    continue
                t = self.target(a)
                related = t[: len(module)] == module or module[: len(t)] == t
                if not related:
                    out.setdefault(module, set()).add(t)
        return out


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def crate_roots(args):
    dirs = [ROOT / a for a in args] if args else sorted({p.parent for p in ROOT.rglob("Cargo.toml")})
    for d in dirs:
        if any(part in ("target", ".tools", ".venv", "node_modules") for part in d.relative_to(ROOT).parts):
            continue
        for rel in ("src/lib.rs", "src/main.rs", "main.rs", "all/main.rs"):
            f = d / rel
            if f.exists():
                yield d, f


def main(args):
    loops = 0
    crates = 0
    for d, root in crate_roots(args):
        crates += 1
        c = Crate(root)
        e = c.edges()
        for comp in sccs(list(c.modules), e):
            if len(comp) < 2:
                continue
            loops += 1
            names = sorted("::".join(m) or "crate" for m in comp)
            print(f"{root.relative_to(ROOT)}: loop between {', '.join(names)}")
            for a in sorted(comp):
                for b in sorted(e.get(a, ())):
                    if b in comp:
                        print(f"    {'::'.join(a)} -> {'::'.join(b)}")
    print(f"{crates} crate roots checked, {loops} import loop(s)")
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
