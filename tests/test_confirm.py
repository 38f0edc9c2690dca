"""``batchfuzz confirm`` on a CPU: layouts, detectors and the isolated worker,
with the torch model of the kernel (``batchfuzz.confirm.attention.model_kernel``);
kernel files extracted from a cached release wheel. The engine's own Triton
kernels run in tests/test_confirm_gpu.py on a CUDA device."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.confirm import MODEL, Worker, confirm_case, result_of
from batchfuzz.confirm import kernels as kmod
from batchfuzz.confirm.attention import DeviceFault, model_kernel, replay
from batchfuzz.confirm.layouts import BUILDERS, default_block_size, layout
from batchfuzz.engines import cache_dir

A = registry.get("split_dummy_tokens")


def _variant(contract: str, name: str):
    return registry.get(contract).variant(name).fn


def test_every_kernel_names_contracts_that_reach_attention() -> None:
    for kernel in kmod.KERNELS.values():
        assert kernel.contracts, kernel.name
        assert set(kernel.contracts) <= set(BUILDERS), kernel.name
        assert kernel.files[0].replace("/", ".").removesuffix(".py") == kernel.module


def test_default_block_size_divides_max_model_len() -> None:
    assert [default_block_size(m) for m in (2, 3, 12, 32, 48)] == [2, 1, 4, 16, 16]


def test_remainder_on_last_reads_outside_its_row_and_the_oracle_does_not() -> None:
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    bad = replay(layout("split_dummy_tokens", case, [1, 1, 3], "remainder on last"), model_kernel)
    good = replay(layout("split_dummy_tokens", case, [1, 2, 2], "oracle"), model_kernel)
    assert [(c.kind, c.request) for c in bad.consequences] == [("read outside its row", 2)]
    assert good.clean and good.max_abs_diff == 0.0


def _prefix_prefill_model(q, k, v, o, kv_cache_dtype, k_cache, v_cache, b_loc, b_start_loc, b_seq_len, max_seq_len,
                          max_input_len, k_scale, v_scale, sm_scale=None, causal=True, **_):
    """A stand-in for ``context_attention_fwd``'s cached-K/V path: reads the
    caches by the layout its docstrings give (K ``[blocks, heads, d // x,
    slot, x]``, V ``[blocks, heads, d, slot]``), element by element, then the
    unified kernel's model over the same metadata."""
    import torch

    assert k is None and v is None and kv_cache_dtype == "auto" and causal
    blocks, heads, _, slots, x = k_cache.shape
    dim = v_cache.shape[2]
    b, s, h, d = torch.meshgrid(*(torch.arange(n) for n in (blocks, slots, heads, dim)), indexing="ij")
    keys, vals = k_cache[b, h, d // x, s, d % x], v_cache[b, h, d, s]
    model_kernel(q, keys, vals, o, b_start_loc, max_input_len, b_seq_len, max_seq_len, sm_scale, causal, (-1, -1),
                 b_loc, 0.0, None, None, None)


def test_the_prefix_prefill_adapter_hands_the_kernel_its_own_cache_layout() -> None:
    """Through ``prefix_prefill_as_unified`` the caches arrive in the kernel's
    own layout (the stand-in reads them by that layout): the same verdicts and
    outputs as the unified model, the canary and the NaN slots where they were."""
    from batchfuzz.confirm.attention import prefix_prefill_as_unified

    kernel = prefix_prefill_as_unified(_prefix_prefill_model)
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    bad = replay(layout("split_dummy_tokens", case, [1, 1, 3], "remainder on last"), kernel)
    good = replay(layout("split_dummy_tokens", case, [1, 2, 2], "oracle"), kernel)
    assert [(c.kind, c.request) for c in bad.consequences] == [("read outside its row", 2)]
    assert good.clean and good.max_abs_diff == 0.0
    step = Case({"num_computed_tokens": np.array([2, 0]), "num_scheduled_tokens": np.array([1, 3]),
                 "block_tables": [np.array([[1, 3], [1, 2]], dtype=np.int32)], "block_sizes": [2]}, {})
    split = replay(layout("allow_microbatching", step, True, "shipped"), kernel)
    assert split.consequences and split.consequences[0].kind == "read unwritten KV (NaN)", split.consequences


def test_poison_past_a_row_faults_only_where_the_row_is_overrun() -> None:
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    with pytest.raises(DeviceFault, match="sequence 2"):
        replay(layout("split_dummy_tokens", case, [1, 1, 3], "bad").with_poison(), model_kernel)
    assert replay(layout("split_dummy_tokens", case, [1, 2, 2], "oracle").with_poison(), model_kernel).clean


def test_v1_dummy_seq_lens_read_unwritten_kv() -> None:
    """Every seq_len set to the whole token count: each request attends over
    slots of its row no token wrote (NaN, which also hides the canary past
    the row in the same softmax)."""
    from batchfuzz.reference.make_dummy import DummyBuffers

    case = Case({"num_reqs": 4, "num_tokens": 8, "buffers": DummyBuffers.zeros(4, 8)}, {"max_model_len": 4})
    bad_fn = _variant("make_dummy", "v1_seq_lens_total")
    r = replay(layout("make_dummy", case, result_of("make_dummy", bad_fn, case), "v1"), model_kernel)
    kinds = {c.kind for c in r.consequences}
    assert kinds == {"read unwritten KV (NaN)"}
    assert sorted(c.request for c in r.consequences) == [0, 1, 2, 3]
    oracle = registry.get("make_dummy").oracle
    assert replay(layout("make_dummy", case, result_of("make_dummy", oracle, case), "oracle"), model_kernel).clean


def test_stale_query_start_loc_tail_writes_past_the_output() -> None:
    stale = np.array([0, 9, 9, 9, 9], dtype=np.int32)
    case = Case({"num_scheduled_tokens": np.array([2, 1], dtype=np.int32), "num_reqs_padded": 3},
                {"out": stale, "history": [], "max_num_reqs": 4})
    bad = replay(layout("pad_query_start_loc", case, [0, 2, 3, 9], "stale tail"), model_kernel)
    assert [c.kind for c in bad.consequences] == ["wrote past its output"]
    assert replay(layout("pad_query_start_loc", case, [0, 2, 3, 3], "oracle"), model_kernel).clean


def test_the_unsound_shipped_split_reads_unwritten_kv() -> None:
    """The README's realizable step: a fully cached parallel-sampling copy
    (q == 1) split before the request that writes its blocks."""
    case = Case({"num_computed_tokens": np.array([2, 0]), "num_scheduled_tokens": np.array([1, 3]),
                 "block_tables": [np.array([[1, 3], [1, 2]], dtype=np.int32)], "block_sizes": [2]}, {})
    split = replay(layout("allow_microbatching", case, True, "split"), model_kernel)
    whole = replay(layout("allow_microbatching", case, False, "whole step"), model_kernel)
    assert [(c.kind, c.request) for c in split.consequences] == [("read unwritten KV (NaN)", 0)]
    assert whole.clean


def test_the_worker_survives_a_fault_and_confirms_against_the_control() -> None:
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    bad_fn = _variant("split_dummy_tokens", "remainder_to_last.input_batch")
    with Worker(None, MODEL, "cpu") as worker:
        v = confirm_case("split_dummy_tokens", case, bad_fn, "variant", worker)
        assert worker.restarts == 1  # the poison replay faulted; the control ran in a fresh worker
    assert v.target_replay.consequences and v.target_replay.consequences[0].startswith("read outside its row")
    assert v.poison is not None and v.poison.fault
    assert v.control_clean
    json.dumps(v.to_json(), default=str)


def _wheel(version: str) -> Path:
    hits = sorted((cache_dir() / "wheels").glob(f"vllm-{version}-*.whl"))
    if not hits:
        from batchfuzz.engines import SourceError, fetch_wheel

        try:
            return fetch_wheel("vllm", version)
        except SourceError as exc:
            pytest.skip(f"vllm {version} wheel not cached and not downloadable: {exc}")
    return hits[0]


def test_extract_copies_the_kernel_files_and_checks_them(tmp_path: Path) -> None:
    from batchfuzz.engines.vllm import ReleaseSource

    folder = kmod.extract(ReleaseSource.from_wheel(_wheel("0.33.0")), tmp_path / "k")
    manifest = kmod.read_manifest(folder)
    assert manifest["version"] == "0.33.0" and manifest["kernels"] == {"unified": "extracted", "decode": "extracted",
                                                                          "prefix_prefill": "extracted"}
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < 1 << 20  # small enough to carry to a machine without network
    victim = folder / kmod.KERNELS["unified"].files[0]
    victim.write_text(victim.read_text() + "\n# edited\n")
    with pytest.raises(kmod.KernelError, match="differs from the release"):
        kmod.read_manifest(folder)


def test_the_release_enum_is_cut_out_with_the_binding_kit(tmp_path: Path) -> None:
    from batchfuzz.engines.vllm import ReleaseSource

    folder = kmod.extract(ReleaseSource.from_wheel(_wheel("0.33.0")), tmp_path / "k")
    mode = kmod._kv_quant_mode(folder)
    assert mode.NONE == 0 and "INT4_PER_TOKEN_HEAD" in mode.__members__


def test_confirm_command_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    assert main(["confirm", "--kernels", str(tmp_path)]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
    assert main(["confirm", "--kernel", "nope"]) == 2
    assert main(["confirm", "--extract"]) == 2


def test_confirm_command_on_the_model_kernel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    out = tmp_path / "v.json"
    rc = main(["confirm", "--kernel", "model", "--device", "cpu", "--contract", "split_dummy_tokens",
               "--variant", "remainder_to_last.v1_runner", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads(out.read_text())
    assert [v["target"] for v in doc["verdicts"]] == ["variant:split_dummy_tokens.remainder_to_last.v1_runner"]
    assert all(v["verdict"] == "consequence" and v["control_clean"] for v in doc["verdicts"])
    assert "read outside its row" in text and "model (a torch model" in text


def test_an_exclusive_cumsum_leaves_output_rows_unwritten() -> None:
    """The kernel run on data of the recorded H200 run: run 4 reported these
    as 'wrong output (differs by 7.25)', 7.25 being the sentinel."""
    case = Case({"num_scheduled_tokens": np.array([2, 3], dtype=np.int32), "num_reqs_padded": 2},
                {"out": np.zeros(3, dtype=np.int32), "history": [], "max_num_reqs": 2})
    r = replay(layout("pad_query_start_loc", case, [0, 0, 2], "exclusive cumsum"), model_kernel)
    kinds = [c.kind for c in r.consequences]
    # request 1 gets rows [0, 2) of its 3 tokens (its third slot is never written), rows 2..4 nobody's
    assert kinds == ["read unwritten KV (NaN)", "left output rows unwritten"]


# --------------------------------------------------------------------------- kernel folders and wheels that are not the release's

_OPS = "vllm/v1/attention/ops"
# A hand-made release: every kernel file (each a stand-in function), the enum module, a valid RECORD.
_RELEASE = {
    f"{_OPS}/triton_unified_attention.py": "def unified_attention(*args, **kwargs):\n    return 'source'\n",
    f"{_OPS}/triton_attention_helpers.py": "HELPER = 1\n",
    f"{_OPS}/triton_decode_attention.py": "def decode_attention_fwd(*args, **kwargs):\n    return 'source'\n",
    f"{_OPS}/prefix_prefill.py": "KV_FROM_CACHE = True\n\ndef context_attention_fwd(*args, **kwargs):\n    return 'source'\n",
    "vllm/v1/kv_cache_interface.py": "import enum\n\n\nclass KVQuantMode(enum.IntEnum):\n    NONE = 0\n",
}


def _make_wheel(folder: Path, version: str, files: dict[str, str], *, tag: str = "py3-none-any",
                record: dict[str, str] | None = None) -> Path:
    """A wheel of ``files`` with a dist-info RECORD (``record`` overrides rows' hashes)."""
    import zipfile

    from batchfuzz.engines._wheels import record_digest

    info = f"vllm-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    rows = [f"{p},{(record or {}).get(p) or record_digest(t.encode())},{len(t.encode())}" for p, t in files.items()]
    path = folder / f"vllm-{version}-{tag}.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
        z.writestr(f"{info}/RECORD", "\n".join(rows + [f"{info}/RECORD,,"]) + "\n")
    return path


def _folder(tmp_path: Path) -> Path:
    from batchfuzz.engines.vllm import ReleaseSource

    return kmod.extract(ReleaseSource.from_wheel(_make_wheel(tmp_path / "w", "0.99.0", _RELEASE)), tmp_path / "k")


def _edit_manifest(folder: Path, change) -> None:
    manifest = json.loads((folder / kmod.MANIFEST).read_text())
    change(manifest)
    (folder / kmod.MANIFEST).write_text(json.dumps(manifest))


def _hash_updated(folder: Path) -> str:
    """The decode kernel's file edited and its manifest hash updated to match."""
    import hashlib

    path = f"{_OPS}/triton_decode_attention.py"
    (folder / path).write_text("def decode_attention_fwd(*a, **k):\n    return 'edited'\n")
    _edit_manifest(folder, lambda m: m["files"].__setitem__(path, hashlib.sha256((folder / path).read_bytes()).hexdigest()))
    return path


def _no_files(folder: Path) -> str:
    _edit_manifest(folder, lambda m: m.__setitem__("files", {}))
    return "lists no files"


def _outside(target: str):
    """``target`` listed in the manifest, with its right SHA-256 where it is a regular file."""
    import hashlib

    def change(folder: Path) -> str:
        path = folder / target
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "0" * 64
        _edit_manifest(folder, lambda m: m["files"].__setitem__(target, digest))
        return f"{target!r}, not a kernel file"
    return change


def _linked(folder: Path) -> str:
    path = f"{_OPS}/triton_decode_attention.py"
    (folder / path).unlink()
    (folder / path).symlink_to("/dev/zero")
    return path


def _no_record(folder: Path) -> str:
    (folder / kmod.RECORD).unlink()
    return "RECORD is missing"


@pytest.mark.parametrize("tamper", [_hash_updated, _no_files, _outside("../../../etc/hostname"),
                                    _outside("../../../dev/zero"), _linked, _no_record],
                         ids=["hash-updated", "no-files", "etc-hostname", "dev-zero", "link", "no-record"])
def test_a_kernel_folder_the_release_does_not_vouch_for_is_refused(tmp_path: Path, tamper,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 naming the file, before anything is read outside the folder."""
    from batchfuzz.cli import main

    folder = _folder(tmp_path)
    kmod.read_manifest(folder)  # as extracted: accepted
    named = tamper(folder)
    assert main(["confirm", "--kernels", str(folder), "--kernel", "decode", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert named in err and "kernel folder" in err, err


def test_kernel_modules_load_from_the_checked_source_never_bytecode(tmp_path: Path) -> None:
    """A ``__pycache__/*.pyc`` planted beside a kernel file, with the header
    that makes Python's own loader take it, is not what ``load`` runs."""
    import importlib.util
    import os
    import py_compile
    import subprocess
    import sys

    folder = _folder(tmp_path)
    source = folder / f"{_OPS}/triton_decode_attention.py"
    evil = tmp_path / "evil.py"
    evil.write_text(source.read_text().replace("'source'", "'bytecd'"))  # the same size
    st = source.stat()
    os.utime(evil, ns=(st.st_atime_ns, st.st_mtime_ns))
    py_compile.compile(str(evil), cfile=importlib.util.cache_from_source(str(source)))
    fake = tmp_path / "fake"  # triton is imported by the stand-ins; a CPU machine may lack it
    (fake / "triton").mkdir(parents=True)
    (fake / "triton" / "__init__.py").write_text("")
    (fake / "triton" / "language.py").write_text("")
    code = f"from batchfuzz.confirm import kernels; print(kernels.load({str(folder)!r}, 'decode')())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(Path(__file__).resolve().parent.parent)])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "source", r.stdout + r.stderr


def _no_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, index: Path | None = None) -> None:
    """pip configured with only ``index`` (a local simple index) or none reachable; the cache under tmp_path."""
    import os

    monkeypatch.setenv("BATCHFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", (index or tmp_path / "no-index").as_uri())


def test_a_planted_wheel_in_the_cache_is_not_taken_for_the_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-made wheel named like the release, nothing to check it against: refused, exit 2 naming it."""
    from batchfuzz.cli import main

    _no_index(monkeypatch, tmp_path)
    planted = _make_wheel(tmp_path / "cache" / "wheels", "0.33.0", _RELEASE)
    assert main(["confirm", "--extract", "--release", "0.33.0", "--kernels", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert planted.name in err and "cannot be checked against the index" in err, err
    assert not (tmp_path / "k").exists()


def _simple_index(tmp_path: Path, wheel: Path) -> Path:
    """A PEP 503 index (a folder) publishing ``wheel`` with its SHA-256."""
    from batchfuzz.engines._wheels import sha256_file

    page = tmp_path / "index" / "vllm" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<html><body><a href="{wheel.as_uri()}#sha256={sha256_file(wheel)}">{wheel.name}</a></body></html>\n')
    return page.parent.parent


def test_a_fetched_wheel_is_checked_against_the_index_when_fetched_and_reused(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from batchfuzz.engines import SourceError, fetch_wheel

    release = _make_wheel(tmp_path / "published", "0.99.0", _RELEASE)
    _no_index(monkeypatch, tmp_path, _simple_index(tmp_path, release))
    cached = fetch_wheel("vllm", "0.99.0", timeout_s=120)  # a local index: no network
    assert cached.read_bytes() == release.read_bytes() and fetch_wheel("vllm", "0.99.0") == cached  # reused: checked
    _make_wheel(cached.parent, "0.99.0", {**_RELEASE, "vllm/extra.py": "x = 1\n"})  # replaced in the cache
    with pytest.raises(SourceError, match=f"{cached.name}.*differs from the release the index publishes"):
        fetch_wheel("vllm", "0.99.0")


def test_a_wheel_whose_record_does_not_match_is_refused_and_not_kept(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The index publishes it, but a file differs from the wheel's own RECORD."""
    from batchfuzz.engines import SourceError, fetch_wheel

    bad = _make_wheel(tmp_path / "published", "0.99.0", _RELEASE,
                      record={f"{_OPS}/prefix_prefill.py": "sha256=" + "A" * 43})
    _no_index(monkeypatch, tmp_path, _simple_index(tmp_path, bad))
    with pytest.raises(SourceError, match=r"prefix_prefill\.py differs from its RECORD"):
        fetch_wheel("vllm", "0.99.0", timeout_s=120)
    assert not list((tmp_path / "cache" / "wheels").glob("*.whl"))


def test_a_folder_from_a_source_checkout_has_no_record_and_is_accepted(tmp_path: Path) -> None:
    """A checkout has no RECORD: its folder says so and is checked against its manifest alone."""
    from batchfuzz.engines.vllm import ReleaseSource

    for path, text in _RELEASE.items():
        (tmp_path / "src" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / path).write_text(text)
    folder = kmod.extract(ReleaseSource.from_dir(tmp_path / "src"), tmp_path / "k")
    manifest = kmod.read_manifest(folder)
    assert manifest["record"] is False and not (folder / kmod.RECORD).exists()
    assert manifest["kernels"] == {"unified": "extracted", "decode": "extracted", "prefix_prefill": "extracted"}
