"""The description of this machine that reports and benchmarks record, built
in one place (:func:`machine_info`)."""

from __future__ import annotations

import os
import platform
from typing import Any


def machine_info(torch: bool = False) -> dict[str, Any]:
    """Python, platform, processor, CPU count and the versions of numpy and
    Hypothesis; with ``torch``, also torch's version, its intra-op threads and
    the CUDA device's name when there is one (``torch`` is imported then only)."""
    import hypothesis
    import numpy as np

    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "processor": platform.processor(), "cpu_count": os.cpu_count(),
                            "numpy": np.__version__, "hypothesis": hypothesis.__version__}
    if torch:
        try:
            import torch as t
        except ImportError:
            return info
        info["torch"] = t.__version__
        info["torch_threads"] = t.get_num_threads()
        if t.cuda.is_available():
            info["cuda_device"] = t.cuda.get_device_name(0)
    return info
