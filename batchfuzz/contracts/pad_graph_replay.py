"""Contract K: the padding of a batch replayed on a captured CUDA graph (docs/contracts.md, contract K)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, as_int_array, require
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.pad_graph_replay_variants import VARIANTS
from batchfuzz.impl import pad_graph_replay_numpy
from batchfuzz.reference import pad_graph_replay as oracle
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import pad_graph_replay as strategies

ARGUMENTS = oracle.ARGUMENTS
BUFFERS = ("seq_lens_buf", "positions_buf", "out_cache_loc_buf")


def _ints(case: Case, key: str) -> list[int]:
    return [int(x) for x in case.args[key]]


def _replay(target: Target, case: Case) -> tuple[int, list[int], list[int], list[int]]:
    """The target's ``(bs, seq_lens, positions, out_cache_loc)``, as Python values,
    the arrays of the lengths the graph of ``bs`` requests reads."""
    got = target(*(case.args[k] for k in ARGUMENTS))
    if not (isinstance(got, (tuple, list)) and len(got) == 4):
        raise ResultTypeError(f"pad_graph_replay must return (bs, seq_lens, positions, out_cache_loc), got {got!r:.120}")
    bs = got[0]
    if isinstance(bs, np.ndarray) and bs.shape == ():
        bs = bs.item()
    if isinstance(bs, bool) or not isinstance(bs, (int, np.integer)):
        raise ResultTypeError(f"bs must be an int, got {type(bs).__name__} {bs!r:.60}")
    bs, t = int(bs), case.args["num_tokens_per_bs"]
    arrays = []
    for name, value, rows in zip(("seq_lens", "positions", "out_cache_loc"), got[1:], (bs, bs * t, bs * t), strict=True):
        arr = as_int_array(value, name)
        require(arr.ndim == 1 and len(arr) == rows, f"{name} has shape {arr.shape}, the graph of bs = {bs} reads {rows} rows")
        arrays.append([int(x) for x in arr])
    return bs, arrays[0], arrays[1], arrays[2]


def _size_fits(target: Target, case: Case) -> None:
    sizes, r = _ints(case, "capture_bs"), len(case.args["seq_lens"])
    bs = _replay(target, case)[0]
    require(bs in sizes and bs >= r, f"graph size {bs} is {'not a captured size' if bs not in sizes else f'below R = {r}'}; "
                                     f"capture_bs = {sizes}, R = {r}")


def _size_smallest(target: Target, case: Case) -> None:
    sizes, r = _ints(case, "capture_bs"), len(case.args["seq_lens"])
    bs = _replay(target, case)[0]
    smaller = [c for c in sizes if r <= c < bs]
    require(not smaller, f"graph size {bs}, but the captured size {smaller[0] if smaller else 0} also holds R = {r}; "
                         f"capture_bs = {sizes}")


def _first_difference(got: list[int], want: list[int], start: int) -> str:
    """The first row where ``got`` differs from ``want`` (both of one length; "" when none does)."""
    j = next((i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w), None)
    return "" if j is None else f"row {start + j}: got {got[j]}, expected {want[j]}"


def _real_rows_copied(target: Target, case: Case) -> None:
    _bs, lens, pos, loc = _replay(target, case)
    r, t = len(case.args["seq_lens"]), case.args["num_tokens_per_bs"]
    for name, got, rows in (("seq_lens", lens, r), ("positions", pos, r * t), ("out_cache_loc", loc, r * t)):
        want = _ints(case, name)
        require(got[:rows] == want, f"{name}'s real rows are not the step's: {_first_difference(got[:rows], want, 0)}; "
                                    f"R = {r}, T = {t}")


def _padded(name: str, fill: str | None) -> Any:
    def check(target: Target, case: Case) -> None:
        bs, *arrays = _replay(target, case)
        r, t = len(case.args["seq_lens"]), case.args["num_tokens_per_bs"]
        got = arrays[("seq_lens", "positions", "out_cache_loc").index(name)]
        real = r if name == "seq_lens" else r * t
        value = case.args[fill] if fill else 0
        pad = got[real:]
        require(all(v == value for v in pad), f"padded {name} of the graph of {bs} (rows {real}..{len(got) - 1}): "
                                              f"{_first_difference(pad, [value] * len(pad), real)}, whatever an earlier "
                                              f"replay left there (stale {name}_buf = {_ints(case, name + '_buf')[:len(got)]})")
    return check


def _matches_oracle(target: Target, case: Case) -> None:
    got = _replay(target, case)
    bs, *arrays = oracle.pad_graph_replay(*(case.args[k] for k in ARGUMENTS))
    require(got[0] == bs, f"graph size {got[0]}, expected {bs}")
    for name, g, w in zip(("seq_lens", "positions", "out_cache_loc"), got[1:], arrays, strict=True):
        want = [int(x) for x in w]
        require(g == want, f"{name}: {_first_difference(g, want, 0)}")


# The size first, the real rows, then each padded buffer, the exact answer last: a release matrix reports the first that fails.
PROPERTIES = (
    Property("size_fits", "bs is a captured size and bs >= R", _size_fits, label=SAFETY),
    Property("size_smallest", "no captured size c with R <= c < bs (bisect_left over capture_bs)", _size_smallest, label=CHOICE),
    Property("real_rows_copied", "seq_lens[:R], positions[:R*T] and out_cache_loc[:R*T] are the step's rows", _real_rows_copied,
             label=SAFETY),
    Property("padded_seq_lens_filled", "seq_lens[R:bs] == seq_len_fill_value, over any stale buffer",
             _padded("seq_lens", "seq_len_fill_value"), label=SAFETY),
    Property("padded_out_cache_loc_zeroed", "out_cache_loc[R*T:bs*T] == 0, over any stale buffer", _padded("out_cache_loc", None),
             label=SAFETY),
    Property("padded_positions_zeroed", "positions[R*T:bs*T] == 0, over any stale buffer", _padded("positions", None), label=SAFETY),
    inputs_unchanged(ARGUMENTS, writes=BUFFERS),
    Property("matches_oracle", "(bs, seq_lens, positions, out_cache_loc) of the rule, exactly", _matches_oracle, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", pad_graph_replay_numpy.pad_graph_replay, "searchsorted over the sizes, slice fills then copies"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: up to 6 strictly increasing captured sizes, R from 0, T 1..4, any fill value, stale buffers of "
            "any int32 values and up to 2 extra rows",
    "engine": "what SGLang's runners replay: R >= 1 requests of seq_len >= 1, fill value 0 or 1, buffers of exactly the largest "
              "captured size holding an earlier replay's values (>= 0)",
})

_GOOD: dict[str, Any] = strategies.case_of([1, 2], [3]).args
ERROR_INPUTS = (
    ErrorInput({**_GOOD, "capture_bs": np.array([2, 1], dtype=np.int32)}, ValueError, r"capture_bs must be strictly increasing"),
    ErrorInput({**_GOOD, "capture_bs": np.array([], dtype=np.int32)}, ValueError, r"capture_bs must hold at least one"),
    ErrorInput({**_GOOD, "capture_bs": np.array([0, 2], dtype=np.int32)}, ValueError, r"capture_bs\[0\] must be >= 1, got 0"),
    ErrorInput({**_GOOD, "seq_lens": np.array([1, 1, 1], dtype=np.int32)}, ValueError,
               r"seq_lens must have at most capture_bs\[-1\] \(2\) rows, got 3"),
    ErrorInput({**_GOOD, "positions": np.array([0, 1], dtype=np.int32)}, ValueError,
               r"positions must have R \* num_tokens_per_bs = 1 rows, got 2"),
    ErrorInput({**_GOOD, "num_tokens_per_bs": 0}, ValueError, r"num_tokens_per_bs must be >= 1, got 0"),
    ErrorInput({**_GOOD, "seq_len_fill_value": 1.0}, TypeError, r"seq_len_fill_value must be an int, got float"),
    ErrorInput({**_GOOD, "seq_lens_buf": np.array([0], dtype=np.int32)}, ValueError, r"seq_lens_buf must have at least 2 rows, got 1"),
    ErrorInput({**_GOOD, "out_cache_loc": np.array([-1], dtype=np.int32)}, ValueError, r"out_cache_loc\[0\] must be >= 0, got -1"),
)

EXAMPLES = (
    strategies.case_of([1, 2, 4, 8], [5, 7, 9], 1, 1, stale=7),  # R = 3 into the graph of 4, stale 7 everywhere
    strategies.case_of([1, 2, 4], [4, 4], 2, 0, stale=3),  # R exactly a captured size: no padding
    strategies.case_of([4], [2], 3, 1, stale=9),  # verify-shaped: 3 tokens per request, 3 padded requests
)


def _labels(case: Case) -> list[str]:
    sizes, r = _ints(case, "capture_bs"), len(case.args["seq_lens"])
    out = ["padded" if oracle.graph_size(sizes, r) > r else "exact size"]
    if case.args["num_tokens_per_bs"] > 1:
        out.append("T > 1")
    return out


CONTRACT = registry.register(Contract(
    name="pad_graph_replay",
    title="CUDA-graph replay padding",
    section="K",
    signature="pad_graph_replay(capture_bs, seq_lens, positions, out_cache_loc: int arrays, num_tokens_per_bs: int, "
              "seq_len_fill_value: int, seq_lens_buf, positions_buf, out_cache_loc_buf: int arrays) -> "
              "(bs, seq_lens[:bs], positions[:bs*T], out_cache_loc[:bs*T])",
    arguments=ARGUMENTS,
    oracle=oracle.pad_graph_replay,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="The three *_buf arguments are the runner's persistent buffers as an earlier replay left them; the target may write "
          "them. Results compare as Python ints (any integer dtype).",
))
