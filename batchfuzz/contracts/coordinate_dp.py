"""Contract I: data-parallel coordination of a step (docs/contracts.md, contract I).

A target takes every rank's step and the shared configuration and returns
every rank's decision (``RankDecision``: split, the token count of every
rank, graph mode, descriptor token count), so the properties judge the ranks'
answers together. Engine code runs as one process per rank
(``batchfuzz.distributed``); implementations and variants are rank functions
run in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, ResultTypeError, require
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.coordinate_dp_variants import VARIANTS
from batchfuzz.impl import coordinate_dp_numpy
from batchfuzz.impl._dp import ARGUMENTS
from batchfuzz.reference import coordinate_dp as oracle
from batchfuzz.reference.coordinate_dp import NONE, RankDecision, Step, last_microbatch_empty
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import coordinate_dp as strategies


def _int(value: Any, what: str) -> int:
    value = to_host(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ResultTypeError(f"{what} must be an int, got {type(value).__name__} {value!r:.80}")
    return int(value)


def _decision(item: Any, rank: int) -> RankDecision:
    if isinstance(item, RankDecision):
        split, across, mode, tokens = item.split, item.num_tokens_across_dp, item.cg_mode, item.num_tokens
    else:
        try:
            split, across, mode, tokens = item
        except (TypeError, ValueError):
            raise ResultTypeError(f"rank {rank}'s decision must be a RankDecision or (split, num_tokens_across_dp, cg_mode, "
                                  f"num_tokens), got {item!r:.120}") from None
    split = to_host(split)
    if isinstance(split, np.ndarray) and split.ndim == 0:
        split = split.item()
    if not isinstance(split, (bool, np.bool_)):
        raise ResultTypeError(f"rank {rank}'s split must be a bool, got {type(split).__name__} {split!r}")
    across = to_host(across)
    seq = across.tolist() if isinstance(across, np.ndarray) else list(across)
    return RankDecision(bool(split), tuple(_int(x, f"rank {rank}'s num_tokens_across_dp entry") for x in seq),
                        _int(mode, f"rank {rank}'s cg_mode"), _int(tokens, f"rank {rank}'s num_tokens"))


@dataclass(frozen=True)
class _Facts:
    step: Step
    decisions: list[RankDecision]


def _call(target: Target, case: Case) -> _Facts:
    step = oracle.check_coordinate_args(*(case.args[k] for k in ARGUMENTS))
    out = target(*(case.args[k] for k in ARGUMENTS))
    if not isinstance(out, (list, tuple)):
        raise ResultTypeError(f"coordinate_dp must return one decision per rank (a list), got {type(out).__name__}")
    decisions = [_decision(item, r) for r, item in enumerate(out)]
    require(len(decisions) == step.num_ranks, f"got {len(decisions)} decisions, expected one per rank ({step.num_ranks})")
    for r, d in enumerate(decisions):
        require(len(d.num_tokens_across_dp) == step.num_ranks,
                f"rank {r}'s num_tokens_across_dp has {len(d.num_tokens_across_dp)} entries, expected {step.num_ranks}")
    return _Facts(step, decisions)


def _show(decisions: list[RankDecision]) -> str:
    return "\n".join(f"  rank {r}: split={d.split} num_tokens_across_dp={list(d.num_tokens_across_dp)} cg_mode={d.cg_mode} "
                     f"num_tokens={d.num_tokens}" for r, d in enumerate(decisions))


def _vetoes(step: Step) -> list[int]:
    """The ranks that veto the split: they do not allow it, or their step is
    below its threshold (v1: by its own kind; a dispatching coordinator: as a
    decode only when every rank decodes the same length)."""
    same = step.uniform_decode_len[0] > 0 and all(u == step.uniform_decode_len[0] for u in step.uniform_decode_len)
    out = []
    for r in range(step.num_ranks):
        decode = same if step.ubatch_capture_sizes is not None else step.uniform_decode_len[r] > 0
        if not step.allow_microbatching[r] or not oracle.passes_threshold(step, step.num_tokens[r], decode):
            out.append(r)
    return out


def _matches_oracle(target: Target, case: Case) -> None:
    f = _call(target, case)
    expected = oracle.coordinate_dp(*(case.args[k] for k in ARGUMENTS))
    require(f.decisions == expected, f"decisions differ from the oracle\n got\n{_show(f.decisions)}\n expected\n{_show(expected)}")


def _ranks_agree(target: Target, case: Case) -> None:
    f = _call(target, case)
    first = f.decisions[0]
    for r, d in enumerate(f.decisions[1:], start=1):
        same = (d.split, d.num_tokens_across_dp, d.cg_mode) == (first.split, first.num_tokens_across_dp, first.cg_mode)
        require(same, f"rank {r} decided differently from rank 0\n{_show(f.decisions)}")


def _veto_respected(target: Target, case: Case) -> None:
    f = _call(target, case)
    vetoes = _vetoes(f.step)
    if vetoes:
        splitting = [r for r, d in enumerate(f.decisions) if d.split]
        require(not splitting, f"rank {vetoes[0]} vetoes the split (allows={f.step.allow_microbatching[vetoes[0]]}, "
                               f"tokens={f.step.num_tokens[vetoes[0]]}), yet ranks {splitting} split\n{_show(f.decisions)}")


def _keeps_real_tokens(target: Target, case: Case) -> None:
    f = _call(target, case)
    for r, d in enumerate(f.decisions):
        require(d.num_tokens >= f.step.num_tokens[r], f"rank {r} runs {d.num_tokens} tokens, fewer than its "
                                                      f"{f.step.num_tokens[r]} real ones\n{_show(f.decisions)}")
        for k, c in enumerate(d.num_tokens_across_dp):
            require(c >= f.step.num_tokens[k], f"rank {r} counts {c} tokens for rank {k}, fewer than its "
                                               f"{f.step.num_tokens[k]} real ones\n{_show(f.decisions)}")


def _padded_counts_equal(target: Target, case: Case) -> None:
    f = _call(target, case)
    for r, d in enumerate(f.decisions):
        if d.split or d.cg_mode != NONE:
            counts = set(d.num_tokens_across_dp) | {d.num_tokens}
            require(len(counts) == 1, f"rank {r} {'splits' if d.split else f'runs graph mode {d.cg_mode}'}, so every rank "
                                      f"must run one count, but it has {sorted(counts)}\n{_show(f.decisions)}")


def _covers_graph_padding(target: Target, case: Case) -> None:
    f = _call(target, case)
    most = max(f.step.num_tokens_padded)
    for r, d in enumerate(f.decisions):
        if d.cg_mode != NONE:
            require(d.num_tokens >= most, f"rank {r} runs graph mode {d.cg_mode} at {d.num_tokens} tokens, below the "
                                          f"largest padded count {most}\n{_show(f.decisions)}")


def _no_empty_microbatch(target: Target, case: Case) -> None:
    f = _call(target, case)
    n = f.step.num_ubatches
    for r, d in enumerate(f.decisions):
        if not d.split:
            continue
        for k, real in enumerate(f.step.num_tokens):
            if last_microbatch_empty(real, d.num_tokens, n):
                start = (d.num_tokens // n) * (n - 1)
                raise PropertyViolation(f"rank {r} splits {d.num_tokens} tokens into {n} microbatches; rank {k}'s last one "
                                        f"starts at token {start} >= its {real} real tokens: no real token\n{_show(f.decisions)}")


def _graph_runnable(target: Target, case: Case) -> None:
    f = _call(target, case)
    lowest = min(f.step.cudagraph_mode)
    for r, d in enumerate(f.decisions):
        require(d.cg_mode <= lowest, f"rank {r} runs graph mode {d.cg_mode}, but rank "
                                     f"{f.step.cudagraph_mode.index(lowest)} can run only mode {lowest}\n{_show(f.decisions)}")
        sizes = f.step.ubatch_capture_sizes
        if d.split and d.cg_mode != NONE and sizes is not None:
            require(d.num_tokens in sizes, f"rank {r} runs a microbatched graph of {d.num_tokens} tokens, not a captured "
                                           f"size {sizes}\n{_show(f.decisions)}")


def _split_when_agreed(target: Target, case: Case) -> None:
    f = _call(target, case)
    s = f.step
    if not _vetoes(s) and not last_microbatch_empty(min(s.num_tokens), max(s.num_tokens_padded), s.num_ubatches):
        missing = [r for r, d in enumerate(f.decisions) if not d.split]
        require(not missing, f"every rank allows the split and no microbatch would be empty, yet ranks {missing} do not "
                             f"split\n{_show(f.decisions)}")


PROPERTIES = (
    Property("matches_oracle", "every rank's decision equals the oracle's", _matches_oracle, label=CHOICE),
    Property("ranks_agree", "every rank reaches the same split, counts and graph mode", _ranks_agree, label=SAFETY),
    Property("veto_respected", "one rank's veto (not allowed, or below its threshold) means no rank splits", _veto_respected, label=SAFETY),
    Property("keeps_real_tokens", "padding never drops a real token: every count is at least the rank's real count",
             _keeps_real_tokens, label=SAFETY),
    Property("padded_counts_equal", "a split step, or one run with a graph, runs one count on every rank", _padded_counts_equal,
             label=SAFETY),
    Property("covers_graph_padding", "a graph run's count is at least every rank's padded count", _covers_graph_padding, label=SAFETY),
    Property("no_empty_microbatch", "when split, no rank has a microbatch without a real token, for any num_ubatches",
             _no_empty_microbatch, label=CHOICE),
    Property("graph_runnable", "the agreed graph mode is one every rank can run (at most the smallest asked for; a "
             "microbatched graph of a captured size)", _graph_runnable, label=SAFETY),
    Property("split_when_agreed", "with no veto and no empty microbatch, every rank splits", _split_when_agreed, label=CHOICE),
    inputs_unchanged(ARGUMENTS),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", coordinate_dp_numpy.coordinate_dp, "the exchanged table as one (6, R) array"),
    registry.host_impl("ranks", "batchfuzz.impl.coordinate_dp_torch:coordinate_dp", "a rank function over a torch table and an all-reduce, "
                       "its ranks in this process (batchfuzz.distributed runs it as processes)"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "2 <= R <= 8 ranks, real counts >= 1, padded >= real, any votes, modes and uniform-decode lengths, thresholds "
            ">= num_ubatches, sorted capture sizes, microbatched graphs None or sorted",
    "engine": "as the engine's callers produce: uniform decodes of one shared length U with U tokens per request, mixed "
              "steps of at least one token per request; each rank eager or padded to the smallest capture size that fits "
              "(FULL for a uniform decode, PIECEWISE otherwise); microbatched graph sizes among the capture sizes",
})


def _args(tokens: list[int], padded: list[int], allow: list[int], modes: list[int], uniform: list[int], reqs: list[int],
          n: int = 2, thresholds: tuple[int, int] = (2, 2), sizes: list[int] | None = None,
          ubatch_sizes: list[int] | None = None) -> dict[str, Any]:
    return strategies._args(strategies._ranks(tokens, padded, allow, modes, uniform, reqs), n, thresholds, sizes or [2, 4, 8],
                            ubatch_sizes)


ERROR_INPUTS = (
    ErrorInput(_args([2], [2], [1], [0], [0], [1]), ValueError, r"num_tokens must have one entry per rank, 2 <= ranks <= 8, got 1"),
    ErrorInput(_args([2, 0], [2, 1], [1, 1], [0, 0], [0, 0], [1, 1]), ValueError, r"num_tokens\[1\] must be >= 1, got 0"),
    ErrorInput(_args([2, 3], [2, 2], [1, 1], [0, 0], [0, 0], [1, 1]), ValueError,
               r"num_tokens_padded\[1\] must be >= num_tokens\[1\] = 3, got 2"),
    ErrorInput(_args([2, 3], [2, 3, 4], [1, 1], [0, 0], [0, 0], [1, 1]), ValueError,
               r"num_tokens_padded must have one entry per rank \(2\), got 3"),
    ErrorInput(_args([2, 3], [2, 3], [1, 2], [0, 0], [0, 0], [1, 1]), ValueError, r"allow_microbatching\[1\] must be 0 or 1, got 2"),
    ErrorInput(_args([2, 3], [2, 3], [1, 1], [0, 3], [0, 0], [1, 1]), ValueError, r"cudagraph_mode\[1\] must be 0 \(none\)"),
    ErrorInput(_args([2, 3], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1], n=1), ValueError, r"num_ubatches must be >= 2, got 1"),
    ErrorInput(_args([2, 3], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1], thresholds=(1, 4)), ValueError,
               r"ubatch_thresholds\[0\] must be >= 2, got 1"),
    ErrorInput(_args([2, 3], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1], sizes=[4, 2]), ValueError,
               r"capture_sizes must be strictly increasing, got \[4, 2\]"),
    ErrorInput({**_args([2, 3], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1]), "num_tokens": np.array([2.0, 3.0])}, TypeError,
               r"num_tokens must have dtype int32 or int64, got float64"),
)

EXAMPLES = (
    Case(_args([4, 2], [4, 2], [1, 1], [0, 0], [0, 0], [1, 1]), {"kind": "refused: rank 1's last microbatch is padding"}),
    Case(_args([3, 4], [4, 4], [1, 1], [1, 1], [0, 0], [1, 1], ubatch_sizes=[4, 8]), {"kind": "split, no FULL"}),
    Case(_args([4, 4, 8], [4, 4, 8], [1, 1, 1], [2, 2, 2], [1, 1, 1], [4, 4, 8], n=2, ubatch_sizes=[8]), {"kind": "FULL graph"}),
    Case(_args([6, 7], [8, 8], [1, 0], [1, 2], [0, 1], [3, 7], n=3, thresholds=(3, 3)), {"kind": "veto"}),
)


def _labels(case: Case) -> list[str]:
    out = []
    try:
        decisions = oracle.coordinate_dp(*(case.args[k] for k in ARGUMENTS))
    except (TypeError, ValueError):
        return ["bad input"]
    d = decisions[0]
    out.append(f"R == {len(decisions)}")
    out.append(f"n == {case.args['num_ubatches']}")
    out.append("v1 (caller dispatches)" if case.args["ubatch_capture_sizes"] is None else "dispatching coordinator")
    out.append("split" if d.split else "not split")
    out.append(f"mode {d.cg_mode}")
    return out


CONTRACT = registry.register(Contract(
    name="coordinate_dp",
    title="Data-parallel coordination",
    section="I",
    signature="coordinate_dp(num_tokens, num_tokens_padded, allow_microbatching, cudagraph_mode, uniform_decode_len, "
              "num_reqs, num_ubatches: int, ubatch_thresholds: (int, int), capture_sizes, ubatch_capture_sizes | None) "
              "-> list of RankDecision(split, num_tokens_across_dp, cg_mode, num_tokens), one per rank",
    arguments=ARGUMENTS,
    oracle=oracle.coordinate_dp,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="A decision may be a RankDecision or a (split, num_tokens_across_dp, cg_mode, num_tokens) tuple; counts compare "
          "exactly after conversion to Python ints. Engine bindings run one process per rank (batchfuzz.distributed).",
))
