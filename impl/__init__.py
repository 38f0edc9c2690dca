"""Optimised implementations of the contracts (installed as ``batchfuzz.impl``).

One module per contract and backend: ``<contract>_numpy.py`` (host code, also
the engine's host-side code paths where a contract has them) and
``<contract>_torch.py`` (CPU and CUDA: eager forms, CUDA-graph-capturable
forms, and ``bind(device)`` functions giving each the canonical numpy
signature through ``_adapter.numpy_call``). Every one is checked against the
oracle of ``batchfuzz.reference`` by the contract's properties; none is ever
checked against itself.
"""
