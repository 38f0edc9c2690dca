"""Target references (``batchfuzz.targets``): every kind reads back as it is
written, bad text is refused naming it, a reference loads what it names,
and a user's file or module is imported as the user wrote it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchfuzz import registry, targets
from batchfuzz.targets import TargetError, TargetRef

CONTRACT = registry.get("split_dummy_tokens")


@pytest.mark.parametrize(("text", "ref"), [
    ("impl:numpy@cpu", TargetRef("impl", "numpy", "cpu")),
    ("impl:engine.dummy_run@cuda", TargetRef("impl", "engine.dummy_run", "cuda")),
    ("variant:remainder_to_first", TargetRef("variant", "remainder_to_first")),
    ("oracle", TargetRef("oracle")),
    ("engine:vllm::wheel:/w/vllm.whl::f::c", TargetRef("engine", "vllm::wheel:/w/vllm.whl::f::c")),
    ("pkg.mod:Class.method", TargetRef("user", "pkg.mod:Class.method")),
    ("dir/file.py:f", TargetRef("user", "dir/file.py:f")),
])
def test_every_kind_reads_back_as_written(text: str, ref: TargetRef) -> None:
    assert targets.parse(text) == ref
    assert ref.spec == text
    assert ref.is_project_code == (ref.kind != "user")


@pytest.mark.parametrize(("text", "match"), [
    ("", r"a target must be a non-empty string, got ''"),
    ("impl:numpy", r"an implementation target is impl:NAME@DEVICE with DEVICE cpu or cuda, got 'impl:numpy'"),
    ("impl:numpy@tpu", r"DEVICE cpu or cuda, got 'impl:numpy@tpu'"),
    ("impl:@cpu", r"got 'impl:@cpu'"),
    ("variant:", r"a variant target is variant:NAME, got 'variant:'"),
    ("engine:", r"an? engine target is engine:NAME, got 'engine:'"),
    ("justaname", r"target must be MODULE:FUNCTION or FILE.py:FUNCTION .*got 'justaname'"),
    ("mod:", r"got 'mod:'"),
])
def test_bad_text_is_refused_naming_it(text: str, match: str) -> None:
    with pytest.raises(TargetError, match=match):
        targets.parse(text)


def test_names_a_reproduction_calls_it_by_and_the_release_an_engine_target_reads() -> None:
    assert [targets.parse(t).function_name for t in ("impl:engine.dummy_run@cpu", "variant:a.b", "oracle", "m:C.meth")] == \
        ["impl_engine_dummy_run", "variant_a_b", "oracle", "meth"]
    assert targets.parse("engine:vllm::wheel:/w/v.whl::f::c").release == "wheel:/w/v.whl"
    assert targets.parse("engine:vllm").release == "" and targets.parse("impl:numpy@cpu").release == ""


def test_same_release_follows_links_and_compares_kinds(tmp_path: Path) -> None:
    wheel = tmp_path / "v.whl"
    wheel.write_text("")
    link = tmp_path / "link.whl"
    os.symlink(wheel, link)
    assert targets.same_release(f"wheel:{wheel}", f"wheel:{link}")
    assert not targets.same_release(f"wheel:{wheel}", f"dir:{wheel}")
    assert not targets.same_release(f"wheel:{wheel}", f"wheel:{tmp_path / 'other.whl'}")
    assert targets.same_release("installed:", "installed:") and not targets.same_release("installed:", "installed:x")
    assert not targets.same_release("wheel:", "wheel:") and not targets.same_release("pip:x", "pip:x")


def test_a_reference_loads_what_it_names_or_says_why_not() -> None:
    assert targets.parse("oracle").load(CONTRACT) is CONTRACT.oracle
    assert targets.parse("variant:remainder_to_first").load(CONTRACT) is CONTRACT.variant("remainder_to_first").fn
    assert targets.parse("impl:numpy@cpu").load(CONTRACT)(3, 7).tolist() == [2, 2, 3]
    with pytest.raises(TargetError, match=r"contract 'split_dummy_tokens' has no implementation 'nope' \(has: numpy, "):
        targets.parse("impl:nope@cpu").load(CONTRACT)
    with pytest.raises(TargetError, match=r"implementation 'numpy' does not run on device 'cuda'"):
        targets.parse("impl:numpy@cuda").load(CONTRACT)
    with pytest.raises(TargetError, match=r"has no variant 'nope'"):
        targets.parse("variant:nope").load(CONTRACT)
    with pytest.raises(TargetError, match=r"^cannot load engine target 'nope::x': "):
        targets.parse("engine:nope::x").load(CONTRACT)


def test_a_users_file_is_imported_with_its_folder_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "sibling_of_target.py").write_text("def half(n):\n    return n // 2\n")
    (tmp_path / "user_target.py").write_text("from sibling_of_target import half\n\nclass Split:\n"
                                             "    @staticmethod\n    def even(r, n):\n        return [half(n)] * r\n")
    fn = targets.parse(f"{tmp_path / 'user_target.py'}:Split.even").load(CONTRACT)
    assert fn(2, 8) == [4, 4]
    assert targets.load_function("os.path:join")("a", "b") == os.path.join("a", "b")


@pytest.mark.parametrize(("spec", "match"), [
    ("nocolon", r"target must be MODULE:FUNCTION or FILE.py:FUNCTION, got 'nocolon'"),
    ("{tmp}/missing.py:f", r"target file '.*missing.py' does not exist"),
    ("{tmp}/broken.py:f", r"cannot import '.*broken.py': ZeroDivisionError: division by zero"),
    ("no_such_module_here:f", r"cannot import 'no_such_module_here': ModuleNotFoundError"),
    ("os.path:no_such_attr", r"'os.path' has no attribute 'no_such_attr'"),
    ("os:sep", r"'os:sep' is not callable \(got str\)"),
])
def test_a_user_function_that_cannot_load_is_named(tmp_path: Path, spec: str, match: str) -> None:
    (tmp_path / "broken.py").write_text("1 / 0\n")
    with pytest.raises(TargetError, match=match):
        targets.load_function(spec.format(tmp=tmp_path))
