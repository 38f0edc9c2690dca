"""The findings with an upstream report: what each breaks, in our words, and
its reproduction body (run after the header of ``batchfuzz.upstream``).

The engine's own words are not here: a ``Quote`` names where to read them
(a docstring, or the comment above a line), and the report reads them from
the release at run time. Each reproduction builds only the stand-in objects
the engine's function reads, as plain Python, and asserts the property.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchfuzz import registry


@dataclass(frozen=True)
class Quote:
    """Where the engine states its rule: ``qualname``'s docstring
    (``needle`` None), or the comment just above its first line holding ``needle``."""

    where: str
    path: str
    qualname: str
    needle: str | None = None


@dataclass(frozen=True)
class TrackerFix:
    """A fix proposed upstream (``url``), as a unified diff against the
    release, and whether it removes the reproduction's failure (``fixes``,
    checked by tests/test_upstream.py); ``note`` says what it gives."""

    url: str
    diff: str
    fixes: bool
    note: str


@dataclass(frozen=True)
class Finding:
    """One failing cell, written up for the engine's maintainers.

    Its ``label`` is its property's in the registry: ``safety`` (any
    correct engine must hold it) or ``choice`` (one of several safe
    answers, the one the engine documents). ``files`` are the source files
    the reproduction reads, under the source root; ``fix`` is the smallest
    fix we can state, a unified diff against the release; ``tracker`` a fix
    proposed in the engine's tracker, checked the same way."""

    key: str
    engine: str
    package: str
    release: str
    path: str
    qualname: str
    contract: str
    prop: str
    title: str
    broken: str
    case: str
    matters: str
    realizable: str
    rule: tuple[Quote, ...]
    script: str
    fix: str
    files: tuple[str, ...] = ()
    tracker: TrackerFix | None = None
    kernel: str = ""  # what the engine's kernel does with the case (a `batchfuzz confirm` result), where one exists
    counterexample: dict[str, Any] | None = None  # the matrix's shrunk case (codec.encode_case), replayed by --cells
    row: str = ""  # where the cell is a split-search row, its name after the qualname ("#...")
    checked: str = ""  # what `--patch FIX --cells` gave for ``fix`` (the runs: docs/upstream-reports.md)

    @property
    def label(self) -> str:
        return registry.get(self.contract).property(self.prop).label


_V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"

_POOLER_SCRIPT = '''
import types
import typing

import numpy as np
import torch


class Captured(Exception):
    """Raised where the dummy run hands its split to the pooling cursor: all this needs."""


class PoolingMetadata:
    def __init__(self, **fields):
        self.fields = fields

    def build_pooling_cursor(self, num_scheduled_tokens, seq_lens_cpu, device):
        raise Captured([int(n) for n in num_scheduled_tokens], tuple(self.fields["prompt_token_ids"].shape))


class PoolingParams:
    def __init__(self, task):
        self.task = task

    def verify(self, *args, **kwargs):
        pass


class Model:
    pooler = types.SimpleNamespace(
        get_pooling_updates=lambda task: types.SimpleNamespace(apply=lambda params: None))


class Runner:
    """What the method reads of the model runner."""

    device = "cpu"
    model_config = None

    def __init__(self, max_num_seqs):
        self.scheduler_config = types.SimpleNamespace(max_num_seqs=max_num_seqs)

    def get_model(self):
        return Model()


namespace = {"np": np, "torch": torch, "cast": typing.cast, "VllmModelForPooling": object,
             "PoolingParams": PoolingParams, "PoolingMetadata": PoolingMetadata, "PoolingStates": object}
run_task = engine_function("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._dummy_pooler_run_task", namespace)

num_tokens, max_num_seqs = 5, 3  # 5 dummy tokens over min(5, 3) = 3 requests
try:
    run_task(Runner(max_num_seqs), torch.zeros(num_tokens, 4), "embed")
    sys.exit("the dummy pooler run did not reach build_pooling_cursor")
except Captured as captured:
    split, token_ids_shape = captured.args
print("tokens per dummy request:", split, "prompt_token_ids shape:", token_ids_shape)
num_reqs = min(num_tokens, max_num_seqs)
largest = -(-num_tokens // num_reqs)  # ceil(num_tokens / num_reqs)
assert sum(split) == num_tokens and len(split) == num_reqs, split
assert max(split) <= largest, f"a dummy request gets {max(split)} tokens, more than ceil({num_tokens}/{num_reqs}) = {largest}"
assert token_ids_shape[1] >= max(split), f"prompt_token_ids rows hold {token_ids_shape[1]} tokens, prompt_lens reach {max(split)}"
'''

_POOLER_CASE = {"args": {"num_reqs": 3, "num_tokens": 5}, "context": {"max_model_len": 2}}

_POOLER_FIX = '''\
--- a/vllm/v1/worker/gpu_model_runner.py
+++ b/vllm/v1/worker/gpu_model_runner.py
@@ -5994,9 +5994,9 @@
         num_scheduled_tokens_np = np.full(num_reqs, min_tokens_per_req)
-        num_scheduled_tokens_np[-1] += num_tokens % num_reqs
+        num_scheduled_tokens_np[num_reqs - num_tokens % num_reqs :] += 1
         assert np.sum(num_scheduled_tokens_np) == num_tokens
         assert len(num_scheduled_tokens_np) == num_reqs

-        req_num_tokens = num_tokens // num_reqs
+        req_num_tokens = int(num_scheduled_tokens_np.max())

         dummy_prompt_lens = torch.from_numpy(num_scheduled_tokens_np)'''

