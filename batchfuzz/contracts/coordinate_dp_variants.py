"""Known buggy variants of contract I, data-parallel coordination, modelled on
the public history of vLLM's coordination code (docs/dp-coordination.md) and
on the new model runner's shipped rule.

Every variant is a rank function (``batchfuzz.impl._dp``): each rank
writes its column of the exchanged table, all-reduces it and decides from
the reduced table, as the engine does, so the variant runs unchanged as
real processes (``batchfuzz.distributed``) and in this process; its
canonical-signature form runs in this process. Plain code with one flag per
bug: variants are judged, not fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batchfuzz.impl._dp import Config, RankStep, ranks_target
from batchfuzz.reference.coordinate_dp import FULL, NONE, RankDecision, last_microbatch_empty, smallest_fitting
from batchfuzz.registry import Variant

if TYPE_CHECKING:  # torch is imported when a variant runs: `batchfuzz list` and usage errors stay light
    import torch

AllReduce = Callable[["torch.Tensor"], None]


@dataclass(frozen=True)
class _Bugs:
    """One flag per bug (the defaults: the correct rule)."""

    pad_when_split: bool = True
    pad_piecewise: bool = True
    across_from_unpadded: bool = False
    refusal_ubatches: int | None = None
    refusal_rank: str = "fewest"
    veto: bool = True
    mode_max: bool = False
    graph_needs_full: bool = True
    refuse: bool = True
    graph_check_two: bool = False
    splits: bool = True
    pad_to_smallest: bool = False


def _decide(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config,
            bugs: _Bugs = _Bugs()) -> RankDecision:
    import torch

    n, (decode_thr, prefill_thr), _sizes, ubatch_sizes = config
    table = torch.zeros(6, world, dtype=torch.int32)
    for row, value in enumerate(step):
        table[row, rank] = value
    all_reduce(table)
    tokens = [int(x) for x in table[0]]
    padded = [int(x) for x in table[1]]
    votes = [int(x) for x in table[2]]
    modes = [int(x) for x in table[3]]
    uniform = [int(x) for x in table[4]]
    mode = max(modes) if bugs.mode_max else min(modes)
    if ubatch_sizes is None:
        ok = [v == 1 and t >= (decode_thr if u > 0 else prefill_thr) for v, t, u in zip(votes, tokens, uniform, strict=True)]
    else:
        same = uniform[0] > 0 and all(u == uniform[0] for u in uniform)
        ok = [v == 1 for v in votes]
        ok = [o and min(tokens) >= (decode_thr if same else prefill_thr) for o in ok]
    vote = all(ok) if bugs.veto else any(ok)
    checked = {"fewest": min(tokens), "largest": max(tokens), "own": tokens[rank]}[bugs.refusal_rank]
    empty = last_microbatch_empty(checked, max(padded), bugs.refusal_ubatches or n)
    split = bugs.splits and vote and not (bugs.refuse and empty)
    source = tokens if bugs.across_from_unpadded else padded
    largest = min if bugs.pad_to_smallest else max
    if split:
        run = largest(source)
        if ubatch_sizes is not None:
            graph = smallest_fitting(list(ubatch_sizes), max(padded))
            fits = graph is not None and (2 * min(tokens) >= graph if bugs.graph_check_two
                                          else not last_microbatch_empty(min(tokens), graph, n))
            if (mode == FULL or not bugs.graph_needs_full) and graph is not None and fits:
                return RankDecision(True, (graph,) * world, FULL, graph)
            run, mode = max(tokens), NONE
        if not bugs.pad_when_split and mode == NONE:
            return RankDecision(True, tuple(source), mode, source[rank])
        return RankDecision(True, (run,) * world, mode, run)
    if mode != NONE and (bugs.pad_piecewise or mode == FULL):
        run = largest(source)
        return RankDecision(False, (run,) * world, mode, run)
    if mode != NONE:
        return RankDecision(False, tuple(padded), mode, padded[rank])
    own = tokens if ubatch_sizes is not None else padded
    return RankDecision(False, tuple(own), NONE, own[rank])


# ---------------------------------------------------------------- the rank functions (referenced by name)


def dp_padding_optional(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """DP padding only when the agreed graph mode asks for it: a split eager step leaves the ranks at their own counts."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(pad_when_split=False))


