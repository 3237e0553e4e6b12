"""FSDP2 (`torch.distributed.fsdp.fully_shard`) in an attached script: which module to measure.

An FSDP2 job has no DistributedDataParallel module, so the samples of a step (the first input's
leading dimension) and the forward marks come from the FSDP module the script calls: the root
of its `fully_shard` calls (scripts shard the layers first and the whole model last; a later call
on a module that contains the watched one takes over). ddptop wraps `fully_shard` where scripts
import it from (`torch.distributed.fsdp`, and `torch.distributed.fsdp._fully_shard`, which
`torch.distributed._composable.fsdp` re-exports), arguments and result untouched.

`torch.distributed.fsdp` takes over a second to import, and most scripts never use it, so it is
not imported here: a one-shot import watcher wraps `fully_shard` right after the script's own
import of the package has finished (at once when it is already imported).

What attach does not see under FSDP2: its all-gathers and reduce-scatters are not DDP buckets,
so there is no bucket timeline (said in a log line when the module is watched).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

PACKAGE = "torch.distributed.fsdp"
_EXPORTS = (PACKAGE, PACKAGE + "._fully_shard")  # module globals, not the defining module's own

OnShard = Callable[[Any], None]


def wrap(fully_shard: Callable[..., Any], on_shard: OnShard) -> Callable[..., Any]:
    """`fully_shard` that calls `on_shard(module)` after each call (a list of modules: each)."""
    if getattr(fully_shard, "__ddptop_wrapped__", False):
        return fully_shard

    @functools.wraps(fully_shard)  # keeps `.state` and the contract's attributes
    def wrapped(module: Any, *args: Any, **kwargs: Any) -> Any:
        out = fully_shard(module, *args, **kwargs)
        for m in module if isinstance(module, (list, tuple)) else [module]:
            on_shard(m)
        return out

    wrapped.__ddptop_wrapped__ = True  # type: ignore[attr-defined]
    return wrapped


def patch_loaded(on_shard: OnShard) -> bool:
    """Wrap `fully_shard` in the already imported modules; False when there is none."""
    done = False
    for name in _EXPORTS:
        mod = sys.modules.get(name)
        fn = getattr(mod, "fully_shard", None) if mod is not None else None
        if callable(fn):
            setattr(mod, "fully_shard", wrap(fn, on_shard))
            done = True
    return done


class _FsdpImportWatcher(importlib.abc.MetaPathFinder):
    """Wraps `fully_shard` right after `import torch.distributed.fsdp` has finished."""

    def __init__(self, on_shard: OnShard, on_error: Callable[[str], None]) -> None:
        self.on_shard = on_shard
        self.on_error = on_error

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE:
            return None
        remove_watcher()  # one shot; and find_spec below must not find us again
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:  # noqa: BLE001 - the normal import machinery reports it
            return None
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        original = loader.exec_module
        on_shard, on_error = self.on_shard, self.on_error

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            try:
                if not patch_loaded(on_shard):
                    on_error("torch.distributed.fsdp has no fully_shard")
            except Exception as e:  # noqa: BLE001 - ddptop's failure is never the script's
                on_error(f"{type(e).__name__}: {e}")

        loader.exec_module = exec_module  # this spec's own loader object only
        return spec


def remove_watcher() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _FsdpImportWatcher)]


def install(on_shard: OnShard, on_error: Callable[[str], None]) -> None:
    """Wrap `fully_shard` now if the script imported FSDP already, else when it does."""
    if PACKAGE in sys.modules:
        patch_loaded(on_shard)
        return
    remove_watcher()
    sys.meta_path.insert(0, _FsdpImportWatcher(on_shard, on_error))


def takes_over(new: Any, watched: Any | None) -> bool:
    """Whether a `fully_shard(new)` call moves the measuring to `new`: nothing watched yet, or
    `new` contains the watched module (the root sharded after its layers)."""
    if watched is None:
        return True
    try:
        return any(m is watched for m in new.modules())
    except Exception:  # noqa: BLE001 - not an nn.Module
        return False
