"""Hypothesis profiles: dev, ci, nightly, mutation.

Selected by pytest's ``--hypothesis-profile NAME`` or the environment variable
``BATCHFUZZ_PROFILE``. Under ``CI=true`` Hypothesis would silently load its
own built-in ``ci`` profile; ours replaces it (same name), and ``nightly``
switches randomness and the database back on explicitly, whatever ``CI`` says.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the constants below are read by `batchfuzz --help`, which must stay light
    from hypothesis import settings

PROFILES = ("dev", "ci", "nightly", "mutation")
ENV_VAR = "BATCHFUZZ_PROFILE"
MUTATION_EXAMPLES_ENV_VAR = "BATCHFUZZ_MUTATION_EXAMPLES"  # examples per property under the mutation profile
DATABASE_ENV_VAR = "BATCHFUZZ_DATABASE"
DEFAULT_DATABASE = ".hypothesis/batchfuzz"
# Seconds an example in flight may run past a run's deadline (the grace of --budget; batchfuzz.runner).
DEADLINE_GRACE_S = 2.0
# Examples per search before a catalogue variant counts as not found (batchfuzz.catalogue).
CATALOGUE_MAX_EXAMPLES = 300



def _mutation_examples() -> int:
    text = os.environ.get(MUTATION_EXAMPLES_ENV_VAR, "100")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MUTATION_EXAMPLES_ENV_VAR}={text!r} must be a positive integer (examples per property)")
    return int(text)


def database_path() -> str:
    """The local example database directory: ``$BATCHFUZZ_DATABASE`` when it is a
    directory, else ``.hypothesis/batchfuzz`` (also when it is a ``redis://`` URL:
    the directory is then the shared database's local copy)."""
    value = os.environ.get(DATABASE_ENV_VAR)
    return value if value and "://" not in value else DEFAULT_DATABASE


def untimed(base: settings) -> settings:
    """``base`` with nothing that measures wall-clock time: no deadline, and
    Hypothesis's ``too_slow`` health check (how long input generation took)
    suppressed. A verdict is about the code under test, not about how busy
    the machine is: batchfuzz's own profiles below already are (their
    ``_SLOW`` list), the test suite's conftest applies this to whatever
    profile is loaded, and ``batchfuzz.testing.check_contract`` to the
    settings of the user's run."""
    from hypothesis import HealthCheck
    from hypothesis import settings as _settings

    if base.deadline is None and HealthCheck.too_slow in base.suppress_health_check:
        return base
    return _settings(base, deadline=None, suppress_health_check=[*base.suppress_health_check, HealthCheck.too_slow])


def register_profiles() -> None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    _SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
    _NO_EXPLAIN = tuple(p for p in Phase if p.name != "explain")
    _NO_SHRINK = tuple(p for p in _NO_EXPLAIN if p.name != "shrink")
    settings.register_profile(
        "dev", max_examples=40, deadline=None, suppress_health_check=_SLOW,
        database=DirectoryBasedExampleDatabase(database_path()),
    )
    settings.register_profile(
        # Derandomized and bounded: the whole suite stays well under 10 minutes on 2 cores.
        # No explain phase: it re-runs a failing case many times to annotate it,
        # which costs more than the search itself on a caught variant.
        "ci", max_examples=25, deadline=None, derandomize=True, database=None, print_blob=True,
        suppress_health_check=_SLOW, phases=_NO_EXPLAIN,
    )
    settings.register_profile(
        "nightly", max_examples=5000, deadline=None, derandomize=False, print_blob=True,
        database=DirectoryBasedExampleDatabase(database_path()), phases=tuple(Phase),
        suppress_health_check=_SLOW,
    )
    settings.register_profile(
        # A mutant is killed by any failing example: no shrinking (nor explaining) of it,
        # which would cost more than the search on every killed mutant; 100 examples, as a survivor
        # costs its tests in full; benchmarks/mutation.py --examples N sets another count (docs/mutation.md).
        "mutation", max_examples=_mutation_examples(), deadline=None, derandomize=True, database=None,
        suppress_health_check=_SLOW, phases=_NO_SHRINK,
    )


def default_profile() -> str:
    """The test suite's profile (the conftest loads it): ``$BATCHFUZZ_PROFILE``,
    else ``ci`` on every machine, CI or not. A test's verdict is then a
    function of the code alone: derandomized, no database carried from run to
    run, nothing timed. Exploring with fresh randomness is what ``check`` and
    ``fuzz`` do (their default is ``dev``); ``BATCHFUZZ_PROFILE=dev`` runs the
    suite that way too."""
    name = os.environ.get(ENV_VAR)
    if name:
        if name not in PROFILES:
            raise ValueError(f"{ENV_VAR}={name!r} is not a profile; choose one of {', '.join(PROFILES)}")
        return name
    return "ci"


def load(name: str | None = None) -> settings:
    from hypothesis import settings

    register_profiles()
    name = name or default_profile()
    if name not in PROFILES:
        raise ValueError(f"profile {name!r} is not one of {', '.join(PROFILES)}")
    settings.load_profile(name)
    return settings.get_profile(name)
