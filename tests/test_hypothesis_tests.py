"""batchfuzz.hypothesis_tests: the contract properties as Hypothesis tests
that pytest collects, HypoFuzz fuzzes and the crosshair backend runs; and
the command lines and files of docs/hypofuzz-crosshair.md, run as printed.

HypoFuzz and hypothesis-crosshair are optional (the ``hypofuzz`` and
``crosshair`` extras, not installed in CI): the tests that need them skip,
saying so, without them."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from batchfuzz import registry
from batchfuzz.hypothesis_tests import ContractFailure, expose, expose_implementations, make_test, name_of_test

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "hypofuzz-crosshair.md"
HAS_HYPOFUZZ = importlib.util.find_spec("hypofuzz") is not None
HAS_CROSSHAIR = importlib.util.find_spec("hypothesis_crosshair_provider") is not None
needs_hypofuzz = pytest.mark.skipif(not HAS_HYPOFUZZ, reason="hypofuzz is not installed (pip install 'batchfuzz[hypofuzz]')")
needs_crosshair = pytest.mark.skipif(not HAS_CROSSHAIR,
                                     reason="hypothesis-crosshair is not installed (pip install 'batchfuzz[crosshair]')")
# Derandomized and bounded by examples: a verdict does not depend on a seed or on the machine's load.
SEARCH = settings(derandomize=True, max_examples=300, database=None)


def _claimed(contract: registry.Contract) -> list[tuple[str, str]]:
    return [(contract.name, p.name) for p in contract.properties]


PROPERTIES = [cp for name in ("split_dummy_tokens", "pad_query_start_loc", "split_ubatches") for cp in _claimed(registry.get(name))]


@pytest.mark.parametrize(("contract", "prop"), PROPERTIES, ids=[f"{c}.{p}" for c, p in PROPERTIES])
def test_every_exposed_property_fails_on_a_variant_that_breaks_it(contract: str, prop: str) -> None:
    """The exposed test of each property of contracts A, C and D fails on a
    registered variant that claims to break it (its ``caught_by``), and
    passes on the numpy implementation."""
    c = registry.get(contract)
    claimed = [v for v in c.variants if prop in v.caught_by]
    failed = []
    for v in claimed:
        try:
            make_test(c, prop, f"variant:{v.name}", settings=SEARCH)()
        except ContractFailure as exc:
            assert f"{contract} on variant:{v.name}: property {prop} " in str(exc)
            failed.append(v.name)
            break
    assert failed, f"{contract}.{prop} failed on none of {[v.name for v in claimed]}"
    make_test(c, prop, "impl:numpy@cpu", settings=settings(SEARCH, max_examples=50))()


def test_expose_names_one_test_per_property_and_refuses_a_second_copy() -> None:
    ns: dict[str, Any] = {"__name__": "user_tests"}
    names = expose(ns, "split_ubatches", "impl:numpy@cpu")
    c = registry.get("split_ubatches")
    assert names == [name_of_test(c.name, p.name, "impl:numpy@cpu") for p in c.properties]
    assert names[0] == "test_split_ubatches__matches_oracle__impl_numpy_cpu"
    assert all(ns[n].__module__ == "user_tests" and ns[n].is_hypothesis_test for n in names)
    with pytest.raises(ValueError, match="user_tests already has a 'test_split_ubatches__matches_oracle__impl_numpy_cpu'"):
        expose(ns, "split_ubatches", "impl:numpy@cpu")
    with pytest.raises(TypeError, match="target must be a target reference or a callable, got int 3"):
        expose({}, "split_ubatches", 3)  # type: ignore[arg-type]
    with pytest.raises(registry.UnknownName, match="has no property 'nope'"):
        expose({}, "split_ubatches", "impl:numpy@cpu", properties=["nope"])
    assert len(expose_implementations({}, ["D"])) == len(c.properties) * len(c.implementations)


def test_a_callable_target_and_its_assumptions() -> None:
    """A callable is named by module and qualname; a case its ``@assumes``
    rejects is rejected, not failed (the same evaluation as ``check``)."""
    import batchfuzz
    from batchfuzz.contracts.split_dummy_tokens_variants import remainder_to_first

    @batchfuzz.assumes(lambda num_reqs, num_tokens: num_tokens % num_reqs == 0)
    def even_only(num_reqs: int, num_tokens: int) -> object:
        return remainder_to_first(num_reqs, num_tokens)

    ns: dict[str, Any] = {}
    [name] = expose(ns, "split_dummy_tokens", even_only, properties=["non_decreasing"], settings=SEARCH)
    assert name.endswith("__tests_test_hypothesis_tests_test_a_callable_target_and_its_assumptions_locals_even_only")
    ns[name]()  # the bug needs a remainder, which the assumption rules out
    with pytest.raises(ContractFailure, match="property non_decreasing fails"):
        make_test("split_dummy_tokens", "non_decreasing", remainder_to_first, settings=SEARCH)()


_MODULE = '''
from hypothesis import settings
from batchfuzz.hypothesis_tests import expose

search = settings(derandomize=True, max_examples=100, database=None)
expose(globals(), "split_dummy_tokens", "variant:remainder_to_first", properties=["non_decreasing"], settings=search)
expose(globals(), "split_dummy_tokens", "impl:numpy@cpu", properties=["non_decreasing"], settings=search)
'''


def test_pytest_collects_the_exposed_tests_and_the_variant_fails(tmp_path: Path) -> None:
    (tmp_path / "test_exposed.py").write_text(_MODULE)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_exposed.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED test_exposed.py::test_split_dummy_tokens__non_decreasing__variant_remainder_to_first" in run.stdout
    assert "1 failed, 1 passed" in run.stdout
    assert "ContractFailure: split_dummy_tokens on variant:remainder_to_first: property non_decreasing fails" in run.stdout


@needs_crosshair
def test_the_crosshair_backend_runs_an_exposed_test() -> None:
    with pytest.raises(ContractFailure, match="property non_decreasing fails"):
        make_test("split_dummy_tokens", "non_decreasing", "variant:remainder_to_first",
                  settings=settings(backend="crosshair", max_examples=100, database=None))()


# ---------------------------------------------------------------- the page's files and commands

def _page_files() -> dict[str, str]:
    return dict(re.findall(r"```python\n# file: (\S+)\n(.*?)```", PAGE.read_text(), re.S))


def _page_commands() -> list[str]:
    return [line for block in re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S) for line in block.splitlines() if line.strip()]


def _argv(command: str) -> list[str]:
    """A printed command as run here: ``python`` is this interpreter, and
    ``hypothesis`` Hypothesis's command line (the benchmark's
    ``hypothesis_command``: the script, or its ``main`` where this
    environment has no script)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from hypofuzz_crosshair import hypothesis_command
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "hypothesis":
        argv[:1] = hypothesis_command()
    return argv


