"""Stream gradient-noise statistics from a PyTorch training run to copus (protocol v1).

Standard library only at import time; ``torch`` is imported inside the functions that need
it, so the protocol writer runs (and is tested) with plain ``python3``.

Protocol v1: one JSON object per line, e.g.
    {"v":1,"step":12,"b_small":8,"b_big":64,"sq_small":0.91,"sq_big":0.17,"n_small":8}
``b_small`` and ``b_big`` are samples (sequences); ``sq_small`` is the mean over the small
batches of |g_small|^2 and ``sq_big`` is |g_big|^2. See docs/LIVE.md.

In data-parallel training the small batch is one rank's batch (before the all-reduce) and
the big one is the global batch (after it), so the measurement is nearly free:

    writer = copus_hook.open_writer(path="stats.ndjson", serve="127.0.0.1:7000")
    hook = copus_hook.DdpNoiseHook(ddp_model, writer, samples_per_rank=bs * accum)
    hook.install()                      # before the first backward
    ...
    scaler.scale(loss).backward()       # inside no_sync() for all but the last micro-step
    hook.step_end(step, loss=loss.detach(), lr=lr,
                  loss_scale=copus_hook.scaler_scale(scaler))
    scaler.step(opt)                    # clip / unscale after measuring, not before
    ...
    hook.close()                        # on every rank: writes the steps still held
    writer.close()

The hooks keep each step's norms on the device and write them every ``flush_every`` steps
(default 16) with one host transfer: nothing is read back to the host per step. Tensors
passed as ``loss`` or ``loss_scale`` are read at the flush too.

``Advisor`` applies the advice of ``copus watch --advise`` (a new global batch, by gradient
accumulation) at the same step on every rank and writes an ``applied`` line to the stream.
"""

import ctypes
import errno
import json
import logging
import math
import os
import select
import socket
import struct
import threading
import time
import warnings
import weakref

PROTOCOL_VERSION = 1


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def make_record(step, b_small, b_big, sq_small, sq_big, *, n_small=None, tokens=None,
                loss=None, lr=None, step_time_s=None, layers=None, loss_scale=None,
                skipped=None, config=None):
    """Build one protocol v1 record (a dict) for an optimizer step.

    Squared norms measured on loss-scaled gradients (AMP) are divided by ``loss_scale**2``.
    Non-finite values cannot travel in JSON: they are written as 0 and the step is flagged
    ``skipped`` (copus then leaves it out of the estimate). Raises ValueError on impossible
    batch sizes.
    """
    if not (_finite(b_small) and b_small > 0 and _finite(b_big) and b_big > b_small):
        raise ValueError(f"need 0 < b_small < b_big (samples), got {b_small}, {b_big}")
    divide = 1.0
    if loss_scale is not None:
        if not (_finite(loss_scale) and loss_scale > 0):
            raise ValueError(f"loss_scale must be a positive number, got {loss_scale}")
        divide = float(loss_scale) ** 2
    bad = []

    def clean(name, x):
        x = float(x) / divide
        if math.isfinite(x):
            return x
        bad.append(name)
        return 0.0

    rec = {"v": PROTOCOL_VERSION, "step": int(step), "b_small": b_small, "b_big": b_big,
           "sq_small": clean("sq_small", sq_small), "sq_big": clean("sq_big", sq_big)}
    if n_small is not None:
        rec["n_small"] = int(n_small)
    if loss is not None:
        if _finite(float(loss)):
            rec["loss"] = float(loss)
        else:
            bad.append("loss")
    for key, val in (("tokens", tokens), ("lr", lr), ("step_time_s", step_time_s)):
        if val is not None and _finite(float(val)):
            rec[key] = float(val)
    if config is not None:
        rec["config"] = {k: int(config[k]) for k in ("dp", "tp", "pp", "mbs")}
    if layers:
        rec["layers"] = {name: {"sq_small": clean(f"{name}.sq_small", s),
                                "sq_big": clean(f"{name}.sq_big", b)}
                         for name, (s, b) in sorted(layers.items())}
    if bad:
        note = "non-finite: " + ", ".join(bad)
        skipped = f"{skipped}; {note}" if skipped else note
    if skipped:
        rec["skipped"] = str(skipped)
    return rec


def dumps(record):
    """One protocol line (no newline): compact, strict JSON (NaN and Infinity refused)."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False)


class FileSink:
    """Writes each line to a file and flushes it, so a follower sees whole lines promptly.

    A file that already holds lines (an earlier run's) is not replaced unless asked:
    ``append=True`` continues it (a job resumed from a checkpoint: copus reads the steps it
    repeats as a restart and keeps the earlier ones), ``overwrite=True`` replaces it. Without
    either, such a file raises ``FileExistsError`` naming it. An empty file, a FIFO or a
    device (``/dev/stdout``) is written as is.
    """

    def __init__(self, path, append=False, overwrite=False):
        if append and overwrite:
            raise ValueError("FileSink: append and overwrite exclude each other")
        if append or overwrite:
            self._f = open(path, "a" if append else "w", encoding="utf-8")
            return
        try:
            self._f = open(path, "x", encoding="utf-8")
            return
        except FileExistsError:
            if os.path.isfile(path) and os.path.getsize(path) > 0:
                raise FileExistsError(
                    f"{path}: already holds {os.path.getsize(path)} bytes of statistics; pass "
                    "append=True to continue that run (a job resumed from a checkpoint), "
                    "overwrite=True to replace it, or write to another path") from None
        self._f = open(path, "w", encoding="utf-8")

    def write_line(self, line):
        self._f.write(line + "\n")
        self._f.flush()

    def close(self):
        self._f.close()


class TcpSink:
    """A stats server: one listener, any number of clients; each new client first receives
    every line so far. Loopback unless another host is named."""

    def __init__(self, host="127.0.0.1", port=0, write_timeout_s=2.0):
        host = host or "127.0.0.1"
        if host not in ("127.0.0.1", "localhost", "::1"):
            warnings.warn(f"copus_hook: serving statistics on non-loopback host {host}")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen()
        self._sock.settimeout(0.1)
        self.host, self.port = host, self._sock.getsockname()[1]
        self._timeout = write_timeout_s
        self._lock = threading.Lock()
        self._history, self._clients = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="copus-hook-server",
                                        daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(self._timeout)
            with self._lock:
                try:
                    conn.sendall(b"".join(self._history))
                    self._clients.append(conn)
                except OSError:
                    conn.close()

    def clients(self):
        """Number of connected clients."""
        with self._lock:
            return len(self._clients)

    def write_line(self, line):
        data = (line + "\n").encode("utf-8")
        with self._lock:
            self._history.append(data)
            alive = []
            for c in self._clients:
                try:
                    c.sendall(data)
                    alive.append(c)
                except OSError:
                    c.close()
            self._clients = alive

    def close(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()
        with self._lock:
            for c in self._clients:
                c.close()
            self._clients = []


class StatsWriter:
    """Serialises records and hands each line to every sink. With no sinks (ranks other than
    0) it does nothing."""

    def __init__(self, sinks=()):
        self.sinks = list(sinks)
        self._producers = weakref.WeakSet()

    def write(self, record):
        line = dumps(record)
        for s in self.sinks:
            s.write_line(line)
        return line

    def _watch(self, producer):
        """A hook that holds records until its flush: closing warns if it still holds some."""
        self._producers.add(producer)

    def close(self):
        for p in list(self._producers):
            if p.pending_steps():
                warnings.warn(f"copus_hook: {type(p).__name__} still holds {p.pending_steps()} "
                              "unwritten step(s): call its close() on every rank before "
                              "closing the writer")
        for s in self.sinks:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rank():
    try:
        import torch.distributed as dist  # only when available and initialised
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0"))


def open_writer(path=None, serve=None, rank=None, append=False, overwrite=False):
    """A writer for this process: on rank 0, a file sink (``path``) and/or a server
    (``serve`` = "HOST:PORT", HOST empty for loopback); on other ranks, a no-op writer.
    ``append``/``overwrite``: what to do with a ``path`` that already holds lines
    (:class:`FileSink`; neither: refuse it)."""
    if (rank if rank is not None else _rank()) != 0:
        return StatsWriter()
    sinks = []
    if path:
        sinks.append(FileSink(path, append=append, overwrite=overwrite))
    if serve:
        host, _, port = str(serve).removeprefix("tcp://").rpartition(":")
        sinks.append(TcpSink(host.strip("[]") or "127.0.0.1", int(port)))
    return StatsWriter(sinks)


# --- Squared norms without a squared copy -------------------------------------------------

# Elements per partial norm. PyTorch's float32 norm on CPU accumulates in float32 and loses
# about 2e-5 (relative, on |g|^2) at 1M elements, 4e-4 at 6.5M (one 25 MB DDP bucket); norms
# of 4096-element rows are exact to ~1e-8 and their squares are summed in float64, at about
# the speed of one norm.
_CHUNK = 4096


def _norm_kw(t):
    """vector_norm's dtype argument: float32 arithmetic for bf16/f16 (their own would keep 3
    digits), the tensor's own for float32/float64."""
    import torch
    return {} if t.dtype in (torch.float32, torch.float64) else {"dtype": torch.float32}


