"""Contract J: the two-batch-overlap split (docs/contracts.md, contract J)."""

from __future__ import annotations

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, require
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.tbo_split_variants import VARIANTS
from batchfuzz.impl import tbo_split_numpy
from batchfuzz.reference import tbo_split as oracle
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import tbo_split as strategies

ARGUMENTS = ("forward_mode", "seq_lens", "threshold")


def _lens(case: Case) -> list[int]:
    return [int(x) for x in case.args["seq_lens"]]


def _split(target: Target, case: Case) -> tuple[int, int, bool]:
    """The target's ``(split_seq_index, split_token_index, two_chunk)``, as Python values."""
    got = target(*(case.args[k] for k in ARGUMENTS))
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        raise ResultTypeError(f"tbo_split must return (split_seq_index, split_token_index, two_chunk), got {got!r:.120}")
    out = []
    for name, v in zip(("split_seq_index", "split_token_index"), got[:2], strict=True):
        if isinstance(v, np.ndarray) and v.shape == ():
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ResultTypeError(f"{name} must be an int, got {type(v).__name__} {v!r:.60}")
        out.append(int(v))
    if not isinstance(got[2], (bool, np.bool_)):
        raise ResultTypeError(f"two_chunk must be a bool, got {type(got[2]).__name__} {got[2]!r:.60}")
    return out[0], out[1], bool(got[2])


def _prefix(lens: list[int]) -> list[int]:
    out = [0]
    for x in lens:
        out.append(out[-1] + x)
    return out


def _in_range(s: int, t: int, two_chunk: bool, lens: list[int]) -> None:
    require(0 <= s <= len(lens) and 0 <= t <= sum(lens),
            f"split (s, t) = ({s}, {t}) outside 0 <= s <= R = {len(lens)}, 0 <= t <= N = {sum(lens)}; seq_lens = {lens}")
    require(not two_chunk or s < len(lens), f"two-chunk split at s = {s} names no request (R = {len(lens)}); seq_lens = {lens}")


def _checked(target: Target, case: Case) -> tuple[int, int, bool, list[int]]:
    lens = _lens(case)
    s, t, two = _split(target, case)
    _in_range(s, t, two, lens)
    return s, t, two, lens


def _indices_in_range(target: Target, case: Case) -> None:
    _checked(target, case)


def _tokens_follow_requests(target: Target, case: Case) -> None:
    s, t, two, lens = _checked(target, case)
    p = _prefix(lens)
    if two:
        require(p[s] <= t <= p[s + 1], f"two-chunk split: token index {t} is outside request {s} ([{p[s]}, {p[s + 1]}]), "
                                       f"which both children hold; seq_lens = {lens}")
    else:
        require(t == p[s], f"token index {t} is not request {s}'s first token ({p[s]}): without the two-chunk mode some "
                           f"token is in the child of another request's; seq_lens = {lens}")