_THRESHOLD_SCRIPT = '''
import types
from functools import reduce


class Group:
    """An attention group whose metadata builder asks for ``threshold``."""

    def __init__(self, threshold):
        self.builder = types.SimpleNamespace(reorder_batch_threshold=threshold)

    def get_metadata_builder(self, *args, **kwargs):
        return self.builder


class Runner:
    """What the method reads of the model runner: one attention group per KV-cache group."""

    def __init__(self, thresholds):
        self.attn_groups = [[Group(t)] for t in thresholds]
        self.reorder_batch_threshold = None

    def _attn_group_iterator(self):
        return (group for groups in self.attn_groups for group in groups)


calculate = engine_function("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner.calculate_reorder_batch_threshold",
                            {"reduce": reduce})
num_speculative_tokens = 1
# Group 0's backend runs speculative rows as prefills (it asks for 1); group 1's
# runs them as decodes and asks for 1 + num_speculative_tokens.
runner = Runner([1, 1 + num_speculative_tokens])
try:
    calculate(runner)
except (ValueError, NotImplementedError) as refusal:  # refusing the configuration is an answer too
    print("refused:", refusal)
    sys.exit(0)
print("reorder_batch_threshold:", runner.reorder_batch_threshold)
assert runner.reorder_batch_threshold >= 1 + num_speculative_tokens, (
    f"threshold {runner.reorder_batch_threshold}: the group that runs its {1 + num_speculative_tokens}-token "
    "speculative rows as decodes does not get them reordered into the decode region")
'''

_THRESHOLD_CASE = {"args": {"num_computed_tokens": [0], "num_scheduled_tokens": [1], "num_prompt_tokens": [1], "thresholds": [1, 2],
                            "num_speculative_tokens": 1}, "context": {}}

_THRESHOLD_FIX = '''\
--- a/vllm/v1/worker/gpu_model_runner.py
+++ b/vllm/v1/worker/gpu_model_runner.py
@@ -6823,1 +6823,1 @@
-        min_none_high = lambda a, b: a if b is None else b if a is None else min(a, b)
+        min_none_high = lambda a, b: a if b is None else b if a is None else max(a, b)'''

_TBO = "sglang/srt/batch_overlap/two_batch_overlap.py"

_TBO_SCRIPT = '''
import typing


class ForwardMode:
    """The one mode this needs: an extend (prefill) step."""

    EXTEND, MIXED = "extend", "mixed"


namespace = {"ForwardMode": ForwardMode, "Sequence": typing.Sequence, "Optional": typing.Optional,
             "get_tbo_token_distribution_threshold": lambda: 0.48}  # the server argument's default
for name in ("_split_array_by_balanced_sum", "_split_array_by_cum_less_than_half", "_split_extend_seqs"):
    engine_function("sglang/srt/batch_overlap/two_batch_overlap.py", name, namespace)
is_two_chunk = engine_function("sglang/srt/batch_overlap/two_batch_overlap.py", "_is_two_chunk_split_enabled", namespace)
split_seq = engine_function("sglang/srt/batch_overlap/two_batch_overlap.py", "compute_split_seq_index", namespace)
split_token = engine_function("sglang/srt/batch_overlap/two_batch_overlap.py", "compute_split_token_index", namespace)

extend_lens = [2, 3]  # one extend step: two prefill chunks of 2 and 3 tokens
seq = split_seq(ForwardMode.EXTEND, sum(extend_lens), extend_lens, None)
token = split_token(seq, ForwardMode.EXTEND, extend_lens, None)
two_chunk = is_two_chunk(extend_lens)
# In the two-chunk mode child A holds requests [0 : seq + 1] and tokens [0 : token); else requests [0 : seq].
last = seq if two_chunk else seq - 1
print(f"split_seq_index={seq}, split_token_index={token}, two_chunk={two_chunk}")
assert 0 < token < sum(extend_lens), "a child with no token at all"
assert sum(extend_lens[:last]) < token, (
    f"child A holds request {last} but none of its tokens: its tokens start at {sum(extend_lens[:last])}, "
    f"child A ends at {token}")
'''

_TBO_CASE = {"args": {"forward_mode": "extend", "seq_lens": {"ndarray": [1, 2, 1, 1, 2], "dtype": "int32"}, "threshold": 0.48},
             "context": {}}

_TBO_FIX = '''\
--- a/sglang/srt/batch_overlap/two_batch_overlap.py
+++ b/sglang/srt/batch_overlap/two_batch_overlap.py
@@ -129,4 +129,6 @@
     if child_a_batch_size > child_a_num_q_tokens:
         return False
+    if sum(extend_lens[:split_seq_index]) >= child_a_num_q_tokens:
+        return False  # the cut is on a seq boundary: child_a's last seq would get no token

     return True'''

