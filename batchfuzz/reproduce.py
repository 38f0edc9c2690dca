"""A reproduction is a test: the printed block of a counterexample.

Pasted into a file and run with ``python``, it fails while the bug is there
and passes once it is fixed; the same text makes a failure's other forms
(``regression_test``: a pytest file; ``example_line``: an ``@example``
line). What each kind of failure reproduces as: docs/internals.md,
"reproduce.py".
"""

from __future__ import annotations

import keyword
import os
from typing import Any

from batchfuzz import registry
from batchfuzz.codec import call_literal, literal
from batchfuzz.execution import checked_property
from batchfuzz.registry import Property
from batchfuzz.runner import CRASH_PROPERTY, RAISES_PROPERTY, TIMEOUT_PROPERTY, Failure
from batchfuzz.targets import TargetRef, parse

# The line a printed reproduction follows (check, fuzz, replay, the engine matrix): it is printed
# unindented after it, up to the next line starting with "--- ", so that pasted as printed it runs.
HEADER = "--- reproduction (copy-paste; run it with python) ---"

# Context keys only statistics read (labels); left out of reproductions.
_STATISTICS_ONLY = ("labels", "source", "kind")
_EXPECTED_LIMIT = 400  # characters: a longer expected value is not printed
_ERROR_LIMIT = 200  # characters of the error's first line kept in ``found``


def import_lines(ref: TargetRef, contract: str, name: str) -> list[str]:
    """Lines that bind ``name`` to the target ``ref`` names."""
    if ref.kind == "user":
        module, _, attr = ref.name.rpartition(":")
        head, _, rest = attr.partition(".")
        if module.endswith(".py") or os.sep in module:
            path = os.path.abspath(module)
            lines = ["import importlib.util", "import sys",
                     f"sys.path.insert(0, {os.path.dirname(path)!r})",
                     f"_spec = importlib.util.spec_from_file_location({os.path.splitext(os.path.basename(path))[0]!r}, {path!r})",
                     "_module = importlib.util.module_from_spec(_spec)", "_spec.loader.exec_module(_module)",
                     f"{name} = _module.{attr}"]
            return lines
        if rest or head != name:
            return [f"from {module} import {head}", f"{name} = {attr}"] if rest else [f"from {module} import {head} as {name}"]
        return [f"from {module} import {head}"]
    lines = ["from batchfuzz import registry"]
    if ref.kind == "impl":
        return lines + [f"{name} = registry.get({contract!r}).implementation({ref.name!r}).for_device({ref.device!r})"]
    if ref.kind == "variant":
        return lines + [f"{name} = registry.get({contract!r}).variant({ref.name!r}).fn"]
    if ref.kind == "oracle":
        return lines + [f"{name} = registry.get({contract!r}).oracle"]
    return ["from batchfuzz import engines", f"{name} = engines.resolve({ref.name!r})"]


def _name(ref: TargetRef) -> str:
    """The Python name a reproduction calls the target by: an identifier,
    whatever the reference holds (a corpus file chooses it)."""
    name = ref.name.rpartition(":")[2].split(".")[-1] if ref.kind == "user" else ref.function_name
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return "target_" + "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in name)


def _violated(contract: registry.Contract, failure: Failure) -> Property:
    """The property ``failure`` violates, as batchfuzz states it (the
    registry's, or the runner's pseudo-property), never the failure's text."""
    pseudo = {p.name: p for p in (CRASH_PROPERTY, TIMEOUT_PROPERTY, RAISES_PROPERTY)}
    return pseudo.get(failure.property) or contract.property(failure.property)


def _found_line(failure: Failure, ref: TargetRef, origin: str) -> str:
    """The statement ``found = {...}``: the target, what it did and where it
    was found, as literals (text from a target or a corpus file)."""
    first = failure.message.splitlines()[0] if failure.message else ""
    error = f"{failure.error_type}: {first}" if first else failure.error_type
    found = {"target": ref.spec, "error": error[:_ERROR_LIMIT]}
    if failure.exit:
        found["exit"] = failure.exit[:_ERROR_LIMIT]
    if origin:
        found["in"] = origin
    return f"found = {found!r}  # what batchfuzz found"


