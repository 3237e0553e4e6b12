"""ddptop's Python workers: DDP training, the no_sync probe and the all-reduce bench, reporting
to ddptop over its Unix socket (docs/protocol.md)."""

__version__ = "0.1.0"
