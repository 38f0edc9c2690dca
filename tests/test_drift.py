"""Where each binding lives and how it drifted (``batchfuzz.engines.locate``),
and following releases (``batchfuzz.engines.follow``, ``batchfuzz vllm
--where/--drift/--latest/--follow/--profile nightly``): small made-up
releases built here (source trees, and wheels on a package index in a
folder, served to pip as ``file://``), no download."""

from __future__ import annotations

import json
import os
import textwrap
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import follow, locate
from tests._lazy import LazyModule

vllm = LazyModule("batchfuzz.engines.vllm")  # imports torch: when a test first uses it

OLD = {
    "pkg/runner.py": '''
        class Runner:
            def decide(self, batch, config):
                if not config.enabled:
                    return False
                return batch.num_tokens >= config.threshold

            def prepare(self, batch, slices, cg_mode=None):
                return [batch.query_start_loc[s.token_slice] for s in slices]

            def helper_count(self, tokens):
                total = 0
                for t in tokens:
                    total += t
                return total

            def calc_spec_metadata(self, num_draft_tokens, cu_num_scheduled_tokens):
                cu_num_draft_tokens = num_draft_tokens.cumsum()
                target_logits_indices = cu_num_scheduled_tokens - cu_num_draft_tokens
                bonus_logits_indices = cu_num_scheduled_tokens - 1
                return target_logits_indices, bonus_logits_indices

            def vanished(self, zebra_quokka_count, narwhal_offset):
                return zebra_quokka_count + narwhal_offset
    ''',
}
NEW = {
    "pkg/runner.py": '''
        class Runner:
            def decide(self, batch, config):
                if not config.enabled or config.enable_fault_tolerance:
                    return False
                return batch.num_tokens >= config.threshold

            def prepare(self, batch, slices, batch_desc, dp_sync_state=None):
                return [batch.query_start_loc[s.token_slice] for s in slices]

            def sum_counts(self, values):
                acc = 0
                for v in values:
                    acc += v
                return acc
    ''',
    "pkg/new_runner/inputs.py": '''
        def prepare_inputs(num_draft_tokens, cu_num_scheduled_tokens, logits):
            cu_num_draft_tokens = num_draft_tokens.cumsum()
            target_logits_indices = cu_num_scheduled_tokens - cu_num_draft_tokens
            bonus_logits_indices = cu_num_scheduled_tokens - 1
            return logits[target_logits_indices], logits[bonus_logits_indices]
    ''',
    "pkg/moved.py": '''
        class Runner:
            def added_here(self):
                return 1
    ''',
}


@dataclass(frozen=True)
class _Spec:
    function: str
    contract: str
    build: Callable[..., Any]


def _build_by_name() -> None:
    """The fake engine's one builder (named in the table as the binding used)."""


class FakeEngine:
    """An engine module's shape, enough for ``locate``: SPECS and bindings
    (a function the release lacks is absent, any other unbindable)."""

    ENGINE = "fake"
    SPECS = tuple(_Spec(f"pkg/runner.py:Runner.{m}", c, _build_by_name) for m, c in (
        ("decide", "allow_microbatching"), ("prepare", "slice_ubatch_metadata"), ("helper_count", "split_dummy_tokens"),
        ("calc_spec_metadata", "spec_decode_metadata"), ("vanished", "split_ubatches")))
    SPECS += (_Spec("pkg/moved.py:Runner.added_here", "spec_decode_metadata", _build_by_name),)

    @staticmethod
    def bindings(source: engines.ReleaseSource) -> list[engines.Bound]:
        out = []
        for spec in FakeEngine.SPECS:
            path, _, qual = spec.function.partition(":")
            there = qual in locate.definitions(path, source.read(path) or "")
            if there and qual.endswith("added_here"):  # the one this engine can bind
                out.append(engines.Bound(f"fake {source.version}", spec.function, spec.contract, "bound", target=len))
                continue
            out.append(engines.Bound(f"fake {source.version}", spec.function, spec.contract,
                                     "unbindable" if there else "absent", reason="" if there else f"{qual} is not in {path}"))
        return out


