"""What a rank can see alone of a failure that DDP will report later, said at once with names
(ddptop adds the verdicts that need every rank: src/app/diagnose.rs, docs/troubleshooting.md).

Unused parameters: a DDP built without `find_unused_parameters` (and without `static_graph`)
waits in backward for every parameter's gradient; one that took part in no loss never gets one,
and DDP raises at the *next* forward ("Expected to have finished reduction in the prior
iteration before starting a new one"), naming indices, not the parameters. At the first
optimizer step the unused ones are exactly those whose `.grad` is still None.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .client import Client

MAX_NAMES = 64  # protocol::Finding::MAX_NAMES
MAX_NAME_CHARS = 200


def unused_parameter_names(ddp: DDP) -> list[str]:
    """Parameters of `ddp`'s module that need a gradient and have none, when DDP will fail for
    them (no find_unused_parameters, no static_graph); [] otherwise."""
    if getattr(ddp, "find_unused_parameters", False) or getattr(ddp, "static_graph", False):
        return []
    return [
        name
        for name, p in ddp.module.named_parameters()
        if p.requires_grad and p.grad is None
    ]


def finding(names: list[str]) -> dict[str, Any]:
    return {
        "kind": "unused_parameters",
        "names": [n[:MAX_NAME_CHARS] for n in names[:MAX_NAMES]],
        "count": len(names),
    }


def report_unused(client: Client, ddp: DDP, step: int) -> bool:
    """Say the unused parameters of `ddp` (call after backward, before the optimizer step);
    True when there were some."""
    names = unused_parameter_names(ddp)
    if not names:
        return False
    shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    # `warn`, not `error`: the rank has not failed (yet); an error line would mark it failed.
    client.log(
        "warn",
        f"{len(names)} parameter(s) got no gradient in step {step} ({shown}): DDP without "
        "find_unused_parameters will fail at the next forward",
        finding=finding(names),
    )
    return True


def watch_first_step(client: Client, ddp: DDP, opt: torch.optim.Optimizer) -> None:
    """Check for unused parameters once, just before `opt`'s first step."""
    handle: Any = None

    def pre(_opt: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        handle.remove()
        report_unused(client, ddp, 1)

    handle = opt.register_step_pre_hook(pre)


class WithUnusedLayer(nn.Module):
    """`model` plus a layer LAYER that forward never calls: the `unused:LAYER` fault, the bug
    of a head defined in `__init__` and left out of `forward`. The model's own parameters keep
    their names (`model` is registered as the wrapper's first child under `body`)."""

    def __init__(self, model: nn.Module, layer: str) -> None:
        super().__init__()
        self.body = model
        self.add_module(layer, nn.Linear(8, 8))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.body(*args, **kwargs)
