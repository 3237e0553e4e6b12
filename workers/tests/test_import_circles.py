"""No import circles between the modules of ddptop's Python packages (issue 49; the Rust side is
tests/layering.rs). Every import counts, wherever it is written: at the top, inside a function
(a lazy import) or under `if TYPE_CHECKING:`: a circle a type checker or a later refactor walks
is still a circle. A failure names each import of the circle as file:line."""

from __future__ import annotations

import ast
from pathlib import Path

WORKERS = Path(__file__).resolve().parent.parent
PACKAGES = ["ddptop_worker", "ddptop_bootstrap"]

Edge = tuple[str, str, str]  # (from module, to module, "file:line")


def imports_of(package: str, module: str, source: str, path: str) -> list[Edge]:
    """The package's own modules that `module`'s source imports, each with file:line."""
    names = {p.stem for p in (WORKERS / package).glob("*.py")}
    out: list[Edge] = []

    def add(target: str, line: int) -> None:
        if target in names and target != module:
            out.append((module, target, f"{path}:{line}"))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import a, b
                for a in node.names:
                    add(a.name, node.lineno)
            elif node.level == 1 and node.module:  # from .a import x / from .a.b import x
                add(node.module.split(".")[0], node.lineno)
            elif node.level == 0 and node.module and node.module.split(".")[0] == package:
                parts = node.module.split(".")
                if len(parts) > 1:  # from ddptop_worker.a import x
                    add(parts[1], node.lineno)
                else:  # from ddptop_worker import a
                    for a in node.names:
                        add(a.name, node.lineno)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == package and len(parts) > 1:
                    add(parts[1], node.lineno)
    return out


def circles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def report(edges: list[Edge]) -> list[str]:
    lines = []
    for c in circles(edges):
        at = [where for a, b, where in edges if a in c and b in c]
        lines.append(f"import circle between {', '.join(c)}: {', '.join(at)}")
    return lines


def package_edges(package: str) -> list[Edge]:
    edges: list[Edge] = []
    for f in sorted((WORKERS / package).glob("*.py")):
        rel = f.relative_to(WORKERS.parent).as_posix()
        edges += imports_of(package, f.stem, f.read_text(), rel)
    return edges


def test_no_import_circles_in_the_worker_packages() -> None:
    edges = [e for p in PACKAGES for e in package_edges(p)]
    assert len(edges) > 30, f"only {len(edges)} imports found: the reader is broken"
    bad = report(edges)
    assert not bad, "\n".join(bad)


def test_a_type_only_circle_is_reported_with_its_lines() -> None:
    # The circle issue 49 found: attach imports attach_hooks, attach_hooks imported attach's
    # Session under TYPE_CHECKING.
    a = "from . import attach_hooks as hooks\nfrom .client import Client\n"
    b = (
        "from typing import TYPE_CHECKING\nfrom . import inflight\n"
        "if TYPE_CHECKING:\n    from .attach import Session\n"
    )
    edges = imports_of("ddptop_worker", "attach", a, "attach.py")
    edges += imports_of("ddptop_worker", "attach_hooks", b, "attach_hooks.py")
    assert report(edges) == [
        "import circle between attach, attach_hooks: attach.py:1, attach_hooks.py:4"
    ]
    # Without the type-only import: no circle.
    assert report([e for e in edges if e[2] != "attach_hooks.py:4"]) == []