def _context(failure: Failure) -> dict[str, Any]:
    return {k: v for k, v in failure.case.context.items() if k not in _STATISTICS_ONLY}


def _expected(contract: registry.Contract, failure: Failure, imports: set[str]) -> str | None:
    try:
        value = contract.call(contract.oracle, failure.case.copy())
    except Exception:
        return None
    text = literal(value, imports)
    return text if len(text) <= _EXPECTED_LIMIT else None


def _engine_step_lines(failure: Failure, recorded: str) -> list[str]:
    """For a case whose step came from the engine's own scheduler (its context
    holds the ``workload``): lines that build vLLM's scheduler, submit the
    workload, step it and take the step (``args``), checking it is the one
    the search recorded."""
    workload = failure.case.context.get("workload")
    if workload is None:
        return []
    return ["from batchfuzz.engine_steps import engine_step_args, same_args",
            f"workload = {workload!r}",
            "# vLLM's own scheduler (the installed vLLM) stepped through the workload; the step as its model runner lays it out",
            f"recorded = {recorded}",
            "args = engine_step_args(workload, recorded)",
            "assert same_args(args, recorded), 'this vLLM scheduler no longer makes the recorded step from the workload'"]


def reproduction(failure: Failure, target: TargetRef | str | None = None, *, timeout_s: float = 60.0) -> str:
    """The test that replays ``failure`` on the target ``target`` names
    (default: ``failure.target``)."""
    head, setup, body = _parts(failure, target, timeout_s)
    return "\n".join([*head, *setup, *body])


def _parts(failure: Failure, target: TargetRef | str | None, timeout_s: float,
           origin: str = "") -> tuple[list[str], list[str], list[str]]:
    """A reproduction in three parts: its comment lines, the lines that set
    it up (imports; for a crash or a timeout, the call's source), and the
    statements that check it (a test function's body, first the ``found``
    line: what was found, where, as literals).

    A comment holds only batchfuzz's own text (the registry's names and
    sentences); every value from a target or a corpus file (its target, its
    error, the file's path) is a Python literal (``repr``), so no text from
    outside can start a statement (docs/nightly.md, "The corpus as committed tests")."""
    contract = registry.get(failure.contract)
    given = target or failure.target
    ref = parse(given) if isinstance(given, str) else given
    name = _name(ref)
    imports: set[str] = set()
    crash = failure.property in (CRASH_PROPERTY.name, TIMEOUT_PROPERTY.name)
    prop = checked_property(failure.property, failure.during)
    args = literal(failure.case.args, imports)
    context = literal(_context(failure), imports)
    rebuilt = _engine_step_lines(failure, args)
    if rebuilt:
        args = "args"
    check = f"assert_property({contract.name!r}, {prop!r}, {name}, {args}, {context})"
    violated = _violated(contract, failure)
    head = [f"# batchfuzz reproduction: {contract.name}, property {violated.name}",
            f"# {violated.name}: {violated.spec}",
            "# Run it with python: it fails while the bug is there and passes once it is fixed."]
    found = _found_line(failure, ref, origin)
    if not crash:
        if contract.reproduce is not None:
            calls = contract.reproduce(name, failure.case, prop, imports)
        else:
            calls = [f"result = {call_literal(name, failure.case, imports)}"]
        expected = _expected(contract, failure, imports)
        if rebuilt:
            calls = [f"result = {name}(*(args[k] for k in {list(contract.arguments)!r}))"]
        setup = [*sorted(imports), *import_lines(ref, contract.name, name), "from batchfuzz.testing import assert_property", ""]
        body = [found, *rebuilt, *calls]
        if expected is not None:
            body.append(f"expected = {expected}  # the contract's answer ({contract.oracle.__module__})")
        body.append(check)
        return head, setup, body
    inner = [*sorted(imports), *import_lines(ref, contract.name, name), "from batchfuzz.testing import assert_property",
             *rebuilt, check]
    how = "ran past its per-example timeout" if failure.property == TIMEOUT_PROPERTY.name else "ended as found['exit'] says"
    source = "\n".join(inner)
    # Readable between triple quotes, unless a literal in it could end them or mean another text there.
    call = [f"CALL = {source!r}"] if "\\" in source or "'''" in source else ["CALL = '''", *inner, "'''"]
    setup = ["import subprocess", "import sys", "", *call]
    body = [found, f"# In batchfuzz's worker process the call {how}.",
            f"run = subprocess.run([sys.executable, '-c', CALL], timeout={timeout_s:g})  # a hang raises TimeoutExpired",
            "assert run.returncode == 0, f'the call ended with exit status {run.returncode}'"]
    return head, setup, body