def test_the_page_shows_these_files_and_commands() -> None:
    assert set(_page_files()) == {"mysplit.py", "test_contracts_fuzz.py", "conftest.py"}
    assert _page_commands() == [
        "python -m pytest -q -p no:cacheprovider --hypothesis-profile=repeatable test_contracts_fuzz.py",
        "python -m pytest -q -p no:cacheprovider --hypothesis-profile=crosshair test_contracts_fuzz.py -k 'mysplit and max_is_ceil'",
        "hypothesis fuzz --no-dashboard -n 1 -- -p no:cacheprovider test_contracts_fuzz.py -k 'mysplit and max_is_ceil'",
        "PYTHONPATH=$PWD python3 benchmarks/hypofuzz_crosshair.py --cap 30 --json hypofuzz-crosshair.json",
        "PYTHONPATH=$PWD python3 benchmarks/hypofuzz_crosshair.py --contract A --variant ceil_then_trim_last "
        "--variant uneven_spread --tool crosshair --cap 30",
    ]


def _run_page_command(tmp_path: Path, k: int, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    for name, text in _page_files().items():
        (tmp_path / name).write_text(text)
    return subprocess.run(_argv(_page_commands()[k]), cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def test_the_pages_pytest_command_finds_the_bug(tmp_path: Path) -> None:
    run = _run_page_command(tmp_path, 0)
    assert run.returncode == 1, run.stdout + run.stderr
    failed = sorted(re.findall(r"FAILED test_contracts_fuzz.py::(\S+)", run.stdout))
    assert failed == [f"test_split_dummy_tokens__{p}__mysplit_split"
                      for p in ("dummy_attention_in_bounds", "matches_oracle", "max_is_ceil", "within_max_model_len")]
    assert "4 failed, 12 passed" in run.stdout


@needs_crosshair
@pytest.mark.slow
def test_the_pages_crosshair_command_finds_the_bug(tmp_path: Path) -> None:
    run = _run_page_command(tmp_path, 1)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED test_contracts_fuzz.py::test_split_dummy_tokens__max_is_ceil__mysplit_split" in run.stdout


@needs_hypofuzz
@pytest.mark.slow
def test_the_pages_hypofuzz_command_ends_on_the_failure(tmp_path: Path) -> None:
    """HypoFuzz stops once every test it fuzzes has failed: the page's
    command selects one failing test, so it ends by itself."""
    run = _run_page_command(tmp_path, 2)
    assert "using 1 process to fuzz 1 test" in run.stdout, run.stdout + run.stderr
    assert "Found a failing input for every test!" in run.stderr, run.stdout + run.stderr


def test_the_pages_benchmark_commands_parse() -> None:
    """The benchmark (run once for the page's figures; minutes) is only parsed here."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import hypofuzz_crosshair
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    parsed = []
    for command in _page_commands()[3:]:
        argv = shlex.split(command)
        assert argv[:3] == ["PYTHONPATH=$PWD", "python3", "benchmarks/hypofuzz_crosshair.py"]
        parsed.append(hypofuzz_crosshair.parser().parse_args(argv[3:]))
    assert [(a.cap, a.json, a.tool, a.contract, a.variant) for a in parsed] == [
        (30.0, "hypofuzz-crosshair.json", None, None, None),
        (30.0, None, ["crosshair"], ["A"], ["ceil_then_trim_last", "uneven_spread"]),
    ]