def _sq(t):
    """|t|^2 as a float64 0-d tensor on t's device (bf16/f16/f32/f64 alike), from fused
    norms: no squared copy is made and nothing is read back to the host. The flat tensor is
    cut into rows of ``_CHUNK`` elements whose norms (float32 for low precision inputs) are
    squared and summed in float64 (one dot product), so the result is exact to ~1e-8
    relative."""
    import torch
    x = t.detach().reshape(-1)
    kw = _norm_kw(x)
    n = x.numel()
    m = n - n % _CHUNK
    if m == 0:
        r = torch.linalg.vector_norm(x, **kw).to(torch.float64)
        return r * r
    r = torch.linalg.vector_norm(x[:m].view(-1, _CHUNK), dim=1, **kw)
    if m < n:
        r = torch.cat([r, torch.linalg.vector_norm(x[m:], **kw).reshape(1)])
    r = r.to(torch.float64)
    return torch.dot(r, r)


def _sq_sum(tensors):
    """sum_i |t_i|^2 as a float64 0-d tensor, or None for an empty list. On CUDA one fused
    ``torch._foreach_norm`` launch for all the tensors (its partial sums are short enough
    for float32); elsewhere one :func:`_sq` per tensor."""
    import torch
    ts = [t.detach() for t in tensors]
    if not ts:
        return None
    if all(t.is_cuda for t in ts) and len({t.device for t in ts}) == 1:
        try:
            norms = torch._foreach_norm(ts, 2, dtype=torch.float32)
        except TypeError:   # a torch without the dtype argument: one norm per tensor
            norms = None
        if norms is not None:
            r = torch.stack(norms).to(torch.float64)
            return torch.dot(r, r)
    return torch.stack([_sq(t) for t in ts]).sum()


def _local(t):
    """The local part of a DTensor (a shard), or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


# --- Deferred records: per-step statistics stay on the device until a flush ----------------

_FIELDS = ("loss", "lr", "loss_scale", "tokens", "step_time_s")


def _is_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def grad_norm_mismatch(sq_big, grad_norm, rtol=1e-3):
    """Check the hook's |G|^2 (a record's ``sq_big``, one rank's whole step) against the
    trainer's own gradient norm of the same step (what ``clip_grad_norm_`` returns, before
    clipping; the norm of the unscaled, accumulated gradient). Returns ``None`` when they
    agree within ``rtol`` (relative, on the squared norm), else a sentence saying by what
    factor they differ and what usually causes it: a sharded model whose gradients are
    counted more than once (FSDP/HSDP replicas summed, TP-replicated parameters counted on
    every rank), or counted only in part (shards not gathered)."""
    want = float(grad_norm) ** 2
    got = float(sq_big)
    if not (math.isfinite(want) and math.isfinite(got)):
        return f"not finite: hook |G|^2 {got}, trainer's norm^2 {want}"
    if abs(got - want) <= rtol * max(abs(want), 1e-300):
        return None
    ratio = got / want if want > 0 else float("inf")
    return (f"hook |G|^2 = {got:.6g} but the trainer's gradient norm^2 = {want:.6g} "
            f"(x{ratio:.3g}): gradients counted more than once (FSDP/HSDP replicas or "
            f"TP-replicated parameters summed) or only in part (shards not gathered), or the "
            f"loss scale not divided out")


def scaler_scale(scaler):
    """The loss scale of a ``torch.amp.GradScaler`` without a host synchronisation: its scale
    tensor (read at the next flush, copied when the step is recorded, so the scaler's
    in-place update does not change it), or ``get_scale()`` (a float, which syncs) when the
    scaler is disabled or has not scaled anything yet; None for no scaler."""
    if scaler is None:
        return None
    enabled = getattr(scaler, "is_enabled", lambda: True)()
    scale = getattr(scaler, "_scale", None) if enabled else None
    return scale if scale is not None else scaler.get_scale()


class _Deferred:
    """What the hooks share: each ``step_end`` stores one row of float64 device values (the
    hook's squared norms, then any of loss / lr / loss_scale / tokens / step_time_s given as
    tensors; ``tokens`` is **cumulative**, the tokens the whole job has trained on so far,
    not this step's) and its host values; every ``flush_every`` steps, at ``flush()`` and at
    ``close()``, the rows are reduced across ranks (the hook's collectives, once per flush
    instead of once per step), moved to the host in one transfer (``.tolist()``) and written
    as one record per step, in step order. Lines queued with ``_queue_line`` (the Advisor's
    ``applied`` lines) are written in their place among the records.

    ``flush()`` and ``close()`` are collectives: call them on every rank (``step_end`` flushes
    on the same step everywhere)."""

    _n_reduced = 0   # how many leading values of a row the hook's _reduce sums over ranks

    def _init_deferred(self, writer, flush_every, advisor):
        if not callable(getattr(writer, "write", None)):
            # Refused here, not at the first flush ``flush_every`` steps into training.
            raise TypeError(
                f"writer: a StatsWriter on every rank, got {writer!r}: call "
                f"copus_hook.open_writer(...) on every rank (it writes on rank 0 and returns "
                f"a writer that writes nothing on the others)")
        flush_every = int(flush_every)
        if flush_every < 1:
            raise ValueError(f"flush_every must be >= 1 (steps), got {flush_every}")
        self.writer, self.flush_every = writer, flush_every
        self.advisor = advisor
        self._entries = []   # ("rec", row, build, fields, tensor names) or ("line", dict)
        self._steps = 0      # records among _entries
        if advisor is not None:
            advisor._attach(self)
        watch = getattr(writer, "_watch", None)
        if watch is not None:
            watch(self)

    def _push(self, values, fields, build):
        """Store one step: ``values`` the hook's float64 0-d device tensors (the first
        ``_n_reduced`` are summed over ranks at the flush), ``fields`` step_end's optional
        arguments, ``build(values, fields) -> record dict`` run at the flush with host
        floats. Returns the lines written if this step completes a flush."""
        import torch
        dev = values[0].device
        host, names, extra = {}, [], []
        for k in _FIELDS:
            v = fields.get(k)
            if _is_tensor(v):
                names.append(k)
                extra.append(v.detach().reshape(()).to(device=dev, dtype=torch.float64))
            elif v is not None:
                host[k] = v
        row = torch.stack([v.reshape(()).to(torch.float64) for v in values] + extra)
        self._entries.append(("rec", row, build, host, names))
        self._steps += 1
        if self._steps >= self.flush_every:
            return self.flush()
        return []

    def _queue_line(self, obj):
        """Write ``obj`` (a dict) at its place in the stream: after the records of the steps
        stored so far, at the next flush."""
        self._entries.append(("line", obj))

    def _reduce(self, head):
        """Sum the [steps, _n_reduced] float64 tensor over the ranks (in place)."""
        raise NotImplementedError

    def pending_steps(self):
        """Steps recorded on the device and not yet written."""
        return self._steps

    def flush(self):
        """Reduce, read back (one host transfer) and write every stored step; a collective:
        call it on every rank. Returns the lines (rank 0 writes them; other ranks' writers
        have no sinks)."""
        import torch
        entries, self._entries, self._steps = self._entries, [], 0
        recs = [e for e in entries if e[0] == "rec"]
        values = []
        if recs:
            k = self._n_reduced
            parts = []
            if k:
                head = torch.stack([e[1][:k] for e in recs])
                self._reduce(head)
                parts.append(head.reshape(-1))
            parts += [e[1][k:] for e in recs]
            flat = torch.cat(parts).tolist()   # the one host transfer of this flush
            tail = len(recs) * k
            for i, e in enumerate(recs):
                row = flat[i * k:(i + 1) * k]
                n_own = e[1].numel() - k - len(e[4])
                own = flat[tail:tail + n_own]
                named = flat[tail + n_own:tail + n_own + len(e[4])]
                tail += n_own + len(e[4])
                values.append((row + own, dict(e[3], **dict(zip(e[4], named)))))
        lines, it = [], iter(values)
        for e in entries:
            if e[0] == "line":
                lines.append(self.writer.write(e[1]))
            else:
                vals, fields = next(it)
                lines.append(self.writer.write(e[2](vals, fields)))
        return lines

    def close(self):
        """Flush what is left (a collective: on every rank). The writer stays open (it may be
        shared); close it after this."""
        return self.flush()

    def _follow_advisor(self):
        """Samples per rank from the Advisor's current accumulation, when there is one."""
        if self.advisor is not None:
            return self.advisor.micro_batch * self.advisor.accumulation
        return None

    def _data_parallel_config(self, world):
        """The record's ``config`` of a purely data-parallel job on ``world`` ranks (DDP,
        FSDP): dp = world, tp = pp = 1, mbs the micro batch (the Advisor's, else the
        ``micro_batch`` given); None when the micro batch is not known."""
        mbs = self.advisor.micro_batch if self.advisor is not None else self.micro_batch
        if mbs is None:
            return None
        return {"dp": int(world), "tp": 1, "pp": 1, "mbs": int(mbs)}


