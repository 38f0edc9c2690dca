"""What every vLLM binding shares: the release's paths, its ReleaseSource and the per-release loader."""

from __future__ import annotations

import functools
import logging
from typing import Any

from batchfuzz import engines as _engines
from batchfuzz.engines.base import Built, Release

ENGINE = "vllm"

INPUT_BATCH = "vllm/v1/worker/gpu/input_batch.py"
MRV2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
LORA_UTILS = "vllm/v1/worker/gpu/lora_utils.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
UBATCH_UTILS = "vllm/v1/worker/ubatch_utils.py"
ATTN_UTILS = "vllm/v1/attention/backends/utils.py"
DP_UTILS = "vllm/v1/worker/dp_utils.py"
MRV2_DP_UTILS = "vllm/v1/worker/gpu/dp_utils.py"
MRV2_CG_UTILS = "vllm/v1/worker/gpu/cudagraph_utils.py"


class ReleaseSource(_engines.ReleaseSource):
    """A vLLM release's files: ``from_wheel``, ``from_dir``, ``installed``, ``from_ref``."""

    distribution = "vllm"
    package = "vllm"


# Names the cut-outs read that no file of theirs defines in a form that can
# be cut out (a logger made at import time).
_STAND_INS: dict[str, Any] = {"logger": logging.getLogger("batchfuzz.engines.vllm")}


# What a binding's builder gives: the target and what was cut out, and optionally the configuration values it assumed.
_Built = Built


class _Release(Release):
    """One vLLM release: the shared per-release loader, with this engine's stand-ins."""

    STAND_INS = _STAND_INS


@functools.lru_cache(maxsize=16)
def _release(source_ref: str) -> _Release:
    return _Release(ReleaseSource.from_ref(source_ref))
