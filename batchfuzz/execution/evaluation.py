"""One property on one case, in this process: the body both executors share.

The target is *guarded* (each call gets copies of the arguments the contract
does not let it write) and its own exceptions are told apart from the
property's (docs/fuzz-loop.md, "Where the target runs").
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case, copy_value
from batchfuzz.execution.outcome import CRASH, FAILED, PASSED, RAISES, REJECTED, TIMEOUT, Outcome
from batchfuzz.preconditions import declared_assumptions
from batchfuzz.text import bounded


class _Timeout(Exception):
    """Raised inside an in-process target by SIGALRM."""


class _OwnInterrupt(KeyboardInterrupt):
    """The KeyboardInterrupt a real SIGINT raises while an in-process target runs."""


class _Interrupts:
    """Whether a SIGINT arrived while an in-process target ran: a target that
    raises KeyboardInterrupt itself is a crash of the target, a Ctrl-C stops
    the command."""

    seen = False


_INTERRUPTS = _Interrupts()


# The oracle's parameter names, per oracle (inspect.signature costs more than a small property).
_PARAMETERS: dict[Callable[..., Any], list[str]] = {}


def _parameters(contract: registry.Contract) -> list[str]:
    names = _PARAMETERS.get(contract.oracle)
    if names is None:
        names = _PARAMETERS[contract.oracle] = list(inspect.signature(contract.oracle).parameters)
    return names


def guarded(contract: registry.Contract, target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` called on copies of every argument it may not write (all but
    ``contract.writes``: a persistent buffer, an ``out=``), so the caller's
    values (the case the properties judge by) stay as they were."""
    names = _parameters(contract)
    writes = set(contract.writes)

    def call(*args: Any, **kwargs: Any) -> Any:
        args2 = tuple(a if (i < len(names) and names[i] in writes) else copy_value(a) for i, a in enumerate(args))
        kwargs2 = {k: v if k in writes else copy_value(v) for k, v in kwargs.items()}
        return target(*args2, **kwargs2)

    call.__wrapped__ = target  # type: ignore[attr-defined]
    return call


def signature_error(contract: registry.Contract, target: Callable[..., Any]) -> str | None:
    """Why ``target`` cannot take the calls the properties make (the canonical
    arguments, positionally, and each optional parameter of the oracle's
    signature, like contract C's ``out``), or None."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None  # a builtin or an extension function: nothing to check before calling
    params = list(inspect.signature(contract.oracle).parameters)
    n = len(contract.arguments)
    for count in sorted({n, len(params)}):
        try:
            sig.bind(*range(count))
        except TypeError as exc:
            return (f"its signature {sig} cannot take the {count} positional arguments "
                    f"({', '.join(params[:count])}) the contract's properties pass: {exc}")
    return None


def _admits(contract: registry.Contract, target: Any, case: Case) -> bool:
    args = [case.args[k] for k in contract.arguments]
    return all(p(*args) for p in declared_assumptions(target))


class _TargetRaised(BaseException):
    """Carries an exception the target raised out of the property that called
    it (a BaseException, so that no property's ``except Exception`` takes it
    for its own)."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(exc)
        self.exc = exc


def _reporting(target: Callable[..., Any], refusals: tuple[type[Exception], ...] = ()) -> Callable[..., Any]:
    """``target``, with an exception it raises marked as the target's own,
    except the contract's ``refusals`` (an answer its properties judge)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return target(*args, **kwargs)
        except _Timeout:
            raise
        except refusals:
            raise
        except Exception as exc:
            raise _TargetRaised(exc) from None

    call.__wrapped__ = target  # type: ignore[attr-defined]
    return call


def _scores(contract: registry.Contract, target: Callable[..., Any], case: Case) -> dict[str, int]:
    """The contract's scores of ``target`` on ``case``: counted, never failed
    on, so a target that raises there scores nothing ({})."""
    if contract.scores is None:
        return {}
    try:
        return dict(contract.scores(guarded(contract, target), case))
    except _Timeout:
        raise
    except Exception:
        return {}


def _text(exc: BaseException) -> str:
    """``str(exc)``, or a note when its ``__str__`` raises (a target's own exception class)."""
    try:
        return str(exc)
    except Exception as err:
        return f"<str() of this {type(exc).__name__} raised {type(err).__name__}>"


def _formatted(exc: BaseException) -> str:
    """``exc``'s traceback with each part (a frame, a message) bounded, so a
    huge message cannot push the frames (the origin's location) out."""
    return "".join(bounded(part) for part in traceback.format_exception(exc))


def evaluate(contract: registry.Contract, target: Callable[..., Any], prop_name: str, case: Case, *,
             scores: bool = False) -> Outcome:
    """Run one property on one case, here: the body both executors share.
    ``prop_name`` may also be ``__admits__`` (only the target's ``@assumes``
    predicates). ``scores``: when the property passes, the contract's scores
    on the same case (as it was before the property ran) are the outcome's
    ``value``, computed in the same call (one round trip to a worker, not two)."""
    start = time.perf_counter()
    try:
        if not _admits(contract, target, case):
            return Outcome(REJECTED)
        if prop_name == "__admits__":
            return Outcome(PASSED)
        prop = contract.property(prop_name)
        reporting = _reporting(target, contract.refusals)
        before = case.copy() if scores and contract.scores is not None and contract.writes else case
        prop.check(reporting if prop.raw else guarded(contract, reporting), case)
        value = _scores(contract, target, before) if scores else None
    except _TargetRaised as raised:
        exc = raised.exc
        return Outcome(RAISES, type(exc).__name__, _text(exc), _formatted(exc), seconds=time.perf_counter() - start)
    except _Timeout as exc:
        return Outcome(TIMEOUT, "Timeout", str(exc), seconds=time.perf_counter() - start)
    except Exception as exc:
        return Outcome(FAILED, type(exc).__name__, _text(exc), _formatted(exc), seconds=time.perf_counter() - start)
    except SystemExit as exc:
        return Outcome(CRASH, "SystemExit", f"the target called sys.exit({exc.code!r})", exit=f"sys.exit({exc.code!r})",
                       seconds=time.perf_counter() - start)
    except KeyboardInterrupt as exc:
        if _INTERRUPTS.seen or isinstance(exc, _OwnInterrupt):
            raise  # the user pressed Ctrl-C (a SIGINT arrived): stop, not a verdict on the target
        return Outcome(CRASH, type(exc).__name__, f"the target raised {type(exc).__name__} (no SIGINT arrived): "
                       f"{_text(exc)}", _formatted(exc), exit=f"raised {type(exc).__name__}",
                       seconds=time.perf_counter() - start)
    except BaseException as exc:
        return Outcome(CRASH, type(exc).__name__, f"the target raised {type(exc).__name__}: {_text(exc)}",
                       _formatted(exc), exit=f"raised {type(exc).__name__}",
                       seconds=time.perf_counter() - start)
    return Outcome(PASSED, seconds=time.perf_counter() - start, value=value)
