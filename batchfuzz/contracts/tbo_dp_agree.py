"""Contract M: the data-parallel ranks' agreement on two-batch overlap (docs/contracts.md, contract M).

A target takes every rank's gathered flag, forward mode and split index and
returns every rank's answer, so the properties judge the ranks together.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, require
from batchfuzz.contracts.tbo_dp_agree_variants import VARIANTS
from batchfuzz.impl import tbo_dp_agree_numpy
from batchfuzz.reference import tbo_dp_agree as oracle
from batchfuzz.reference.tbo_dp_agree import FORWARD_MODES, IDLE
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import tbo_dp_agree as strategies

ARGUMENTS = oracle.ARGUMENTS
Answer = tuple[int | None, str | None]


def _answer(r: int, got: Any) -> Answer:
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise ResultTypeError(f"rank {r}: an answer must be (split_seq_index, forward_mode), got {got!r:.120}")
    split, mode = got
    if split is not None and (isinstance(split, bool) or not isinstance(split, (int, np.integer))):
        raise ResultTypeError(f"rank {r}: split_seq_index must be an int or None, got {type(split).__name__} {split!r:.60}")
    if mode is not None and mode not in FORWARD_MODES:
        raise ResultTypeError(f"rank {r}: forward_mode must be one of {FORWARD_MODES} or None, got {mode!r:.60}")
    return (None if split is None else int(split)), mode


def _answers(target: Target, case: Case) -> list[Answer]:
    """Every rank's ``(split_seq_index, forward_mode)``, one per rank, as Python values."""
    got = target(*(case.args[k] for k in ARGUMENTS))
    if not isinstance(got, (tuple, list)) or len(got) != len(case.args["can_run_tbo"]):
        raise ResultTypeError(f"tbo_dp_agree must return one answer per rank ({len(case.args['can_run_tbo'])}), "
                              f"got {got!r:.120}")
    return [_answer(r, a) for r, a in enumerate(got)]


def _runs(answers: list[Answer]) -> list[int]:
    """The ranks that run two-batch overlap (a split index given)."""
    return [r for r, (split, _mode) in enumerate(answers) if split is not None]


def _agree(target: Target, case: Case) -> None:
    answers = _answers(target, case)
    decisions = {(split is not None, mode) for split, mode in answers}
    require(len(decisions) == 1, f"the ranks decide differently: {answers}; flags {case.args['can_run_tbo']}, "
                                 f"modes {case.args['forward_modes']}")


def _every_rank_can(target: Target, case: Case) -> None:
    runs = _runs(_answers(target, case))
    can, enabled = case.args["can_run_tbo"], case.args["enable_two_batch_overlap"]
    require(not runs or (enabled and all(can)), f"ranks {runs} run two-batch overlap, though enabled = {enabled} and "
                                                f"the flags are {can}")


def _mode(target: Target, case: Case) -> None:
    answers = _answers(target, case)
    busy = sorted({m for m in case.args["forward_modes"] if m != IDLE})
    for r, (split, mode) in enumerate(answers):
        if split is None:
            require(mode is None, f"rank {r} runs no overlap but is given the mode {mode!r}")
        else:
            require(busy == [mode], f"rank {r} runs overlap in mode {mode!r}; the ranks that are not idle are in "
                                    f"{busy or 'none'} (modes {case.args['forward_modes']})")


def _own_split(target: Target, case: Case) -> None:
    answers = _answers(target, case)
    for r in _runs(answers):
        want = case.args["split_seq_index"][r]
        require(answers[r][0] == want, f"rank {r} runs overlap with split index {answers[r][0]}, its own is {want}")


def _matches_oracle(target: Target, case: Case) -> None:
    answers = _answers(target, case)
    want = oracle.tbo_dp_agree(*(case.args[k] for k in ARGUMENTS))
    require(answers == want, f"answers {answers}, expected {want}")


PROPERTIES = (
    Property("ranks_agree", "every rank decides the same: overlap or not, and the same mode", _agree, label=SAFETY),
    Property("runs_only_if_every_rank_can", "a rank runs overlap only when it is enabled and every rank's flag is true",
             _every_rank_can, label=SAFETY),
    Property("mode_of_busy_ranks", "overlap runs in the one mode of every rank that is not idle (so not with every "
             "rank idle); a rank without overlap has no mode", _mode, label=SAFETY),
    Property("keeps_own_split", "a rank that runs overlap keeps its own split index", _own_split, label=SAFETY),
    Property("matches_oracle", "every rank's (split_seq_index, forward_mode) of the rule, exactly", _matches_oracle, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", tbo_dp_agree_numpy.tbo_dp_agree, "np.unique of the modes of the ranks not idle"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: 1 to 8 ranks, any flag, mode and split index each, overlap on or off",
    "engine": "what SGLang's preparer gathers: an idle rank has the flag true and split index 0",
})

ERROR_INPUTS = (
    ErrorInput({"can_run_tbo": [], "forward_modes": [], "split_seq_index": [], "enable_two_batch_overlap": True},
               ValueError, r"can_run_tbo must have at least one rank, got \[\]"),
    ErrorInput({"can_run_tbo": [True], "forward_modes": ["mixed"], "split_seq_index": [0], "enable_two_batch_overlap": True},
               ValueError, r"forward_modes\[0\] must be one of 'extend', "),
    ErrorInput({"can_run_tbo": [True, 1], "forward_modes": ["idle"] * 2, "split_seq_index": [0, 0],
                "enable_two_batch_overlap": True}, TypeError, r"can_run_tbo\[1\] must be a bool, got int 1"),
    ErrorInput({"can_run_tbo": [True], "forward_modes": ["idle"], "split_seq_index": [0, 1],
                "enable_two_batch_overlap": True}, ValueError, r"split_seq_index must have one entry per rank \(1, "),
    ErrorInput({"can_run_tbo": [True], "forward_modes": ["idle"], "split_seq_index": [-1],
                "enable_two_batch_overlap": True}, ValueError, r"split_seq_index\[0\] must be >= 0, got -1"),
)

EXAMPLES = (
    strategies.case_of([True, True], ["decode", "idle"], [3, 0]),
    strategies.case_of([True, False], ["extend", "extend"], [1, 2]),
    strategies.case_of([True, True], ["extend", "decode"], [1, 2]),
    strategies.case_of([True, True], ["idle", "idle"], [0, 0]),
)


def _labels(case: Case) -> list[str]:
    modes = case.args["forward_modes"]
    busy = {m for m in modes if m != IDLE}
    return ([f"{len(modes)} ranks", "all idle" if not busy else ("modes agree" if len(busy) == 1 else "modes differ")]
            + ([] if all(case.args["can_run_tbo"]) else ["a rank cannot"]))


CONTRACT: Any = registry.register(Contract(
    name="tbo_dp_agree",
    title="Data-parallel agreement on two-batch overlap",
    section="M",
    signature="tbo_dp_agree(can_run_tbo: [bool], forward_modes: [str], split_seq_index: [int], "
              "enable_two_batch_overlap: bool) -> [(split_seq_index | None, forward_mode | None), ...]",
    arguments=ARGUMENTS,
    oracle=oracle.tbo_dp_agree,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="One entry per rank in every list argument and in the result; a rank's answer is its split index and "
          "the agreed mode when overlap runs, (None, None) when not.",
))
