"""batchfuzz: property-based verification of LLM-serving batch-layout logic.

The library face: ``batchfuzz.testing.check_contract`` (run a contract's
properties on your function inside your own tests), ``batchfuzz.strategies``
(the Hypothesis strategies), and the decorators :func:`domain` and
:func:`assumes` (a target's own statement of the inputs it is meant for).
"""

from batchfuzz.preconditions import assumes, domain

__version__ = "0.2.0"
__all__ = ["__version__", "assumes", "domain"]
