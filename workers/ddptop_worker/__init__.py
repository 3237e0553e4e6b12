"""ddptop's Python workers: DDP training, the no_sync probe and the all-reduce bench, reporting
to ddptop over its Unix socket (docs/protocol.md). `watch` and `step` are attach mode's explicit
API for a user's own script (docs/attach.md)."""

from .explicit import step, watch

__all__ = ["step", "watch"]

__version__ = "0.1.0"