_DUMMY_RUN_SCRIPT = '''
import contextlib
import enum
import types

import numpy as np
import torch


class CUDAGraphMode(enum.Enum):
    NONE, PIECEWISE, FULL = 0, 1, 2

    def is_valid_runtime_mode(self):
        return True


class Captured(Exception):
    """Raised where the dummy run copies its seq_lens to the device: all this needs."""


class SeqLens:
    def copy_(self, source, non_blocking=False):
        raise Captured(source)


class Runner:
    """What the method reads of the model runner before it copies seq_lens,
    for a FULL-graph dummy run of ``num_tokens`` over ``max_num_seqs`` requests."""

    uniform_decode_query_len = 1
    dcp_world_size = 1

    def __init__(self, max_num_seqs, max_model_len, max_num_tokens=8192):
        self.max_num_tokens, self.max_model_len = max_num_tokens, max_model_len
        self.scheduler_config = types.SimpleNamespace(max_num_seqs=max_num_seqs)
        self.parallel_config = types.SimpleNamespace(cp_kv_cache_interleave_size=1)
        self.vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(num_ubatches=2),
                                                 model_config=types.SimpleNamespace(multimodal_config=None))
        self.optimistic_seq_lens_cpu = torch.zeros(max_num_seqs, dtype=torch.int32)
        self.seq_lens = SeqLens()

    def _determine_batch_execution_and_padding(self, num_tokens, num_reqs, num_scheduled_tokens_np, **kwargs):
        # A FULL graph captured at exactly this size, no microbatching, no DP.
        self.query_lens = [int(n) for n in num_scheduled_tokens_np]
        desc = types.SimpleNamespace(num_tokens=num_tokens, num_reqs=num_reqs)
        return CUDAGraphMode.FULL, desc, False, None, None

    def _get_slot_mappings(self, **kwargs):
        return None, None

    def synchronize_input_prep(self):
        return contextlib.nullcontext()


namespace = {"np": np, "torch": torch, "CUDAGraphMode": CUDAGraphMode, "cdiv": lambda a, b: -(-a // b),
             "get_dcp_dummy_context_len": lambda *args: 0, "maybe_create_ubatch_slices": lambda *args: (None, None),
             "logger": types.SimpleNamespace(debug=lambda *args: None)}
dummy_run = engine_function("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._dummy_run", namespace)


def dummy_batch(num_tokens, max_num_seqs, max_model_len):
    """The dummy requests' query lengths and seq_lens as the dummy run sets them."""
    runner = Runner(max_num_seqs, max_model_len)
    try:
        dummy_run(runner, num_tokens, cudagraph_runtime_mode=CUDAGraphMode.FULL)
    except Captured as captured:
        return runner.query_lens, [int(n) for n in captured.args[0][:len(runner.query_lens)]]
    sys.exit("the dummy run did not reach the seq_lens copy")


num_tokens, max_num_seqs, max_model_len = 24, 32, 16  # 24 one-token dummy requests
query_lens, seq_lens = dummy_batch(num_tokens, max_num_seqs, max_model_len)
print("query lengths:", query_lens, "seq_lens:", seq_lens)
assert all(s >= q for s, q in zip(seq_lens, query_lens)), "a seq_len shorter than its own query"
assert max(seq_lens) <= max_model_len, (
    f"a dummy request has seq_len {max(seq_lens)}, past max_model_len={max_model_len}: attention reads "
    f"cdiv({max(seq_lens)}, block_size) blocks through a block-table row sized for {max_model_len} tokens")
'''

_DUMMY_RUN_CASE = {"args": {"num_reqs": 2, "num_tokens": 2, "buffers": {"dataclass": "DummyBuffers", "fields": {
    "seq_lens": {"ndarray": [0, 0], "dtype": "int32"}, "query_start_loc": {"ndarray": [0, 0, 0], "dtype": "int32"},
    "positions": {"ndarray": [0, 0], "dtype": "int32"}, "input_ids": {"ndarray": [0, 0], "dtype": "int32"}}}},
    "context": {"max_model_len": 1}}

# The seq_lens alone are not enough: with the remainder split (finding A of
# the README) a one-request seq_len still passes max_model_len (--cells).
_DUMMY_RUN_FIX = '''\
--- a/vllm/v1/worker/gpu_model_runner.py
+++ b/vllm/v1/worker/gpu_model_runner.py
@@ -5548,1 +5548,2 @@
-            num_scheduled_tokens_list[-1] += num_tokens % num_reqs
+            for i in range(num_reqs - num_tokens % num_reqs, num_reqs):
+                num_scheduled_tokens_list[i] += 1  # at most ceil(num_tokens / num_reqs)
@@ -5658,1 +5659,2 @@
-                    seq_lens = max_query_len  # type: ignore[assignment]
+                    # each dummy request's own tokens: no context past max_model_len
+                    seq_lens = torch.from_numpy(num_scheduled_tokens)  # type: ignore[assignment]'''

# vLLM#53671 (open) clamps the dummy seq_lens to max_model_len; this is that
# clamp as its description states it, on the line it names.
_DUMMY_RUN_53671 = '''\
--- a/vllm/v1/worker/gpu_model_runner.py
+++ b/vllm/v1/worker/gpu_model_runner.py
@@ -5658,1 +5658,1 @@
-                    seq_lens = max_query_len  # type: ignore[assignment]
+                    seq_lens = min(max_query_len, self.max_model_len)  # type: ignore[assignment]'''


_DP = "vllm/v1/worker/gpu/dp_utils.py"
_UBATCH = "vllm/v1/worker/ubatch_utils.py"