class DdpNoiseHook(_Deferred):
    """A DDP communication hook that measures each rank's |g|^2 before the all-reduce and
    the global |g|^2 after it, then averages the gradients exactly like DDP's default hook.

    Per step: ``b_small`` = samples per rank, ``b_big`` = samples per rank x world size,
    ``n_small`` = world size, ``sq_small`` = mean over ranks of |g_rank|^2. With gradient
    accumulation, run all but the last micro-step under ``ddp_model.no_sync()`` (the usual
    pattern) so the hook sees the accumulated gradient once per step, and pass
    ``samples_per_rank`` = micro-batch size x accumulation steps (or ``advisor=`` an
    :class:`Advisor`, whose micro-batch x accumulation it then follows step by step; with
    it, or ``micro_batch=`` given, the records carry the layout as ``config``: dp = world
    size). Measure
    before clipping; pass the AMP loss scale to ``step_end``. Needs at least 2 ranks. Tested
    under real torch.distributed (gloo DDP on CPU) in CI: test_torch_hook.py; see docs/LIVE.md.

    Cost: fused norms of each flat bucket (no squared copy), kept on the device; no host
    read-back and no collective of its own per step. Every ``flush_every`` steps (default 16)
    the per-rank norms of those steps are summed over ranks in one all-reduce, read back in
    one transfer and written as one record per step. Call ``close()`` (or ``flush()``) on
    every rank at the end, before closing the writer.
    """

    _n_reduced = 1

    def __init__(self, ddp_model, writer, samples_per_rank, process_group=None, *,
                 flush_every=16, advisor=None, micro_batch=None):
        self.model = ddp_model
        self.samples_per_rank, self.group = samples_per_rank, process_group
        self.micro_batch = _micro_batch_arg(micro_batch)
        # Per-bucket squared norms (device tensors), stacked in step_end. The all-reduce
        # callbacks of different buckets may run at once on the backend's threads: each
        # appends its own part (list.append is atomic) instead of updating a running sum.
        self._local_parts, self._global_parts = [], []
        self._calls = 0
        self._init_deferred(writer, flush_every, advisor)

    def install(self):
        """Register the hook on the DDP model (before the first backward)."""
        self.model.register_comm_hook(state=self, hook=DdpNoiseHook._hook)
        return self

    @staticmethod
    def _hook(state, bucket):
        import torch.distributed as dist
        buf = bucket.buffer()
        if bucket.index() == 0:
            state._calls += 1
        state._local_parts.append(_sq(buf))
        world = dist.get_world_size(state.group)
        fut = dist.all_reduce(buf.div_(world), group=state.group, async_op=True).get_future()

        def after(f):
            t = f.value()[0]
            state._global_parts.append(_sq(t))
            return t

        return fut.then(after)

    def _reduce(self, head):
        import torch.distributed as dist
        dist.all_reduce(head, group=self.group)

    def step_end(self, step, loss=None, lr=None, loss_scale=None, tokens=None,
                 step_time_s=None):
        """Call on every rank after backward (before the optimizer step). Stores the step's
        norms on the device; writes (rank 0) the stored steps when this one completes a
        flush, and returns those lines. ``tokens``: cumulative, all ranks' tokens so far. ``loss`` and ``loss_scale`` may be tensors (e.g.
        the summed loss, :func:`scaler_scale`): they are read at the flush, not now."""
        import torch
        import torch.distributed as dist
        world = dist.get_world_size(self.group)
        if world < 2:
            raise ValueError("DdpNoiseHook needs at least 2 ranks (two batch sizes)")
        if not self._local_parts or not self._global_parts:
            raise RuntimeError("no gradient seen since the last step_end: call install() "
                               "before training and step_end() after backward()")
        local = torch.stack(self._local_parts).sum()
        global_sq = torch.stack(self._global_parts).sum()
        skipped = None
        if self._calls > 1:
            skipped = (f"comm hook ran {self._calls} times in one step: wrap all but the "
                       "last micro-step in no_sync()")
        self._local_parts, self._global_parts = [], []
        self._calls = 0
        follow = self._follow_advisor()
        if follow is not None:
            self.samples_per_rank = follow
        spr = self.samples_per_rank
        config = self._data_parallel_config(world)

        def build(v, f):
            return make_record(step, spr, spr * world, v[0] / world, v[1], n_small=world,
                               skipped=skipped, config=config, **f)

        return self._push([local, global_sq], dict(loss=loss, lr=lr, loss_scale=loss_scale,
                                                    tokens=tokens, step_time_s=step_time_s),
                          build)


class FsdpNoiseHook(_Deferred):
    """The same measurement for FSDP2 (``torch.distributed.fsdp.fully_shard``).

    FSDP2 reduce-scatters each rank's unsharded gradient into shards of the mean gradient.
    ``install()`` puts a measuring reduce-scatter (FSDP2's public
    ``set_custom_reduce_scatter``) on every FSDP module: it adds |input|^2 (this rank's whole
    local gradient, as FSDP hands it over) and |output|^2 (its shard of the reduced one)
    around the same collective. ``step_end`` takes |G|^2 from the sharded ``.grad`` DTensors
    (the mean gradient, summed over the shards of the group) and uses the ratio of the two
    reduced norms to undo whatever factor FSDP divided the input by before the collective,
    so sq_small is the mean over ranks of |g_rank|^2 whatever the backend's choice.

    With gradient accumulation, call ``model.set_requires_gradient_sync(False)`` for all but
    the last micro-batch (FSDP2's no_sync); ``samples_per_rank`` = micro-batch size x
    accumulation steps (or ``advisor=``). Needs at least 2 ranks in the sharding group.
    Norms stay on the device; the three sums of the stored steps are all-reduced once per
    flush (``flush_every`` steps, ``flush()``, ``close()`` on every rank), as in
    :class:`DdpNoiseHook`.
    """

    _n_reduced = 3

    def __init__(self, model, writer, samples_per_rank, process_group=None, *,
                 flush_every=16, advisor=None, micro_batch=None):
        self.model = model
        self.samples_per_rank, self.group = samples_per_rank, process_group
        self.micro_batch = _micro_batch_arg(micro_batch)
        self._local = self._out = None
        self._op = None
        self._calls = 0
        self._init_deferred(writer, flush_every, advisor)

    def install(self):
        """Put the measuring reduce-scatter on every FSDP module (after ``fully_shard``)."""
        from torch.distributed.fsdp import FSDPModule
        comm = _MeasuringReduceScatter(self)
        mods = [m for m in self.model.modules() if isinstance(m, FSDPModule)]
        if not mods:
            raise ValueError("FsdpNoiseHook: no FSDP module in the model (call fully_shard)")
        for m in mods:
            m.set_custom_reduce_scatter(comm)
        return self

    def _reduce(self, head):
        import torch.distributed as dist
        dist.all_reduce(head, group=self.group)

    def step_end(self, step, loss=None, lr=None, loss_scale=None, tokens=None,
                 step_time_s=None):
        """Call on every rank after backward (before clipping and the optimizer step)."""
        import torch.distributed as dist
        world = dist.get_world_size(self.group)
        if world < 2:
            raise ValueError("FsdpNoiseHook needs at least 2 ranks (two batch sizes)")
        if self._local is None:
            raise RuntimeError("no reduce-scatter seen since the last step_end: call install() "
                               "after fully_shard and step_end() after backward()")
        g2 = _sq_sum([_local(p.grad) for p in self.model.parameters() if p.grad is not None])
        values = [self._local.to(g2.device), self._out.to(g2.device), g2]
        op = self._op
        self._local = self._out = None
        self._calls = 0
        follow = self._follow_advisor()
        if follow is not None:
            self.samples_per_rank = follow
        spr = self.samples_per_rank
        config = self._data_parallel_config(world)

        def build(v, f):
            local, out, g2 = v
            # The collective reduced x_r = g_r / f; AVG gives mean(x) = G / f, SUM gives
            # W * mean(x) = W * G / f, so f^2 = |G|^2 / |mean x|^2.
            mean_x2 = out / (world * world) if op == "sum" else out
            f2 = g2 / mean_x2 if mean_x2 > 0 else float("nan")
            return make_record(step, spr, spr * world, f2 * local / world, g2, n_small=world,
                               config=config, **f)

        return self._push(values, dict(loss=loss, lr=lr, loss_scale=loss_scale, tokens=tokens,
                                       step_time_s=step_time_s), build)


