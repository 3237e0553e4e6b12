"""The chapter's two PyTorch settings, applied by ddptop's workers unless asked not to:

    torch.set_float32_matmul_precision("high")   # TF32 tensor cores for float32 matmuls
    torch.backends.cudnn.benchmark = True        # try every convolution algorithm once per shape

Both change the measured figure (about 1 point on one H200), so ddptop records them as a setting
of the run (`--torch-settings book|off`) and reports what was in effect at the end (`result`),
which for an attached script is the script's own choice.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

CHOICES = ("book", "off")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--torch-settings",
        choices=CHOICES,
        default="book",
        help="book: matmul precision high and cudnn.benchmark on, as the chapter's script; "
        "off: PyTorch's defaults",
    )


def apply(choice: str) -> None:
    if choice == "book":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True


def observed() -> dict[str, Any]:
    """The settings in effect now, as `result` fields."""
    return {
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def autotunes(device: torch.device) -> bool:
    """Whether the first steps try convolution algorithms (the `autotune` phase)."""
    return device.type == "cuda" and bool(torch.backends.cudnn.benchmark)
