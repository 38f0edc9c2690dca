"""The exhaustive contract-A sweep on the CPU, over a smaller domain, and its
power to fail: a batched remainder-to-last split is caught."""

from __future__ import annotations

import pytest

from tests._lazy import LazyModule

torch = LazyModule("torch")
sweep = LazyModule("batchfuzz.sweep")
split_dummy_tokens_torch = LazyModule("batchfuzz.impl.split_dummy_tokens_torch")


def test_cpu_sweep_all_properties_hold() -> None:
    res = sweep.sweep_split(split_dummy_tokens_torch.split_dummy_tokens_batched, max_reqs=256, max_tokens=4096, device="cpu")
    assert res.ok, res.failures
    assert res.pairs == sum(4096 - r + 1 for r in range(1, 257))


def _remainder_to_last(num_reqs: int, num_tokens: torch.Tensor) -> torch.Tensor:
    n = num_tokens.to(torch.int64).unsqueeze(1)
    out = (n // num_reqs).repeat(1, num_reqs)
    out[:, -1] += (n % num_reqs).squeeze(1)
    return out


def test_sweep_catches_the_shipped_split() -> None:
    res = sweep.sweep_split(_remainder_to_last, max_reqs=8, max_tokens=64, device="cpu")
    assert set(res.failures) == {"matches_oracle", "max_is_ceil", "within_max_model_len"}
    assert res.failures["max_is_ceil"] == (3, 5)


def test_sweep_reports_progress_after_every_request_count() -> None:
    seen: list[tuple[int, int]] = []
    res = sweep.sweep_split(split_dummy_tokens_torch.split_dummy_tokens_batched, max_reqs=5, max_tokens=20, device="cpu",
                      on_progress=lambda r, k: seen.append((k, r.pairs)))
    assert [k for k, _ in seen] == [1, 2, 3, 4, 5]
    assert [p for _, p in seen] == [sum(20 - r + 1 for r in range(1, k + 1)) for k in range(1, 6)]
    assert seen[-1][1] == res.pairs


def test_the_sweep_command_prints_plain_lines_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal the sweep's progress is plain heartbeat lines (batchfuzz.progress; tests/test_progress.py): no bar."""
    from batchfuzz.cli import main

    assert main(["sweep", "--max-reqs", "4", "--max-tokens", "16"]) == 0
    out = capsys.readouterr().out
    assert "all properties hold" in out and "\x1b" not in out


def _extras_first(num_reqs: int, num_tokens: torch.Tensor) -> torch.Tensor:
    n = num_tokens.unsqueeze(1)
    req = torch.arange(num_reqs, dtype=n.dtype).unsqueeze(0)
    return n // num_reqs + (req < n % num_reqs).to(n.dtype)


def _drops_remainder(num_reqs: int, num_tokens: torch.Tensor) -> torch.Tensor:
    return (num_tokens // num_reqs).unsqueeze(1).repeat(1, num_reqs)


@pytest.mark.parametrize(("split", "failing"), [
    (_extras_first, {"matches_oracle", "non_decreasing"}),
    (_drops_remainder, {"matches_oracle", "sum_is_num_tokens", "max_is_ceil"}),
])
def test_the_closed_form_is_checked_through_what_characterises_it(split: object, failing: set[str]) -> None:
    """The sweep's matches_oracle is not the implementation's own expression: a
    permutation of the right counts fails it (with non_decreasing), and so does
    a split with the wrong sum."""
    res = sweep.sweep_split(split, max_reqs=6, max_tokens=40, device="cpu")  # type: ignore[arg-type]
    assert set(res.failures) == failing
    assert res.failures["matches_oracle"] == (2, 3)  # the first (R, N) in the sweep's order with a remainder