def _measuring_reduce_scatter_class():
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class MeasuringReduceScatter(ReduceScatter):
        def __init__(self, hook):
            self.hook = hook

        def allocate(self, size, *, dtype, device):
            import torch
            return torch.empty(*size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            import torch.distributed as dist
            h = self.hook
            x = _sq(input_tensor)
            h._local = x if h._local is None else h._local + x
            work = dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                              async_op=async_op)
            if work is not None:
                work.wait()   # orders the norm after the collective (a stream wait on NCCL)
            y = _sq(output_tensor)
            h._out = y if h._out is None else h._out + y
            h._op = "sum" if op == dist.ReduceOp.SUM else "avg"
            h._calls += 1
            return None

    return MeasuringReduceScatter


def _MeasuringReduceScatter(hook):
    return _measuring_reduce_scatter_class()(hook)


class ModelParallelNoiseHook(_Deferred):
    """The measurement for tensor-, pipeline- and data-parallel (3D) training, where each
    rank holds a shard of the model (Megatron-LM, DeepSpeed): the "3D-parallel-aware"
    noise scale of the COPUS paper.

    Squared norms of the gradient shards are summed over the model-parallel group
    (``mp_group``: the tensor x pipeline ranks holding one copy of the model; Megatron's
    ``get_model_parallel_group()``), parameters replicated on every rank of the
    tensor-parallel group (``tp_group``, default ``mp_group``; e.g. layer norms and the
    biases of row-parallel layers) counted once, and the data-parallel group (``dp_group``)
    gives the two batch sizes: ``b_small`` = samples per data-parallel rank, ``b_big`` =
    x its size.

        hook = ModelParallelNoiseHook(model.named_parameters(), writer, samples_per_dp_rank,
                                      dp_group=dp, mp_group=mp, tp_group=tp,
                                      replicated=lambda name, p: not getattr(
                                          p, "tensor_model_parallel", False))
        loss.backward()
        hook.local()          # before the data-parallel gradient reduction
        ...                   # the reduction (all-reduce or reduce-scatter + gather)
        hook.step_end(step, loss=..., loss_scale=...)   # after it, before clipping
        ...
        hook.close()          # at the end, on every rank

    ``grad`` reads a parameter's gradient (default ``p.grad``; Megatron keeps it in
    ``p.main_grad``). Every rank calls both methods; rank 0 of the world writes. The shard
    norms stay on the device; once per flush (``flush_every`` steps, ``flush()``,
    ``close()``) they are summed over the model-parallel group, then the per-rank ones over
    the data-parallel group: two collectives per flush, none per step.
    """

    _n_reduced = 2

    def __init__(self, named_params, writer, samples_per_dp_rank, dp_group=None,
                 mp_group=None, tp_group=None, replicated=None, grad=None, *,
                 flush_every=16, advisor=None):
        self.params = list(named_params)
        self.samples = samples_per_dp_rank
        self.dp, self.mp = dp_group, mp_group
        self.tp = tp_group if tp_group is not None else mp_group
        if replicated is None:
            replicated = frozenset()
        if isinstance(replicated, (set, frozenset, list, tuple)):
            names = frozenset(replicated)
            self._replicated = lambda name, p: name in names
        else:
            self._replicated = replicated
        self._grad = grad or (lambda p: p.grad)
        self._local = None
        self._init_deferred(writer, flush_every, advisor)

    def _shard_norm(self):
        """|g|^2 of this rank's shards, replicated ones weighted 1/copies (a float64 device
        scalar; summed over the model-parallel group at the flush)."""
        import torch.distributed as dist
        copies = dist.get_world_size(self.tp) if self.tp is not None else 1
        own, rep = [], []
        for name, p in self.params:
            g = self._grad(p)
            if g is None:
                continue
            (rep if self._replicated(name, p) else own).append(_local(g))
        if not own and not rep:
            raise RuntimeError("ModelParallelNoiseHook: no parameter has a gradient")
        a, b = _sq_sum(own), _sq_sum(rep)
        if b is not None:
            b = b / copies
        return b if a is None else a if b is None else a + b

    def _reduce(self, head):
        import torch.distributed as dist
        if self.mp is not None:
            dist.all_reduce(head, group=self.mp)
        local = head[:, 0].contiguous()
        dist.all_reduce(local, group=self.dp)
        head[:, 0] = local

    def local(self):
        """Measure this data-parallel rank's gradient (after backward, before the data-parallel
        reduction)."""
        self._local = self._shard_norm()

    def step_end(self, step, loss=None, lr=None, loss_scale=None, tokens=None,
                 step_time_s=None):
        """Measure the reduced gradient and store the step (after the data-parallel
        reduction, before clipping); writes when this step completes a flush."""
        import torch.distributed as dist
        if self._local is None:
            raise RuntimeError("call local() after backward and before the data-parallel "
                               "reduction, then step_end()")
        world = dist.get_world_size(self.dp)
        if world < 2:
            raise ValueError("ModelParallelNoiseHook needs at least 2 data-parallel ranks")
        big = self._shard_norm()
        local, self._local = self._local, None
        follow = self._follow_advisor()
        if follow is not None:
            self.samples = follow
        spr = self.samples

        def build(v, f):
            return make_record(step, spr, spr * world, v[0] / world, v[1], n_small=world, **f)

        return self._push([local.to(big.device), big],
                          dict(loss=loss, lr=lr, loss_scale=loss_scale, tokens=tokens,
                               step_time_s=step_time_s), build)


