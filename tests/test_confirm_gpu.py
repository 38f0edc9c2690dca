"""The engine's own attention kernels on a CUDA device (``batchfuzz confirm``):
every shipped variant that reaches attention shows its consequence, every
oracle layout stays clean and matches plain attention.

Needs the kernel files of a release: ``$BATCHFUZZ_KERNELS``, or
``.kernels/vllm-0.33.0`` in the checkout (made by ``batchfuzz confirm
--extract --release 0.33.0 --kernels .kernels/vllm-0.33.0``); skips with the
reason without them, and without CUDA (conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from batchfuzz.case import Case
from batchfuzz.confirm import Worker, confirm_case, confirm_catalogue

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


def _folder() -> str:
    folder = os.environ.get("BATCHFUZZ_KERNELS") or str(ROOT / ".kernels" / "vllm-0.33.0")
    if not (Path(folder) / "manifest.json").is_file():
        pytest.skip(f"no kernel folder at {folder} (batchfuzz confirm --extract --release 0.33.0 --kernels {folder})")
    return folder


@pytest.fixture(scope="module")
def worker():
    with Worker(_folder(), "unified", "cuda") as w:
        yield w


def _assert_shipped_variants_confirmed(worker: Worker) -> None:
    """Every shipped variant of A, B and E has a consequence on the worker's
    kernel (but B's stale tail, clean on its shrunk case), and every control is
    clean and within 0.05 of plain attention."""
    verdicts = confirm_catalogue(worker, ["split_dummy_tokens", "make_dummy", "allow_microbatching"])
    assert verdicts
    for v in verdicts:
        assert v.control_clean, (v.target, v.control.summary())
        assert v.control.max_abs_diff is not None and v.control.max_abs_diff < 0.05, v.target
    reaching = [v for v in verdicts if v.target != "variant:make_dummy.qsl_tail_unwritten"]
    assert all(not v.target_replay.clean for v in reaching), [(v.target, v.consequence()) for v in reaching]


def test_every_shipped_variant_has_a_consequence_and_every_control_is_clean(worker: Worker) -> None:
    _assert_shipped_variants_confirmed(worker)


def test_a_poison_id_past_the_row_is_an_illegal_memory_access_survived(worker: Worker) -> None:
    from batchfuzz import registry

    case = Case({"num_reqs": 32, "num_tokens": 32 * 16 + 31}, {"max_model_len": 32})
    fn = registry.get("split_dummy_tokens").variant("remainder_to_last.input_batch").fn
    v = confirm_case("split_dummy_tokens", case, fn, "remainder on last", worker)
    assert any("request 31" in c for c in v.target_replay.consequences)
    assert v.poison is not None and "illegal memory access" in v.poison.summary()
    assert v.control_clean


def test_the_unsound_shipped_split_reads_nan_on_the_kernel(worker: Worker) -> None:
    from batchfuzz import registry

    case = Case({"num_computed_tokens": np.array([2, 0]), "num_scheduled_tokens": np.array([1, 3]),
                 "block_tables": [np.array([[1, 3], [1, 2]], dtype=np.int32)], "block_sizes": [2]}, {})
    fn = registry.get("allow_microbatching").variant("shipped_check").fn
    v = confirm_case("allow_microbatching", case, fn, "shipped", worker)
    assert v.target_replay.consequences and v.target_replay.consequences[0].startswith("read unwritten KV (NaN) (request 0")
    assert v.control_clean


def test_the_decode_kernel_confirms_the_v1_dummy_seq_lens() -> None:
    """A uniform-decode dummy batch (one token per request) with every
    seq_len the whole token count: the decode kernel attends over slots no
    token wrote (NaN, which also hides the canary past each row)."""
    from batchfuzz import registry
    from batchfuzz.reference.make_dummy import DummyBuffers

    case = Case({"num_reqs": 8, "num_tokens": 8, "buffers": DummyBuffers.zeros(8, 8)}, {"max_model_len": 4})
    fn = registry.get("make_dummy").variant("v1_seq_lens_total").fn
    with Worker(_folder(), "decode", "cuda") as w:
        v = confirm_case("make_dummy", case, fn, "v1 seq_lens", w)
    assert sorted(c.split(" (request ")[1].split(":")[0] for c in v.target_replay.consequences) == [str(i) for i in range(8)]
    assert all(c.startswith("read unwritten KV (NaN)") for c in v.target_replay.consequences), v.consequence()
    assert v.control_clean and v.control.max_abs_diff is not None and v.control.max_abs_diff < 0.05


def test_a_stale_query_start_loc_tail_from_a_larger_step_reaches_the_kernel(worker: Worker) -> None:
    """The shrunk cases of the stale-tail variants hold small stale values; a
    buffer left by a larger earlier step sends the padded sequences' rows
    past the step's output."""
    from batchfuzz import registry
    from batchfuzz.reference.make_dummy import DummyBuffers

    buffers = DummyBuffers.zeros(4, 64)
    buffers.query_start_loc[:] = [0, 16, 32, 48, 64]
    case = Case({"num_reqs": 1, "num_tokens": 3, "buffers": buffers}, {"max_model_len": 16})
    fn = registry.get("make_dummy").variant("qsl_tail_unwritten").fn
    v = confirm_case("make_dummy", case, fn, "stale tail", worker)
    assert not v.target_replay.clean, v.consequence()
    assert v.control_clean
    stale = np.array([0, 5, 40, 60, 64], dtype=np.int32)
    case = Case({"num_scheduled_tokens": np.array([3, 2], dtype=np.int32), "num_reqs_padded": 4},
                {"out": stale, "history": [], "max_num_reqs": 4})
    fn = registry.get("pad_query_start_loc").variant("padding_unwritten").fn
    v = confirm_case("pad_query_start_loc", case, fn, "padding unwritten", worker)
    assert not v.target_replay.clean, v.consequence()
    assert v.control_clean


def test_the_prefix_prefill_kernel_confirms_the_shipped_variants() -> None:
    """vLLM's prefix-prefill kernel (``context_attention_fwd`` on its
    cached-K/V path) over the same shipped variants as the unified kernel."""
    with Worker(_folder(), "prefix_prefill", "cuda") as w:
        _assert_shipped_variants_confirmed(w)