def _two_chunk_only_in_extend(target: Target, case: Case) -> None:
    s, t, two, lens = _checked(target, case)
    mode = case.args["forward_mode"]
    if two:
        require(mode == "extend", f"two-chunk split (request {s} cut at token {t}) in {mode} mode; seq_lens = {lens}")
        require(t == sum(lens) // 2, f"two-chunk cut at token {t}, expected N // 2 = {sum(lens) // 2}; seq_lens = {lens}")


def _cut_request_in_both(target: Target, case: Case) -> None:
    s, t, two, lens = _checked(target, case)
    if two:
        p = _prefix(lens)
        require(p[s] < t < p[s + 1], f"two-chunk split cuts request {s} ([{p[s]}, {p[s + 1]})) at token {t}: child "
                                     f"{'A' if t <= p[s] else 'B'} holds it with extend length {min(t - p[s], p[s + 1] - t)}; "
                                     f"seq_lens = {lens}, threshold {case.args['threshold']}")


def _both_children_real(target: Target, case: Case) -> None:
    lens = _lens(case)
    mode, thr = case.args["forward_mode"], case.args["threshold"]
    with_tokens = sum(1 for x in lens if x > 0)
    # The two-chunk mode needs a lopsided balanced split, L outside [N * thr, N * (1 - thr)] as the engine computes
    # it in floats: a threshold below float resolution (1 - thr == 1) cannot make "everything left" lopsided.
    two_chunk_possible = 0 < thr and 1.0 - thr < 1.0
    possible = (len(lens) >= 2 if mode in ("decode", "target_verify") else
                mode == "extend" and (sum(lens) >= 2 if two_chunk_possible else with_tokens >= 2))
    if not possible:
        return
    _s, t, _two = _split(target, case)
    require(0 < t < sum(lens), f"split at token {t} of N = {sum(lens)} leaves child {'A' if t <= 0 else 'B'} without a real "
                               f"token, though the {mode} step can give both one; seq_lens = {lens}, threshold {thr}")


def _matches_oracle(target: Target, case: Case) -> None:
    got = _split(target, case)
    expected = oracle.tbo_split(*(case.args[k] for k in ARGUMENTS))
    require(got == expected, f"(split_seq_index, split_token_index, two_chunk) = {got}, expected {expected}")


# The rule's structural properties first, the exact answer last: a release matrix reports the first that fails.
PROPERTIES = (
    Property("indices_in_range", "0 <= s <= R, 0 <= t <= N, and s < R in the two-chunk mode", _indices_in_range, label=SAFETY),
    Property("tokens_follow_requests", "without the two-chunk mode t = P[s] (every token and request in exactly one "
             "child); with it P[s] <= t <= P[s+1] (request s in both)", _tokens_follow_requests, label=SAFETY),
    Property("two_chunk_only_in_extend", "the two-chunk mode only in extend steps, cutting at t = N // 2",
             _two_chunk_only_in_extend, label=CHOICE),
    Property("cut_request_in_both", "a two-chunk cut leaves the cut request at least one token in each child "
             "(P[s] < t < P[s+1]): child A's last extend length t - P[s] and child B's first P[s+1] - t are >= 1",
             _cut_request_in_both, label=CHOICE),
    Property("both_children_real", "both children hold a real token whenever the mode's splits allow it "
             "(decode/verify: R >= 2; extend: N >= 2 with threshold > 0, or two requests with tokens)", _both_children_real, label=SAFETY),
    inputs_unchanged(ARGUMENTS),
    Property("matches_oracle", "(s, t, two_chunk) is the split of the rule, exactly", _matches_oracle, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", tbo_split_numpy.tbo_split, "one cumulative sum: first growth of |2L - N|, searchsorted for N // 2"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: any forward mode, R from 0, extend lengths from 0, any threshold in [0, 0.5]",
    "engine": "what SGLang's TBO preparers pass: R >= 1 and extend lengths >= 1 outside idle, no request in idle, the "
              "threshold a server-argument value (0.48 default, 0 two-chunk off, 0.5 at most)",
})

ERROR_INPUTS = (
    ErrorInput({"forward_mode": "prefill", "seq_lens": [1], "threshold": 0.48}, ValueError,
               r"forward_mode must be one of .*got 'prefill'"),
    ErrorInput({"forward_mode": 3, "seq_lens": [1], "threshold": 0.48}, TypeError, r"forward_mode must be a str, got int 3"),
    ErrorInput({"forward_mode": "extend", "seq_lens": [1, -2], "threshold": 0.48}, ValueError, r"seq_lens\[1\] must be >= 0, got -2"),
    ErrorInput({"forward_mode": "extend", "seq_lens": [1.0], "threshold": 0.48}, TypeError, r"seq_lens must hold ints"),
    ErrorInput({"forward_mode": "extend", "seq_lens": [1], "threshold": 0.7}, ValueError, r"threshold must be in \[0, 0.5\], got 0.7"),
    ErrorInput({"forward_mode": "extend", "seq_lens": [1], "threshold": "0.4"}, TypeError, r"threshold must be a float, got str"),
    ErrorInput({"forward_mode": "decode", "seq_lens": [1, 2], "threshold": 0.48}, ValueError, r"seq_lens must be all 1 in decode"),
    ErrorInput({"forward_mode": "target_verify", "seq_lens": [2, 3], "threshold": 0.48}, ValueError,
               r"seq_lens must be all equal in target_verify"),
    ErrorInput({"forward_mode": "idle", "seq_lens": [1], "threshold": 0.48}, ValueError, r"seq_lens must be empty in idle"),
)

EXAMPLES = (
    strategies.case_of("extend", [1, 1, 1], 0.0),  # a tie of the balanced split: it moves on
    strategies.case_of("extend", [60, 2, 2], 0.48),  # lopsided: two-chunk, request 0 cut at N // 2
    strategies.case_of("target_verify", [4, 4, 4], 0.48),
    strategies.case_of("idle", [], 0.48),
)


def _labels(case: Case) -> list[str]:
    lens, mode = _lens(case), case.args["forward_mode"]
    out = [mode]
    if mode == "extend" and oracle.is_two_chunk(lens, case.args["threshold"]):
        out.append("two-chunk")
    if len(lens) == 1:
        out.append("R == 1")
    return out


CONTRACT = registry.register(Contract(
    name="tbo_split",
    title="Two-batch-overlap split",
    section="J",
    signature="tbo_split(forward_mode: str, seq_lens: int array, threshold: float) -> (split_seq_index, split_token_index, two_chunk)",
    arguments=ARGUMENTS,
    oracle=oracle.tbo_split,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Child A is tokens [0, t) and requests [0, s), and request s too in the two-chunk mode (its first t - P[s] "
          "tokens); child B the rest. Results compare as Python ints and a bool.",
))
