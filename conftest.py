"""pytest configuration: Hypothesis profiles (none of them measuring time),
the --device option, GPU skips (the markers themselves are declared once, in
pyproject.toml; ``timing`` marks the few tests about wall-clock bounds).

Profiles (see batchfuzz/profiles.py) are registered here, before Hypothesis's
pytest plugin applies ``--hypothesis-profile``; without that option the
profile comes from ``BATCHFUZZ_PROFILE``, else ``ci``, CI or not
(``profiles.default_profile``: a verdict depends on the code, not on a seed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from batchfuzz import profiles

profiles.load()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Whatever profile is loaded (``--hypothesis-profile`` included), no
    health check or deadline measures time (``profiles.untimed``)."""
    current = settings.default
    untimed = profiles.untimed(current)
    if untimed is current:
        return
    settings.register_profile("untimed", untimed)
    settings.load_profile("untimed")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Torch is imported by the tests that use it, never at collection: so
    its settings are made here, once it is there. A GPU test skips, saying
    why, without a CUDA device."""
    torch = sys.modules.get("torch")
    if torch is not None and os.environ.get("PYTEST_XDIST_WORKER"):
        # Each xdist worker owns one core: torch's intra-op threads would only
        # contend with the other workers (small ops get ~100x slower on 2 cores).
        torch.set_num_threads(1)
    if "gpu" in item.keywords:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("no CUDA device (torch.cuda.is_available() is False)")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device", action="store", default="all", choices=("cpu", "cuda", "all"),
        help="devices for torch implementations: all (default; cuda cases skip without a GPU), cpu, or cuda",
    )


# The inner loop, `pytest -m inner` (README, "Development"): each core
# layer's own tests and the contracts' error inputs, under two minutes on 2
# cores; the end-to-end runs (fuzz, pytest and reproductions in subprocesses)
# stay in the whole suite. A file, or a file's test function.
INNER = (
    "tests/test_registry.py", "tests/test_targets.py", "tests/test_plugins.py", "tests/test_binding.py",
    "tests/test_argument_vocabulary.py", "tests/test_impl_results.py", "tests/test_microbatch_impl.py",
    "tests/test_checking.py", "tests/test_progress.py", "tests/test_doc_references.py",
    "tests/test_corpus.py", "tests/test_contracts.py::test_error_inputs", "tests/test_contracts.py::test_oracle_satisfies",
)


def _inner(nodeid: str) -> bool:
    function = nodeid.partition("[")[0]
    return any(function == entry or nodeid.startswith(entry + "::") for entry in INNER)


# The test modules that import vLLM in the test process (about 7 s of CPU each
# time): one xdist worker runs them all (``loadgroup`` below), so a run pays
# the import once rather than once per worker.
VLLM_MODULES = ("tests/test_engine_steps.py", "tests/test_live_engine.py", "tests/test_matrix_steps.py")
# The modules whose module fixtures take seconds (a night of two shards, a
# vLLM release read and bound, a wheel built): a fixture is made once per
# worker that runs one of its tests, so each module runs on one worker.
ONE_WORKER_MODULES = ("tests/test_nightly_shards.py", "tests/test_engines_vllm.py", "tests/test_packaging.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own (also tryfirst), which makes "no" into "load"
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-n N`` without ``--dist`` distributes by ``loadgroup`` (xdist would
    take ``load``): set here, not in pyproject's addopts, where ``--dist``
    would be an unknown option under ``-p no:xdist`` (the mutation runs). A
    worker parses the command line again, so it is told (``workerinput``)."""
    if getattr(config, "workerinput", {}).get("loadgroup"):
        config.option.loadgroup = True
    elif getattr(config.option, "dist", None) == "no" and getattr(config.option, "numprocesses", None):
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent under -p no:xdist
def pytest_configure_node(node: Any) -> None:
    node.workerinput["loadgroup"] = node.config.getvalue("dist") == "loadgroup"


# First, so that xdist's worker sees the group when it names the test by it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    loadgroup = getattr(config.option, "loadgroup", False)
    for item in items:
        if _inner(item.nodeid):
            item.add_marker(pytest.mark.inner)
        module = item.nodeid.partition("::")[0]
        if loadgroup and module in VLLM_MODULES:
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif loadgroup and module in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(Path(module).stem))
    device = config.getoption("--device")
    if device != "all":
        # --device cuda keeps only the GPU tests; --device cpu drops them.
        keep = [i for i in items if ("gpu" in i.keywords) == (device == "cuda")]
        dropped = [i for i in items if ("gpu" in i.keywords) != (device == "cuda")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
