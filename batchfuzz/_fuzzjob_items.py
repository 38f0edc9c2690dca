"""The fuzz job's internal test module (see :mod:`batchfuzz.fuzzjob`).

Run only by ``batchfuzz fuzz`` (``pytest.main`` with ``-p batchfuzz.fuzzjob``);
never collected by the project's own test run (it lives outside ``tests/``
and its name matches no ``python_files`` pattern). One test, parametrized by
the plugin with the job's work items.
"""

from __future__ import annotations

import pytest

from batchfuzz.fuzzjob import Job, WorkItem, run_item


def test_work_item(work_item: WorkItem, batchfuzz_job: Job) -> None:
    state = run_item(batchfuzz_job, work_item)
    if state["error"] is not None:
        pytest.fail(f"{work_item.id}: {state['error']['type']}: {state['error']['message']}\n{state['error']['traceback']}",
                    pytrace=False)
    if state["failures"]:
        lines = [f"{work_item.id}: {len(state['failures'])} failure(s)"]
        for f in state["failures"]:
            lines.append(f"  {f['property']}: {f['error_type']}: {f['message'].splitlines()[0] if f['message'] else ''}")
            lines.append(f"    corpus: {f['corpus_file']}")
        pytest.fail("\n".join(lines), pytrace=False)
    if state["status"] == "not run":
        pytest.skip(state["reason"])
