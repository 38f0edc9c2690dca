"""Every command line and code block batchfuzz prints as a next step is run
here exactly as printed, from a fresh directory, as a user pastes it into a
shell or a file: the reproductions (``python FILE``), ``check``'s "replay the
search" line and its ``--write-test`` file's pytest line, the ``replay``
line of a ``fuzz`` failure and of ``replay`` itself, ``fuzz``'s "rerun with
the same seed" line, and the engine matrix's reproduction and "check it
again" line. Each must do what its text says: a reproduction and a written
test fail while the bug is there and pass once it is fixed; a replay of a
user's entry replays it (not skips it); a rerun runs the same work items.

The shell finds ``batchfuzz`` and ``python`` where this test's Python is (the
installed console script, as after ``pip install``). Runs are bounded by
example counts and seeds, not by seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BUGGY = '''
def bad_split(num_reqs, num_tokens):
    """The shipped bug of contract A: the remainder all goes to the last request."""
    base = num_tokens // num_reqs
    out = [base] * num_reqs
    out[-1] += num_tokens - base * num_reqs
    return out
'''

FIXED = '''
def bad_split(num_reqs, num_tokens):
    """Fixed: the remainder spread one token each over the last requests."""
    return [num_tokens // num_reqs + (1 if i >= num_reqs - num_tokens % num_reqs else 0) for i in range(num_reqs)]
'''

REPRODUCTION = "--- reproduction (copy-paste; run it with python) ---"


def _env(**extra: str) -> dict[str, str]:
    """A user's shell: ``batchfuzz`` and ``python`` on PATH, none of this test run's own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCHFUZZ_", "PYTEST_", "HYPOTHESIS_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("CI", None)
    return {**env, **extra}


