"""A printed reproduction is a test: written to a file and run with
``python``, it fails while the bug is there and passes once it is fixed.

For every contract, a variant's reproduction is run as printed (it fails),
then pointed at the contract's correct implementation (it passes); for a
user's file target, the file is fixed in place; for a crash and a timeout,
the reproduction runs the call in a subprocess and checks how it ends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from batchfuzz import registry, runner
from batchfuzz.execution import Isolated
from batchfuzz.reproduce import reproduction

REPO = Path(__file__).resolve().parent.parent


def _run(code: str, tmp_path: Path, name: str = "repro.py") -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(code)
    return subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=240)


def _hunt(contract: registry.Contract, target: object, prop: str, name: str) -> runner.Failure:
    r = runner.hunt(contract, target, contract.property(prop),  # type: ignore[arg-type]
                    runner.HuntOptions(settings(max_examples=300, derandomize=True, database=None, deadline=None)), target_name=name)
    assert r.failure is not None, (contract.name, name, prop)
    return r.failure


@pytest.mark.parametrize("name", [c.name for c in registry.contracts()])
def test_a_variants_reproduction_fails_and_passes_on_the_correct_implementation(name: str, tmp_path: Path) -> None:
    contract = registry.get(name)
    variant = contract.variants[0]
    failure = _hunt(contract, variant.fn, variant.caught_by[0], f"variant:{variant.name}")
    code = reproduction(failure, f"variant:{variant.name}")
    bad = _run(code, tmp_path)
    assert (bad.returncode != 0 and "AssertionError" in bad.stderr) or "PropertyViolation" in bad.stderr, code + bad.stderr
    fixed = reproduction(failure, f"impl:{contract.implementations[0].name}@cpu")
    good = _run(fixed, tmp_path)
    assert good.returncode == 0, fixed + good.stderr


PLANTED = '''
def split(num_reqs, num_tokens):
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out
'''
FIXED = '''
def split(num_reqs, num_tokens):
    q, r = divmod(num_tokens, num_reqs)
    return [q + (i >= num_reqs - r) for i in range(num_reqs)]
'''


def test_a_file_targets_reproduction_imports_it_and_turns_green_when_fixed(tmp_path: Path) -> None:
    target = tmp_path / "engine_split.py"
    target.write_text(textwrap.dedent(PLANTED))
    contract = registry.get("split_dummy_tokens")
    with Isolated(contract, f"{target}:split") as ex:
        failure = _hunt(contract, ex, "max_is_ceil", f"{target}:split")
    code = reproduction(failure)
    assert "importlib.util.spec_from_file_location" in code and "split(3, 5)" in code
    assert _run(code, tmp_path / "..").returncode != 0  # from another folder: the file is found by its path
    target.write_text(textwrap.dedent(FIXED))
    assert _run(code, tmp_path).returncode == 0


# The hang sleeps rather than spins, so its timeouts take no core from the other test worker (a spinning
# hang is tests/test_hostile.py's and tests/test_execution.py's: tests/hostile.py:hang), and the search
# does not shrink: every shrink step that still hangs would cost the 1 s timeout again (~19 of them), and
# what is checked here is the reproduction of whatever case failed (shrinking is tests/test_hostile.py's).
@pytest.mark.parametrize(("body", "kind"), [
    ("import ctypes\n    if num_reqs >= 3:\n        ctypes.string_at(0)", "crash"),
    ("import time\n    if num_tokens >= 40:\n        time.sleep(3600)", "timeout"),
], ids=("crash", "timeout"))
def test_crash_and_timeout_reproductions_run_the_call_in_a_subprocess(body: str, kind: str, tmp_path: Path) -> None:
    target = tmp_path / "hostile.py"
    target.write_text(f"def split(num_reqs, num_tokens):\n    {body}\n{textwrap.indent(textwrap.dedent(FIXED), '')}"
                      .replace("def split(num_reqs, num_tokens):\n    q, r", "def _even(num_reqs, num_tokens):\n    q, r")
                      + "\n\ndef fixed(num_reqs, num_tokens):\n    return _even(num_reqs, num_tokens)\n")
    src = target.read_text().replace(f"    {body}\n", f"    {body}\n    return _even(num_reqs, num_tokens)\n", 1)
    target.write_text(src)
    contract = registry.get("split_dummy_tokens")
    with Isolated(contract, f"{target}:split") as ex:
        r = runner.hunt(contract, ex, contract.property("sum_is_num_tokens"),
                        runner.HuntOptions(settings(max_examples=100, derandomize=True, database=None, deadline=None,
                                                    phases=(Phase.explicit, Phase.reuse, Phase.generate)),
                                           example_timeout_s=1.0, reduce=False),
                        target_name=f"{target}:split")
    assert r.failure is not None and r.failure.property == kind
    code = reproduction(r.failure, timeout_s=5)  # the hang's: 5 s is plenty to show it hangs
    assert "subprocess.run" in code
    assert _run(code, tmp_path).returncode != 0
    target.write_text(src.replace(f"    {body}\n", "", 1))
    # The fixed function's subprocess imports batchfuzz (torch) first: seconds on a loaded machine, not a verdict.
    assert _run(reproduction(r.failure, timeout_s=180), tmp_path).returncode == 0
