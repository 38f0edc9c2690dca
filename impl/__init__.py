"""Optimised implementations of the contracts: numpy and torch (CPU and CUDA).

Each is checked against the oracle in ``reference/`` by the properties that the
registry generates; none is ever checked against itself.
"""