# The ranks of one data-parallel step, run one after another in this process:
# shared by both findings of sync_cudagraph_and_dp_padding.
_DP_RANKS = '''
import enum
import types
from dataclasses import dataclass
from typing import Any

import torch


class CUDAGraphMode(enum.Enum):
    """The modes this needs, with the release's values (the all-reduce carries them)."""

    NONE, PIECEWISE, FULL = 0, 1, 2


@dataclass(frozen=True)
class BatchExecutionDescriptor:
    """The fields of the release's descriptor."""

    cg_mode: CUDAGraphMode
    num_tokens: int
    num_reqs: int | None
    uniform_token_count: int | None = None
    max_query_len: int | None = None
    num_active_loras: int = 0
    num_ubatches: int = 1


class GraphManager:
    """FULL microbatched CUDA graphs captured at ``sizes``: the smallest that fits, else eager."""

    def __init__(self, sizes):
        self.sizes = sizes

    def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0, num_ubatches=1,
                 max_query_len=None):
        fits = [s for s in self.sizes if s >= num_tokens and num_ubatches > 1]
        if not fits:
            return BatchExecutionDescriptor(CUDAGraphMode.NONE, num_tokens, num_reqs, num_ubatches=num_ubatches)
        return BatchExecutionDescriptor(CUDAGraphMode.FULL, min(fits), num_reqs, uniform_token_count,
                                        num_ubatches=num_ubatches)


class Reduced(Exception):
    """Raised by the first pass's all-reduce, carrying this rank's contribution."""


class Group:
    """The DP group's CPU all-reduce (a sum), over ranks run one after another:
    a first pass collects every rank's contribution, a second hands out the sum."""

    def __init__(self, total=None):
        self.total = total

    def cpu_all_reduce_(self, tensor):
        if self.total is None:
            raise Reduced(tensor.clone())
        tensor.copy_(self.total)


namespace = {"torch": torch, "CUDAGraphMode": CUDAGraphMode, "BatchExecutionDescriptor": BatchExecutionDescriptor,
             "DPSyncState": types.SimpleNamespace, "should_skip_dp_coordination": lambda: False}
for name in ("check_ubatch_thresholds", "get_num_ubatches"):
    engine_function("vllm/v1/worker/ubatch_utils.py", name, namespace)
sync = engine_function("vllm/v1/worker/gpu/dp_utils.py", "sync_cudagraph_and_dp_padding", namespace)


def run_ranks(num_tokens, modes, graph_sizes, num_ubatches=2, uniform_token_count=None):
    """Every rank's (descriptor, sync state) for one step: rank r has
    ``num_tokens[r]`` tokens (one request each, or one per token for a
    uniform decode) and asks for ``modes[r]``; every rank allows microbatching."""
    config = types.SimpleNamespace(use_ubatching=True, num_ubatches=num_ubatches, dbo_decode_token_threshold=1,
                                   dbo_prefill_token_threshold=1)

    def rank(r, group):
        namespace["get_dp_group"] = lambda: group
        reqs = num_tokens[r] if uniform_token_count else 1
        desc = BatchExecutionDescriptor(modes[r], num_tokens[r], reqs, uniform_token_count)
        return sync(GraphManager(graph_sizes), desc, num_tokens[r], reqs, uniform_token_count, len(num_tokens), r,
                    parallel_config=config, allow_ubatching=True, uniform_decode=uniform_token_count is not None)

    parts = []
    for r in range(len(num_tokens)):
        try:
            rank(r, Group())
            sys.exit("the function did not all-reduce")
        except Reduced as reduced:
            parts.append(reduced.args[0])
    total = sum(parts)
    return [rank(r, Group(total)) for r in range(len(num_tokens))]
'''

_DP_EAGER_SCRIPT = _DP_RANKS + '''
# Two ranks of 2 tokens, both asking to run eagerly; a microbatched FULL graph is captured at 2.
modes = [CUDAGraphMode.NONE, CUDAGraphMode.NONE]
for r, (desc, state) in enumerate(run_ranks([2, 2], modes, graph_sizes=[2])):
    print(f"rank {r}: cg_mode={desc.cg_mode.name}, num_tokens={desc.num_tokens}, num_ubatches={desc.num_ubatches}")
    assert desc.cg_mode.value <= min(m.value for m in modes), (
        f"rank {r} asked to run eagerly and is given a {desc.cg_mode.name} graph")
'''

_DP_EMPTY_SCRIPT = _DP_RANKS + '''

def check(num_tokens, graph_sizes, num_ubatches):
    """No rank replays a FULL graph whose last microbatch holds none of its tokens."""
    modes = [CUDAGraphMode.FULL] * len(num_tokens)
    for r, (desc, state) in enumerate(run_ranks(num_tokens, modes, graph_sizes, num_ubatches, uniform_token_count=1)):
        last_start = (desc.num_tokens // desc.num_ubatches) * (desc.num_ubatches - 1)
        print(f"{num_ubatches} microbatches, rank {r} of {num_tokens[r]} tokens: cg_mode={desc.cg_mode.name}, "
              f"num_tokens={desc.num_tokens}, last microbatch [{last_start}, {desc.num_tokens})")
        assert desc.cg_mode != CUDAGraphMode.FULL or last_start < num_tokens[r], (
            f"rank {r} replays the FULL graph with a last microbatch [{last_start}, {desc.num_tokens}) of padding only")


# Two ranks, each a uniform decode of 2 one-token requests; a microbatched FULL graph at 4.
check([2, 2], graph_sizes=[4], num_ubatches=2)
# Three microbatches: ranks of 10 and 16 decode tokens, a microbatched FULL graph at 16.
check([10, 16], graph_sizes=[16], num_ubatches=3)
'''