class GradNoiseMeter(_Deferred):
    """The measurement from gradient accumulation, with no communication hook: the small
    batch is one micro-batch, the big one is the micro-batches of one optimizer step on one
    rank. Works on one device or under DDP (with ``no_sync()`` for all but the last
    micro-batch, as Lightning and the Hugging Face Trainer do), and is what the framework
    callbacks use.

    Each parameter gets a gradient hook (``Tensor.register_hook``) that runs in backward,
    before the gradient is accumulated: it adds the micro-batch gradient's |g|^2, and the
    |.grad + g|^2 of the rank's accumulated gradient so far (fused norms; one temporary sum
    per parameter, no squared copy), so no copy of the gradients is kept and clipping after
    backward does not disturb the measurement. ``step_end`` stores the step on the device;
    once per flush (``flush_every`` steps, ``flush()``, ``close()`` on every rank) the
    stored sums are averaged over the ranks (one all-reduce) and written: ``b_small`` =
    micro-batch size, ``b_big`` = x ``accum_steps``, ``sq_small`` = mean |g_micro|^2,
    ``sq_big`` = mean over ranks of |g_step|^2. The loss is taken to be divided by
    ``accum_steps`` (as the frameworks do; ``loss_divided=False`` otherwise). Needs
    ``accum_steps`` >= 2. The AMP loss scale of the backward passes goes to ``step_end``.
    With ``advisor=`` the micro-batch size and ``accum_steps`` follow the Advisor.
    """

    _n_reduced = 2

    def __init__(self, model, writer, micro_batch_size, accum_steps, process_group=None,
                 loss_divided=True, *, flush_every=16, advisor=None, precondition=None):
        if int(accum_steps) < 2:
            raise ValueError("GradNoiseMeter needs gradient accumulation (accum_steps >= 2): "
                             "the micro-batches give the small batch size")
        self.model = model
        self.micro_batch_size, self.accum = micro_batch_size, int(accum_steps)
        self.group, self.loss_divided = process_group, loss_divided
        self._handles = []
        self._micro = None
        self._acc = {}
        self._backwards = {}
        # Adam-preconditioned statistics (``precondition=optimizer``, an Adam or AdamW):
        # the same two norms of P * g with P = 1 / (sqrt(v_hat) + eps) from the optimizer's
        # state before this step (fixed during the step), written as "precond".
        self.precondition = precondition
        self._groups = {}
        if precondition is not None:
            for grp in precondition.param_groups:
                if "betas" not in grp or "eps" not in grp:
                    raise ValueError("precondition= needs an Adam-type optimizer "
                                     "(param groups with betas and eps)")
                for p in grp["params"]:
                    self._groups[id(p)] = grp
            self._n_reduced = 4
        self._p_micro = None
        self._p_acc = {}
        self._p_cache = {}
        self._init_deferred(writer, flush_every, advisor)

    def _preconditioner(self, p):
        """1 / (sqrt(v_hat) + eps) for parameter ``p`` from the optimizer's state before this
        step, in float64 (a temporary of the parameter's size, not kept), or None before the
        optimizer's first step. The step count is read once per step (a host value on CPU
        optimizers; under ``capturable`` Adam it is a device tensor and reading it syncs)."""
        key = id(p)
        state = self.precondition.state.get(p, {})
        grp = self._groups.get(key)
        v = state.get("exp_avg_sq")
        if v is None or grp is None:
            return None
        if key not in self._p_cache:
            t = state.get("step")
            self._p_cache[key] = float(t) if t is not None else 0.0
        t = self._p_cache[key]
        if t <= 0:
            return None
        v_hat = v.detach().double() / (1.0 - grp["betas"][1] ** t)
        return 1.0 / (v_hat.sqrt() + grp["eps"])

    def install(self):
        """Register the gradient hooks (before the first backward)."""
        for p in self.model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(self._make_hook(p)))
        return self

    def remove(self):
        """Remove the gradient hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _make_hook(self, p):
        key = id(p)

        def hook(g):
            x = _sq(g)
            self._micro = x if self._micro is None else self._micro + x
            acc = g if p.grad is None else p.grad.detach() + g.detach()
            self._acc[key] = _sq(acc)
            self._backwards[key] = self._backwards.get(key, 0) + 1
            if self.precondition is not None:
                pre = self._preconditioner(p)
                if pre is None:
                    self._p_missing = True
                else:
                    xp = _sq(g.detach().double() * pre)
                    self._p_micro = xp if self._p_micro is None else self._p_micro + xp
                    self._p_acc[key] = _sq(acc.detach().double() * pre)
            return None

        return hook

    def _reduce(self, head):
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(head, group=self.group)

    def step_end(self, step, loss=None, lr=None, loss_scale=None, tokens=None,
                 step_time_s=None):
        """Call after the step's last backward (before or after clipping: the hooks measured
        in backward), on every rank; rank 0 writes the stored steps at each flush."""
        import torch
        import torch.distributed as dist
        if self._micro is None:
            raise RuntimeError("no gradient seen since the last step_end: call install() "
                               "before training")
        if self.advisor is not None:
            self.micro_batch_size = self.advisor.micro_batch
            self.accum = self.advisor.accumulation
        k = self.accum
        seen = max(self._backwards.values())
        acc = torch.stack(list(self._acc.values())).sum()
        # The hooks saw gradients of loss / k: micro-batch means are k x those.
        f = float(k * k) if self.loss_divided else 1.0
        g = 1.0 if self.loss_divided else 1.0 / (k * k)
        values = [self._micro.reshape(()) * f, acc.to(self._micro.device).reshape(()) * g]
        if self.precondition is not None:
            dev = self._micro.device
            if getattr(self, "_p_missing", False) or self._p_micro is None:
                nan = torch.tensor(float("nan"), dtype=torch.float64, device=dev)
                values += [nan, nan]
            else:
                p_acc = torch.stack(list(self._p_acc.values())).sum()
                values += [self._p_micro.reshape(()) * f, p_acc.to(dev).reshape(()) * g]
            self._p_micro, self._p_acc, self._p_cache = None, {}, {}
            self._p_missing = False
        world = 1
        if dist.is_available() and dist.is_initialized():
            world = dist.get_world_size(self.group)
        skipped = None
        if seen != k:
            skipped = f"{seen} backward passes in a step of {k} micro-batches"
        b = self.micro_batch_size
        self._micro = None
        self._acc, self._backwards = {}, {}

        def build(v, fields):
            micro, big = v[0], v[1]
            rec = make_record(step, b, b * k, micro / (k * world), big / world,
                              n_small=k * world, skipped=skipped, **fields)
            if len(v) == 4 and math.isfinite(v[2]) and math.isfinite(v[3]):
                scale = fields.get("loss_scale")
                d = float(scale) ** 2 if _finite(scale) and scale else 1.0
                rec["precond"] = {"sq_small": v[2] / (k * world) / d,
                                  "sq_big": v[3] / world / d}
            return rec

        return self._push(values, dict(loss=loss, lr=lr, loss_scale=loss_scale, tokens=tokens,
                                       step_time_s=step_time_s), build)


# --- Branched training: the measured critical batch size (copus cbs) ----------------------

def branch_experiment(path, model, optimizer, from_step, batches, train_step, eval_loss, *,
                      seeds=2, budget_samples, eval_every, lr_scaling="sqrt",
                      base_batch=None, tokens_per_sample=None, append=False):
    """Run a branched experiment from the run's current state and write branch records
    (docs/PROTOCOL.md, "Branch records") to ``path`` for ``copus cbs`` (docs/CBS.md).

    The model's and the optimizer's state at ``from_step`` are saved; for each batch of
    ``batches`` (samples) and each seed, both are restored, every parameter group's learning
    rate is scaled from ``base_batch`` (default: the smallest batch) by ``lr_scaling``
    ("none", "sqrt", "linear"), and the branch trains for ``budget_samples`` samples:
    ``train_step(batch, seed, step)`` must do one optimizer step on ``batch`` fresh samples
    drawn with ``seed`` (forward, backward, ``optimizer.step()``, ``zero_grad``).
    ``eval_loss()`` (no arguments) gives the loss to compare, best on a fixed held-out set;
    it is written at 0 samples and every ``eval_every`` samples (a multiple of every batch).
    Afterwards the saved state is restored, so the run continues as if nothing happened.
    Call it on one process (rank 0) with a model that is not wrapped for distribution.

    ``path`` must not exist unless ``append=True``, which adds this branch point's records to
    the file (one file for several branch points, as ``copus branch`` writes): a second call
    with the same path replaced the first point's records without a word."""
    import copy
    if lr_scaling not in LR_SCALING:
        raise ValueError(f"lr_scaling must be one of {LR_SCALING}, not {lr_scaling!r}")
    batches = [int(b) for b in batches]
    if len(batches) < 3 or any(b < 1 for b in batches) or int(seeds) < 2:
        raise ValueError("need at least 3 batches >= 1 and 2 seeds")
    if eval_every < 1 or any(eval_every % b for b in batches) or budget_samples < eval_every:
        raise ValueError("eval_every must be a multiple of every batch and at most the budget")
    if not append and os.path.exists(path):
        raise FileExistsError(
            f"{path} exists: pass append=True to add this branch point's records to it, "
            "or another path")
    base = int(base_batch or min(batches))
    model_state = copy.deepcopy(model.state_dict())
    opt_state = copy.deepcopy(optimizer.state_dict())
    base_lrs = [g["lr"] for g in optimizer.param_groups]
    factor = {"none": lambda r: 1.0, "sqrt": math.sqrt, "linear": lambda r: r}[lr_scaling]
    try:
        with open(path, "a" if append else "x", encoding="utf-8") as out:
            for batch in batches:
                for seed in range(int(seeds)):
                    model.load_state_dict(model_state)
                    optimizer.load_state_dict(opt_state)
                    f = factor(batch / base)
                    for g, lr in zip(optimizer.param_groups, base_lrs):
                        g["lr"] = lr * f
                    samples = step = 0
                    while True:
                        if samples % eval_every == 0:
                            rec = {"v": PROTOCOL_VERSION,
                                   "branch": {"from_step": int(from_step), "batch": batch,
                                              "seed": seed},
                                   "step": step, "samples": samples,
                                   "loss": float(eval_loss()), "lr": base_lrs[0] * f}
                            if tokens_per_sample:
                                rec["tokens"] = samples * tokens_per_sample
                            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
                        if samples >= budget_samples:
                            break
                        train_step(batch, seed, step)
                        samples += batch
                        step += 1
    finally:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(opt_state)
        for g, lr in zip(optimizer.param_groups, base_lrs):
            g["lr"] = lr


# --- The Advisor: applies copus's batch-size advice in the training loop ------------------

_log = logging.getLogger("copus_hook")

LR_SCALING = ("none", "sqrt", "linear")


def _count(x, minimum=1):
    return isinstance(x, int) and not isinstance(x, bool) and x >= minimum


def _micro_batch_arg(micro_batch):
    """A hook's ``micro_batch`` argument: None or an integer >= 1 (samples)."""
    if micro_batch is not None and not _count(micro_batch):
        raise ValueError(f"micro_batch must be an integer >= 1 (samples), got {micro_batch!r}")
    return micro_batch


