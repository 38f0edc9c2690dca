"""Contract A: the dummy token split (docs/contracts.md, contract A)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, as_int_array, assert_array_equal, assert_non_decreasing, require
from batchfuzz.consumers import dummy_block_table, gather_block_ids
from batchfuzz.contracts.split_dummy_tokens_variants import VARIANTS
from batchfuzz.impl import split_dummy_tokens_numpy
from batchfuzz.reference import split_dummy_tokens as oracle
from batchfuzz.reference._args import ceil_div
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import split_dummy_tokens as strategies


def _split(target: Target, case: Case) -> np.ndarray:
    r, n = case.args["num_reqs"], case.args["num_tokens"]
    out = as_int_array(target(r, n), "split_dummy_tokens result")
    require(out.shape == (r,), f"result has shape {out.shape}, expected ({r},) for num_reqs={r}")
    return out


def _matches_oracle(target: Target, case: Case) -> None:
    expected = oracle.split_dummy_tokens(**case.args)
    assert_array_equal(_split(target, case), expected, "split_dummy_tokens")


def _sum(target: Target, case: Case) -> None:
    n = _split(target, case)
    require(int(n.sum()) == case.args["num_tokens"], f"sum(n) = {int(n.sum())} != num_tokens = {case.args['num_tokens']}; n = {n.tolist()}")


def _max(target: Target, case: Case) -> None:
    n = _split(target, case)
    r, total = case.args["num_reqs"], case.args["num_tokens"]
    require(int(n.max()) == ceil_div(total, r), f"max(n) = {int(n.max())} != ceil(N / R) = {ceil_div(total, r)}")


def _min(target: Target, case: Case) -> None:
    n = _split(target, case)
    r, total = case.args["num_reqs"], case.args["num_tokens"]
    require(int(n.min()) == total // r, f"min(n) = {int(n.min())} != N // R = {total // r}")


def _sorted(target: Target, case: Case) -> None:
    assert_non_decreasing(_split(target, case), "n")


def _positive(target: Target, case: Case) -> None:
    n = _split(target, case)
    if (n < 1).any():
        i = int(np.argmax(n < 1))
        raise PropertyViolation(f"n[{i}] = {int(n[i])} < 1: a dummy request without tokens")


def _max_model_len(target: Target, case: Case) -> None:
    n = _split(target, case)
    limit = case.context["max_model_len"]
    i = int(np.argmax(n))
    require(int(n[i]) <= limit, f"request {i} gets {int(n[i])} tokens > max_model_len = {limit} (N = {case.args['num_tokens']} <= R * L)")


KERNEL_BLOCK_SIZE = 16


@contextlib.contextmanager
def _one_cpu_thread(device: str) -> Iterator[None]:
    """Run torch's CPU ops single-threaded: on a shared 2-core machine its
    thread pool makes these small ops (at most 131072 tokens) about 15x
    slower (18 ms an example instead of 1.2 ms, measured by ``batchfuzz bench
    --loop``); an isolated worker runs single-threaded anyway."""
    import torch

    threads = torch.get_num_threads()
    if device != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _attention_in_bounds(target: Target, case: Case) -> None:
    """Run an attention-like gather over the dummy batch (``batchfuzz.consumers``).

    The block table has ceil(max_model_len / 16) columns per request, as the
    engine sizes it. The kernel runs on ``BATCHFUZZ_KERNEL_DEVICE`` (default
    cpu): on the CPU a read past a row is an IndexError, reported here as a
    violation; on CUDA it is a device fault, which only an isolated worker
    (the default execution mode of ``batchfuzz check`` and ``fuzz``) survives.
    """
    import torch

    n = _split(target, case)
    r, limit = case.args["num_reqs"], case.context["max_model_len"]
    device = os.environ.get("BATCHFUZZ_KERNEL_DEVICE", "cpu")
    with _one_cpu_thread(device):
        table = dummy_block_table(r, limit, KERNEL_BLOCK_SIZE, device)
        try:
            ids = gather_block_ids(torch.as_tensor(n), table, KERNEL_BLOCK_SIZE)
        except IndexError as exc:
            raise PropertyViolation(f"attention over the dummy batch reads past a block-table row "
                                    f"({table.shape[1]} blocks of {KERNEL_BLOCK_SIZE} for max_model_len={limit}): {exc}") from None
        # The request owning each block read (floor division, on the host).
        owner = (ids.cpu().numpy().astype(np.int64) - 1) // table.shape[1]
    expected_owner = np.repeat(np.arange(r), n)
    assert_array_equal(owner, expected_owner, "request whose blocks each token reads")


PROPERTIES = (
    Property("matches_oracle", "n[i] = N // R + (1 if i >= R - N % R else 0)", _matches_oracle, label=CHOICE),
    Property("sum_is_num_tokens", "sum(n) == N", _sum, label=SAFETY),
    Property("max_is_ceil", "max(n) == ceil(N / R)", _max, label=SAFETY),
    Property("min_is_floor", "min(n) == N // R", _min, label=CHOICE),
    Property("non_decreasing", "non-decreasing (the extra tokens sit at the tail)", _sorted, label=CHOICE),
    Property("every_request_has_a_token", "every n[i] >= 1", _positive, label=SAFETY),
    Property("within_max_model_len", "for any max_model_len L with N <= R * L, max(n) <= L", _max_model_len, label=SAFETY),
    Property("dummy_attention_in_bounds", "attention on the dummy batch reads only each request's own block-table row "
             "(consequence of max(n) <= max_model_len; the shipped crash)", _attention_in_bounds, label=SAFETY),
)


IMPLEMENTATIONS = (
    registry.host_impl("numpy", split_dummy_tokens_numpy.split_dummy_tokens, "vectorised numpy, int64"),
    registry.torch_impl("torch", "batchfuzz.impl.split_dummy_tokens_torch:bind", "torch, int64, CPU and CUDA"),
    registry.host_impl("engine.input_batch", split_dummy_tokens_numpy.input_batch_builder, "dummy input-batch builder (int32)"),
    registry.host_impl("engine.dummy_run", split_dummy_tokens_numpy.dummy_run, "model runner dummy run (list)"),
    registry.host_impl("engine.lora_hook", "batchfuzz.impl.split_dummy_tokens_torch:lora_capture_hook",
                       "LoRA capture hook (CPU tensor)"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every 1 <= R <= N of the realistic sizes (R up to 1024, N up to 131072), with the remainder edges",
    "engine": "the dummy runs an engine makes: N a CUDA-graph capture size or a token budget, R = min(N, max_num_seqs), "
              "or a uniform-decode run R = N // q; the precondition is the same (the input-batch builder asserts 0 < R <= N)",
})

ERROR_INPUTS = (
    ErrorInput({"num_reqs": 0, "num_tokens": 4}, ValueError, r"num_reqs must be >= 1, got 0"),
    ErrorInput({"num_reqs": -3, "num_tokens": 4}, ValueError, r"num_reqs must be >= 1, got -3"),
    ErrorInput({"num_reqs": 5, "num_tokens": 4}, ValueError, r"num_tokens must be >= num_reqs.*num_tokens=4 < num_reqs=5"),
    ErrorInput({"num_reqs": 1, "num_tokens": 0}, ValueError, r"num_tokens must be >= 1, got 0"),
    ErrorInput({"num_reqs": 2.0, "num_tokens": 4}, TypeError, r"num_reqs must be an int, got float 2.0"),
    ErrorInput({"num_reqs": 2, "num_tokens": "4"}, TypeError, r"num_tokens must be an int, got str '4'"),
    ErrorInput({"num_reqs": True, "num_tokens": 4}, TypeError, r"num_reqs must be an int, got bool True"),
)

EXAMPLES = (
    # The reported crash: capture size 496, max_num_seqs 256, max_model_len 16.
    Case({"num_reqs": 256, "num_tokens": 496}, {"max_model_len": 16}),
    Case({"num_reqs": 1, "num_tokens": 1}, {"max_model_len": 1}),
    Case({"num_reqs": 1024, "num_tokens": 65535}, {"max_model_len": 64}),
)


def _labels(case: Case) -> list[str]:
    r, n = case.args["num_reqs"], case.args["num_tokens"]
    rem = n % r
    out = [f"N % R == {'0' if rem == 0 else '1' if rem == 1 else 'R-1' if rem == r - 1 else 'other'}"]
    if r == 1:
        out.append("R == 1")
    if r == n:
        out.append("R == N")
    if case.context.get("max_model_len") == ceil_div(n, r):
        out.append("max_model_len tight")
    if n > 32767:
        out.append("N > int16 max")
    return out


CONTRACT = registry.register(Contract(
    name="split_dummy_tokens",
    title="Dummy token split",
    section="A",
    signature="split_dummy_tokens(num_reqs: int, num_tokens: int) -> int sequence",
    arguments=("num_reqs", "num_tokens"),
    oracle=oracle.split_dummy_tokens,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Integer results compare exactly; any integer dtype is accepted from a target. "
          "In-project numpy/torch implementations return int64, engine.input_batch int32.",
))
