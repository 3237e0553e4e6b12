"""Optional dependencies of a test module: skipped where they are missing, a failure on CI.

Like the Rust tests (tests/common `python_importing`), a machine without jax skips the jax tests
and says so, but CI (the `CI` variable set, as scripts/test and CI services do; not "" or "0")
must have them: there a missing dependency fails the run instead of passing it silently.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def on_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def unavailable(why: str) -> NoReturn:
    """Skip the calling module, or fail it under CI. Call at module level."""
    if on_ci():
        pytest.fail(f"CI is set, so this cannot be skipped: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def module(name: str, hint: str) -> ModuleType:
    """`import name`, or skip/fail the calling module with the ImportError and `hint`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        unavailable(f"{name} is not importable ({e}); {hint}")
