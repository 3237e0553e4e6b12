"""Every line a worker prints goes out in one write (client.write_line): `print()` writes the text
and its newline separately, so gloo ranks sharing torchrun's pipe interleave mid-line."""

from __future__ import annotations

import ast
from pathlib import Path

import ddptop_worker

PKG = Path(ddptop_worker.__file__).parent


def test_no_worker_module_calls_print():
    offenders = []
    for path in sorted(PKG.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == [], f"use client.write_line (one write per line): {offenders}"
