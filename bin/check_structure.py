"""The structure checks CI runs beside import-linter (issue 32, "rooms with one job").

Fails, printing every offender, on:
  (a) an import cycle between modules of the checked packages, inside a package too
      (import-linter's layers contract only sees imports between the layers). Imports under
      `if TYPE_CHECKING:` are left out: they never run, so they close no circle at import time;
      an import inside a function counts, it runs on the first call;
  (b) a module over MAX_MODULE_LINES lines;
  (c) a function over MAX_FUNCTION_LINES lines (decorators and docstring included) that is not
      in DECLARATIVE_TABLES below, each entry with the reason it stays one piece.

Usage: check_structure.py [--root DIR] [PACKAGE ...]   (defaults: the repository,
resources and coordination_assets).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# "path/of/module.py:qualified.name" -> why it is a table read top to bottom, not steps to name.
# Empty: no long function in resources/ or coordination_assets/ is such a table (argparse's
# `build_parser` is steps per command, to cut). An entry for a function gone or short again
# fails the check too, so the list never outlives its reason.
DECLARATIVE_TABLES: dict[str, str] = {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("packages", nargs="*", default=["resources", "coordination_assets"])
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    files = sorted(f for package in args.packages for f in (root / package).rglob("*.py"))
    problems = [
        *(f"import cycle: {' -> '.join(cycle)}" for cycle in import_cycles(root, args.packages)),
        *long_modules(root, files),
        *long_functions(root, files),
    ]
    if args.packages == ["resources", "coordination_assets"]:
        problems += stale_allowances(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-structure: {len(problems)} problem(s)")
        return 1
    print(f"check-structure: {len(files)} modules, no cycle, none too long")
    return 0


def import_cycles(root: Path, packages: list[str]) -> list[list[str]]:
    """Each strongly connected group of modules (two or more), as one import path around it."""
    import grimp

    sys.path.insert(0, str(root))
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)
    edges = {
        module: sorted(set(graph.find_modules_directly_imported_by(module)) & graph.modules)
        for module in graph.modules
    }
    return [_around(group, edges) for group in _strongly_connected(edges) if len(group) > 1]


def _strongly_connected(edges: dict[str, list[str]]) -> Iterator[list[str]]:
    """Tarjan's algorithm, iterative (the graph holds hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                yield sorted(group)


def _around(group: list[str], edges: dict[str, list[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    members = set(group)
    start = group[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return group


def long_modules(root: Path, files: Iterable[Path]) -> Iterator[str]:
    for file in files:
        lines = len(file.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            yield f"module over {MAX_MODULE_LINES} lines: {file.relative_to(root)} ({lines})"


def long_functions(root: Path, files: Iterable[Path]) -> Iterator[str]:
    for file in files:
        relative = file.relative_to(root).as_posix()
        for name, node in _functions(ast.parse(file.read_text()), ""):
            lines = _length(node)
            if lines > MAX_FUNCTION_LINES and f"{relative}:{name}" not in DECLARATIVE_TABLES:
                yield (
                    f"function over {MAX_FUNCTION_LINES} lines: {relative}:{node.lineno} "
                    f"{name} ({lines})"
                )


Function = ast.FunctionDef | ast.AsyncFunctionDef


def stale_allowances(root: Path) -> Iterator[str]:
    """An allowance for a function that is gone or now short is one to remove."""
    for entry in DECLARATIVE_TABLES:
        relative, name = entry.split(":")
        file = root / relative
        found = dict(_functions(ast.parse(file.read_text()), "")) if file.exists() else {}
        node = found.get(name)
        if node is None or _length(node) <= MAX_FUNCTION_LINES:
            yield f"allowlist entry no longer needed: {entry}"


def _length(node: Function) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def _functions(tree: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from _functions(node, f"{name}.")
        else:
            yield from _functions(node, prefix)


if __name__ == "__main__":
    sys.exit(main())