def padding_only_full_graphs(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Pads the ranks to one count only for FULL graphs: PIECEWISE runs keep their own counts."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(pad_piecewise=False))


def counts_from_unpadded(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """The agreed count (and descriptor) from the largest real count, not the largest padded one."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(across_from_unpadded=True))


def pads_to_smallest(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Pads every rank to the smallest padded count, not the largest."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(pad_to_smallest=True))


def refusal_for_two_ubatches(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """The empty-microbatch refusal computed for two microbatches whatever num_ubatches is."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(refusal_ubatches=2))


def refusal_on_own_rank(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Each rank checks the last microbatch of its own step, not of the rank with the fewest tokens."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(refusal_rank="own"))


def refusal_on_largest_rank(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """The last-microbatch check on the rank with the most real tokens."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(refusal_rank="largest"))


def any_vote_splits(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """One rank's yes is enough to split (the veto ignored)."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(veto=False))


def mode_is_max(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """The agreed graph mode is the largest any rank asks for, not the smallest."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(mode_max=True))


def split_graph_ignores_modes(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """A split step dispatches the microbatched FULL graph whatever mode the ranks can run."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(graph_needs_full=False))


def graph_check_times_two(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Keeps the microbatched graph unless 2 * fewest < graph size: two microbatches assumed, and ``<`` where an
    empty second microbatch needs ``<=``."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(graph_check_two=True))


def no_refusal(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Splits even when a rank's last microbatch holds no real token (it would run as dummy work)."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(refuse=False))


def never_splits(rank: int, world: int, all_reduce: AllReduce, step: RankStep, config: Config) -> RankDecision:
    """Never microbatches (a coordinator that lost the split)."""
    return _decide(rank, world, all_reduce, step, config, _Bugs(splits=False))


def _scribbling(*args: Any) -> list[RankDecision]:
    """The right decision, but zeroes the caller's first real count afterwards."""
    from batchfuzz.reference.coordinate_dp import coordinate_dp

    out = coordinate_dp(*args)
    args[0][0] = 1 if args[0][0] != 1 else 2
    return out


def _target(name: str) -> Callable[..., list[RankDecision]]:
    fn = ranks_target(f"{__name__}:{name}", "in_process")
    fn.__name__ = name
    return fn


SIZES = [2, 4, 8]


def _canon(tokens: list[int], padded: list[int], allow: list[int], modes: list[int], uniform: list[int], reqs: list[int],
           n: int, thresholds: tuple[int, int], sizes: list[int], ubatch_sizes: list[int] | None) -> dict[str, Any]:
    """A canonical counterexample with plain lists (the catalogue then leaves the dtype free)."""
    return {"num_tokens": tokens, "num_tokens_padded": padded, "allow_microbatching": allow, "cudagraph_mode": modes,
            "uniform_decode_len": uniform, "num_reqs": reqs, "num_ubatches": n, "ubatch_thresholds": thresholds,
            "capture_sizes": sizes, "ubatch_capture_sizes": ubatch_sizes}


VARIANTS = (
    Variant("dp_padding_optional", "DP padding only when the agreed graph mode is not NONE: a split eager step runs "
            "unequal counts (vLLM made DP padding optional, #26375)", _target("dp_padding_optional"), "mutant",
            ("padded_counts_equal", "matches_oracle"), _canon([2, 3], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("padding_only_full_graphs", "PIECEWISE runs not padded to one count (padded counts for the wrong graph mode, "
            "#29933)", _target("padding_only_full_graphs"), "mutant", ("padded_counts_equal", "matches_oracle"),
            _canon([1, 1], [1, 2], [1, 1], [1, 1], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("counts_from_unpadded", "the agreed count and descriptor from the largest real count, not the largest padded "
            "one (a descriptor from the unpadded count hung DP/EP, #25906)", _target("counts_from_unpadded"), "mutant",
            ("covers_graph_padding", "matches_oracle"), _canon([1, 1], [2, 2], [1, 1], [1, 1], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("pads_to_smallest", "every rank padded to the smallest padded count: the largest rank loses tokens",
            _target("pads_to_smallest"), "mutant", ("keeps_real_tokens", "covers_graph_padding", "matches_oracle"),
            _canon([1, 2], [1, 2], [1, 1], [1, 1], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("refusal_for_two_ubatches", "the empty-microbatch refusal for two microbatches whatever num_ubatches is "
            "(graphs keyed on the first two ubatches, #43145)", _target("refusal_for_two_ubatches"), "mutant",
            ("no_empty_microbatch", "matches_oracle"), _canon([4, 6], [4, 6], [1, 1], [0, 0], [0, 0], [1, 1], 3, (3, 3), SIZES, None)),
    Variant("refusal_on_own_rank", "each rank checks its own last microbatch: ranks disagree on the split",
            _target("refusal_on_own_rank"), "mutant", ("ranks_agree", "no_empty_microbatch", "matches_oracle"),
            _canon([2, 3], [2, 4], [1, 1], [1, 1], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("refusal_on_largest_rank", "the last-microbatch check on the rank with the most tokens",
            _target("refusal_on_largest_rank"), "mutant", ("no_empty_microbatch", "matches_oracle"),
            _canon([2, 4], [2, 4], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("any_vote_splits", "one rank's yes splits every rank: the veto ignored", _target("any_vote_splits"), "mutant",
            ("veto_respected", "matches_oracle"), _canon([2, 2], [2, 2], [1, 0], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("mode_is_max", "the agreed graph mode is the largest asked for", _target("mode_is_max"), "mutant",
            ("graph_runnable", "matches_oracle"), _canon([1, 1], [1, 1], [1, 1], [0, 1], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("split_graph_ignores_modes", "a split step takes the microbatched FULL graph whatever the ranks' modes (the "
            "new model runner's rule as of vLLM 0.33.0)", _target("split_graph_ignores_modes"), "shipped",
            ("graph_runnable", "matches_oracle"), _canon([2, 2], [2, 2], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, [2])),
    Variant("graph_check_times_two", "keeps the microbatched graph unless 2 * fewest < its size (the new model runner's "
            "check as of vLLM 0.33.0)", _target("graph_check_times_two"), "shipped",
            ("no_empty_microbatch", "matches_oracle"), _canon([2, 2], [2, 2], [1, 1], [2, 2], [0, 0], [1, 1], 2, (2, 2), SIZES, [4])),
    Variant("no_refusal", "splits with microbatches of padding only, run as dummy work (the new model runner's design as of "
            "vLLM 0.33.0)", _target("no_refusal"), "shipped", ("no_empty_microbatch", "matches_oracle"),
            _canon([4, 2], [4, 2], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("never_splits", "never microbatches", _target("never_splits"), "mutant", ("split_when_agreed", "matches_oracle"),
            _canon([2, 2], [2, 2], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
    Variant("scribbles_num_tokens", "the right decision, but changes the caller's num_tokens[0] afterwards", _scribbling,
            "mutant", ("inputs_unchanged",), _canon([1, 1], [1, 1], [1, 1], [0, 0], [0, 0], [1, 1], 2, (2, 2), SIZES, None)),
)
