"""The findings with an upstream report: what each breaks, in our words, and
its reproduction body (run after the header of ``batchfuzz.upstream``).

The engine's own words are not here: a ``Quote`` names where to read them
(a docstring, or the comment above a line), and the report reads them from
the release at run time. Each reproduction builds only the stand-in objects
the engine's function reads, as plain Python, and asserts the property.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quote:
    """Where the engine states its rule: ``qualname``'s docstring
    (``needle`` None), or the comment just above its first line holding ``needle``."""

    where: str
    path: str
    qualname: str
    needle: str | None = None


@dataclass(frozen=True)
class Finding:
    """One failing cell, written up for the engine's maintainers.

    ``label`` is ``safety`` (any correct engine must hold the property) or
    ``choice`` (the property is one of several safe answers, and the engine
    documents another). ``files`` are the source files the reproduction
    reads, under the source root; ``fix`` is the smallest fix we can state,
    a unified diff against the release."""

    key: str
    engine: str
    package: str
    release: str
    path: str
    qualname: str
    contract: str
    prop: str
    label: str
    title: str
    broken: str
    case: str
    matters: str
    realizable: str
    rule: tuple[Quote, ...]
    script: str
    fix: str
    files: tuple[str, ...] = ()


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

_TBO_FIX = '''\
--- a/sglang/srt/batch_overlap/two_batch_overlap.py
+++ b/sglang/srt/batch_overlap/two_batch_overlap.py
@@ -129,4 +129,6 @@
     if child_a_batch_size > child_a_num_q_tokens:
         return False
+    if sum(extend_lens[:split_seq_index]) >= child_a_num_q_tokens:
+        return False  # the cut is on a seq boundary: child_a's last seq would get no token

     return True'''

FINDINGS: tuple[Finding, ...] = (
    Finding(
        key="vllm-v1-pooler-dummy-split", engine="vLLM", package="vllm", release="0.33.0", path=_V1_RUNNER,
        qualname="GPUModelRunner._dummy_pooler_run_task", contract="split_dummy_tokens", prop="matches_oracle",
        label="safety",
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
        script=_POOLER_SCRIPT, fix=_POOLER_FIX, files=(_V1_RUNNER,),
    ),
    Finding(
        key="vllm-reorder-threshold-min", engine="vLLM", package="vllm", release="0.33.0", path=_V1_RUNNER,
        qualname="GPUModelRunner.calculate_reorder_batch_threshold", contract="batch_order",
        prop="threshold_matches_oracle", label="choice",
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
        script=_THRESHOLD_SCRIPT, fix=_THRESHOLD_FIX, files=(_V1_RUNNER,),
    ),
    Finding(
        key="sglang-tbo-child-without-token", engine="SGLang", package="sglang", release="0.5.23", path=_TBO,
        qualname="compute_split_token_index", contract="tbo_split", prop="cut_request_in_both", label="choice",
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
        script=_TBO_SCRIPT, fix=_TBO_FIX, files=(_TBO,),
    ),
)
