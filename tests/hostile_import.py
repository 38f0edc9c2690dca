"""A module that never finishes importing (a target whose module hangs at
import: tests/test_faults.py)."""

while True:
    pass


def even(num_reqs: int, num_tokens: int) -> list[int]:  # pragma: no cover - never reached
    return [num_tokens // num_reqs] * num_reqs