def parse_advice(line):
    """The advice of one NDJSON line written by ``copus watch --advise``, as a dict with
    ``at_step`` (optimizer step), ``batch`` (global batch, samples), ``micro_batch`` (samples
    per forward pass on one rank), ``accumulation`` (micro-batches per optimizer step),
    ``layout`` ({dp, tp, pp}), ``apply`` ("batch" or "restart"), ``dry_run`` (bool) and, when
    present, ``expected_gain`` and ``reason``; None for any other line (stats records,
    blank, malformed JSON, missing or mistyped fields)::

        {"v":1,"advice":{"at_step":120,"batch":256,"micro_batch":4,"accumulation":8,
         "layout":{"dp":8,"tp":1,"pp":1},"expected_gain":0.12,"reason":"...",
         "apply":"batch","dry_run":false}}
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("v") != 1 or not isinstance(obj.get("advice"), dict):
        return None
    a = obj["advice"]
    if not (_count(a.get("at_step"), 0)
            and all(_count(a.get(k)) for k in ("batch", "micro_batch", "accumulation"))):
        return None
    layout = a.get("layout")
    if not (isinstance(layout, dict) and all(_count(layout.get(k)) for k in ("dp", "tp", "pp"))):
        return None
    dry = a.get("dry_run", False)
    if a.get("apply") not in ("batch", "restart") or not isinstance(dry, bool):
        return None
    out = {k: a[k] for k in ("at_step", "batch", "micro_batch", "accumulation", "apply")}
    out["layout"] = {k: layout[k] for k in ("dp", "tp", "pp")}
    out["dry_run"] = dry
    for k in ("expected_gain", "reason"):
        if k in a:
            out[k] = a[k]
    return out


class _Lines:
    """Complete lines out of a byte stream; a partial last line waits for its newline."""

    def __init__(self):
        self._buf = b""

    def split(self, data):
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        return [ln.decode("utf-8", "replace") for ln in lines if ln.strip()]

    def reset(self):
        self._buf = b""


class _FileSource:
    """Follows a growing NDJSON file (which may not exist yet): each ``read()`` returns the
    complete lines added since the last one. A file that shrinks or is replaced is read again
    from its start (the Advisor skips advice it has seen)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._f = None
        self._lines = _Lines()

    def read(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if self._f is not None:
            now = os.fstat(self._f.fileno())
            if now.st_ino != st.st_ino or st.st_size < self._f.tell():
                self.close()
        if self._f is None:
            try:
                self._f = open(self.path, "rb")
            except OSError:
                return []
            self._lines.reset()
        return self._lines.split(self._f.read())

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None


class _TcpSource:
    """A client of a line server at HOST:PORT: connects without blocking, reads what has
    arrived without blocking, and after a refused or lost connection tries again at most
    every ``reconnect_s`` seconds, quietly. The partial line of a lost connection is
    dropped (a server sends whole lines again to a new client)."""

    def __init__(self, host, port, reconnect_s=1.0):
        self.host, self.port, self.reconnect_s = host, int(port), float(reconnect_s)
        self._sock, self._connected, self._next = None, False, 0.0
        self._lines = _Lines()

    def _drop(self):
        if self._sock is not None:
            self._sock.close()
        self._sock, self._connected = None, False
        self._lines.reset()

    def _connect(self):
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.reconnect_s
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM)[0]
            s = socket.socket(family, kind, proto)
        except OSError:
            return
        s.setblocking(False)
        err = s.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            s.close()
            return
        self._sock, self._connected = s, err == 0
        self._lines.reset()

    def read(self):
        if self._sock is None:
            self._connect()
            if self._sock is None:
                return []
        if not self._connected:
            _, writable, _ = select.select([], [self._sock], [], 0)
            if not writable:
                return []
            if self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._drop()
                return []
            self._connected = True
        out, lost = [], False
        while True:
            try:
                data = self._sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                lost = True
                break
            if not data:
                lost = True
                break
            out += self._lines.split(data)
        if lost:
            self._drop()
        return out

    def close(self):
        self._drop()


def _open_source(source, reconnect_s):
    text = os.fspath(source)
    if isinstance(text, str) and text.startswith("tcp://"):
        host, _, port = text[len("tcp://"):].rpartition(":")
        return _TcpSource(host.strip("[]") or "127.0.0.1", int(port), reconnect_s)
    return _FileSource(text)