def _dp_case(num_tokens_padded: list[int], cudagraph_mode: list[int], uniform_decode_len: list[int],
             num_reqs: list[int], capture_sizes: list[int], ubatch_capture_sizes: list[int]) -> dict[str, Any]:
    """A coordinate_dp case of two ranks of 2 tokens that allow two microbatches (codec.encode_case's form)."""
    def arr(values: list[int]) -> dict[str, Any]:
        return {"ndarray": values, "dtype": "int32"}

    return {"args": {"num_tokens": arr([2, 2]), "num_tokens_padded": arr(num_tokens_padded), "allow_microbatching": arr([1, 1]),
                     "cudagraph_mode": arr(cudagraph_mode), "uniform_decode_len": arr(uniform_decode_len),
                     "num_reqs": arr(num_reqs), "num_ubatches": 2, "ubatch_thresholds": {"tuple": [2, 2]},
                     "capture_sizes": capture_sizes, "ubatch_capture_sizes": ubatch_capture_sizes},
            "context": {"kind": "engine"}}


# The matrix's shrunk cases (seed 1, 200 examples a property): both ranks ask for NONE; and, found with the
# eager-ranks fix applied so that it is this bug's alone, both ranks ask for FULL over a graph at 4.
_DP_EAGER_CASE = _dp_case([2, 2], [0, 0], [0, 0], [1, 1], [2, 4, 8], [2])
_DP_EMPTY_CASE = _dp_case([4, 4], [2, 2], [1, 1], [2, 2], [4, 8], [4])

_DP_EAGER_FIX = '''\
--- a/vllm/v1/worker/gpu/dp_utils.py
+++ b/vllm/v1/worker/gpu/dp_utils.py
@@ -123,1 +123,3 @@
-            if cudagraph_manager is not None:
+            if cudagraph_manager is not None and int(cg_mode_across_dp.min()) == (
+                CUDAGraphMode.FULL.value
+            ):  # a FULL microbatched graph only where every rank can run one'''

_DP_EMPTY_FIX = '''\
--- a/vllm/v1/worker/gpu/dp_utils.py
+++ b/vllm/v1/worker/gpu/dp_utils.py
@@ -133,1 +133,3 @@
-                if 2 * int(num_tokens_across_dp.min()) < ubatch_desc.num_tokens:
+                last_start = (ubatch_desc.num_tokens // num_ubatches) * (num_ubatches - 1)
+                if last_start >= int(num_tokens_across_dp.min()):
+                    # the smallest rank's last microbatch would be padding only'''

# vLLM#57020 (open): the guard's `<` made `<=`, as its description states it.
_DP_EMPTY_57020 = '''\
--- a/vllm/v1/worker/gpu/dp_utils.py
+++ b/vllm/v1/worker/gpu/dp_utils.py
@@ -133,1 +133,1 @@
-                if 2 * int(num_tokens_across_dp.min()) < ubatch_desc.num_tokens:
+                if 2 * int(num_tokens_across_dp.min()) <= ubatch_desc.num_tokens:'''


