"""The plug-in points declared in ``batchfuzz.plugins``: every shipped module
has its declared shape, and a module that lacks a part is refused at
registration with a message naming the module and the part."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import types
from typing import Any

import pytest

from batchfuzz import engines, plugins, registry


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _strategies(**drop_or_add: Any) -> types.ModuleType:
    parts: dict[str, Any] = {"DOMAINS": ("spec", "engine"), "cases": lambda domain: None, "in_domain": lambda case, domain: True,
                             "size": lambda case: (), "reductions": lambda case: iter(())}
    parts.update(drop_or_add)
    return _module("toy_strategies", **{k: v for k, v in parts.items() if v is not None})


def test_the_declarations_list_their_members() -> None:
    assert [n for n, _ in plugins.members(plugins.StrategiesModule)] == ["DOMAINS", "cases", "in_domain", "size", "reductions"]
    assert [n for n, _ in plugins.members(plugins.ScopedStrategiesModule)][-2:] == ["SCOPES", "scope_cases"]
    assert dict(plugins.members(plugins.EngineModule)) == {"ENGINE": False, "ReleaseSource": False, "RELEASES": False,
                                                           "SPECS": False, "bindings": True, "resolve": True}
    assert dict(plugins.members(plugins.CommandModule)) == {"register": True}


def test_a_strategies_module_missing_a_part_is_named() -> None:
    with pytest.raises(plugins.PluginError, match=r"strategies module toy_strategies: no in_domain; no reductions "
                                                  r"\(the shape is batchfuzz.plugins.StrategiesModule\)"):
        registry.input_space(_strategies(in_domain=None, reductions=None), {"spec": "all"})
    with pytest.raises(plugins.PluginError, match=r"toy_strategies: size does not take 1 positional argument"):
        registry.input_space(_strategies(size=lambda: ()), {"spec": "all"})
    with pytest.raises(plugins.PluginError, match=r"toy_strategies: cases is a int, not callable"):
        registry.input_space(_strategies(cases=3), {"spec": "all"})
    with pytest.raises(plugins.PluginError, match=r"toy_strategies: has SCOPES without scope_cases"):
        registry.input_space(_strategies(SCOPES={}), {"spec": "all"})
    with pytest.raises(plugins.PluginError, match=r"DOMAINS \['spec', 'engine'\] has no 'nightly'"):
        registry.input_space(_strategies(), {"spec": "all", "nightly": "more"})
    space = registry.input_space(_strategies(), {"spec": "all", "engine": "what the engine makes"}, irreducible=("engine",))
    assert [(d.name, d.reducible) for d in space.domains] == [("spec", True), ("engine", False)] and space.scopes == ()


def test_every_command_module_registers_a_parser_with_func() -> None:
    import batchfuzz.commands as pkg

    sub = argparse.ArgumentParser(prog="batchfuzz").add_subparsers()
    names = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            names.append(plugins.register_command(importlib.import_module(f"{pkg.__name__}.{info.name}"), sub).prog)
    assert "batchfuzz engine" in names and "batchfuzz vllm" in names


def test_a_command_module_without_func_is_refused() -> None:
    sub = argparse.ArgumentParser(prog="batchfuzz").add_subparsers()
    with pytest.raises(plugins.PluginError, match=r"command module toy_command: no register"):
        plugins.register_command(_module("toy_command"), sub)
    quiet = _module("toy_command", register=lambda s: s.add_parser("quiet"))
    with pytest.raises(plugins.PluginError, match=r"its parser 'batchfuzz quiet' sets no func"):
        plugins.register_command(quiet, sub)


_TOY_COMMAND = """
import signal
RUNS_WORKERS = {runs}
OWNS_SIGNALS = {owns}
SEEN = []
def run(args):
    SEEN.append(signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN))
    return 0
def register(sub):
    sub.add_parser("toy-cmd").set_defaults(func=run)
"""


@pytest.fixture
def toy_command(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Writes a plug-in command module, toy_cmd, into the commands package
    with the given declarations; the process's signal handlers are put back
    after."""
    import signal

    import batchfuzz.commands as pkg

    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def write(runs: object, owns: object) -> None:
        (tmp_path / "toy_cmd.py").write_text(_TOY_COMMAND.format(runs=runs, owns=owns))
        sys.modules.pop("batchfuzz.commands.toy_cmd", None)
        importlib.invalidate_caches()

    yield write
    sys.modules.pop("batchfuzz.commands.toy_cmd", None)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("runs, owns", [(True, True), (False, False)])
