"""DDP constructor settings from the launch's environment, for `ddptop tune` and presets.

ddptop passes a run's settings as environment variables (its NCCL toggles and presets work the
same way), so a candidate of `ddptop tune` and a saved `[presets.tuned-…]` reach ddptop's own
workers and an attached, unmodified script alike:

  DDPTOP_DDP_BUCKET_CAP_MB=N          bucket_cap_mb (MiB, above 0; DDP's default is 25)
  DDPTOP_DDP_STATIC_GRAPH=1|0         static_graph
  DDPTOP_DDP_GRAD_AS_BUCKET_VIEW=1|0  gradient_as_bucket_view

Unset variables leave the constructor's own arguments alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

BUCKET_CAP: Final = "DDPTOP_DDP_BUCKET_CAP_MB"
STATIC_GRAPH: Final = "DDPTOP_DDP_STATIC_GRAPH"
GRAD_VIEW: Final = "DDPTOP_DDP_GRAD_AS_BUCKET_VIEW"

# DistributedDataParallel(module, device_ids, output_device, dim, broadcast_buffers, init_sync,
# process_group, bucket_cap_mb, find_unused_parameters, check_reduction,
# gradient_as_bucket_view, static_graph, ...): the positions of the settings tuned here, counted
# with `module` as 0. A script that passes them positionally cannot be overridden by keyword.
POSITIONS = {"bucket_cap_mb": 7, "gradient_as_bucket_view": 10, "static_graph": 11}


class KnobError(ValueError):
    pass


MAX_CAP_MB: Final = 1e6  # ddptop's own bound (run/ddp.rs): past any model's gradients


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    v = env.get(name, "").strip()
    if not v:
        return None
    if v in ("1", "true"):
        return True
    if v in ("0", "false"):
        return False
    raise KnobError(f"{name}={v!r}: expected 1 or 0")


def _bucket_cap(env: Mapping[str, str]) -> float | None:
    cap = env.get(BUCKET_CAP, "").strip()
    if not cap:
        return None
    try:
        mb = float(cap)
    except ValueError:
        mb = float("nan")
    if not 0.0 < mb <= MAX_CAP_MB:  # NaN fails too
        raise KnobError(f"{BUCKET_CAP}={cap!r}: expected MiB above 0")
    return mb


@dataclass(frozen=True)
class Knobs:
    """The DDP settings a launch asks for, typed; None leaves the constructor's own."""

    bucket_cap_mb: float | None = None
    static_graph: bool | None = None
    gradient_as_bucket_view: bool | None = None

    @classmethod
    def parse(cls, env: Mapping[str, str]) -> Knobs:
        """The one reader of the DDPTOP_DDP_* variables; a bad value raises KnobError."""
        return cls(
            bucket_cap_mb=_bucket_cap(env),
            static_graph=_flag(env, STATIC_GRAPH),
            gradient_as_bucket_view=_flag(env, GRAD_VIEW),
        )

    def kwargs(self) -> dict[str, Any]:
        """DDP's keyword arguments for the settings that are set (in this order)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The DDP keyword arguments the environment asks for (empty: none)."""
    return Knobs.parse(os.environ if env is None else env).kwargs()


def passed(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """The tuned settings a DDP constructor call passes itself, by keyword or by position (an
    explicit None is DDP's own default: not counted)."""
    out = []
    for kw, pos in POSITIONS.items():
        value = kwargs[kw] if kw in kwargs else args[pos] if len(args) > pos else None
        if value is not None:
            out.append(kw)
    return out


def override(args: tuple[Any, ...], kwargs: dict[str, Any], knobs: Mapping[str, Any]) -> str | None:
    """Put `knobs` into a DDP constructor call's `kwargs` in place. Returns why it could not be
    done safely (a setting passed positionally), or None."""
    for kw in knobs:
        if len(args) > POSITIONS[kw]:
            return f"the script passes {kw} positionally; ddptop leaves its DDP settings alone"
    kwargs.update(knobs)
    return None


def describe(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in knobs.items())
