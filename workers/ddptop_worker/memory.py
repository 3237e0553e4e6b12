"""What one rank holds: exact local bytes of parameters, gradients and optimizer state, the
prediction (16P for DDP, 8P + 8P/k for ZeRO-1, 16P/k for FSDP, with Adam), and the CUDA caching
allocator's counters.

Exact bytes are sums over local tensors: a sharded parameter (DTensor under FSDP2) counts only its
local shard (`to_local()`), a replicated one (DDP) counts whole. On CPU there is no allocator
counter (`torch.accelerator.memory_allocated()` is 0 without CUDA and RSS cannot separate DDP from
FSDP), so the peak is None there and the exact sums are the figure to read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor

PARAM_BYTES_PER_ELEM = 4  # fp32 weights
GRAD_BYTES_PER_ELEM = 4  # fp32 gradients
OPTIM_BYTES_PER_ELEM = {"adam": 8, "sgd": 0}  # Adam: exp_avg + exp_avg_sq; plain SGD: nothing


def local_bytes(t: torch.Tensor) -> int:
    """Bytes this rank holds for `t`: the local shard of a DTensor, else the whole tensor."""
    local = t.to_local() if isinstance(t, DTensor) else t
    return int(local.numel()) * int(local.element_size())


@dataclass(frozen=True)
class StateBytes:
    params: int
    grads: int
    optim: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optim


def local_optimizer(opt: torch.optim.Optimizer | None) -> torch.optim.Optimizer | None:
    """The optimizer whose state this rank holds: ZeroRedundancyOptimizer's local one (`.optim`,
    the shard of parameters this rank updates), else `opt` itself."""
    if isinstance(opt, ZeroRedundancyOptimizer):
        return opt.optim
    return opt


def state_bytes(net: nn.Module, opt: torch.optim.Optimizer | None) -> StateBytes:
    """Exact local bytes of parameters, their gradients (those that exist now) and optimizer
    state (every tensor in the state this rank holds, Adam's scalar `step` counters included)."""
    params = grads = 0
    for p in net.parameters():
        params += local_bytes(p)
        if p.grad is not None:
            grads += local_bytes(p.grad)
    optim = 0
    local = local_optimizer(opt)
    if local is not None:
        for st in local.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    optim += local_bytes(v)
    return StateBytes(params, grads, optim)


def padded_numel(shape: torch.Size | tuple[int, ...], k: int) -> int:
    """Elements of one parameter once FSDP pads dim 0 to a multiple of k (what an all-gather
    brings back)."""
    if len(shape) == 0:
        return 1
    rows = -(-int(shape[0]) // k) * k
    rest = 1
    for d in shape[1:]:
        rest *= int(d)
    return rows * rest


def predicted_bytes(
    strategy: str,
    n_params: int,
    k: int,
    optimizer: str,
    largest_unit_params: int,
    owned_params: int | None = None,
) -> int:
    """The model's figure for what a rank holds during a step.

    DDP replicates everything: (4 + 4 + s)·P bytes with s the optimizer's bytes per parameter
    (8 for Adam: 16P in all). ZeRO-1 (`zero1`) keeps the fp32 parameters and gradients whole and
    only the optimizer state of the parameters it owns: 8P + s·P_owned, with P_owned the rank's
    share of ZeroRedundancyOptimizer's partition (whole tensors, so ≈ P/k: 8P + 8P/k for Adam).
    FSDP keeps 1/k of everything, plus one unit's gathered fp32 parameters
    (`largest_unit_params` elements, padded) while it computes; at k=1 nothing is gathered (the
    shard is the whole parameter)."""
    s = OPTIM_BYTES_PER_ELEM[optimizer]
    per_elem = PARAM_BYTES_PER_ELEM + GRAD_BYTES_PER_ELEM + s
    if strategy == "zero1":
        owned = n_params if owned_params is None else owned_params
        return (PARAM_BYTES_PER_ELEM + GRAD_BYTES_PER_ELEM) * n_params + s * owned
    if strategy == "ddp" or k == 1:
        return per_elem * n_params
    return -(-per_elem * n_params // k) + PARAM_BYTES_PER_ELEM * largest_unit_params


def cuda_counters(device: torch.device) -> dict[str, int | None]:
    """allocated/reserved/peak bytes on a CUDA device; None for each on CPU."""
    if device.type != "cuda":
        return {"allocated_bytes": None, "reserved_bytes": None, "peak_bytes": None}
    return {
        "allocated_bytes": int(torch.cuda.memory_allocated(device)),
        "reserved_bytes": int(torch.cuda.memory_reserved(device)),
        "peak_bytes": int(torch.cuda.max_memory_allocated(device)),
    }


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
