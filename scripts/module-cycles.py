#!/usr/bin/env python3
"""Fails when a module of a library crate imports (`use crate::…`) a module that imports
it back, directly or through others. Modules are the crate's top-level ones; a `tests`
module is left out (it may use anything it tests).

    python3 scripts/module-cycles.py            # every library crate of the workspace
"""
import os
import re
import sys

CRATES = ["stampede-runtime/src", "stampede-macros/src", "stampede-settings/src", "testkit/src"]


def top_module(root, path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    if not parts or "tests" in parts:
        return None
    return parts[0]


def edges_of(root):
    edges = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            module = top_module(root, path)
            if module is None:
                continue
            text = open(path).read().split("#[cfg(test)]\nmod tests;")[0]
            for used in re.findall(r"crate::([a-z_][a-z0-9_]*)", text):
                if used != module:
                    edges.setdefault(module, set()).add(used)
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failed = False
    for crate in CRATES:
        root = os.path.join(top, crate)
        if not os.path.isdir(root):
            continue
        for component in cycles(edges_of(root)):
            failed = True
            print(f"{crate}: import circle among {', '.join(component)}")
    if failed:
        sys.exit(1)
    print("no import circles")


if __name__ == "__main__":
    main()
