"""Running a :class:`~batchfuzz.confirm.layouts.Layout` through an attention
kernel and reading the detectors (torch; imported only where a layout runs).

:func:`replay` builds a layout's buffers on a device, runs its launches
through a kernel with the signature of vLLM's ``unified_attention`` and
returns the consequences it saw (docs/confirm.md, "The detectors").
:func:`model_kernel`, a plain torch model of the kernel's memory access, lets
the whole path run on a CPU (the test suite); it is never reported as the
engine's kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchfuzz.confirm.layouts import Launch, Layout

CANARY_V = 100.0
MARKER_THRESHOLD = 1.5
GUARD_VALUE = -7.25
GUARD_ROWS = 64
NUM_QUERY_HEADS = 4
NUM_KV_HEADS = 2
HEAD_SIZE = 64
SCALE = HEAD_SIZE ** -0.5  # the softmax scale every replay passes


@dataclass
class Consequence:
    """One thing the kernel did with a layout."""

    kind: str
    request: int | None
    detail: str

    def __str__(self) -> str:
        who = f"request {self.request}: " if self.request is not None else ""
        return f"{self.kind} ({who}{self.detail})" if self.detail else self.kind


@dataclass
class Replay:
    """The consequences of one layout (empty: clean)."""

    what: str
    consequences: list[Consequence] = field(default_factory=list)
    max_abs_diff: float | None = None

    @property
    def clean(self) -> bool:
        return not self.consequences


class DeviceFault(RuntimeError):
    """The kernel faulted the device (sticky on CUDA: the process must end)."""


def _cache(layout: Layout, device: Any, dtype: Any) -> tuple[Any, Any, Any, Any]:
    """(k_cache, v_cache, true_k, true_v): the true values of every slot,
    and the cache as the step finds it (unwritten slots NaN)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1234)
    shape = (layout.num_blocks, layout.block_size, NUM_KV_HEADS, HEAD_SIZE)
    true_k = (torch.rand(shape, generator=gen) * 2 - 1).to(dtype)
    true_v = (torch.rand(shape, generator=gen) * 2 - 1).to(dtype)
    canary = torch.as_tensor(layout.canary, dtype=torch.long)
    if canary.numel():
        true_k[canary] = 0
        true_v[canary] = CANARY_V
    k, v = true_k.clone(), true_v.clone()
    for block, offset in layout.unwritten:
        k[block, offset] = float("nan")
        v[block, offset] = float("nan")
    return k.to(device), v.to(device), true_k.to(device), true_v.to(device)


def _seq_ranges(launch: Launch) -> list[tuple[int, int]]:
    qsl = [int(x) for x in launch.cu_seqlens_q.tolist()]
    return [(qsl[s], qsl[s + 1]) for s in range(len(launch.seq_lens))]


