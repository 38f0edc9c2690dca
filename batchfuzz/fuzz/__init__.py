"""The fuzz job (``batchfuzz fuzz``, ``merge-reports``, ``replay``), one package:

- :mod:`~batchfuzz.fuzz.controller`: plans the work items, starts the job processes,
  hands out time slices, writes the final reports;
- :mod:`~batchfuzz.fuzz.job`: the job's description and a job process;
- :mod:`~batchfuzz.fuzz.corpus`: the failure corpus (content-addressed files, replay);
- :mod:`~batchfuzz.fuzz.report`, :mod:`~batchfuzz.fuzz.merge`: the reports of a run
  and of a sharded run's shards;
- :mod:`~batchfuzz.fuzz.progress`: the live table or lines;
- :mod:`~batchfuzz.fuzz.database`: the (shared) Hypothesis example database;
- :mod:`~batchfuzz.fuzz.shards`: the stable partition of the work items.

Importing the package imports none of them (``batchfuzz.fuzz.database`` is
loaded on its own by processes that need only Hypothesis and redis).
"""
