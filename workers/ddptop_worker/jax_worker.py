"""The `jax` experiment: one process drives k devices. Describe the layout (a Mesh, PartitionSpecs),
jit the unchanged training step, and read the collectives XLA wrote from the compiled program.

Reports over one connection (rank 0, world_size 1, `devices: k`):
- `plan`, `step` (one fused jitted program: only step_ms is measured, fwd/bwd/opt are 0 and
  `fused` says so), `epoch`, `result` (experiment `jax`, samples/s over all k devices);
- `hlo`: the receipt from `step.lower(...).compile().as_text()` (hlo_receipt.py) with the layout
  of the batch and one weight before and after the first step, and the XLA passes that changed the
  collective counts (read from per-pass HLO dumps of that same compile);
- `check`: k=1 against k on the same global batches from the same initial weights: the loss of
  each of the first 4 steps and every parameter after step 1 (jax_check.py says the tolerances);
- `memory`: one per device, with the local bytes of parameters and optimizer state, the
  compiler's per-device estimate, and the allocator's counters where JAX has them (null on CPU).

jax, flax and optax are optional dependencies: imported only here, after argument parsing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from . import hlo_receipt, jax_check, protocol
from .client import Client, write_line
from .data import DataConfig, add_data_args, resize, source
from .jax_sharding import (
    SHARDINGS,
    batch_sharding,
    layout_text,
    local_bytes,
    make_mesh,
    place_state,
    replicated,
)
from .runtime import WorkerError

PIP_HINT = (
    "pip install 'jax[cpu]==0.10.2' flax==0.12.8 optax==0.2.8 "
    "(NVIDIA GPUs: pip install 'jax[cuda13]' flax optax)"
)
MODELS = ("resnet18", "tiny")
OPTIMIZERS = ("sgd", "adam")
DEFAULT_LR = {"sgd": 0.1, "adam": 1e-3}
# Per-pass dumps are kept only for passes whose names match: the ones that create, combine or
# convert collectives (SPMD partitioning, combiners, reduce-scatter creation, async conversion).
PASS_RE = "spmd|combiner|collective|scatter|gather|all-reduce|async"
LAYOUT_WEIGHT = ("fc", "kernel")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=1, help="devices in the mesh (one process for all)")
    p.add_argument(
        "--sharding",
        choices=SHARDINGS,
        default="data",
        help="data: parameters replicated; fsdp: parameters and optimizer state split on the mesh",
    )
    p.add_argument(
        "--batch", type=int, default=256, help="per-device batch (global batch = k * batch)"
    )
    p.add_argument("--epochs", type=int, default=2, help="epochs, epoch 0 is warm-up")
    p.add_argument("--model", choices=MODELS, default="resnet18", help="model")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd", help="optax optimizer")
    p.add_argument("--lr", type=float, default=None, help="learning rate (sgd 0.1, adam 1e-3)")
    # --data-path: `loader` gathers each global batch on the host and copies it to the mesh;
    # `device` keeps the resized data set on every device and gathers the batch there.
    add_data_args(p)
    p.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="tensorfloat32",
        help="jax_default_matmul_precision: tensorfloat32 (default) is the book's "
        'torch.set_float32_matmul_precision("high"); default leaves XLA\'s own choice',
    )
    p.add_argument(
        "--platform",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="devices the mesh must be made of (auto: whatever jax picks)",
    )
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the k=1 equality check (it compiles and runs the step once more on one device)"
        "%(default).0s",
    )
    p.add_argument(
        "--no-passes",
        dest="passes",
        action="store_false",
        help="do not dump per-pass HLO to find the passes that combined collectives%(default).0s",
    )
    p.add_argument(
        "--hlo-out",
        default=None,
        help="also write the compiled HLO text to this file (or, when unset, to "
        "$DDPTOP_JAX_HLO_DIR/hlo_<model>_k<k>_<sharding>.txt if that is set)",
    )


# jax_default_matmul_precision values offered ("default": the option left unset).
MATMUL_PRECISIONS = ("tensorfloat32", "float32", "bfloat16", "default")


def apply_matmul_precision(jax: Any, choice: str) -> str:
    """Set jax_default_matmul_precision (the book's PyTorch "high" is TF32 on tensor cores:
    `tensorfloat32`) before anything is traced; returns the value in effect, as `result` says
    it (`default` when unset)."""
    if choice != "default":
        jax.config.update("jax_default_matmul_precision", choice)
    seen = jax.config.jax_default_matmul_precision
    return str(seen) if seen is not None else "default"


def require_jax() -> tuple[Any, Any, Any]:
    """(jax, nnx, optax), or a one-line error that names the pip command."""
    try:
        import jax
        from flax import nnx

        optax = importlib.import_module("optax")  # untyped: an Any rather than a stub error
    except ImportError as e:
        missing = e.name or "jax"
        raise WorkerError(f"the jax worker needs jax, flax and optax ({missing} is missing): {PIP_HINT}") from None
    return jax, nnx, optax


@dataclass
class Layouts:
    """Texts of visualize_array_sharding, in the order they were taken."""

    texts: dict[str, str] = field(default_factory=dict)

    def take(self, name: str, arr: Any) -> None:
        self.texts[name] = layout_text(arr)


def make_train_step(graphdef: Any, tx: Any, broken_k: int = 0) -> Any:
    """The training step, written once for every k and every layout: forward, loss, gradients,
    optimizer update. Nothing in it names a device or a collective.

    `broken_k` > 1 is the TEST-ONLY wrong reduction (jax_check.BREAK_ENV): the gradient gets
    device 0's shard's gradient added whole instead of its 1/k share; the loss is unchanged."""
    from flax import nnx

    optax = importlib.import_module("optax")

    def train_step(params: Any, stats: Any, opt_state: Any, x: Any, y: Any) -> tuple[Any, ...]:
        model = nnx.merge(graphdef, params, stats)

        def loss_fn(m: Any) -> Any:
            return optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()

        def broken_loss_fn(m: Any) -> tuple[Any, Any]:
            per_sample = optax.softmax_cross_entropy_with_integer_labels(m(x), y)
            loss = per_sample.mean()
            shard0 = per_sample[: per_sample.shape[0] // broken_k].mean()
            # grad(loss) is the mean of the k shards' gradients; this adds (1 - 1/k) of shard
            # 0's on top: its gradient whole, the others' averaged.
            return loss + (1.0 - 1.0 / broken_k) * shard0, loss

        # nnx.value_and_grad differentiates the Params and carries BatchNorm's updated running
        # statistics back into `model`.
        if broken_k > 1:
            (_, loss), grads = nnx.value_and_grad(broken_loss_fn, has_aux=True)(model)
        else:
            loss, grads = nnx.value_and_grad(loss_fn)(model)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, nnx.state(model, nnx.BatchStat), opt_state, loss

    return train_step


def compile_step(lowered: Any, passes: bool) -> tuple[Any, list[hlo_receipt.PassChange] | None, str]:
    """Compile; with `passes`, XLA also dumps the module after each matching pass that changed it,
    and the dumps tell which passes inserted or merged collectives. Returns (compiled, changes or
    None, why None)."""
    if not passes:
        return lowered.compile(), None, "per-pass dumps off (--no-passes)"
    with tempfile.TemporaryDirectory(prefix="ddptop-hlo-") as d:
        try:
            compiled = lowered.compile(
                compiler_options={"xla_dump_to": d, "xla_dump_hlo_pass_re": PASS_RE}
            )
        except Exception as e:  # noqa: BLE001 - an XLA without these options: compile plainly
            return lowered.compile(), None, f"per-pass dumps unavailable ({type(e).__name__}: {e})"
        snaps = read_pass_dumps(d)
    if not snaps:
        return compiled, None, "XLA wrote no per-pass dumps"
    return compiled, hlo_receipt.pass_changes(snaps), ""


def read_pass_dumps(d: str) -> list[tuple[str, str]]:
    """(pass, module text) in pass order, for the module of the training step."""
    named = [(hlo_receipt.parse_dump_name(n), n) for n in os.listdir(d)]
    ours = [(dn, n) for dn, n in named if dn is not None and "train_step" in dn.fn]
    if not ours:
        return []
    module = max({dn.module for dn, _ in ours}, key=lambda m: sum(dn.module == m for dn, _ in ours))
    ours = sorted((t for t in ours if t[0].module == module), key=lambda t: t[0].seq)
    out = []
    for dn, n in ours:
        with open(os.path.join(d, n), encoding="utf-8", errors="replace") as f:
            out.append((dn.after, f.read()))
    return out


class Data:
    """FashionMNIST-shaped images resized to 64x64 once (data.py's source and resize) as NHWC
    float32. `batch(order, i)` is the i-th global batch of an epoch's order, split on the mesh:
    gathered on the host and copied (`loader`), or gathered from a copy of the data set resident
    on every device (`device`)."""

    def __init__(self, args: argparse.Namespace, global_batch: int, mesh: Any) -> None:
        import jax
        import numpy as np

        cfg = DataConfig.from_args(args)
        images, labels, self.description = source(cfg)
        n = int(images.shape[0])
        self.steps_per_epoch = n // global_batch
        if self.steps_per_epoch < 1:
            raise WorkerError(
                f"--samples {args.samples} is fewer than one global batch of {global_batch} "
                f"(k x --batch)"
            )
        chunks = [
            resize(images[i : i + 4096]).permute(0, 2, 3, 1).numpy() for i in range(0, n, 4096)
        ]
        self.x = np.ascontiguousarray(np.concatenate(chunks), dtype=np.float32)
        self.y = labels.numpy().astype(np.int32)
        self.global_batch = global_batch
        self.seed = cfg.seed
        self.path = cfg.path
        self.mesh = mesh
        if self.path == "device":
            rep = replicated(mesh)
            self.x_dev = jax.device_put(self.x, rep)
            self.y_dev = jax.device_put(self.y, rep)
            bs = batch_sharding(mesh)
            # Each device gathers only its slice of the batch from its own copy: no transfer.
            self.take = jax.jit(lambda xs, ys, idx: (xs[idx], ys[idx]), out_shardings=(bs, bs))
            self.rep = rep

    def order(self, epoch: int) -> Any:
        import numpy as np

        rng = np.random.default_rng(self.seed * 1_000_003 + epoch * 101)
        return rng.permutation(self.x.shape[0]).astype(np.int32)

    def host_batch(self, order: Any, i: int) -> tuple[Any, Any]:
        idx = order[i * self.global_batch : (i + 1) * self.global_batch]
        return self.x[idx], self.y[idx]

    def batch(self, order: Any, i: int) -> tuple[Any, Any]:
        import jax

        if self.path == "device":
            idx = order[i * self.global_batch : (i + 1) * self.global_batch]
            return tuple(self.take(self.x_dev, self.y_dev, jax.device_put(idx, self.rep)))
        bs = batch_sharding(self.mesh)
        xh, yh = self.host_batch(order, i)
        return jax.device_put(xh, bs), jax.device_put(yh, bs)


@dataclass
class Pending:
    """A dispatched step whose loss has not been waited for yet."""

    step: int
    epoch: int
    warmup: bool
    t_dispatch: float
    data_ms: float
    loss: Any


class JaxRun:
    def __init__(self, args: argparse.Namespace, client: Client, jax: Any, nnx: Any, optax: Any):
        self.args = args
        self.client = client
        self.jax = jax
        self.nnx = nnx
        self.optax = optax
        self.k = int(args.k)
        self.devices = jax.devices()[: self.k]
        self.platform = self.devices[0].platform
        self.mesh = make_mesh(self.devices)
        self.global_batch = self.k * int(args.batch)
        self.global_step = 0
        self.layouts = Layouts()
        self.losses: dict[int, float] = {}  # step -> loss at k, for the equality check
        self.k1_losses: list[float] = []
        self.k1_params: list[Any] = []  # host leaves after step 1 at k=1
        self.k_params: list[Any] = []  # the same at k, taken from training's step 1
        self.checks: list[dict[str, Any]] = []  # the check messages' fields, once sent
        self.broken = jax_check.broken_reduction() and self.k > 1
        self.compiled: Any = None
        self.changes: list[hlo_receipt.PassChange] | None = None
        self.combined: list[str] = []
        self.stopped = False
        self.strategy = "jax_fsdp" if args.sharding == "fsdp" else "jax_data"

    # ------------------------------------------------------------------ setup

    def build(self) -> None:
        jax, nnx, optax = self.jax, self.nnx, self.optax
        from . import jax_model

        args = self.args
        self.data = Data(args, self.global_batch, self.mesh)
        self.client.send(
            "plan",
            **protocol.plan_fields(
                args.epochs * self.data.steps_per_epoch,
                epochs=args.epochs,
                steps_per_epoch=self.data.steps_per_epoch,
                phase="train",
            ),
        )
        self.graphdef, params, stats = jax_model.init_state(args.model, args.seed)
        self.params_count = jax_model.param_count(params)
        lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
        self.tx = optax.sgd(lr) if args.optimizer == "sgd" else optax.adam(lr)
        opt_state = self.tx.init(params)
        # Host copies of the initial state: the k=1 equality check starts from the same weights.
        self.init_host = jax.device_get((params, stats, opt_state))
        self.params = place_state(params, self.mesh, args.sharding)
        self.opt_state = place_state(opt_state, self.mesh, args.sharding)
        # BatchNorm's running statistics are per-channel vectors: replicated in both layouts.
        self.stats = place_state(stats, self.mesh, "data")
        self.step_fn = make_train_step(self.graphdef, self.tx)
        # The k-device program; only the test switch makes it differ from the k=1 reference's.
        self.k_step_fn = make_train_step(self.graphdef, self.tx, self.k if self.broken else 0)
        if self.broken:
            self.client.log("warn", jax_check.BREAK_NOTE)
        self.send_memory("init")

    def put_batch(self, xh: Any, yh: Any, mesh: Any) -> tuple[Any, Any]:
        sh = batch_sharding(mesh)
        return self.jax.device_put(xh, sh), self.jax.device_put(yh, sh)

    def compile(self) -> None:
        jax = self.jax
        order = self.data.order(0)
        x, y = self.data.batch(order, 0)
        # Donation lets XLA reuse the old state's buffers for the new state on accelerators; the
        # CPU client cannot donate and would warn on every call.
        donate = (0, 1, 2) if self.platform != "cpu" else ()
        # The layout is declared for the outputs too: left to XLA's propagation, the fsdp program
        # returns BatchNorm's running statistics split on the mesh although they came in
        # replicated, and the next call would not match the compiled program.
        state_shardings = jax.tree.map(
            lambda a: a.sharding, (self.params, self.stats, self.opt_state)
        )
        jitted = jax.jit(
            self.k_step_fn,
            donate_argnums=donate,
            out_shardings=(*state_shardings, replicated(self.mesh)),
        )
        t0 = time.perf_counter()
        lowered = jitted.lower(self.params, self.stats, self.opt_state, x, y)
        if self.k == 1:
            # One device: the partitioner writes no collective, there is no pass to look for.
            self.compiled, self.changes, why = lowered.compile(), [], ""
        else:
            self.compiled, self.changes, why = compile_step(lowered, self.args.passes)
        compile_s = time.perf_counter() - t0
        self.hlo_text = self.compiled.as_text()
        hlo_out = self.args.hlo_out
        if hlo_out is None and os.environ.get("DDPTOP_JAX_HLO_DIR"):
            name = f"hlo_{self.args.model}_k{self.k}_{self.args.sharding}.txt"
            hlo_out = os.path.join(os.environ["DDPTOP_JAX_HLO_DIR"], name)
        if hlo_out:
            with open(hlo_out, "w", encoding="utf-8") as f:
                f.write(self.hlo_text)
        self.collectives = hlo_receipt.collectives(self.hlo_text)
        for why in self.collectives.problems[:5]:
            self.client.log("warn", f"receipt: counted without a size: {why}")
        if self.changes is None:
            self.combined = hlo_receipt.inferred_combiners(self.collectives)
            self.client.log("warn", f"receipt: {why}; combiner passes inferred from the final HLO")
        else:
            self.combined = hlo_receipt.combined_by(self.changes)
        self.client.log(
            "info",
            f"compiled the step in {compile_s:.1f} s; receipt "
            f"{hlo_receipt.summary(self.collectives, self.k)}"
            + (
                "; passes: "
                + ", ".join(
                    f"{c.pass_name} {c.op.replace('_', '-')} {c.before}->{c.after}"
                    for c in self.changes
                )
                if self.changes
                else ""
            ),
        )
        self.layouts.take("batch (before)", x)
        self.layouts.take("fc.kernel (before)", self.weight(self.params))
        self.send_memory("compiled")

    def weight(self, params: Any) -> Any:
        node = params
        for key in LAYOUT_WEIGHT:
            node = node[key]
        # A Param in newer flax, a bare array in older: either way its one leaf is the array.
        (arr,) = self.jax.tree.leaves(node)
        return arr

    # ------------------------------------------------------------------ the equality check

    def run_k1_reference(self) -> None:
        """The same first CHECK_STEPS global batches from the same initial state on one device;
        keeps each step's loss and the parameters after step 1."""
        jax = self.jax
        mesh1 = make_mesh(self.devices[:1])
        params, stats, opt_state = self.init_host
        state = (
            place_state(params, mesh1, "data"),
            place_state(stats, mesh1, "data"),
            place_state(opt_state, mesh1, "data"),
        )
        order = self.data.order(0)
        steps = min(jax_check.CHECK_STEPS, self.data.steps_per_epoch)
        step1 = jax.jit(self.step_fn)
        t0 = time.perf_counter()
        for i in range(steps):
            x, y = self.put_batch(*self.data.host_batch(order, i), mesh1)
            *rest, loss = step1(*state, x, y)
            state = tuple(rest)
            self.k1_losses.append(float(loss))
            if i == 0:
                self.k1_params = [jax.device_get(a) for a in jax.tree.leaves(state[0])]
        self.client.log(
            "info",
            f"equality check: {steps} step(s) at k=1 on device {self.devices[0]} with the same "
            f"global batch of {self.global_batch} in {time.perf_counter() - t0:.1f} s",
        )

    def send_check(self) -> None:
        """Once training has reached every reference step: one `check` per step's loss and one
        for the parameters after step 1 (jax_check.py), then a log line with the verdict."""
        n = len(self.k1_losses)
        if n == 0 or self.checks or any(s not in self.losses for s in range(1, n + 1)):
            return
        if not self.k_params:
            return  # training has not taken the parameters after its step 1
        checks = jax_check.loss_checks(self.k, self.platform, self.k1_losses, self.losses)
        checks.append(jax_check.params_check(self.k, self.platform, self.k1_params, self.k_params))
        for c in checks:
            if self.broken:
                c["note"] = f"{jax_check.BREAK_NOTE}; {c['note']}"
            self.client.send("check", **c)
        self.checks = checks
        ok = all(c["ok"] for c in checks)
        worst = max(checks[:-1], key=lambda c: c["diff"] / max(c["tol"], 1e-300))
        p = checks[-1]
        self.client.log(
            "info" if ok else "warn",
            f"equality check k=1 vs k={self.k} {'ok' if ok else 'FAILED'}: loss steps 1-{n} "
            f"worst diff {worst['diff']:.1e} (step {worst['step']}, tol {worst['tol']:.1e}), "
            f"params after step 1 max diff {p['diff']:.1e} (tol {p['tol']:.1e})"
            + (f"; {jax_check.BREAK_NOTE}" if self.broken else ""),
        )
        self.k1_losses, self.k1_params, self.k_params = [], [], []  # sent once

    # ------------------------------------------------------------------ reports

    def send_receipt(self) -> None:
        c = self.collectives
        ar = c.ops["all_reduce"]
        fields: dict[str, Any] = {
            "k": self.k,
            "all_reduce_ops": ar.count,
            "all_reduce_bytes": ar.total_bytes,
            "sharding": self.args.sharding,
            "ops": {
                key: protocol.hlo_ops_entry(
                    st.count, st.largest_elems, st.total_elems, st.total_bytes
                )
                for key, st in c.ops.items()
            },
            "combined_by": self.combined,
            "layout": dict(self.layouts.texts),
            "platform": self.platform,
            # Beyond the agreed fields (ignored by older readers): how each pass changed the
            # counts, collectives outside the three, and how many are async (-start) ops.
            "pass_changes": [ch.wire() for ch in self.changes or []],
            "other_ops": dict(c.other),
            "async_ops": sum(st.async_count for st in c.ops.values()),
            "model": self.args.model,
            "params": self.params_count,
        }
        self.client.send("hlo", step=1, **fields)

    def send_memory(self, phase: str) -> None:
        analysis = None
        compiled = getattr(self, "compiled", None)
        if compiled is not None:
            try:
                analysis = compiled.memory_analysis()
            except Exception:  # noqa: BLE001 - not every backend has it
                analysis = None
        predicted = None
        if analysis is not None:
            predicted = int(
                analysis.argument_size_in_bytes
                + analysis.output_size_in_bytes
                + analysis.temp_size_in_bytes
                - analysis.alias_size_in_bytes
            )
        for i, dev in enumerate(self.devices):
            stats = _memory_stats(dev)
            fields: dict[str, Any] = {
                "allocated_bytes": stats.get("bytes_in_use"),
                "reserved_bytes": stats.get("bytes_reserved", stats.get("pool_bytes")),
                "peak_bytes": stats.get("peak_bytes_in_use"),
                "device": i,
                "strategy": self.strategy,
                "phase": phase,
                "param_bytes": local_bytes(self.params, dev),
                "optim_bytes": local_bytes(self.opt_state, dev),
            }
            if predicted is not None:
                fields["predicted_bytes"] = predicted
            self.client.send("memory", **fields)

    # ------------------------------------------------------------------ training

    def finish(self, p: Pending, prev_ready: float) -> float:
        """Wait for a dispatched step and report it; returns when it was ready."""
        loss = float(p.loss)  # blocks until the step's program has run
        t_ready = time.perf_counter()
        self.losses[p.step] = loss
        self.client.step = p.step
        # One step stays in flight: step i is dispatched before step i-1 is waited for, so the
        # step's time is from the later of its dispatch and the previous step's end to its end.
        self.client.send(
            "step",
            step=p.step,
            epoch=p.epoch,
            warmup=p.warmup,
            sync=True,
            samples=self.global_batch,
            fwd_ms=0.0,
            bwd_ms=0.0,
            opt_ms=0.0,
            data_ms=p.data_ms,
            step_ms=max(0.0, (t_ready - max(p.t_dispatch, prev_ready)) * 1000.0),
            timing="host",
            fused=True,
            loss=loss,
        )
        if p.step == 1:
            self.send_receipt()
        self.send_check()
        return t_ready

    def run_epoch(self, epoch: int) -> tuple[dict[str, Any], bool]:
        warmup = epoch == 0 and self.args.epochs > 1
        order = self.data.order(epoch)
        pending: Pending | None = None
        steps = samples = 0
        data_wait = 0.0
        t_epoch = time.perf_counter()
        prev_ready = t_epoch
        stop = False
        for i in range(self.data.steps_per_epoch):
            if self.client.stop_requested:
                stop = True
                break
            t0 = time.perf_counter()
            x, y = self.data.batch(order, i)
            data_ms = (time.perf_counter() - t0) * 1000.0
            self.params, self.stats, self.opt_state, loss = self.compiled(
                self.params, self.stats, self.opt_state, x, y
            )
            self.global_step += 1
            if self.global_step == 1:
                # Shardings are known at dispatch: the layout after the step without waiting.
                self.layouts.take("batch (after)", x)
                self.layouts.take("fc.kernel (after)", self.weight(self.params))
                if self.k1_losses:
                    # The equality check's parameters after step 1: this waits for step 1 (once;
                    # epoch 0 is warm-up) and copies before the next call may donate them.
                    jax = self.jax
                    self.k_params = [jax.device_get(a) for a in jax.tree.leaves(self.params)]
            steps += 1
            samples += self.global_batch
            data_wait += data_ms
            if pending is not None:
                prev_ready = self.finish(pending, prev_ready)
            pending = Pending(self.global_step, epoch, warmup, t0, data_ms, loss)
        if pending is not None:
            self.finish(pending, prev_ready)
        seconds = time.perf_counter() - t_epoch
        st = {
            "epoch": epoch,
            "warmup": warmup,
            "samples": samples,
            "seconds": seconds,
            "samples_per_s": samples / seconds if seconds > 0 and steps else 0.0,
            "data_wait_ms": data_wait,
        }
        if steps:
            self.client.send("epoch", **st)
            last = self.losses.get(self.global_step, float("nan"))
            self.client.log(
                "info",
                f"epoch {epoch}{' (warm-up)' if warmup else ''}: {steps} steps, "
                f"{st['samples_per_s']:.1f} samples/s on {self.k} device(s), last loss {last:.4f}",
            )
            self.send_memory(f"epoch{epoch}")
        return st, stop

    def train(self) -> tuple[float | None, int]:
        self.client.phase = "train"
        timed: list[float] = []
        for epoch in range(self.args.epochs):
            st, stop = self.run_epoch(epoch)
            if not st["warmup"] and st["samples"] > 0:
                timed.append(float(st["samples_per_s"]))
            if stop:
                self.stopped = True
                self.client.log("info", f"stopped at step {self.global_step}")
                break
        mean = sum(timed) / len(timed) if timed else None
        return mean, len(timed)


def _memory_stats(dev: Any) -> dict[str, int]:
    try:
        stats = dev.memory_stats()
    except Exception:  # noqa: BLE001 - CPU devices may raise instead of returning None
        return {}
    return {k: int(v) for k, v in (stats or {}).items() if isinstance(v, int)}


def _versions(jax: Any) -> str:
    import flax

    optax = importlib.import_module("optax")
    return f"jax {jax.__version__}, flax {flax.__version__}, optax {optax.__version__}"


def run(args: argparse.Namespace) -> int:
    if args.k < 1 or args.batch < 1 or args.epochs < 1 or args.samples < 1:
        raise WorkerError("--k, --batch, --epochs and --samples must be >= 1")
    if args.data_path == "fast-loader":
        raise WorkerError(
            "--data-path fast-loader is a torch DataLoader: the jax worker has device and loader "
            "(each global batch gathered on the host)"
        )
    jax, nnx, optax = require_jax()
    matmul_precision = apply_matmul_precision(jax, args.matmul_precision)
    devices = jax.devices()
    if args.platform != "auto" and devices[0].platform != args.platform:
        hint = " (pip install 'jax[cuda13]')" if args.platform == "gpu" else ""
        raise WorkerError(
            f"--platform {args.platform} but jax's devices are {devices[0].platform}{hint}"
        )
    if args.k > len(devices):
        hint = (
            " (on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)"
            if devices[0].platform == "cpu"
            else ""
        )
        raise WorkerError(
            f"--k {args.k} but jax sees {len(devices)} {devices[0].platform} device(s){hint}"
        )
    platform = devices[0].platform
    client = Client.from_env(
        worker="jax",
        backend="nccl" if platform == "gpu" else "xla",
        device=f"{platform}:0-{args.k - 1}" if args.k > 1 else f"{platform}:0",
        rank=0,
        world_size=1,
        local_rank=0,
        versions={"torch": None, "nccl": None, "cuda": _cuda_version(jax, platform)},
        hello_extra=protocol.hello_extra(devices=args.k, instrument="full"),
    )
    with client:
        try:
            r = JaxRun(args, client, jax, nnx, optax)
            client.log(
                "info",
                f"jax k={args.k} sharding {args.sharding}: one process, mesh over "
                f"{', '.join(str(d) for d in r.devices)}; {_versions(jax)}",
            )
            r.build()
            client.log(
                "info",
                f"model {args.model} ({r.params_count} params), global batch {r.global_batch} "
                f"({args.batch} per device), {r.data.steps_per_epoch} steps/epoch, data "
                f"{r.data.description} via the {args.data_path} path, optimizer {args.optimizer}, "
                f"jax_default_matmul_precision {matmul_precision}",
            )
            # XLA compiles before the first step (about 9 s for ResNet-18 on an H200): the
            # watchdog shows it and allows the first-steps threshold (docs/reliability.md).
            client.phase = "compile"
            r.compile()
            if args.check and args.k > 1:
                r.run_k1_reference()
            mean, timed = r.train()
            client.send(
                "result",
                experiment="jax",
                samples_per_s=mean,
                timed_epochs=timed,
                params=r.params_count,
                grad_bytes=4 * r.params_count,
                bucket_bytes=[],
                optimizer=args.optimizer,
                sharding=args.sharding,
                devices=args.k,
                jax_matmul_precision=apply_matmul_precision(jax, "default"),
            )
        except BaseException as e:
            msg = str(e) if isinstance(e, WorkerError) else f"{type(e).__name__}: {e}"
            client.log("error", msg)
            client.close("error")
            raise
        client.close("stopped" if r.stopped else "done")
    rate = f"{mean:.1f}" if mean is not None else "n/a"
    write_line(
        f"jax k={args.k} {args.sharding}: {rate} samples/s over {timed} timed epoch(s), "
        f"global batch {r.global_batch}; receipt {hlo_receipt.summary(r.collectives, args.k)}"
    )
    return 0


def _cuda_version(jax: Any, platform: str) -> str | None:
    if platform != "gpu":
        return None
    try:
        from jax._src.lib import cuda_versions  # private: best effort

        v = cuda_versions.cuda_runtime_get_version() if cuda_versions else None
    except Exception:  # noqa: BLE001 - versions are best effort
        return None
    if not v:
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


if __name__ == "__main__":  # pragma: no cover - use `python -m ddptop_worker jax`
    sys.exit("use: python -m ddptop_worker jax --help")