def test_a_plug_in_command_gets_what_it_declares(toy_command: Any, monkeypatch: pytest.MonkeyPatch, runs: bool, owns: bool) -> None:
    import signal

    import batchfuzz.execution
    from batchfuzz import cli

    toy_command(runs, owns)
    started: list[bool] = []
    monkeypatch.setattr(batchfuzz.execution, "start_fork_server", lambda: started.append(True))
    monkeypatch.setattr(sys, "argv", ["batchfuzz", "toy-cmd"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert cli.main() == 0
    toy = sys.modules["batchfuzz.commands.toy_cmd"]
    assert (started, toy.SEEN) == ([True] if runs else [], [owns])  # the fork server; its own handler while it ran
    assert (signal.getsignal(signal.SIGTERM) is signal.SIG_IGN) == owns  # after it returns: ignored
    assert cli.declared_traits("toy-cmd") == plugins.CommandTraits(runs_workers=runs, owns_signals=owns)


def test_the_built_in_commands_declare_their_traits() -> None:
    from batchfuzz.cli import declared_traits

    workers = {c for c in ("bench", "catalogue", "check", "confirm", "demo", "engine", "fuzz", "list", "merge-reports", "replay",
                           "sweep", "upstream", "vllm") if declared_traits(c).runs_workers}
    assert workers == {"check", "fuzz", "replay", "catalogue", "sweep"}
    assert declared_traits("fuzz").owns_signals and not declared_traits("check").owns_signals
    assert declared_traits("no-such") == declared_traits("--help") == declared_traits(None) == plugins.CommandTraits()


def test_a_malformed_command_declaration_is_refused_at_registration(toy_command: Any) -> None:
    from batchfuzz import cli

    toy_command("'yes'", False)
    with pytest.raises(plugins.PluginError, match=r"command module batchfuzz.commands.toy_cmd: RUNS_WORKERS must be True or "
                                                  r"False, got 'yes' \(the shape is batchfuzz.plugins.CommandTraits\)"):
        cli.build_parser()
    sub = argparse.ArgumentParser(prog="batchfuzz").add_subparsers()
    misnamed = _module("toy_other", OWNS_SIGNALS=True, register=lambda s: s.add_parser("toy-cmd").set_defaults(func=len))
    with pytest.raises(plugins.PluginError, match=r"toy_other: it declares .* but its parser is named 'toy-cmd': a command with "
                                                  r"traits is found by its name, so its module must be named 'toy_cmd'"):
        plugins.register_command(misnamed, sub)
    with pytest.raises(plugins.PluginError, match=r"toy_other: OWNS_SIGNALS must be True or False, got 1"):
        plugins.command_traits(_module("toy_other", OWNS_SIGNALS=1))


def test_the_built_in_engines_are_registered_in_their_shape() -> None:
    found = engines.engines()
    assert found["vllm"].__name__ == "batchfuzz.engines.vllm"
    assert "batchfuzz.engines.split_search" not in engines.engine_modules()
    assert found["sglang"].__name__ == "batchfuzz.engines.sglang"
    with pytest.raises(engines.UnknownEngine, match=r"no engine named 'tgi'; registered: sglang, vllm"):
        engines.engine("tgi")


def test_an_engine_module_missing_a_part_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class Source(engines.ReleaseSource):
        distribution = "toyengine"
        package = "toyengine"

    half = _module("toy_half_engine", ENGINE="toyengine", ReleaseSource=Source, RELEASES=("1.0",), SPECS=(),
                   bindings=lambda source: [])
    monkeypatch.setitem(sys.modules, "toy_half_engine", half)
    monkeypatch.setenv(engines.ENGINES_ENV_VAR, "toy_half_engine")
    with pytest.raises(plugins.PluginError, match=r"engine module toy_half_engine: no resolve \(the shape is "
                                                  r"batchfuzz.plugins.EngineModule\)"):
        engines.engines()
    half.resolve = lambda ref: None
    half.ReleaseSource = engines.ReleaseSource
    with pytest.raises(plugins.PluginError, match=r"toy_half_engine: ReleaseSource must set distribution and package"):
        engines.engines()
    half.ReleaseSource = Source
    half.ENGINE = "vllm"
    with pytest.raises(plugins.PluginError, match=r"engine 'vllm' is registered twice: by batchfuzz.engines.vllm and toy_half_engine"):
        engines.engines()
    half.ENGINE = "toyengine"
    assert engines.engine("toyengine") is half
    with pytest.raises(ValueError, match=r"ref names no engine"):
        engines.resolve("not an engine::x::y::z")


def test_batchfuzz_vllm_is_the_short_form_of_batchfuzz_engine_vllm() -> None:
    from batchfuzz.cli import build_parser
    from batchfuzz.commands import engine as engine_command

    words = ["--release", "0.33.0", "--wheel", "x.whl", "--function", "*_dummy_run", "--contract", "pad_query_start_loc",
             "--budget", "5", "--max-examples", "7", "--seed", "3", "--no-isolation", "--json", "m.json"]
    short, full = (vars(build_parser().parse_args(w)) for w in (["vllm", *words], ["engine", "vllm", *words]))
    assert full.pop("func") is engine_command.run and short.pop("func") is not None
    assert (short.pop("command"), full.pop("command")) == ("vllm", "engine")
    assert short == full  # the same options and the same engine: engine_command.run runs both