def _dist():
    """torch.distributed when it is initialised, else None (also without torch)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _broadcast_json(value, src, group):
    """``value`` (JSON-able) from global rank ``src`` to every rank of ``group``, as UTF-8
    JSON in a uint8 tensor after its length: two broadcasts, no pickle and no NumPy
    (``broadcast_object_list`` unpickles through ``Tensor.numpy()``, and ``pip install torch``
    brings no NumPy: the first check killed the job). Under NCCL the tensors live on the
    current GPU, as ``broadcast_object_list`` puts them."""
    import json
    import torch
    import torch.distributed as dist
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    sending = dist.get_rank() == src
    data = json.dumps(value).encode("utf-8") if sending else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=src, group=group)
    n = int(size.item())
    if sending:
        buf = torch.tensor(list(data), dtype=torch.uint8, device=device)
    else:
        buf = torch.empty(n, dtype=torch.uint8, device=device)
    dist.broadcast(buf, src=src, group=group)
    if sending:
        return value
    return json.loads(bytes(buf.tolist()).decode("utf-8"))


class Advisor:
    """Applies copus's batch-size advice (``copus watch --advise OUT``) to a running job.

    ``source``: the advice stream, a path of a growing NDJSON file or ``"tcp://HOST:PORT"``
    (a line server; this process connects as a client). Only rank 0 of ``group`` reads it;
    every ``check_every`` optimizer steps (default 16, the hooks' ``flush_every``)
    ``step_boundary`` broadcasts the advice that has come due (``at_step`` <= step) to every
    rank (its JSON in one tensor, after its length), so all ranks change at the same step: advice is
    applied at the first check at or after its ``at_step`` (up to ``check_every`` - 1 steps
    later), and the steps between checks cost nothing. Without torch.distributed (one
    process) nothing is broadcast. Under NCCL pass a gloo ``group``
    (``dist.new_group(backend="gloo")``) so the check does not touch the GPU.

    ``micro_batch``: samples per forward pass on one rank; ``accumulation``: micro-batches
    per optimizer step at the start; ``dp_world``: data-parallel ranks (default: the size of
    ``group``, or 1); ``tp``, ``pp``: the run's tensor- and pipeline-parallel degrees
    (optional; compared with restart advice); ``lr_scaling``: how ``lr_factor`` follows the global batch B relative
    to the starting B0: "none" (1), "sqrt" (sqrt(B/B0)), "linear" (B/B0).

    Advice with ``apply: "batch"`` (same layout, new global batch) is applied in place: the
    accumulation becomes batch / (dp_world x micro_batch). It is refused, and treated as a
    restart, when the advice's micro batch differs from this run's, the batch is not a
    multiple of dp_world x micro_batch. Batch advice smaller than the run's batch is ignored
    (logged once, kept in ``ignored``): copus only ever advises growing it, so such advice
    comes from a hand-written or foreign file (``allow_shrink=True`` accepts it). Advice with ``apply: "restart"`` (a new layout) is
    never applied: a checkpoint-and-restart recipe is logged once (logger "copus_hook") and
    the advice is kept in ``restart``. ``dry_run`` advice is logged once and kept in
    ``shown``. Of several advice due at one check, the newest (last read) wins: batch advice
    followed by a restart is a restart, and advice this run already follows (its batch, micro
    batch and ``dp_world``, and ``tp``/``pp`` where given) is done — a job relaunched as a
    restart said reads the whole advice file again and must not go back to an older batch.

    Each applied change is written to the stats stream as one line::

        {"v":1,"applied":{"at_step":S,"batch":B,"micro_batch":m,"accumulation":a,
                          "advice_step":S0,"lr_factor":f}}

    (S the step from which the new accumulation holds, S0 the advice's ``at_step``) through
    the hook given this Advisor as ``advisor=`` (in its place among the records), else
    through ``writer``. The training loop::

        adv = copus_hook.Advisor("advice.ndjson", micro_batch=4, accumulation=8,
                                 lr_scaling="sqrt")
        hook = copus_hook.DdpNoiseHook(ddp, writer, adv.samples_per_rank, advisor=adv)
        for step in range(steps):
            if adv.step_boundary(step):                       # on every rank
                for g in opt.param_groups:
                    g["lr"] = base_lr * adv.lr_factor
            for i in range(adv.accumulation):
                ...                                           # forward / backward
            hook.step_end(step, ...)
        hook.close()
        adv.close()       # on every rank: stops reading the source before the process exits

    (or ``with copus_hook.Advisor(...) as adv:``). A process that exits with the Advisor still
    reading its source can abort in torch.distributed's shutdown.
    """

    def __init__(self, source, writer=None, *, micro_batch, accumulation, lr_scaling="none",
                 check_every=16, group=None, dp_world=None, reconnect_s=1.0, tp=None,
                 pp=None, allow_shrink=False):
        if lr_scaling not in LR_SCALING:
            raise ValueError(f"lr_scaling must be one of {LR_SCALING}, not {lr_scaling!r}")
        if not (_count(micro_batch) and _count(accumulation) and _count(check_every)):
            raise ValueError("micro_batch, accumulation and check_every must be integers >= 1")
        dist = _dist()
        self.writer, self.group = writer, group
        self.micro_batch, self.accumulation = micro_batch, accumulation
        self.lr_scaling, self.check_every = lr_scaling, check_every
        if dp_world is None:
            dp_world = dist.get_world_size(group) if dist is not None else 1
        self.dp_world = int(dp_world)
        for name, v in (("tp", tp), ("pp", pp)):
            if v is not None and not _count(v):
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.tp, self.pp = tp, pp
        self.allow_shrink = bool(allow_shrink)
        self.batch0 = self.batch
        self.restart = None      # the newest restart advice (or refused batch advice)
        self.shown = []          # dry-run advice, logged and not applied
        self.ignored = []        # batch advice that would shrink the batch (allow_shrink off)
        self.applied = []        # the changes applied, as written in the "applied" lines
        self.skipped_lines = 0   # lines of the source that were not advice
        self._pending, self._seen, self._logged = [], set(), set()
        self._emit = None
        self._broadcast = dist is not None and dist.get_world_size(group) > 1
        self._src = dist.get_global_rank(group, 0) if dist is not None and group is not None \
            else 0
        self.reader = dist is None or dist.get_rank(group) == 0
        self._source = _open_source(source, reconnect_s) if self.reader else None

    @property
    def batch(self):
        """The global batch (samples): dp_world x micro_batch x accumulation."""
        return self.dp_world * self.micro_batch * self.accumulation

    @property
    def samples_per_rank(self):
        """Samples per optimizer step on one data-parallel rank: micro_batch x accumulation."""
        return self.micro_batch * self.accumulation

    def _factor(self, batch):
        r = batch / self.batch0
        return {"none": 1.0, "sqrt": math.sqrt(r), "linear": r}[self.lr_scaling]

    @property
    def lr_factor(self):
        """Learning-rate multiplier relative to the starting batch, by ``lr_scaling``."""
        return self._factor(self.batch)

    def _attach(self, hook):
        """Route the applied lines through ``hook`` (in step order among its records)."""
        self._emit = hook._queue_line

    def poll(self):
        """Read what the source has now (rank 0 only; it never waits) and return how many
        advice are pending (read and not yet due); 0 on other ranks. After ``close()`` it
        reads nothing more and returns what is pending."""
        if not self.reader:
            return 0
        if self._source is None:
            return len(self._pending)
        for line in self._source.read():
            a = parse_advice(line)
            if a is None:
                self.skipped_lines += 1
                continue
            key = json.dumps(a, sort_keys=True)
            if key in self._seen:       # a server sends its history again on reconnecting
                continue
            self._seen.add(key)
            self._pending.append(a)
        return len(self._pending)

    def step_boundary(self, step):
        """Call once per optimizer step on every rank, before the step's micro-batches.
        Every ``check_every`` steps it takes the advice due by ``step`` (a collective when
        distributed) and applies it; returns the change (the ``applied`` dict) or None.
        ``accumulation``, ``batch`` and ``lr_factor`` then hold for this step on."""
        if step % self.check_every:
            return None
        due = None
        if self.reader:
            self.poll()
            due = [a for a in self._pending if a["at_step"] <= step] or None
            self._pending = [a for a in self._pending if a["at_step"] > step]
        if self._broadcast:
            due = _broadcast_json(due, self._src, self.group)
        if not due:
            return None
        for a in due:
            if a["dry_run"]:
                self.shown.append(a)
                self._note(a, "copus advice (dry run, not applied): " + self._describe(a))
        live = [a for a in due if not a["dry_run"]]
        if not live:
            return None
        # The newest advice due supersedes the older ones: a restart read after batch advice
        # replaces it, so a job relaunched to follow the restart does not go back to the
        # older batch, and advice this run already follows (relaunched as it said) is done.
        target = live[-1]
        if self._followed(target):
            return None
        if target["apply"] == "restart":
            self._restart(target, None)
            return None
        if target["batch"] < self.batch and not self.allow_shrink:
            # Not a restart to follow: advice copus never writes, ignored and kept apart.
            self.ignored.append(target)
            self._note(target, f"copus batch advice ignored: {self._describe(target)}; it "
                               f"shrinks the global batch from {self.batch} to "
                               f"{target['batch']}, which copus never advises (a hand-written "
                               f"or foreign advice file?). Pass allow_shrink=True to the "
                               f"Advisor to accept smaller batches.")
            return None
        why = self._refusal(target)
        if why:
            self._restart(target, why)
            return None
        new = target["batch"] // (self.dp_world * self.micro_batch)
        if new == self.accumulation:
            return None
        self.accumulation = new
        change = {"at_step": int(step), "batch": self.batch, "micro_batch": self.micro_batch,
                  "accumulation": new, "advice_step": target["at_step"],
                  "lr_factor": self.lr_factor}
        self.applied.append(change)
        line = {"v": PROTOCOL_VERSION, "applied": change}
        if self._emit is not None:
            self._emit(line)
        elif self.writer is not None:
            self.writer.write(line)
        if self.reader:
            _log.info("copus advice applied at step %d: global batch %d (micro batch %d x "
                      "accumulation %d x %d ranks), lr x%.4g", step, self.batch,
                      self.micro_batch, new, self.dp_world, self.lr_factor)
        return change

    def _followed(self, a):
        """Whether this run already runs what ``a`` advises: its global batch, micro batch and
        data-parallel ranks (and its tp and pp, where this Advisor was given them)."""
        lay = a["layout"]
        return (a["batch"] == self.batch and a["micro_batch"] == self.micro_batch
                and lay["dp"] == self.dp_world
                and (self.tp is None or lay["tp"] == self.tp)
                and (self.pp is None or lay["pp"] == self.pp))

    def _refusal(self, a):
        """Why batch advice cannot be applied in place, or None."""
        m, dp = self.micro_batch, self.dp_world
        if a["micro_batch"] != m:
            return f"its micro batch {a['micro_batch']} differs from this run's {m}"
        if a["batch"] % (dp * m):
            return (f"batch {a['batch']} is not a multiple of {dp} data-parallel ranks x "
                    f"micro batch {m}")
        acc = a["batch"] // (dp * m)
        if acc != a["accumulation"] or a["layout"]["dp"] != dp:
            _log.warning("copus advice for step %d assumes dp=%d, accumulation %d; this run "
                         "has dp=%d: applying its global batch %d as accumulation %d",
                         a["at_step"], a["layout"]["dp"], a["accumulation"], dp, a["batch"],
                         acc)
        return None

    def _describe(self, a):
        lay = a["layout"]
        text = (f"from step {a['at_step']}: global batch {a['batch']} = micro batch "
                f"{a['micro_batch']} x accumulation {a['accumulation']} on dp={lay['dp']} "
                f"tp={lay['tp']} pp={lay['pp']} (apply: {a['apply']})")
        if isinstance(a.get("expected_gain"), (int, float)):
            text += f", expected gain {100 * a['expected_gain']:+.1f} %"
        if a.get("reason"):
            text += f"; {a['reason']}"
        return text

    def _restart(self, a, why):
        self.restart = a
        lay = a["layout"]
        head = (f"copus batch advice cannot be applied in place ({why}): treat it as a restart"
                if why else "copus advises a new layout (restart, not applied in place)")
        self._note(a, f"{head}: {self._describe(a)}. To follow it: save a checkpoint, stop, "
                      f"and relaunch with dp={lay['dp']} tp={lay['tp']} pp={lay['pp']}, "
                      f"micro batch {a['micro_batch']}, accumulation {a['accumulation']} "
                      f"(global batch {a['batch']}, lr x{self._factor(a['batch']):.4g} of "
                      f"the starting lr under lr_scaling={self.lr_scaling}).")

    def _note(self, a, message):
        """Log once per advice, on the reading rank."""
        key = json.dumps(a, sort_keys=True)
        if self.reader and key not in self._logged:
            self._logged.add(key)
            _log.warning("%s", message)

    def close(self):
        """Stop reading the source (idempotent)."""
        if self._source is not None:
            self._source.close()
            self._source = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _batch_size(batch):
    """Samples in a batch: the first dimension of its first tensor."""
    import torch
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for x in batch:
            n = _batch_size(x)
            if n:
                return n
    return 0


def lightning_callback(path=None, serve=None, micro_batch_size=None, append=False,
                       overwrite=False):
    """A PyTorch Lightning callback that writes protocol v1 (to ``path`` and/or a server at
    ``serve`` = "HOST:PORT") from the gradient-accumulation measurement of
    :class:`GradNoiseMeter`; needs ``Trainer(accumulate_grad_batches >= 2)``. The
    micro-batch size is taken from the first batch unless given. ``append=True`` continues a
    ``path`` an earlier run wrote (a resumed job), ``overwrite=True`` replaces it; neither
    refuses it (:class:`FileSink`).

        trainer = L.Trainer(accumulate_grad_batches=4,
                            callbacks=[copus_hook.lightning_callback(path="stats.ndjson")])
    """
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the older package name
        from pytorch_lightning import Callback

    class CopusLightningCallback(Callback):
        def __init__(self):
            self.meter = self.writer = None
            self.mbs = micro_batch_size

        def on_train_start(self, trainer, pl_module):
            self.writer = open_writer(path=path, serve=serve, rank=trainer.global_rank,
                                      append=append, overwrite=overwrite)
            self.meter = GradNoiseMeter(pl_module, self.writer, self.mbs or 1,
                                        trainer.accumulate_grad_batches).install()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.mbs is None:
                self.mbs = _batch_size(batch)
                self.meter.micro_batch_size = self.mbs

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            scale = scaler_scale(getattr(trainer.precision_plugin, "scaler", None))
            self.meter.step_end(trainer.global_step, lr=optimizer.param_groups[0]["lr"],
                                loss_scale=scale)

        def on_train_end(self, trainer, pl_module):
            self.meter.remove()
            self.meter.close()
            self.writer.close()

    return CopusLightningCallback()


def hf_trainer_callback(path=None, serve=None, trainer=None, append=False, overwrite=False):
    """A Hugging Face ``transformers.TrainerCallback`` that writes protocol v1 (to ``path``
    and/or a server at ``serve``) from the gradient-accumulation measurement of
    :class:`GradNoiseMeter`; needs ``gradient_accumulation_steps >= 2``. Measured in backward,
    so the Trainer's clipping does not disturb it. With fp16 AMP pass ``trainer=`` (its loss
    scale is read from ``trainer.accelerator.scaler``). ``append``/``overwrite`` as for
    :func:`lightning_callback`.

        trainer = Trainer(model, TrainingArguments(..., gradient_accumulation_steps=4), ...)
        trainer.add_callback(copus_hook.hf_trainer_callback(path="stats.ndjson"))
    """
    from transformers import TrainerCallback

    class CopusTrainerCallback(TrainerCallback):
        def __init__(self):
            self.meter = self.writer = None
            self.trainer = trainer

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            rank = 0 if state.is_world_process_zero else 1
            self.writer = open_writer(path=path, serve=serve, rank=rank, append=append,
                                      overwrite=overwrite)
            self.meter = GradNoiseMeter(model, self.writer, args.per_device_train_batch_size,
                                        args.gradient_accumulation_steps).install()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            scale = None
            acc = getattr(self.trainer, "accelerator", None)
            if getattr(acc, "scaler", None) is not None:
                scale = scaler_scale(acc.scaler)
            elif args.fp16:
                raise ValueError("copus: with fp16 pass trainer= to hf_trainer_callback so "
                                 "that the loss scale can be divided out")
            sched = kwargs.get("lr_scheduler")
            lr = sched.get_last_lr()[0] if sched is not None else None
            self.meter.step_end(state.global_step, lr=lr, loss_scale=scale)

        def on_train_end(self, args, state, control, **kwargs):
            self.meter.remove()
            self.meter.close()
            self.writer.close()

    return CopusTrainerCallback()

# --- Gradient dumps (docs/DUMPS.md): one safetensors file per gradient set ---------------

_ST_DTYPES = {"f32": "F32", "float32": "F32", "f16": "F16", "float16": "F16",
              "bf16": "BF16", "bfloat16": "BF16"}


def _st_dtype(dtype, tensor):
    """The safetensors name (F32, F16, BF16) for a requested dtype, or for the tensor's own
    dtype when none is requested (F32 for anything else, e.g. float64)."""
    import torch
    if dtype is None:
        return {torch.float16: "F16", torch.bfloat16: "BF16"}.get(tensor.dtype, "F32")
    if isinstance(dtype, str):
        try:
            return _ST_DTYPES[dtype.lower()]
        except KeyError:
            raise ValueError(f"dtype must be f32, f16 or bf16, not {dtype!r}") from None
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
    if dtype not in names:
        raise ValueError(f"dtype must be torch.float32, float16 or bfloat16, not {dtype}")
    return names[dtype]


def _named_grads(grads):
    """(name, gradient tensor) pairs from a module (its parameters' .grad), a mapping of names
    to tensors, or an iterable of (name, tensor-or-parameter) pairs. A parameter that takes
    gradients but has none yet counts as a zero gradient (every set of a step must hold the
    same tensors); a leading "module." (DDP's wrapper) is dropped from every name."""
    import torch
    if isinstance(grads, torch.nn.Module):
        items = [(n, p) for n, p in grads.named_parameters() if p.requires_grad]
    elif isinstance(grads, dict):
        items = list(grads.items())
    else:
        items = list(grads)
    out = []
    for name, t in items:
        if isinstance(t, torch.nn.Parameter):
            g = t.grad
            if g is None:
                g = torch.zeros_like(t)
        else:
            g = t
        if not isinstance(g, torch.Tensor):
            raise TypeError(f"{name}: not a tensor")
        if hasattr(g, "full_tensor"):  # a DTensor (FSDP2): gather the whole gradient
            g = g.full_tensor()
        out.append((name, g))
    if out and all(n.startswith("module.") for n, _ in out):
        out = [(n[len("module."):], g) for n, g in out]
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError("tensor names repeat")
    return out


def safetensors_bytes(named, metadata=None, dtype=None, scale=None):
    """The bytes of a safetensors file holding `named` [(name, tensor)] converted to `dtype`
    (f32, f16, bf16; default: each tensor's own when it is one of those, else f32), every
    tensor multiplied by `scale` first when given. `metadata` values become strings."""
    import torch
    cast = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    header, blobs, offset = {}, [], 0
    for name, t in named:
        st = _st_dtype(dtype, t)
        x = t.detach()
        if scale is not None:
            x = x.to(torch.float32) * float(scale)
        x = x.to(device="cpu", dtype=cast[st]).contiguous()
        n = x.numel() * x.element_size()
        blobs.append(ctypes.string_at(x.data_ptr(), n) if n else b"")
        header[name] = {"dtype": st, "shape": list(x.shape), "data_offsets": [offset, offset + n]}
        offset += n
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def dump_gradients(grads, directory, step, name, samples, dtype=None, loss_scale=None):
    """Write one gradient set as ``<directory>/step_<step>/<name>.safetensors``, the layout
    ``copus open DIR`` and ``copus analyze DIR`` read (docs/DUMPS.md).

    A gradient set is the MEAN gradient over ``samples`` samples of one micro-batch or one
    rank, before accumulation or the all-reduce; a step needs at least two sets (e.g.
    ``mb0``, ``mb1`` ... or ``rank0``, ``rank1`` ...). ``grads``: a module (its parameters'
    ``.grad``), a mapping name -> tensor, or (name, tensor) pairs. ``dtype``: "f32", "bf16",
    "f16" (or the torch dtype); by default each tensor's own. ``loss_scale``: the AMP scale the
    gradients carry, divided out before writing (dump unscaled, unclipped gradients). The file
    is written atomically (a reader never sees half of it). Returns its path.

        for i, (x, y) in enumerate(micro_batches):
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()        # mean over the micro-batch
            copus_hook.dump_gradients(model, "dumps", step, f"mb{i}", samples=len(x))
    """
    if not (_finite(samples) and samples > 0):
        raise ValueError(f"samples must be a positive number, got {samples}")
    scale = None
    if loss_scale is not None:
        if not (_finite(loss_scale) and loss_scale > 0):
            raise ValueError(f"loss_scale must be a positive number, got {loss_scale}")
        scale = 1.0 / float(loss_scale)
    if os.sep in str(name) or str(name).startswith("."):
        raise ValueError(f"name must be a plain file name, not {name!r}")
    samples_text = str(int(samples)) if float(samples).is_integer() else repr(float(samples))
    data = safetensors_bytes(_named_grads(grads), {"samples": samples_text}, dtype, scale)
    step_dir = os.path.join(os.fspath(directory), f"step_{int(step)}")
    os.makedirs(step_dir, exist_ok=True)
    path = os.path.join(step_dir, f"{name}.safetensors")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
