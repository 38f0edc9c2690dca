"""Hypothesis strategies for batch-layout inputs (installed as ``batchfuzz.strategies``).

The public building blocks, for your own ``@given`` tests, are importable from
here; each validates its arguments (raising Hypothesis's ``InvalidArgument``
naming the argument and value, in the words of ``reference/_args.py``; why
InvalidArgument: ``strategies/_validate.py``) and states in its docstring
where it shrinks:

- engine configuration: :func:`capture_sizes`, :func:`max_num_seqs`;
- persistent buffers: :func:`stale_arrays`, :func:`dummy_buffers`;
- contract inputs: :func:`num_reqs_and_tokens` (A), :func:`padded_steps` (C),
  :func:`general_steps` and :func:`realizable_steps` (E).

Each contract also has a module named after it (``split_dummy_tokens``,
``make_dummy``, ``pad_query_start_loc``, ``split_ubatches``,
``find_conflicts``, ``allow_microbatching``) whose ``cases(domain)`` gives the
contract's whole cases (arguments plus the context its properties use) in the
``spec`` or the ``engine`` domain (docs/contracts.md), and whose
``in_domain(case, domain)`` says whether a case lies in a domain.
"""

from batchfuzz.strategies._buffers import stale_arrays
from batchfuzz.strategies._engine import capture_sizes, max_num_seqs
from batchfuzz.strategies._steps import general_steps, realizable_steps
from batchfuzz.strategies.make_dummy import dummy_buffers
from batchfuzz.strategies.pad_query_start_loc import padded_steps
from batchfuzz.strategies.split_dummy_tokens import num_reqs_and_tokens

__all__ = [
    "capture_sizes", "dummy_buffers", "general_steps", "max_num_seqs", "num_reqs_and_tokens", "padded_steps",
    "realizable_steps", "stale_arrays",
]
