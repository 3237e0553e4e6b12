"""needs.py: a missing optional dependency skips a test module, except under CI, where it fails.

Runs pytest on the real test_jax_worker.py in a subprocess with `jax` made unimportable (a
package of that name earlier on the path that raises ImportError)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.dirname(HERE)


def pytest_without_jax(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shadow = tmp_path / "shadow" / "jax"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("jax hidden by test_needs")\n')
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(shadow.parent), WORKERS, HERE])
    if ci is not None:
        env["CI"] = ci
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    cmd += [os.path.join(HERE, "test_jax_worker.py")]
    return subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=120)


def test_missing_jax_skips_the_module_outside_ci(tmp_path: Path) -> None:
    p = pytest_without_jax(tmp_path, None)
    # 5: pytest collected no test (the whole module was skipped), which is not a failure.
    assert p.returncode == 5, p.stdout[-2000:] + p.stderr[-2000:]
    assert "1 skipped" in p.stdout and "jax hidden by test_needs" in p.stdout, p.stdout[-2000:]


def test_missing_jax_fails_under_ci(tmp_path: Path) -> None:
    for value in ("1", "true"):
        p = pytest_without_jax(tmp_path / value, value)
        assert p.returncode != 0, p.stdout[-2000:]
        assert "CI is set, so this cannot be skipped" in p.stdout, p.stdout[-2000:]
        assert "jax hidden by test_needs" in p.stdout, p.stdout[-2000:]


def test_no_test_module_skips_a_dependency_behind_ci_s_back() -> None:
    """`pytest.importorskip` skips even under CI=1, so a missing dependency would pass CI
    silently (issue 45): every optional dependency goes through `needs`."""
    import pathlib

    here = pathlib.Path(__file__).parent
    offenders = [
        p.name
        for p in sorted(here.glob("test_*.py"))
        if p.name != pathlib.Path(__file__).name and "importorskip(" in p.read_text()
    ]
    assert offenders == [], f"use needs.module(...) instead of importorskip in {offenders}"