def _shell(line: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``line`` run by a shell, verbatim."""
    return subprocess.run(line, shell=True, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=600)


def _block(out: str) -> str:
    """The printed reproduction: the lines after its marker, up to the next ``--- `` line."""
    lines = out.splitlines()
    start = lines.index(REPRODUCTION) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("--- "))
    return "\n".join(lines[start:end]) + "\n"


def _command(out: str, label: str) -> str:
    """The command printed after ``label`` (the rest of its line)."""
    found = re.findall(rf"^.*?{re.escape(label)}(.+)$", out, re.M)
    assert len(found) == 1, f"{label!r} printed {len(found)} times in:\n{out}"
    return found[0]


def _python(block: str, cwd: Path, name: str = "repro.py", env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """A printed code block pasted into a file and run with python."""
    (cwd / name).write_text(block)
    return _shell(f"python {name}", cwd, env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh directory holding a user's module with a buggy split (contract A)."""
    (tmp_path / "mymod.py").write_text(BUGGY)
    return tmp_path


def _fix(project: Path) -> None:
    (project / "mymod.py").write_text(FIXED)
    for cache in project.rglob("__pycache__"):  # a fix made within the second of the buggy file's write
        for f in cache.iterdir():
            f.unlink()


def test_check_prints_a_reproduction_a_replay_line_and_a_test_command_that_work(project: Path) -> None:
    r = _shell("batchfuzz check split_dummy_tokens mymod:bad_split --seed 1 --budget 60 --write-test regress", project)
    assert r.returncode == 1, r.stdout + r.stderr
    repro = _block(r.stdout)
    search = _command(r.stdout, "--- replay the search: ")
    pytest_line = _command(r.stdout, "(run it: ").removesuffix(")")
    assert pytest_line.startswith("python -m pytest "), pytest_line
    failing = _python(repro, project)
    assert failing.returncode == 1 and "PropertyViolation" in failing.stderr, failing.stdout + failing.stderr
    again = _shell(search, project)
    prop = re.search(r"^COUNTEREXAMPLE: property (\w+)", r.stdout, re.M)
    assert prop is not None and again.returncode == 1, again.stdout + again.stderr
    assert f"COUNTEREXAMPLE: property {prop.group(1)} " in again.stdout, again.stdout
    written = _shell(pytest_line, project)
    assert written.returncode == 1 and "1 failed" in written.stdout, written.stdout + written.stderr
    _fix(project)
    assert _python(repro, project).returncode == 0
    fixed = _shell(pytest_line, project)
    assert fixed.returncode == 0 and "1 passed" in fixed.stdout, fixed.stdout + fixed.stderr


def test_fuzz_prints_a_replay_line_a_reproduction_and_a_rerun_line_that_work(project: Path) -> None:
    r = _shell("batchfuzz fuzz --target split_dummy_tokens=mymod:bad_split --contract split_dummy_tokens --impl 'mymod:*' "
               "--property matches_oracle --max-examples 100 --seed 1 --no-database --report rep --corpus corp "
               "--progress lines", project)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 work items" in r.stdout, r.stdout
    repro = _block(r.stdout)
    replay = _command(r.stdout, "--- replay: ")
    rerun = _command(r.stdout, "rerun with the same seed: ")
    failing = _python(repro, project)
    assert failing.returncode == 1 and "PropertyViolation" in failing.stderr, failing.stdout + failing.stderr
    skipped = _shell("batchfuzz replay corp", project)  # the entry names a user's function: skipped, saying how
    assert skipped.returncode == 4 and "1 skipped" in skipped.stdout, skipped.stdout + skipped.stderr
    told = _shell(_command(skipped.stdout, "replay it against, that one with: "), project)
    assert told.returncode == 1 and "1 still fail" in told.stdout, told.stdout + told.stderr
    replayed = _shell(replay, project)
    assert replayed.returncode == 1 and "1 still fail" in replayed.stdout, replayed.stdout + replayed.stderr
    # replay's own next steps, printed under the entry that still fails, work too
    assert _python(_block(replayed.stdout), project, "repro2.py").returncode == 1
    assert _shell(_command(replayed.stdout, "--- replay: "), project).returncode == 1
    again = _shell(rerun, project)
    assert again.returncode == 1 and "1 work items" in again.stdout, again.stdout + again.stderr  # --property kept
    assert ", seed 1" in again.stdout, again.stdout
    _fix(project)
    assert _python(repro, project).returncode == 0
    passing = _shell(replay, project)
    assert passing.returncode == 0 and "1 pass" in passing.stdout, passing.stdout + passing.stderr


def test_the_engine_matrix_prints_a_reproduction_and_a_check_line_that_work(tmp_path: Path) -> None:
    """The toy engine of tests/test_toy_engine.py (a source checkout, its
    engine module through $BATCHFUZZ_ENGINES): its padding cell fails."""
    from tests.test_toy_engine import ENGINE_MODULE, ENGINE_TREE

    checkout = tmp_path / "checkout"
    for rel, text in ENGINE_TREE.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(textwrap.dedent(text).lstrip())
    (tmp_path / "toy_binding.py").write_text(textwrap.dedent(ENGINE_MODULE).lstrip())
    env = _env(PYTHONPATH=str(tmp_path), BATCHFUZZ_ENGINES="toy_binding")
    r = _shell("batchfuzz engine toyengine --source checkout --contract pad_query_start_loc --max-examples 25 "
               "--budget 240 --seed 3", tmp_path, env)
    assert r.returncode == 1, r.stdout + r.stderr
    # what it does while no cell has ended (tests/test_ux.py: the download lines)
    assert "\nbinding toyengine 1.4.0: reading its source, binding its functions\n" in r.stdout, r.stdout
    assert re.search(r"^bound toyengine 1\.4\.0 in \d+s: 1 absent, 2 bound; running its cells$", r.stdout, re.M), r.stdout
    failing = _python(_block(r.stdout), tmp_path, env=env)
    assert failing.returncode == 1 and "PropertyViolation" in failing.stderr, failing.stdout + failing.stderr
    again = _shell(_command(r.stdout, "--- check it again: "), tmp_path, env)
    assert again.returncode == 1 and "COUNTEREXAMPLE" in again.stdout, again.stdout + again.stderr



def test_the_demo_shows_a_counterexample_whose_next_steps_work(tmp_path: Path) -> None:
    """The README's quick start runs ``batchfuzz demo`` before the fuzz job: it
    exits 0 having shown the bundled bug's counterexample; its reproduction
    fails as printed and its replay line finds the same property again."""
    r = _shell("batchfuzz demo", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "got      [1, 1, 3]\n  expected [1, 2, 2]" in r.stdout, r.stdout
    failing = _python(_block(r.stdout), tmp_path)
    assert failing.returncode == 1 and "PropertyViolation" in failing.stderr, failing.stdout + failing.stderr
    again = _shell(_command(r.stdout, "--- replay the search: "), tmp_path)
    assert again.returncode == 1 and "COUNTEREXAMPLE: property matches_oracle " in again.stdout, again.stdout + again.stderr


def test_an_exhaustive_check_prints_a_reproduction_and_a_replay_line_that_work(project: Path) -> None:
    r = _shell("batchfuzz check split_dummy_tokens mymod:bad_split --exhaustive --scope ci", project)
    assert r.returncode == 1, r.stdout + r.stderr
    failing = _python(_block(r.stdout), project)
    assert failing.returncode == 1 and "PropertyViolation" in failing.stderr, failing.stdout + failing.stderr
    again = _shell(_command(r.stdout, "--- replay: "), project)
    assert again.returncode == 1 and _block(again.stdout) == _block(r.stdout), again.stdout + again.stderr  # the same case
