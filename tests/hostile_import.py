"""A module that never finishes importing (a target whose module hangs at
import: tests/test_faults.py). It sleeps rather than spins, as ``hostile.hang``
does, for the same reason."""

import time

while True:
    time.sleep(0.05)


def even(num_reqs: int, num_tokens: int) -> list[int]:  # pragma: no cover - never reached
    return [num_tokens // num_reqs] * num_reqs
