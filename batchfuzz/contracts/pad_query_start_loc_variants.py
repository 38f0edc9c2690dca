"""Known buggy variants of contract C, padded ``query_start_loc``: the shipped
bug and planted mutants.

All take the canonical signature ``(num_scheduled_tokens, num_reqs_padded,
out=None)`` with numpy inputs, except ``padding_unwritten_torch``, the
shipped bug over torch tensors for the torch state machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

from batchfuzz.impl import pad_query_start_loc_numpy
from batchfuzz.reference.pad_query_start_loc import check_pad_args
from batchfuzz.registry import Variant
from batchfuzz.strategies._engine import default_capture_sizes, pad_to_capture_size


def _target(out: Any, p: int, dtype: np.dtype) -> np.ndarray:
    return out[: p + 1] if out is not None else np.zeros(p + 1, dtype=dtype)


def _write_real(q: np.ndarray, nst: np.ndarray, r: int) -> None:
    q[0] = 0
    np.cumsum(nst, dtype=q.dtype, out=q[1 : r + 1])


# ---------------------------------------------------------------- shipped


def padding_unwritten(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """The second shipped bug: a reused buffer gets ``[0, cumsum]`` in ``out[:R+1]`` and
    the padded slots ``out[R+1:P+1]`` keep whatever an earlier step left there.
    A fresh array (``out=None``) is padded correctly, which is why tests that
    only ever use fresh arrays cannot see the bug."""
    if out is None:
        return pad_query_start_loc_numpy.pad_query_start_loc(num_scheduled_tokens, num_reqs_padded)
    nst, r, p, _, _ = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = out[: p + 1]
    _write_real(q, nst, r)
    return q


def padding_unwritten_torch(
    num_scheduled_tokens: torch.Tensor, num_reqs_padded: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The shipped bug over device tensors (for the torch state machine)."""
    import torch

    nst = num_scheduled_tokens
    r, p = int(nst.shape[0]), int(num_reqs_padded)
    if out is None:
        out = torch.zeros(p + 1, dtype=nst.dtype, device=nst.device)
    q = out[: p + 1]
    q[:1].zero_()
    torch.cumsum(nst, dim=0, dtype=q.dtype, out=q[1 : r + 1])
    return q


# ---------------------------------------------------------------- mutants


