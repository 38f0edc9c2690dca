"""The one test ``benchmarks/hypofuzz_crosshair.py`` has HypoFuzz fuzz: the
primary property of the catalogue variant named by ``$BATCHFUZZ_BENCH_VARIANT``
(``CONTRACT:VARIANT``), exposed by ``batchfuzz.hypothesis_tests`` as a user's
module would. Collected by pytest only when named on its command line."""

import os

from batchfuzz import registry
from batchfuzz.hypothesis_tests import expose

_contract, _, _variant = os.environ["BATCHFUZZ_BENCH_VARIANT"].partition(":")
_c = registry.get(_contract)
expose(globals(), _c, f"variant:{_variant}", properties=[_c.variant(_variant).caught_by[0]])
