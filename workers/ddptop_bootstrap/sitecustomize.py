"""ddptop's zero-code bootstrap for `ddptop attach` (docs/attach.md).

ddptop puts this folder first on the script's PYTHONPATH, so Python's `site` imports this file as
`sitecustomize` in every process started with that environment. It does something only in a
process that torchrun started as a rank (`RANK` set) while ddptop is listening (`DDPTOP_SOCKET`
set), and then only once `torch` is imported: it hands over to `ddptop_worker.attach`, which
connects as the rank and installs torch's public global hooks. Any other process (torchrun's own
agent, a plain `python` run, a subprocess of the rank) is left alone.

Whatever happens in here, the user's script runs on: a failure turns instrumentation off with one
line on stderr (or a `log` to ddptop once connected). Standard library only; nothing is imported
from torch or ddptop_worker until the script imports torch itself.

Python imports only the first `sitecustomize` on sys.path, so this one then runs the next one
(the one the environment would have used without ddptop), exactly once.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any, Optional, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))
# Set by ddptop_worker.attach once this process is attached: children inherit it and stay quiet.
ATTACHED_PID_ENV = "DDPTOP_ATTACHED_PID"


def _say(msg: str) -> None:
    try:
        rank = os.environ.get("RANK", "?")
        sys.stderr.write(f"ddptop bootstrap (rank {rank}): {msg}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr may be closed; the script must still run
        pass


def wanted(environ: "os._Environ[str] | dict[str, str]") -> bool:
    """True in a torchrun rank of a run that ddptop is watching, not yet attached elsewhere."""
    if not environ.get("DDPTOP_SOCKET") or environ.get("RANK") in (None, ""):
        return False
    owner = environ.get(ATTACHED_PID_ENV, "")
    # A subprocess of an attached rank inherits RANK and the socket; the rank is already connected.
    return owner in ("", str(os.getpid()))


def _on_torch_imported() -> None:
    try:
        from ddptop_worker import attach
    except Exception as e:  # noqa: BLE001 - anything: instrumentation off, script unharmed
        _say(f"instrumentation off: cannot import ddptop_worker ({type(e).__name__}: {e})")
        return
    try:
        attach.start_zero_code()
    except Exception as e:  # noqa: BLE001 - start_zero_code reports its own failures; belt and braces
        _say(f"instrumentation off: {type(e).__name__}: {e}")


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Runs `_on_torch_imported` right after `import torch` has finished executing."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]],
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != "torch":
            return None
        _remove_watcher()  # one shot; and find_spec below must not find us again
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:  # noqa: BLE001 - let the normal import machinery report it
            return None
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        original = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            _on_torch_imported()

        try:
            loader.exec_module = exec_module  # this spec's own loader object only
        except Exception:  # noqa: BLE001 - an unusual loader: no instrumentation
            _say("instrumentation off: cannot watch the import of torch")
            return None
        return spec


def _remove_watcher() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchImportWatcher)]


def _install() -> None:
    if not wanted(os.environ):
        return
    if "torch" in sys.modules:  # another sitecustomize/.pth already imported it
        _on_torch_imported()
        return
    sys.meta_path.insert(0, _TorchImportWatcher())


def _chain() -> None:
    """Run the sitecustomize this one shadows (the next one on sys.path), as Python would have."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # The shadowed module runs under its own name so it can import itself and be found later.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _install()
except Exception as _e:  # noqa: BLE001 - never let ddptop stop the script from starting
    _say(f"instrumentation off: {type(_e).__name__}: {_e}")
_chain()