@dataclass(frozen=True)
class _Assuming:
    """A binding that says which configuration values it gave the code (as a Bound may)."""

    release: str
    function: str
    contract: str
    status: str
    reason: str = ""
    assumed: tuple[str, ...] = ()


class _Tree(engines.ReleaseSource):
    distribution = "pkg"
    package = "pkg"


def tree(root: Path, files: dict[str, str], version: str) -> _Tree:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    (root / "pkg" / "_version.py").write_text(f"__version__ = version = {version!r}\n")
    return _Tree.from_dir(root)


@pytest.fixture()
def drifted(tmp_path: Path) -> dict[str, locate.Drift]:
    older, newer = tree(tmp_path / "a", OLD, "1.0.0"), tree(tmp_path / "b", NEW, "1.1.0")
    return {d.function.rsplit(".", 1)[-1]: d for d in locate.drift(FakeEngine, older, newer)}


def test_the_drift_says_what_became_of_each_function(drifted: dict[str, locate.Drift]) -> None:
    got = {name: d.change for name, d in drifted.items()}
    assert got == {"decide": "changed", "prepare": "signature", "helper_count": "renamed",
                   "calc_spec_metadata": "removed", "vanished": "removed", "added_here": "added"}, got
    assert "now reads config.enable_fault_tolerance" in drifted["decide"].detail
    assert drifted["prepare"].detail.startswith("parameters -cg_mode +batch_desc +dp_sync_state")
    assert drifted["helper_count"].now == "pkg/runner.py:Runner.sum_counts"
    assert (drifted["decide"].old, drifted["decide"].new) == ("unbindable", "unbindable")
    assert (drifted["vanished"].old, drifted["vanished"].new) == ("unbindable", "absent")


def test_a_removed_function_names_where_its_behaviour_went(drifted: dict[str, locate.Drift]) -> None:
    went = drifted["calc_spec_metadata"].went
    assert went and went[0].function == "pkg/new_runner/inputs.py:prepare_inputs", went
    assert went[0].share >= locate.WENT_SHARE
    assert drifted["vanished"].went == ()  # its names are nowhere in the newer release
    report = locate.drift_markdown(list(drifted.values()), "1.0.0", "1.1.0")
    assert "`pkg/new_runner/inputs.py:prepare_inputs` (" in report
    assert "no function of 1.1.0 holds" in report
    # The registry's own answer: the functions bound to the same contract in the newer release.
    assert drifted["calc_spec_metadata"].checked == ("pkg/moved.py:Runner.added_here",)
    assert "- spec_decode_metadata: `pkg/moved.py:Runner.added_here`" in report and "- split_ubatches: none" in report


def test_a_function_in_another_file_under_its_name_has_moved(tmp_path: Path) -> None:
    moved = {**NEW, "pkg/runner.py": NEW["pkg/runner.py"].replace("def sum_counts", "def _x")}
    moved["pkg/other.py"] = "class Runner:\n    def helper_count(self, tokens):\n        return sum(tokens)\n"
    older, newer = tree(tmp_path / "a", OLD, "1.0.0"), tree(tmp_path / "b", moved, "1.1.0")
    d = next(x for x in locate.drift(FakeEngine, older, newer) if x.function.endswith("helper_count"))
    assert (d.change, d.now) == ("moved", "pkg/other.py:Runner.helper_count"), d
    assert "the same qualified name in another file" in d.detail
    # A method of the same name in another class, with other code, is no move (locate.MOVE_SHARE).
    unrelated = {**NEW, "pkg/other.py": "class Player:\n    def vanished(self, path):\n        return open(path).read()\n"}
    d = next(x for x in locate.drift(FakeEngine, older, tree(tmp_path / "c", unrelated, "1.1.0")) if x.function.endswith("vanished"))
    assert (d.change, d.now) == ("removed", ""), d