def test_name(failure: Failure, key: str = "") -> str:
    """A pytest function name for ``failure``: ``test_CONTRACT_PROPERTY[_KEY]``."""
    words = [failure.contract, failure.during or failure.property, failure.property if failure.during else "", key]
    return "test_" + "_".join("".join(ch if ch.isalnum() else "_" for ch in w) for w in words if w)


def regression_test(failure: Failure, target: TargetRef | str | None = None, *, timeout_s: float = 60.0,
                    origin: str = "", key: str = "", device: str = "cpu") -> str:
    """A pytest file with one test, the reproduction of ``failure`` as its
    body: it fails while the bug is there and passes once it is fixed.
    ``origin`` says where the failure was found (a corpus file, a check);
    ``key`` makes the test's name unique (a corpus entry's id); a failure
    recorded on ``cuda`` skips where no CUDA device is."""
    head, setup, body = _parts(failure, target, timeout_s, origin)
    head = [line for line in head if not line.startswith("# Run it with python")]
    while setup and not setup[-1]:
        setup = setup[:-1]
    contract = registry.get(failure.contract)
    violated = _violated(contract, failure)
    checked = contract.property(checked_property(failure.property, failure.during)).name
    doc = ['"""Regression test written by batchfuzz (``found`` says where and on which target).', "",
           f"{contract.name}: {violated.name}" + (f" (while checking {checked})" if checked != violated.name else "") + ".",
           "It fails while the bug is there and passes once it is fixed; commit it with your tests.", '"""']
    mark: list[str] = []
    if device == "cuda":
        setup = ["import pytest", "import torch", *setup]
        mark = ["@pytest.mark.skipif(not torch.cuda.is_available(), reason='recorded on cuda; no CUDA device here')"]
    return "\n".join([*doc, *setup, "", "", *mark, f"def {test_name(failure, key)}() -> None:",
                      *(("    " + line) if line else "" for line in [*head, *body]), ""])


def write_test(failure: Failure, directory: str | os.PathLike[str], target: TargetRef | str | None = None, *,
               timeout_s: float = 60.0, origin: str = "", key: str = "", device: str = "cpu") -> str:
    """Write :func:`regression_test` to ``directory/test_CONTRACT_KEY.py``
    (without a key: ``test_CONTRACT_PROPERTY.py``; the folder created, an
    earlier file of that name replaced); returns its path."""
    from batchfuzz.output import write_text_atomic

    os.makedirs(directory, exist_ok=True)
    stem = f"test_{failure.contract}_{key}" if key else test_name(failure)
    path = os.path.join(os.fspath(directory), f"{stem}.py")
    write_text_atomic(path, regression_test(failure, target, timeout_s=timeout_s, origin=origin, key=key, device=device))
    return path


def example_line(failure: Failure) -> str:
    """The ``@batchfuzz.testing.example(...)`` line that keeps ``failure``'s
    case in a test calling ``check_contract`` (with any import its values need
    after a ``# needs:``)."""
    imports: set[str] = set()
    values = {**failure.case.args, **_context(failure)}
    text = ", ".join(f"{k}={literal(v, imports)}" for k, v in values.items())
    needs = f"  # needs: {'; '.join(sorted(imports))}" if imports else ""
    return f"@batchfuzz.testing.example({failure.contract!r}, {text}){needs}"
