"""What every vLLM binding shares: the release's paths, its ReleaseSource and the per-release loader."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from batchfuzz import bind
from batchfuzz import engines as _engines

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
_Built = tuple[Callable[..., Any], str] | tuple[Callable[..., Any], str, tuple[str, ...]]


class _Release:
    """One release: its source and the files parsed so far (shared by every binding)."""

    def __init__(self, source: _engines.ReleaseSource) -> None:
        self.source = source
        self.files: dict[str, bind.SourceFile] = {}

    def loader(self, **stand_ins: Any) -> bind.Loader:
        """A loader of this release's files; ``stand_ins`` add to the module's own."""
        return bind.Loader(self.source, "vllm", stand_ins={**_STAND_INS, **stand_ins}, files=self.files)


@functools.lru_cache(maxsize=16)
def _release(source_ref: str) -> _Release:
    return _Release(ReleaseSource.from_ref(source_ref))