def reference_attention(q: Any, k_cache: Any, v_cache: Any, launch: Launch, table: np.ndarray, block_size: int,
                        scale: float) -> Any:
    """Plain causal attention of each sequence's rows over its own row's
    slots ``0 .. seq_len - 1`` (the intended semantics; sequences whose
    ranges are not well formed are skipped)."""
    import torch

    out = torch.zeros_like(q)
    group = NUM_QUERY_HEADS // NUM_KV_HEADS
    for s, (lo, hi) in enumerate(_seq_ranges(launch)):
        seq_len = int(launch.seq_lens[s])
        if not (0 <= lo <= hi <= q.shape[0]) or hi == lo or seq_len < hi - lo:
            continue
        row = table[launch.table_rows[s]]
        positions = torch.arange(seq_len)
        blocks = torch.as_tensor(row[(positions // block_size).numpy()], dtype=torch.long, device=q.device)
        offs = (positions % block_size).to(q.device)
        keys = k_cache[blocks, offs].float().repeat_interleave(group, dim=1)  # [L, Hq, D]
        vals = v_cache[blocks, offs].float().repeat_interleave(group, dim=1)
        context = seq_len - (hi - lo)
        for t in range(hi - lo):
            upto = context + t + 1
            scores = torch.einsum("hd,lhd->hl", q[lo + t].float(), keys[:upto]) * scale
            out[lo + t] = torch.einsum("hl,lhd->hd", torch.softmax(scores, dim=-1), vals[:upto]).to(q.dtype)
    return out


def _whole_storage(t: Any) -> Any:
    """The rows of ``t``'s storage from its first row on (a view of ``t``'s
    buffer past its own end, as a kernel's pointer sees it)."""
    elements = t.untyped_storage().nbytes() // t.element_size()
    return t.as_strided(((elements - t.storage_offset()) // t.stride(0), *t.shape[1:]), t.stride(), t.storage_offset())


def model_kernel(q: Any, k: Any, v: Any, out: Any, cu_seqlens_q: Any, max_seqlen_q: int, seqused_k: Any,
                 max_seqlen_k: int, softmax_scale: float, causal: bool, window_size: Any, block_table: Any,
                 softcap: float, q_descale: Any, k_descale: Any, v_descale: Any, **_: Any) -> None:
    """A plain torch model of the unified kernel's memory access (module
    docstring). ``out`` and ``q`` may be views of larger buffers: rows past
    their end are written and read in the underlying storage, as a kernel's
    pointer arithmetic would; past the storage is a modelled fault."""
    import torch

    block_size = k.shape[1]
    flat_table = block_table.reshape(-1)
    width = block_table.shape[1]
    out_base, q_base = _whole_storage(out), _whole_storage(q)
    group = q.shape[1] // k.shape[2]
    qsl = [int(x) for x in cu_seqlens_q.tolist()]
    for s in range(len(seqused_k)):
        lo, hi, seq_len = qsl[s], qsl[s + 1], int(seqused_k[s])
        if hi <= lo:
            continue
        if hi > q_base.shape[0] or hi > out_base.shape[0]:
            raise DeviceFault(f"modelled fault: sequence {s} rows [{lo}, {hi}) pass the end of the q/out storage")
        positions = torch.arange(seq_len)
        index = s * width + positions // block_size
        if seq_len and int(index.max()) >= flat_table.numel():
            raise DeviceFault(f"modelled fault: sequence {s} reads block-table entry {int(index.max())} past the table")
        blocks = flat_table[index.to(flat_table.device)].long()
        if seq_len and int(blocks.max()) >= k.shape[0]:
            raise DeviceFault(f"modelled fault: sequence {s} reads block {int(blocks.max())} past the cache")
        offs = (positions % block_size).to(k.device)
        keys = k[blocks, offs].float().repeat_interleave(group, dim=1)
        vals = v[blocks, offs].float().repeat_interleave(group, dim=1)
        context = seq_len - (hi - lo)
        for t in range(hi - lo):
            upto = max(context + t + 1, 0)
            scores = torch.einsum("hd,lhd->hl", q_base[lo + t].float(), keys[:upto]) * softmax_scale
            out_base[lo + t] = torch.einsum("hl,lhd->hd", torch.softmax(scores, dim=-1), vals[:upto]).to(out.dtype)


def replay(layout: Layout, kernel: Callable[..., Any], device: str = "cpu", dtype_name: str = "bfloat16",
           compare: bool = True) -> Replay:
    """Run ``layout`` through ``kernel`` on ``device`` and read the detectors
    (module docstring). Raises :class:`DeviceFault` when the kernel faults."""
    import torch

    dtype = getattr(torch, dtype_name)
    k_cache, v_cache, true_k, true_v = _cache(layout, device, dtype)
    result = Replay(layout.what)
    worst = 0.0
    gen = torch.Generator(device="cpu").manual_seed(99)
    for launch in layout.launches:
        for block, offset in launch.writes:  # the launch's own tokens write their KV first
            k_cache[block, offset] = true_k[block, offset]
            v_cache[block, offset] = true_v[block, offset]
        shape = (launch.rows + GUARD_ROWS, NUM_QUERY_HEADS, HEAD_SIZE)
        q_full = (torch.rand(shape, generator=gen) * 2 - 1).to(dtype).to(device)
        out_full = torch.full(shape, GUARD_VALUE, dtype=dtype, device=device)
        if len(launch.seq_lens) == 0:
            continue  # no sequence: nothing reaches the kernel
        _launch(kernel, layout.block_table, launch, (q_full, k_cache, v_cache, out_full), device)
        out = out_full[:launch.rows].float().cpu()
        result.consequences += _row_consequences(layout, launch, out)
        result.consequences += _guard_consequences(launch, out, out_full[launch.rows:].float().cpu())
        if compare and not result.consequences:
            expected = reference_attention(q_full[:launch.rows], k_cache, v_cache, launch, layout.block_table,
                                           layout.block_size, SCALE).float().cpu()
            diff = float((expected - out).abs().max()) if launch.rows else 0.0
            worst = max(worst, diff)
            if diff > 0.05:
                result.consequences.append(Consequence("wrong output", None,
                                                       f"{launch.label}: differs from plain attention by {diff:.3g}"))
    result.max_abs_diff = worst if compare else None
    return result


def _launch(kernel: Callable[..., Any], block_table: np.ndarray, launch: Launch, buffers: tuple[Any, Any, Any, Any],
            device: str) -> None:
    """Call ``kernel`` on one launch's ``(q, k_cache, v_cache, out)`` (q and
    out with their guard rows), as vLLM's ``unified_attention`` is called; a
    device error becomes a :class:`DeviceFault`."""
    import torch

    q_full, k_cache, v_cache, out_full = buffers
    rows = launch.rows
    table_np = block_table[launch.table_rows].astype(np.int64)
    table = torch.as_tensor(table_np.astype(np.int32) if table_np.max(initial=0) < 2**31 else table_np, device=device)
    qsl = torch.as_tensor(launch.cu_seqlens_q.astype(np.int32), device=device)
    seq_lens = torch.as_tensor(launch.seq_lens.astype(np.int32), device=device)
    max_query = max(int(np.diff(launch.cu_seqlens_q).max(initial=0)), 1)
    try:
        kernel(q_full[:rows], k_cache, v_cache, out_full[:rows], qsl, max_query, seq_lens,
               max(int(launch.seq_lens.max(initial=0)), 1), SCALE, True, (-1, -1), table, 0.0, None, None, None)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except DeviceFault:
        raise
    except RuntimeError as exc:
        text = str(exc)
        if "illegal memory access" in text or "CUDA error" in text or "device-side assert" in text:
            raise DeviceFault(text.strip().splitlines()[0]) from None
        raise


def _row_consequences(layout: Layout, launch: Launch, out: Any) -> list[Consequence]:
    """What each sequence's own output rows show: NaN (it read unwritten KV)
    or the canary's mark (it read outside its block-table row)."""
    import torch

    found = []
    for s, (lo, hi) in enumerate(_seq_ranges(launch)):
        request = launch.requests[s]
        a, b = max(lo, 0), min(hi, launch.rows)
        if a >= b:
            continue
        part = out[a:b]
        nan_rows = torch.isnan(part).any(dim=2).any(dim=1)
        marked = (~nan_rows) & (part.abs() > MARKER_THRESHOLD).any(dim=2).any(dim=1)
        seq_len = int(launch.seq_lens[s])
        if bool(nan_rows.any()):
            found.append(Consequence("read unwritten KV (NaN)", request,
                                     f"{launch.label}: NaN in {int(nan_rows.sum())} of its rows {a}..{b - 1} (seq_len {seq_len})"))
        if bool(marked.any()):
            cap = int(layout.capacity[launch.table_rows[s]])
            need = -(-seq_len // layout.block_size)
            found.append(Consequence("read outside its row", request,
                                     f"{launch.label}: canary in its output; seq_len {seq_len} needs {need} blocks, "
                                     f"its row holds {cap} of {layout.block_size} slots"))
    return found


def _guard_consequences(launch: Launch, out: Any, guard: Any) -> list[Consequence]:
    """Output rows the kernel left holding the sentinel, and guard rows past
    the output it wrote."""
    import torch

    found = []
    untouched = torch.nonzero((out == GUARD_VALUE).all(dim=2).all(dim=1)).flatten().tolist()
    if untouched:
        found.append(Consequence(
            "left output rows unwritten", None,
            f"{launch.label}: {len(untouched)} of its {launch.rows} output rows (first {untouched[0]}) still hold the sentinel"))
    changed = torch.nonzero((guard != GUARD_VALUE).any(dim=2).any(dim=1)).flatten().tolist()
    if changed:
        found.append(Consequence("wrote past its output", None,
                                 f"{launch.label}: {len(changed)} guard rows after its {launch.rows} output rows"))
    return found


class NotApplicable(ValueError):
    """The layout is not one the kernel takes (a decode kernel and a sequence
    with more or fewer than one query token)."""


def decode_as_unified(decode_attention_fwd: Callable[..., Any], num_kv_splits: int = 4) -> Callable[..., Any]:
    """vLLM's Triton decode kernel (``decode_attention_fwd``: one query token
    per sequence, the block table as ``req_to_token``, ``b_seq_len``) called
    through the unified kernel's signature, for layouts whose every sequence
    has exactly one query token (NotApplicable otherwise)."""
    import torch

    def call(q: Any, k: Any, v: Any, out: Any, cu_seqlens_q: Any, max_seqlen_q: int, seqused_k: Any,
             max_seqlen_k: int, softmax_scale: float, causal: bool, window_size: Any, block_table: Any,
             softcap: float, q_descale: Any, k_descale: Any, v_descale: Any, **_: Any) -> None:
        qsl = [int(x) for x in cu_seqlens_q.tolist()]
        if any(qsl[s + 1] - qsl[s] != 1 for s in range(len(qsl) - 1)) or qsl[0] != 0:
            raise NotApplicable("the decode kernel takes one query token per sequence, got query_start_loc "
                                f"{qsl[:9]}{'...' if len(qsl) > 9 else ''}")
        batch, heads, dim = len(seqused_k), q.shape[1], q.shape[2]
        lse = torch.empty((batch, heads), dtype=torch.float32, device=q.device)
        logits = torch.empty((batch, heads, num_kv_splits, dim + 1), dtype=torch.float32, device=q.device)
        decode_attention_fwd(q[:batch], k, v, out[:batch], lse, block_table, seqused_k, logits, num_kv_splits,
                             softmax_scale, page_size=k.shape[1])

    return call


def prefix_prefill_as_unified(context_attention_fwd: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's Triton prefix-prefill kernel (``context_attention_fwd``) called
    through the unified kernel's signature, on its cached-K/V path (``k`` and
    ``v`` None: the step's own tokens' K/V are read from the cache too, at
    positions ``seq_len - query_len`` on, as the unified kernel reads them):
    ``cu_seqlens_q`` is its ``b_start_loc``, ``seqused_k`` its ``b_seq_len``,
    the block table its ``b_loc``. The cache is copied, at each call, into
    the kernel's own layout: K as ``[blocks, kv_heads, head_size // x,
    block_size, x]`` (``x`` elements to 16 bytes), V as ``[blocks, kv_heads,
    head_size, block_size]``, so unwritten (NaN) and canary slots stay where
    they were."""
    import torch

    def call(q: Any, k: Any, v: Any, out: Any, cu_seqlens_q: Any, max_seqlen_q: int, seqused_k: Any,
             max_seqlen_k: int, softmax_scale: float, causal: bool, window_size: Any, block_table: Any,
             softcap: float, q_descale: Any, k_descale: Any, v_descale: Any, **_: Any) -> None:
        blocks, block_size, kv_heads, head_size = k.shape
        x = max(1, 16 // k.element_size())
        k_cache = k.reshape(blocks, block_size, kv_heads, head_size // x, x).permute(0, 2, 3, 1, 4).contiguous()
        v_cache = v.permute(0, 2, 3, 1).contiguous()
        one = torch.ones((), dtype=torch.float32, device=q.device)
        context_attention_fwd(q, None, None, out, "auto", k_cache, v_cache, block_table, cu_seqlens_q, seqused_k,
                              max_seqlen_k, max_seqlen_q, one, one, sm_scale=softmax_scale, causal=causal)

    return call