def pads_with_padded_token_count(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Pads with the padded token count (the capture size the step is padded
    to, default list) instead of the real ``sum(nst)``: padded slots look non-empty."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    padded = pad_to_capture_size(total, default_capture_sizes())
    q = _target(out, p, dtype)
    _write_real(q, nst, r)
    q[r + 1 :] = total if padded is None else padded
    return q


def writes_first_p_only(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Off by one: writes ``q[:P]`` and leaves ``q[P]`` as it was."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    full = np.zeros(p + 1, dtype=np.int64)
    full[1 : r + 1] = np.cumsum(nst)
    full[r + 1 :] = total
    q = _target(out, p, dtype)
    q[:p] = full[:p]
    return q


def pads_from_r_plus_2(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Off by one: pads ``q[R+2:]``, so the first padded slot keeps its old value."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = _target(out, p, dtype)
    _write_real(q, nst, r)
    q[r + 2 :] = total
    return q


def int16_cumsum(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Running sum accumulated in int16: wraps once a prefix passes 32767 tokens
    (a chunked-prefill step of a 65536-token budget does)."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = _target(out, p, dtype)
    q[0] = 0
    q[1 : r + 1] = np.cumsum(nst.astype(np.int16), dtype=np.int16)
    q[r + 1 :] = total
    return q


def pads_with_zero(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Pads with 0 instead of ``sum(nst)``: the array drops at ``R + 1`` and a
    consumer's ``repeat_interleave`` sees a negative count."""
    nst, r, p, _, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = _target(out, p, dtype)
    _write_real(q, nst, r)
    q[r + 1 :] = 0
    return q


def exclusive_cumsum(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """``q[i+1] = sum(nst[:i])`` (exclusive scan): every request's range is its
    predecessor's; the padding is right."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = _target(out, p, dtype)
    q[0] = 0
    q[1 : r + 1] = np.cumsum(nst) - nst
    q[r + 1 :] = total
    return q


def no_leading_zero(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Inclusive scan written from ``q[0]``: ``q[:R] = cumsum(nst)``, ``q[R:] = sum``."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = _target(out, p, dtype)
    q[:r] = np.cumsum(nst)
    q[r:] = total
    return q


def fills_whole_tail(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Right values, but pads every slot of ``out`` past ``R``, not just up to
    ``P``: ``out[P+1:]`` is overwritten (harmless where nobody reads the tail;
    a breach of the ``out=`` contract)."""
    nst, r, p, total, _ = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    if out is None:
        return pad_query_start_loc_numpy.pad_query_start_loc(nst, p)
    _write_real(out, nst, r)
    out[r + 1 :] = total
    return out[: p + 1]


def rebinds_out(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Builds a new array and rebinds the local name ``out`` to it: right
    values returned, the caller's persistent buffer never written."""
    nst, _, p, _, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    out = pad_query_start_loc_numpy.pad_query_start_loc(nst.astype(dtype), p)
    return out


def _nst(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


_STALE = ("matches_oracle", "non_decreasing", "diff_padding_is_zero", "last_is_total",
          "token_map_numpy", "token_map_torch", "persistent_buffer")

def zeroes_counts(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """The right answer, but the caller's counts are zeroed afterwards (a staging array reused in place)."""
    q = pad_query_start_loc_numpy.pad_query_start_loc(num_scheduled_tokens, num_reqs_padded, out)
    if isinstance(num_scheduled_tokens, np.ndarray):
        num_scheduled_tokens[:] = 0
    return q


VARIANTS = (
    Variant("padding_unwritten", "padded entries out[R+1:P+1] keep an earlier step's values in the reused buffer (shipped)",
            padding_unwritten, "shipped", _STALE, {"num_scheduled_tokens": _nst(), "num_reqs_padded": 1}),
    Variant("pads_with_padded_token_count", "pads with the padded token count (capture size) instead of sum(nst)",
            pads_with_padded_token_count, "mutant",
            ("last_is_total", "diff_padding_is_zero", "token_map_numpy", "token_map_torch", "matches_oracle", "persistent_buffer"),
            {"num_scheduled_tokens": _nst(), "num_reqs_padded": 1}),
    Variant("writes_first_p_only", "off by one: writes q[:P], q[P] keeps its old value",
            writes_first_p_only, "mutant", ("matches_oracle", "last_is_total", "starts_at_zero"),
            {"num_scheduled_tokens": _nst(1), "num_reqs_padded": 1}),
    Variant("pads_from_r_plus_2", "off by one: pads from R + 2, the first padded slot keeps its old value",
            pads_from_r_plus_2, "mutant", ("matches_oracle", "non_decreasing", "diff_padding_is_zero"),
            {"num_scheduled_tokens": _nst(), "num_reqs_padded": 1}),
    Variant("int16_cumsum", "running sum accumulated in int16: wraps past 32767 tokens",
            int16_cumsum, "mutant", ("diff_real_is_num_scheduled_tokens", "matches_oracle", "non_decreasing"),
            {"num_scheduled_tokens": _nst(32768), "num_reqs_padded": 1}),
    Variant("pads_with_zero", "pads with 0 instead of sum(nst): the consumer's repeat count goes negative",
            pads_with_zero, "mutant", ("token_map_torch", "token_map_numpy", "non_decreasing", "last_is_total", "matches_oracle"),
            {"num_scheduled_tokens": _nst(1), "num_reqs_padded": 2}),
    Variant("exclusive_cumsum", "exclusive scan: every request gets its predecessor's token range",
            exclusive_cumsum, "mutant", ("token_map_numpy", "diff_real_is_num_scheduled_tokens", "token_map_torch", "matches_oracle"),
            {"num_scheduled_tokens": _nst(1), "num_reqs_padded": 1}),
    Variant("no_leading_zero", "inclusive scan written from q[0]: q[0] = nst[0]",
            no_leading_zero, "mutant", ("starts_at_zero", "diff_real_is_num_scheduled_tokens", "matches_oracle"),
            {"num_scheduled_tokens": _nst(1), "num_reqs_padded": 1}),
    Variant("fills_whole_tail", "pads every slot of out past R, overwriting out[P+1:]",
            fills_whole_tail, "mutant", ("out_form", "persistent_buffer"), {"num_scheduled_tokens": _nst(), "num_reqs_padded": 0}),
    Variant("rebinds_out", "returns a new array and never writes the caller's out",
            rebinds_out, "mutant", ("out_form", "persistent_buffer"), {"num_scheduled_tokens": _nst(), "num_reqs_padded": 0}),
    Variant("zeroes_counts", "right answer, but zeroes the caller's num_scheduled_tokens in place",
            zeroes_counts, "mutant", ("inputs_unchanged",), {"num_scheduled_tokens": _nst(1), "num_reqs_padded": 1}),
)
