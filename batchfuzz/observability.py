"""Hypothesis observability records that name what batchfuzz checks.

batchfuzz writes no records of its own: it makes Hypothesis's ``test_case``
records (read by Tyche and HypoFuzz) say which contract, property, target and
release ran, as ``CONTRACT.PROPERTY`` and ``metadata.batchfuzz``, and
switches them on for every process a command starts (``--observe``). How,
and why each choice: docs/internals.md, "observability.py".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis.internal import observability as _obs

from batchfuzz import __version__
from batchfuzz.targets import TargetError, parse

ENV_VAR = "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY"
NOCOVER_ENV_VAR = "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER"
METADATA_KEY = "batchfuzz"

# thread id -> (property, metadata) of the hunt running on that thread
_labels: dict[int, tuple[str, dict[str, Any]]] = {}
_lock = threading.Lock()


def property_name(contract: str, prop: str) -> str:
    """A record's ``property``: ``CONTRACT.PROPERTY``."""
    return f"{contract}.{prop}"


def name_test(fn: Callable[..., Any], contract: str, prop: str) -> None:
    """Name ``fn`` (the hunt's inner test) after what it checks: its
    ``__qualname__`` ``CONTRACT.PROPERTY``, its ``__name__`` (which Hypothesis
    takes for a record's ``property`` and which must stay an identifier:
    Hypothesis rebuilds the function's signature under it) ``PROPERTY``. Its
    example-database key does not change: Hypothesis hashes the source."""
    fn.__qualname__ = property_name(contract, prop)
    if prop.isidentifier():
        fn.__name__ = prop


def describe(contract: str, prop: str, target: str, domain: str) -> dict[str, Any]:
    """What ``metadata.batchfuzz`` holds for a hunt of ``prop`` of
    ``contract`` on ``target`` (a target reference) over ``domain``."""
    meta: dict[str, Any] = {"contract": contract, "property": prop, "target": target, "domain": domain,
                            "batchfuzz_version": __version__}
    try:
        ref = parse(target)
    except TargetError:
        return meta
    meta["target_kind"] = ref.kind
    if ref.kind == "impl":
        meta.update(implementation=ref.name, device=ref.device)
    elif ref.kind == "variant":
        meta["variant"] = ref.name
    elif ref.kind == "engine":
        parts = ref.name.split("::")
        meta.update(engine=parts[0], release=ref.release)
        if len(parts) > 2:
            meta["engine_function"] = parts[2]
    elif ref.kind == "user":
        meta["function"] = ref.name
    return meta


class _Labelled:
    """A record's metadata with batchfuzz's added: Hypothesis serialises
    metadata through its ``to_json()``; every other attribute is the original's."""

    def __init__(self, inner: Any, extra: dict[str, Any]) -> None:
        self._inner, self._extra = inner, extra

    def __getattr__(self, name: str) -> Any:
        if name == "_inner" or name.startswith("__"):  # a copy being built has no _inner yet
            raise AttributeError(name)
        return getattr(self._inner, name)

    def to_json(self) -> dict[str, Any]:
        inner = self._inner.to_json() if hasattr(self._inner, "to_json") else dict(vars(self._inner))
        return {**inner, METADATA_KEY: self._extra}


def _label(observation: Any, thread_id: int) -> Any:
    label = _labels.get(thread_id)
    if label is None or observation.type != "test_case":
        return observation
    name, meta = label
    return dataclasses.replace(observation, property=name, metadata=_Labelled(observation.metadata, meta))


def _writer() -> Callable[[Any, int], None] | None:
    """Hypothesis's own file writer (the callback its environment variable registers)."""
    return getattr(_obs, "_deliver_to_file", None)


class _Relabel:
    """An observability callback handed the records of a running hunt
    labelled (:func:`_label`); equal to the callback it decorates."""

    def __init__(self, inner: Callable[..., None], all_threads: bool) -> None:
        self.inner, self.all_threads = inner, all_threads

    def __call__(self, observation: Any, thread_id: int | None = None) -> None:
        if self.all_threads:
            self.inner(_label(observation, thread_id if thread_id is not None else threading.get_ident()), thread_id)
        else:
            self.inner(_label(observation, threading.get_ident()))

    def __eq__(self, other: object) -> bool:
        return bool(self.inner == (other.inner if isinstance(other, _Relabel) else other))

    def __hash__(self) -> int:
        return hash(self.inner)


def _registered() -> list[Any]:
    return list(getattr(_obs, "_callbacks_all_threads", ()))


def _install() -> None:
    """Decorate every callback registered (for all threads, and this thread's) with :class:`_Relabel`, once."""
    with _lock:
        every = getattr(_obs, "_callbacks_all_threads", [])
        for k, f in enumerate(every):
            if not isinstance(f, _Relabel):
                every[k] = _Relabel(f, all_threads=True)
        mine = getattr(_obs, "_callbacks", {}).get(threading.get_ident(), [])
        for k, f in enumerate(mine):
            if not isinstance(f, _Relabel):
                mine[k] = _Relabel(f, all_threads=False)


def switch_on() -> None:
    """Observability for this process and every process it starts: the
    environment variable Hypothesis reads at import (without line coverage:
    the environment variable alone gives Hypothesis's default), and Hypothesis's file writer, labelled,
    registered here, where Hypothesis is imported already."""
    os.environ.setdefault(ENV_VAR, "1")
    os.environ.setdefault(NOCOVER_ENV_VAR, "1")
    _obs.OBSERVABILITY_COLLECT_COVERAGE = False
    writer = _writer()
    with _lock:
        if writer is not None and writer not in _registered():  # a _Relabel of it is equal to it
            _obs.add_observability_callback(_Relabel(writer, all_threads=True), all_threads=True)


def enabled() -> bool:
    return bool(_obs.observability_enabled())


@contextlib.contextmanager
def labelled(contract: str, prop: str, target: str, domain: str) -> Iterator[None]:
    """While the block runs, the records Hypothesis writes from this thread
    are ``CONTRACT.PROPERTY`` and carry :func:`describe`'s metadata. Nothing
    is done when observability is off."""
    if not enabled():
        yield
        return
    _install()
    tid = threading.get_ident()
    previous = _labels.get(tid)
    meta = describe(contract, prop, target, domain)
    running = os.environ.get("PYTEST_CURRENT_TEST")  # pytest's "NODEID (PHASE)"
    if running:
        meta["pytest_nodeid"] = running.rsplit(" ", 1)[0]
    _labels[tid] = (property_name(contract, prop), meta)
    try:
        yield
    finally:
        if previous is None:
            _labels.pop(tid, None)
        else:
            _labels[tid] = previous
