"""The JAX experiment's equality check: the k-device run against the same steps on one device.

The first step's loss is computed from the initial weights before any reduced gradient has been
applied, so it cannot see a wrong gradient reduction. The check therefore compares:

- the loss of each of the first `CHECK_STEPS` steps (1 from the initial weights, then 3 after
  updates), each within `LOSS_TOL[platform][first or later] x max(1, |loss at k=1|)`;
- every parameter after step 1 (the first reduced gradient applied), the largest elementwise
  difference within `PARAM_TOL[platform] x max(1, max |parameter at k=1|)`.

Each comparison is one `check` message; ddptop's verdict is "ok" only when all of them are and
they cover `CHECK_STEPS` steps and the parameters (src/app/summary.rs `equality`).

`DDPTOP_TEST_BREAK_REDUCTION=1` is a TEST-ONLY switch: the k-device step adds device 0's
gradient whole instead of its 1/k share (one device's gradient not averaged). The first-step
loss is unchanged, so only the later steps and the parameters can catch it; the tests use it to
show that the check fails (workers/tests/test_jax_worker.py).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import protocol

CHECK_STEPS = 4
# (step 1, steps after updates), relative to max(1, |loss|). Step 1 differs only by the order of
# the BatchNorm sums: a few float32 ulps. After updates the k-device program's other summation
# order compounds through SGD: measured on CPU (tiny model, lr 0.1, k=2 and 4, batch 4 and 32 per
# device) up to 2.2e-4 of the loss by step 4, while device 0's gradient left unaveraged moved it by
# 6e-2 or more (docs/jax.md). GPU: jax's default f32 precision lets convolutions use TF32
# (not measured here: no jax GPU build on this project's machines).
LOSS_TOL = {"cpu": (1e-6, 2e-3), "gpu": (1e-3, 1e-2)}
# Relative to max(1, max |p|), elementwise after step 1. CPU measured up to 3.2e-6 correct and
# 1.1e-2 with the broken reduction.
PARAM_TOL = {"cpu": 1e-4, "gpu": 1e-3}
BREAK_ENV = "DDPTOP_TEST_BREAK_REDUCTION"
BREAK_NOTE = f"TEST SWITCH {BREAK_ENV}=1: device 0's gradient deliberately not averaged"


def broken_reduction() -> bool:
    """Whether the test-only switch asks for a wrong gradient reduction."""
    return os.environ.get(BREAK_ENV) == "1"


def tolerance_text(platform: str) -> str:
    """The rule, as the note of every check message states it."""
    first, later = LOSS_TOL.get(platform, LOSS_TOL["gpu"])
    pt = PARAM_TOL.get(platform, PARAM_TOL["gpu"])
    return (
        f"tol ({platform}): loss x max(1,|loss|) {first:.0e} at step 1, {later:.0e} at steps "
        f"2-{CHECK_STEPS}; params {pt:.0e} x max(1,max|p|) elementwise after step 1"
    )


def loss_checks(
    k: int, platform: str, k1_losses: Sequence[float], losses: dict[int, float]
) -> list[dict[str, Any]]:
    """One `check` per step (1-based) that both runs have, in step order."""
    first, later = LOSS_TOL.get(platform, LOSS_TOL["gpu"])
    out = []
    for i, a in enumerate(k1_losses):
        step = i + 1
        if step not in losses:
            break
        b = losses[step]
        what = "initial weights" if step == 1 else f"after {step - 1} update(s)"
        note = f"loss at step {step} ({what}), same global batch; {tolerance_text(platform)}"
        fields = protocol.check_fields(
            f"k1_vs_k{k}_loss", a, b, (first if step == 1 else later) * max(1.0, abs(a)), note=note
        )
        out.append({"step": step, **fields})
    return out


def leaves_stats(k1: Sequence[Any], kk: Sequence[Any]) -> tuple[float, float, float, float]:
    """(max |a - b|, max |a|, ||a||, ||b||) over matching leaves (numpy arrays)."""
    import numpy as np

    if len(k1) != len(kk):
        raise ValueError(f"parameter trees differ: {len(k1)} against {len(kk)} arrays")
    diff = amax = 0.0
    na = nb = 0.0
    for a, b in zip(k1, kk):
        a64 = np.asarray(a, dtype=np.float64)
        b64 = np.asarray(b, dtype=np.float64)
        if a64.shape != b64.shape:
            raise ValueError(f"parameter shapes differ: {a64.shape} against {b64.shape}")
        if a64.size:
            diff = max(diff, float(np.max(np.abs(a64 - b64))))
            amax = max(amax, float(np.max(np.abs(a64))))
        na += float(np.sum(a64 * a64))
        nb += float(np.sum(b64 * b64))
    return diff, amax, math.sqrt(na), math.sqrt(nb)


def params_check(k: int, platform: str, k1: Sequence[Any], kk: Sequence[Any]) -> dict[str, Any]:
    """The parameters after step 1: `a`/`b` are the L2 norms at k=1 and k, `diff` the largest
    elementwise difference (a norm can agree while elements do not)."""
    diff, amax, na, nb = leaves_stats(k1, kk)
    note = (
        f"parameters after step 1 ({len(k1)} arrays): a, b = L2 norms, diff = max elementwise "
        f"|difference|; {tolerance_text(platform)}"
    )
    if not all(math.isfinite(x) for x in (diff, amax, na, nb)):
        # A NaN or inf parameter fails the check; JSON has no NaN, so the figures are replaced.
        diff, amax, na, nb = sys.float_info.max, 0.0, 0.0, 0.0
        note = "non-finite parameters after step 1; " + note
    tol = PARAM_TOL.get(platform, PARAM_TOL["gpu"]) * max(1.0, amax)
    fields = protocol.check_fields(f"k1_vs_k{k}_params", na, nb, tol, note=note, diff=diff)
    return {"step": 1, **fields}