FINDINGS: tuple[Finding, ...] = (
    Finding(
        key="vllm-v1-pooler-dummy-split", engine="vLLM", package="vllm", release="0.33.0", path=_V1_RUNNER,
        qualname="GPUModelRunner._dummy_pooler_run_task", contract="split_dummy_tokens", prop="max_is_ceil",
        title="the v1 pooler warm-up puts the whole remainder on the last dummy request",
        broken="`_dummy_pooler_run_task` spreads `num_tokens` over `num_reqs = min(num_tokens, max_num_seqs)` dummy "
               "requests by giving each `num_tokens // num_reqs` and the last one the whole remainder. The last request "
               "can then exceed `ceil(num_tokens / num_reqs)` tokens, the bound the release's own fixed copy of this "
               "split (`InputBatch.make_dummy`, quoted above) keeps so that no dummy request passes `max_model_len`. "
               "The same method sizes `prompt_token_ids` rows at `num_tokens // num_reqs`, narrower than the last "
               "request's prompt length.",
        case="`num_tokens=5` hidden states, `max_num_seqs=3`: the split is `[1, 1, 3]` (expected `[1, 2, 2]`), and "
             "`prompt_token_ids` has shape `(3, 1)` while `prompt_lens` is `[1, 1, 3]`.",
        matters="a pooling model's warm-up gives the pooler a request longer than any real request can be (with "
                "`max_model_len=2` here the last one is past it), and prompt lengths that do not fit the token-id rows "
                "handed to the pooler alongside them.",
        realizable="the engine makes this call itself when warming up a pooling model: `num_tokens` is the warm-up size "
                   "and `max_num_seqs` the scheduler's; any `num_tokens > max_num_seqs` not a multiple of it (e.g. 8 "
                   "tokens over `max_num_seqs=3`: `[2, 2, 4]`).",
        rule=(Quote("the fixed copy of the same split, new model runner", "vllm/v1/worker/gpu/input_batch.py",
                    "InputBatch.make_dummy", "base_tokens = num_tokens // num_reqs"),),
        script=_POOLER_SCRIPT, fix=_POOLER_FIX, files=(_V1_RUNNER,), counterexample=_POOLER_CASE,
        checked="on 0.33.0 (exit 0). `matches_oracle`, `max_is_ceil`, `within_max_model_len` and `dummy_attention_in_bounds` "
        "go from fail to pass and this case passes; nothing else changed. The v1 `_dummy_run`'s own copy of the split "
        "still fails the same properties, and the dummy run's and the reorder threshold's cases still fail: their "
        "own fixes.",
        row="#num_scheduled_tokens_np=num_tokens/num_reqs",
    ),
    Finding(
        key="vllm-reorder-threshold-min", engine="vLLM", package="vllm", release="0.33.0", path=_V1_RUNNER,
        qualname="GPUModelRunner.calculate_reorder_batch_threshold", contract="batch_order",
        prop="threshold_matches_oracle",
        title="the reorder threshold is the smallest over KV-cache groups, below what a speculative-as-decode "
              "group asks for",
        broken="with several KV-cache groups the model runner reorders the batch with the smallest threshold any "
               "group's builder asks for. A builder that runs speculative rows as decodes asks for `1 + k` "
               "(`_init_reorder_batch_threshold(..., supports_spec_as_decode=True)`); under a smaller threshold its "
               "`(1 + k)`-token speculative rows are not moved into the decode region, so its split counts them as "
               "prefills. The docstring documents this as a choice (a lower threshold costs only performance); it "
               "is a bug exactly where such a backend's prefill path cannot take a speculative row. batchfuzz's "
               "contract refuses the configuration there; raising the threshold to the largest is another answer "
               "the reproduction accepts (whether the group that asked for 1 runs correctly under it is the "
               "maintainers' call).",
        case="two KV-cache groups asking for thresholds `[1, 2]`, `num_speculative_tokens=1`: the runner's threshold "
             "is 1. On the step `num_computed_tokens=[4, 1], num_scheduled_tokens=[3, 2], num_prompt_tokens=[8, 1]` "
             "nothing is reordered, and the second group's builder (threshold 2) finds no decode at all.",
        matters="a hybrid model with speculative decoding sends speculative rows down the prefill path of a backend "
                "that asked to run them as decodes: a slower path at best, a wrong one where that path does not "
                "handle a row with drafts.",
        realizable="a hybrid model (two KV-cache groups) with speculative decoding, where one group's backend "
                   "raises its threshold to `1 + k` and the other's stays at 1 (no spec-as-decode support, or "
                   "decode context parallelism, which forces 1).",
        rule=(Quote("the method's docstring", _V1_RUNNER, "GPUModelRunner.calculate_reorder_batch_threshold"),
              Quote("how a builder asks for `1 + k`", "vllm/v1/attention/backend.py",
                    "AttentionMetadataBuilder._init_reorder_batch_threshold", "speculative_config = ")),
        script=_THRESHOLD_SCRIPT, fix=_THRESHOLD_FIX, files=(_V1_RUNNER,), counterexample=_THRESHOLD_CASE,
        checked="on 0.33.0 (exit 0). `spec_rows_are_decodes` goes from fail to pass; `threshold_matches_oracle` and "
        "this case still fail, as a documented choice: the contract's oracle refuses the configuration, the fix raises "
        "the threshold, and the reproduction accepts both (a policy difference). Nothing else changed; the file's "
        "other findings' cases still fail: their own fixes.",
    ),
    Finding(
        key="sglang-tbo-child-without-token", engine="SGLang", package="sglang", release="0.5.23", path=_TBO,
        qualname="compute_split_token_index", contract="tbo_split", prop="cut_request_in_both",
        title="a two-chunk two-batch-overlap split gives child A a request with no token",
        broken="in the two-chunk mode child A spans requests `[0 : split_seq_index + 1]` and tokens "
               "`[0 : overall_sum // 2)`. When `overall_sum // 2` falls exactly on the start of request "
               "`split_seq_index`, child A holds that request with an extend length of 0. 0.5.23's guard in "
               "`_is_two_chunk_split_enabled` (quoted above) keeps child A's request count within its token count, "
               "which holds here, so the cut goes through. batchfuzz's contract asks for a strict cut (every request "
               "of a child has a token); whether a zero-length request is harmful depends on the attention "
               "backend, so this is labelled a policy difference, not a proven crash.",
        case="one extend step, `extend_lens=[2, 3]` (threshold 0.48, the default): two-chunk mode, "
             "`split_seq_index=1`, `split_token_index=2`; child A is requests 0 and 1 with extend lengths `[2, 0]`. "
             "batchfuzz's matrix shrank to `[1, 2, 4]` (child A `[1, 2, 0]`); `[2, 3]` is the smallest on a grid.",
        matters="a backend's per-request planner or kernel sees a request with no query token in child A: the case "
                "0.5.23's guard was added for (a planner asserting `batch_size <= num_q_tokens`) in a milder form, "
                "and a zero-length row is what attention metadata builders least expect.",
        realizable="any extend (or mixed) step under two-batch overlap whose balanced split is lopsided beyond the "
                    "threshold and whose token midpoint lands on a request boundary, e.g. two prefill chunks of 2 and "
                    "3 tokens.",
        rule=(Quote("the two-chunk rule and its guard", _TBO, "_is_two_chunk_split_enabled",
                    "split_seq_index = _split_array_by_cum_less_than_half"),),
        script=_TBO_SCRIPT, fix=_TBO_FIX, files=(_TBO,), counterexample=_TBO_CASE,
        checked="on 0.5.23 (exit 0): `cut_request_in_both` and `matches_oracle` go from fail to pass and the stored case "
                "(`seq_lens=[1, 2, 1, 1, 2]`) passes; the other 14 properties of the file's three cells are the same on "
                "both trees.",
    ),
    Finding(
        key="vllm-dp-ubatch-graph-for-eager-ranks", engine="vLLM", package="vllm", release="0.33.0", path=_DP,
        qualname="sync_cudagraph_and_dp_padding", contract="coordinate_dp", prop="graph_runnable",
        title="data-parallel ranks that all ask to run eagerly are given a FULL microbatched CUDA graph",
        broken="when every rank allows microbatching, the split path dispatches a FULL microbatched graph from the "
               "cudagraph manager without looking at the modes the ranks asked for (`cg_mode_across_dp`, reduced a "
               "few lines above). The unsplit path takes the smallest mode (quoted above); the split path does not, "
               "so ranks that asked for `NONE` replay a FULL graph.",
        case="two ranks of 2 tokens each (one request), both asking for `CUDAGraphMode.NONE`, both allowing "
             "microbatching (thresholds met), two microbatches, a FULL microbatched graph captured at 2: every rank "
             "gets `cg_mode=FULL, num_tokens=2`.",
        matters="a rank asks for eager for a reason: its step cannot run under a graph (the profile run, a step with "
                "encoder inputs, a batch the graph's metadata was not captured for). Replaying the graph runs the "
                "captured kernels on buffers this step did not prepare for them.",
        realizable="the model runner passes `need_eager` (or its dispatcher finds no graph) while the manager exists "
                   "and DBO is on with microbatched graphs captured; the split needs only the thresholds, which the "
                   "configuration may set as low as the number of microbatches.",
        rule=(Quote("the unsplit path's rule", _DP, "sync_cudagraph_and_dp_padding",
                    "if synced_cg_mode == CUDAGraphMode.NONE:"),
              Quote("the split path's dispatch", _DP, "sync_cudagraph_and_dp_padding",
                    "ubatch_desc = cudagraph_manager.dispatch(")),
        script=_DP_EAGER_SCRIPT, fix=_DP_EAGER_FIX, files=(_DP, _UBATCH), counterexample=_DP_EAGER_CASE,
        checked="on 0.33.0 (exit 0): `graph_runnable` goes from fail to pass and this case passes; `matches_oracle` and "
                "`no_empty_microbatch` (both documented choices) fail on both trees, and the empty-microbatch finding's "
                "case, in the same function, still fails: that is the other report's fix. `dispatch_cg_and_sync_dp` fails"
                " `sound_under_engine_splits` and `sound_under_adversarial_splits` on both trees, unchanged; 9 other "
                "properties the same.",
    ),
    Finding(
        key="vllm-dp-ubatch-empty-microbatch-graph", engine="vLLM", package="vllm", release="0.33.0", path=_DP,
        qualname="sync_cudagraph_and_dp_padding", contract="coordinate_dp", prop="no_empty_microbatch",
        title="a FULL microbatched graph is kept when a rank's last microbatch is padding only",
        broken="the comment above the guard (quoted above) says a rank with an empty second microbatch runs "
               "without CUDA graphs, but the guard `2 * min_tokens < graph_tokens` keeps the graph at equality "
               "(the second microbatch `[min, 2 * min)` is then all padding), and it is written for two "
               "microbatches: with `n` of them the cut before the last is `(G // n) * (n - 1)`, which can reach "
               "the smallest rank's token count while `2 * min > G`. Whether a microbatch of padding may run at all "
               "is the engine's documented choice (\"Empty microbatches run as dummy batches\", quoted above), "
               "which is why the contract labels this property a documented choice; the graph replayed over one is "
               "what the engine's own comment rules out.",
        case="two ranks, each a uniform decode of 2 one-token requests asking for FULL, two microbatches, a FULL "
             "microbatched graph at 4: both ranks get `cg_mode=FULL, num_tokens=4`, cut at 2, so `[2, 4)` holds no "
             "real token. With three microbatches, ranks of 10 and 16 decode tokens and a graph at 16, rank 0's "
             "last microbatch `[10, 16)` is padding only and the graph is kept (`2 * 10 > 16`).",
        matters="the FULL graph replays attention and the expert all-to-all over a microbatch with no request: the "
                "case the comment says must run without graphs.",
        realizable="data-parallel decode steps of equal size on every rank whose microbatched graph size is twice the "
                   "count (two ranks of 64 decode tokens and a 128-token graph, as vLLM#57020 describes), or three "
                   "microbatches with ranks of 10 and 16 tokens and a graph at 16.",
        rule=(Quote("the guard's comment", _DP, "sync_cudagraph_and_dp_padding", "                    ubatch_desc = None"),
              Quote("empty microbatches, by design", _DP, "sync_cudagraph_and_dp_padding",
                    "ubatch_num_tokens = int(num_tokens_across_dp.max())")),
        script=_DP_EMPTY_SCRIPT, fix=_DP_EMPTY_FIX, files=(_DP, _UBATCH), counterexample=_DP_EMPTY_CASE,
        checked="on 0.33.0 (exit 0): this case (two ranks of 2 FULL decode tokens, a graph at 4) passes, but "
                "`no_empty_microbatch` still fails the search, as a documented choice: with this fix and the eager-ranks "
                "fix both applied, its counterexample is an eager split of ranks of 2 and 4 tokens, rank 0's second "
                "microbatch padding only, run as a dummy batch, as the engine's comment intends. With this fix alone the "
                "eager-ranks case still fails `graph_runnable` (the command names it): the function needs both fixes. "
                "Nothing else changed; `matches_oracle` (choice) and `dispatch_cg_and_sync_dp`'s two split properties "
                "fail on both trees.",
        tracker=TrackerFix(
            url="https://github.com/vllm-project/vllm/pull/57020", diff=_DP_EMPTY_57020, fixes=False,
            note="it makes the guard `<=`: the two-microbatch case runs eagerly, split at 2, and passes; the "
                 "three-microbatch case keeps the FULL graph over `[10, 16)` (`20 <= 16` is false), so the "
                 "reproduction still fails. Where it falls back, it splits eagerly and runs any empty microbatch as "
                 "a dummy batch (the engine's documented choice); batchfuzz's contract, following v1, refuses that "
                 "split, so the matrix cell would still fail `no_empty_microbatch` or `matches_oracle`, both labelled "
                 "documented choice: a policy difference, not a bug."),
    ),
    Finding(
        key="vllm-v1-dummy-run-seq-lens", engine="vLLM", package="vllm", release="0.33.0", path=_V1_RUNNER,
        qualname="GPUModelRunner._dummy_run", contract="make_dummy", prop="seq_lens_within_max_model_len",
        title="the v1 dummy run gives every dummy request the whole token count as its seq_len",
        broken="on the attention path of a dummy run (a FULL graph capture, or `force_attention`) that is neither a "
               "mixed batch nor decode context parallel, `_dummy_run` sets `seq_lens = max_query_len` for every "
               "dummy request, and for a non-uniform batch `max_query_len` is `num_tokens`. A dummy request of one "
               "token then claims `num_tokens - 1` tokens of context, and `num_tokens` can be any capture size, "
               "larger than `max_model_len`. The new model runner's dummy batch (quoted above) sets each seq_len to "
               "its query length instead.",
        case="a FULL capture of `num_tokens=24` with `max_num_seqs=32` and `max_model_len=16`: 24 one-token dummy "
             "requests, each with `seq_len=24`. batchfuzz's contract `make_dummy` shrinks it to `num_reqs=2, "
             "num_tokens=2`: `seq_lens=[2, 2]` for two one-token requests (past `max_model_len=1`).",
        matters="the block table has `cdiv(max_model_len, block_size)` slots a row; a seq_len past `max_model_len` "
                "makes attention read block ids past the request's row (the next row's, or past the tensor for the "
                "last row). vLLM#53658 reports the capture crashing this way (TRITON_ATTN, an illegal memory access; "
                "FLEX_ATTENTION, a shape error).",
        realizable="any CUDA-graph capture size above `max_model_len` under a FULL mode that captures mixed batches "
                   "(or a `force_attention` dummy run), with `max_num_seqs` at least the size: e.g. `max_model_len=16`, "
                   "`max_num_seqs=32`, capture size 24. A dummy run is not a scheduled step, so no engine-steps "
                   "workload applies.",
        kernel="`batchfuzz confirm` replays the shrunk form (`variant:make_dummy.v1_seq_lens_total`, this method's "
               "layout) through vLLM 0.33.0's own Triton unified attention kernel on an H200 (docs/gpu-results.md, "
               "run 4): each dummy request reads outside its block-table row (\"seq_len 2 needs 2 blocks, its row "
               "holds 1 of 1 slots\"), and with a poison block id past the row the kernel faults with an illegal "
               "memory access; the contract's layout on the same case is clean.",
        rule=(Quote("the new model runner's dummy batch", "vllm/v1/worker/gpu/input_batch.py", "InputBatch.make_dummy",
                    "input_buffers.seq_lens[: num_reqs - num_extra] = base_tokens"),
              Quote("and its split", "vllm/v1/worker/gpu/input_batch.py", "InputBatch.make_dummy",
                    "base_tokens = num_tokens // num_reqs"),
              Quote("the mixed dummy batch of this method", _V1_RUNNER, "GPUModelRunner._dummy_run",
                    "if dcp_dummy_context_len > 0:")),
        script=_DUMMY_RUN_SCRIPT, fix=_DUMMY_RUN_FIX, files=(_V1_RUNNER,), counterexample=_DUMMY_RUN_CASE,
        checked="on 0.33.0, exit 0 (114 s). "
        "`_dummy_run` under `make_dummy`: `seq_lens_layout`, `seq_lens_within_max_model_len` and "
        "`num_scheduled_tokens_is_split` go from fail to pass, and this case passes; under `split_dummy_tokens` "
        "`max_is_ceil`, `within_max_model_len` and `dummy_attention_in_bounds` go from fail to pass, in the method's "
        "own row and in the split search's row of it. "
        "`positions_and_input_ids_zero` and `matches_oracle` (choices) fail "
        "on both trees, unchanged: the dummy run feeds the model the `input_ids` and `positions` the last step left "
        "in the persistent buffers (`self.input_ids.gpu[:num_tokens_padded]`, `self.positions[:num_tokens_padded]`), "
        "which any in-range value makes safe; not a separate bug, and not the stale `query_start_loc[0]` of "
        "vLLM#40003 (every writer leaves it 0). The pooler's and the reorder threshold's cases, in the same file, "
        "still fail: their own fixes.",
        tracker=TrackerFix(
            url="https://github.com/vllm-project/vllm/pull/53671", diff=_DUMMY_RUN_53671, fixes=True,
            note="it clamps the seq_lens to `max_model_len` (written here as its description states it): the "
                 "reproduction passes, every one-token request with `seq_len=16`. It keeps this method's split, "
                 "which puts the whole remainder on the last request (README, finding A): with `num_tokens=5`, "
                 "`max_num_seqs=3` and `max_model_len=2` the queries are `[1, 1, 3]` and the clamped seq_lens "
                 "`[2, 2, 2]`, a seq_len shorter than its own query (checked by hand with this reproduction's "
                 "`dummy_batch`). The stated fix therefore evens the split too, as the new model runner's dummy "
                 "batch does: `[1, 2, 2]` for both."),
    ),
)