def test_the_table_says_where_each_binding_lives_and_how_it_was_found(tmp_path: Path) -> None:
    rows = locate.where(FakeEngine, tree(tmp_path / "b", NEW, "1.1.0"))
    by = {r.function.rsplit(".", 1)[-1]: r for r in rows}
    assert (by["prepare"].path, by["prepare"].qualname, by["prepare"].lines) == ("pkg/runner.py", "Runner.prepare", "8-9")
    assert by["prepare"].found == "by name" and by["prepare"].binding.endswith("test_drift._build_by_name")
    assert (by["vanished"].status, by["vanished"].lines) == ("absent", "")
    text = locate.where_markdown(rows, "fake 1.1.0")
    assert "| slice_ubatch_metadata | `pkg/runner.py` | `Runner.prepare` | 8-9 | by name |" in text
    assuming = _Assuming("fake 1.1.0", "pkg/runner.py:Runner.decide", "allow_microbatching", "unbindable", "why",
                         ("config.enable_fault_tolerance=False",))
    (row,) = locate.where(FakeEngine, tree(tmp_path / "c", NEW, "1.1.0"), bound=[assuming])  # type: ignore[list-item]
    assert row.assumed == ("config.enable_fault_tolerance=False",)
    assert "| unbindable: why (assumed: config.enable_fault_tolerance=False) |" in locate.where_markdown([row], "t")


def test_versions_order_and_the_baseline_is_the_newest_seen_before() -> None:
    assert follow.newest(["0.9.0", "0.10.0", "0.10.0rc1", "0.8.5.post1", "0.9.0.dev3"], 2) == ["0.9.0", "0.10.0"]
    assert follow.baseline("0.34.0", {"0.22.0", "0.33.0", "0.35.0"}) == "0.33.0"
    assert follow.baseline("unknown", {"0.22.0", "0.33.0"}) == "0.33.0"  # a checkout: the newest seen
    assert follow.baseline("0.22.0", {"0.22.0", "0.33.0"}) is None
    with pytest.raises(ValueError, match="n must be a positive integer"):
        follow.newest(["1.0"], 0)


# ---------------------------------------------------------------- the command, on wheels of a folder index

V1 = "vllm/v1/worker/gpu_model_runner.py"
RUNNER_090 = '''
class GPUModelRunner:
    def _calc_spec_decode_metadata(self, num_draft_tokens, cu_num_scheduled_tokens):
        cu_num_draft_tokens = num_draft_tokens.cumsum()
        target_logits_indices = cu_num_scheduled_tokens - cu_num_draft_tokens
        bonus_logits_indices = cu_num_scheduled_tokens - 1
        return target_logits_indices, bonus_logits_indices
'''
RUNNER_091 = '''
def prepare_inputs(num_draft_tokens, cu_num_scheduled_tokens):
    cu_num_draft_tokens = num_draft_tokens.cumsum()
    target_logits_indices = cu_num_scheduled_tokens - cu_num_draft_tokens
    bonus_logits_indices = cu_num_scheduled_tokens - 1
    return target_logits_indices, bonus_logits_indices
'''


