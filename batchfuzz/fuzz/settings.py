"""The fuzz job's constants: its budget shares, default paths and
environment variables. A leaf module (stdlib only), so that ``batchfuzz fuzz
--help`` states them without importing the job."""

from __future__ import annotations

import os

CORPUS_ENV_VAR = "BATCHFUZZ_CORPUS"  # the corpus directory (batchfuzz.fuzz.corpus.default_dir)
# The fuzz job's state lives in the project the user runs it in, relative to
# the working directory (as Hypothesis keeps .hypothesis/ there), never in the
# installed tool's own tree: the corpus, the reports and (batchfuzz.profiles)
# the example database. tests/test_fuzz_job.py runs the job from a tmp directory.
DEFAULT_CORPUS = "corpus"
DEFAULT_REPORT = "reports/fuzz"
# A slice is at least this long (seconds): every item runs once when the
# budget gives each item this much per worker.
MIN_SLICE_S = 0.25
# The part of a minimum budget kept for what the slices cost beyond their
# length (results, state files, a job process restarted); start-up itself (imports,
# the fork servers, the job processes, the targets' workers) is not charged to the
# budget (batchfuzz.fuzz.controller).
STARTUP_S = 10.0
# The budget of a run given none (seconds): a minute, or more where the work
# items need more for their first slices (batchfuzz.fuzz.controller.default_budget).
DEFAULT_BUDGET_S = 60.0
MAX_SLICE_S = 300.0
# A failure found in a slice is shrunk (and reduced) past the slice's end for
# at most this share of the budget, or SHRINK_MIN_S seconds if that is more;
# for one more slice's length only while some item has not run yet.
SHRINK_SHARE = 0.05
SHRINK_MIN_S = 2.0
# Slices are sized so that the budget holds about this many rounds.
TARGET_ROUNDS = 2
# After the deadline: the slices in flight finish (each stops generating at
# once and shrinking by the deadline plus runner.DEADLINE_GRACE_S), then the
# job processes are stopped; a job process still busy this long after the deadline is killed.
GRACE_S = float(os.environ.get("BATCHFUZZ_STOP_GRACE", "15"))
