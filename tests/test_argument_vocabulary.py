"""One vocabulary of argument checks (``reference/_args.py``): the public
strategies raise Hypothesis's ``InvalidArgument`` with its messages, the numpy
and the torch forms of a checker reject the same bad arguments with the same
exception and message, and the checks on metadata read no value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis.errors import InvalidArgument

from batchfuzz import strategies
from batchfuzz.impl import allow_microbatching_numpy
from batchfuzz.reference import _args
from batchfuzz.strategies import _exhaustive
from tests._lazy import LazyModule

torch = LazyModule("torch")
allow_microbatching_torch = LazyModule("batchfuzz.impl.allow_microbatching_torch")
split_dummy_tokens_torch = LazyModule("batchfuzz.impl.split_dummy_tokens_torch")


@pytest.mark.parametrize(("build", "message"), [
    (lambda: strategies.max_num_seqs(0), "max_value must be >= 1, got 0"),
    (lambda: strategies.max_num_seqs(2.5), "max_value must be an int, got float 2.5"),
    (lambda: strategies.stale_arrays(-1), "size must be >= 0, got -1"),
    (lambda: strategies.stale_arrays(3, np.float32), "dtype must be one of dtype('int32'), dtype('int64'), got dtype('float32')"),
    (lambda: strategies.stale_arrays(3, "no such dtype"), "dtype must be a numpy dtype, got 'no such dtype'"),
    (lambda: strategies.general_steps(min_num_reqs=3, max_num_reqs=1), "min_num_reqs must be <= max_num_reqs (1), got 3"),
    (lambda: strategies.num_reqs_and_tokens(shapes=()), "shapes must not be empty, got ()"),
    (lambda: strategies.realizable_steps(max_reqs=0), "realizable_steps: max_reqs must be >= 1, got 0"),
])
def test_public_strategies_raise_invalid_argument_in_the_vocabulary(build, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as info:
        build()
    assert str(info.value) == message


def test_the_vocabulary_messages_are_the_checks_messages() -> None:
    with pytest.raises(ValueError, match=r"^num_reqs must be <= max_num_reqs \(2\), got 3$"):
        _args.check_int("num_reqs", 3, minimum=0, maximum=2, maximum_name="max_num_reqs")
    assert _args.int_message("num_reqs", 3, maximum=2, maximum_name="max_num_reqs") == "num_reqs must be <= max_num_reqs (2), got 3"
    assert _args.int_message("num_reqs", 2, maximum=2) == ""
    with pytest.raises(ValueError, match=r"^scope must be one of 'small', got 'big'$"):
        _exhaustive.check_scope("big", {"small": None})  # type: ignore[dict-item]


def _first_error(call, *args):  # type: ignore[no-untyped-def]
    try:
        call(*args)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    raise AssertionError("no error")


def test_numpy_and_torch_checkers_reject_alike() -> None:
    """The drift this vocabulary removed: the same bad argument, the same exception and message on both forms."""
    np_check = allow_microbatching_numpy.ExactMicrobatchCheck(2, [3], [4], 10)
    t_check = allow_microbatching_torch.ExactMicrobatchCheckTorch(2, [3], [4], 10, 5)
    c, q, t = np.zeros(2, np.int32), np.ones(2, np.int32), np.zeros((2, 3), np.int32)
    cases = [
        (3, c, q, [t]), (2, c[:1], q, [t]), (2, c, q[:, None], [t]), (2, c, q.astype(np.float32), [t]),
        (2, c, q, [t[:1]]), (2, c, q, [t[:, :2]]), (2, c, q, [t[0]]), (2, c, q, [t.astype(np.int16)]), (2, c, q, t),
    ]
    for n, cc, qq, tables in cases:
        on_torch = [torch.from_numpy(x) for x in tables] if isinstance(tables, list) else torch.from_numpy(tables)
        np_error = _first_error(np_check, n, cc, qq, tables)
        t_error = _first_error(t_check, n, torch.from_numpy(cc), torch.from_numpy(qq), on_torch)
        assert np_error[0] is t_error[0], (np_error, t_error)
        assert np_error[1].replace("torch.", "").replace("array", "tensor") == t_error[1].replace("torch.", "").replace(
            "array", "tensor"), (np_error, t_error)
    for cls, extra in ((allow_microbatching_numpy.ExactMicrobatchCheck, ()), (allow_microbatching_torch.ExactMicrobatchCheckTorch, (5,))):
        assert _first_error(cls, 2, 3, [4], 10, *extra) == (TypeError, "widths and block_sizes must be lists of ints, got int and list")


def test_metadata_checks_read_no_value() -> None:
    meta = torch.zeros((4, 3), dtype=torch.int32, device="meta")  # any read of a value raises
    _args.check_buffer("t", meta, torch.Tensor, ndim=2, rows=4, cols=3)
    with pytest.raises(ValueError, match=r"^t must have shape \(>= 5, 3\), got \(4, 3\)$"):
        _args.check_buffer("t", meta, torch.Tensor, ndim=2, rows=5, cols=3)
    with pytest.raises(TypeError, match=r"^num_tokens must have dtype int32 or int64, got torch.float32$"):
        split_dummy_tokens_torch.split_dummy_tokens_batched(2, torch.zeros(3, dtype=torch.float32, device="meta"))