def _wheel(folder: Path, version: str, files: dict[str, str]) -> str:
    """A wheel of ``files`` whose RECORD vouches for each (the wheel cache checks it)."""
    from batchfuzz.engines._wheels import record_digest

    name, info = f"vllm-{version}-py3-none-any.whl", f"vllm-{version}.dist-info"
    files = {"vllm/__init__.py": "", **files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = [f"{rel},{record_digest(text.encode())},{len(text.encode())}" for rel, text in files.items()]
    with zipfile.ZipFile(folder / name, "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
        z.writestr(f"{info}/RECORD", "\n".join([*rows, f"{info}/RECORD,,"]) + "\n")
    return name


@pytest.fixture()
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package index in a folder with vLLM 0.90.0 and 0.91.0 (made up), pip's only index; an empty cache."""
    files = tmp_path / "index" / "files"
    (tmp_path / "index" / "simple" / "vllm").mkdir(parents=True)
    files.mkdir()
    names = [_wheel(files, "0.90.0", {V1: RUNNER_090}), _wheel(files, "0.91.0", {"vllm/v1/worker/gpu/inputs.py": RUNNER_091})]
    links = "".join(f'<a href="../../files/{n}">{n}</a>' for n in names)
    (tmp_path / "index" / "simple" / "vllm" / "index.html").write_text(f"<html><body>{links}</body></html>")
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index" / "simple").as_uri())
    monkeypatch.setenv("BATCHFUZZ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "index"


def test_latest_and_follow_report_a_new_release_once(index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    _needs_triton()
    follow.record("vllm", ["0.90.0"])
    out = tmp_path / "m.json"
    assert main(["vllm", "--latest", "1", "--follow", "--contract", "spec_decode_metadata", "--json", str(out)]) == 0
    said = capsys.readouterr().out
    assert "newest releases of vllm on the package index: 0.91.0" in said
    assert "vllm 0.91.0 was never seen: its drift against 0.90.0" in said
    assert f"`{V1}:GPUModelRunner._calc_spec_decode_metadata`: `vllm/v1/worker/gpu/inputs.py:prepare_inputs`" in said
    assert {r["release"] for r in json.loads(out.read_text())["rows"]} == {"0.91.0"}
    assert "0.91.0" in follow.seen("vllm")
    assert main(["vllm", "--profile", "nightly", "--contract", "spec_decode_metadata"]) == 0
    said = capsys.readouterr().out
    assert "on the package index: 0.90.0, 0.91.0" in said and "was never seen" not in said


def test_an_unreachable_index_is_said_and_skipped(index: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    monkeypatch.setenv("PIP_INDEX_URL", (index / "no-such-folder").as_uri())
    assert main(["vllm", "--latest", "2"]) == 2
    err = capsys.readouterr().err
    assert "--latest 2: the package index could not be asked" in err and "give at least one release" in err


def test_where_and_drift_run_no_cell_and_refuse_one_release(index: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    old = engines.fetch_wheel("vllm", "0.90.0")
    new = engines.fetch_wheel("vllm", "0.91.0")
    assert main(["vllm", "--drift", "--wheel", str(old)]) == 2
    assert "--drift compares releases: give two or more" in capsys.readouterr().err
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    assert main(["vllm", "--where", "--drift", "--wheel", str(old), "--wheel", str(new), "--markdown", str(md),
                 "--json", str(js)]) == 0
    text = md.read_text()
    assert "## vllm 0.90.0 (wheel: vllm-0.90.0-py3-none-any.whl)" in text and "## 0.90.0 -> 0.91.0" in text
    data = json.loads(js.read_text())
    spec = {d["function"]: d for d in data["drift"]}[f"{V1}:GPUModelRunner._calc_spec_decode_metadata"]
    assert (spec["change"], spec["new"]) == ("removed", "absent"), spec
    assert {d["change"] for d in data["drift"]} == {"removed", "absent"}
    assert {r["release"] for r in data["where"]} == {"0.90.0", "0.91.0"}
    assert len(data["where"]) == 2 * len(vllm.SPECS)  # no split copy in these trees


# ---------------------------------------------------------------- the documented command lines, as written

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _doc_commands(doc: str, prefix: str = "batchfuzz ") -> list[str]:
    """The ``batchfuzz`` lines of a doc's bash blocks."""
    text = (DOCS / doc).read_text()
    blocks = text.split("```bash\n")[1:]
    return [ln for b in blocks for ln in b.split("```", 1)[0].splitlines() if ln.startswith(prefix)]


def _wheel_or_skip(version: str, distribution: str = "vllm") -> Path:
    try:
        return engines.fetch_wheel(distribution, version)
    except engines.SourceError as exc:
        pytest.skip(f"cannot download {distribution}=={version} from the package registry: {exc}")


def _needs_triton() -> None:
    """vLLM 0.34.0's and the planted releases' spec-decode cells run a Triton kernel: without Triton (the README's
    test install has no vLLM, which brings it) they are unbindable, and the tables differ from the committed ones."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed: the new runner's spec-decode kernel cannot be bound")


def _tables(text: str) -> str:
    """A generated file without its timing line."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("Made in "))


# One test per command (the nightly line's test checks there are three), so that xdist spreads them over workers.
@pytest.mark.parametrize("number", range(3))
def test_the_committed_tables_are_what_the_documented_commands_make(number: int, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """docs/where-it-lives.md's commands, run as written (in a folder of their own), give the committed files."""
    import shlex

    from batchfuzz.cli import main

    line = [ln for ln in _doc_commands("where-it-lives.md") if "--markdown docs/" in ln][number]
    argv = shlex.split(line)
    if "sglang" not in argv:
        _needs_triton()
    for i in (i for i, a in enumerate(argv) if a == "--release"):
        _wheel_or_skip(argv[i + 1], "sglang" if "sglang" in argv else "vllm")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    assert main(argv[1:]) == 0, line
    written = argv[argv.index("--markdown") + 1]
    assert _tables((tmp_path / written).read_text()) == _tables((DOCS.parent / written).read_text()), (
        f"{written} is not what `{line}` makes now: run it again and commit the result")
    capsys.readouterr()


def test_the_documented_nightly_line_follows_the_index(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """docs/where-it-lives.md's nightly line, as written, on the folder index: the two newest releases, the new one's
    drift first, both recorded; every batchfuzz line of that doc is run by this test or the one above."""
    import shlex

    from batchfuzz.cli import main

    lines = _doc_commands("where-it-lives.md")
    (line,) = [ln for ln in lines if "--profile nightly" in ln]
    assert len(lines) == 4 and sum("--markdown docs/" in ln for ln in lines) == 3, lines
    _needs_triton()
    follow.record("vllm", ["0.90.0"])
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(line)[1:]) == 0
    said = capsys.readouterr().out
    assert "on the package index: 0.90.0, 0.91.0" in said and "vllm 0.91.0 was never seen: its drift against 0.90.0" in said
    assert "vllm 0.90.0 was never seen" not in said
    written = json.loads((tmp_path / "vllm-nightly.json").read_text())
    assert {r["release"] for r in written["rows"]} == {"0.90.0", "0.91.0"} and written["seed"] == 7
    assert {"0.90.0", "0.91.0"} <= follow.seen("vllm")


def test_the_ci_workflow_runs_as_written_in_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """docs/engine-ci.md's workflow: its batchfuzz lines, exactly as written, in a checkout holding the newest
    published release's ubatch_utils.py with maybe_create_ubatch_slices renamed (its pip lines are not run)."""
    import shlex

    yaml = pytest.importorskip("yaml")
    from batchfuzz.cli import main

    text = (DOCS / "engine-ci.md").read_text()
    workflow = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    runs = [s["run"] for s in workflow["jobs"]["batchfuzz"]["steps"] if "run" in s]
    assert [r for r in runs if not r.startswith("batchfuzz ")] == [
        "python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu\n"
        "python -m pip install batchfuzz\n"]
    base = follow.baseline("unknown", vllm.RELEASES)
    assert base is not None
    with zipfile.ZipFile(_wheel_or_skip(base)) as z:
        ubatch = z.read("vllm/v1/worker/ubatch_utils.py").decode()
    checkout = tmp_path / "checkout"
    (checkout / "vllm" / "v1" / "worker").mkdir(parents=True)
    assert ubatch.count("def maybe_create_ubatch_slices(") == 1
    (checkout / "vllm" / "v1" / "worker" / "ubatch_utils.py").write_text(
        ubatch.replace("def maybe_create_ubatch_slices(", "def maybe_create_ubatch_slices_renamed("))
    monkeypatch.chdir(checkout)
    codes = [main(shlex.split(run)[1:]) for run in runs if run.startswith("batchfuzz ")]
    said = capsys.readouterr().out
    rows = json.loads((checkout / "batchfuzz-matrix.json").read_text())["rows"]
    # The matrix's own exit code: this partial checkout lacks the files some bindings also read.
    assert codes == [0, matrix.exit_code([matrix.Cell(**r) for r in rows])], codes
    assert f"vllm unknown was never seen: its drift against {base}" in said
    renamed = ("| `vllm/v1/worker/ubatch_utils.py:maybe_create_ubatch_slices` | split_ubatches | bound | absent | renamed | "
               "`vllm/v1/worker/ubatch_utils.py:maybe_create_ubatch_slices_renamed` |")
    assert renamed in said
    where = (checkout / "batchfuzz-where.md").read_text()
    assert "| split_ubatches | `vllm/v1/worker/ubatch_utils.py` | `maybe_create_ubatch_slices` | - | by name |" in where
    assert rows and {r["release"] for r in rows} == {"unknown"}
