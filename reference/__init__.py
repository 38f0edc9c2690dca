"""Pure-Python reference oracles: the contracts of SPEC.md written as plain code.

One module per contract. Oracles are slow on purpose: loops over requests and
positions, each line traceable to a sentence of SPEC.md. Implementations in
``impl/`` are always checked against these, never against themselves.
"""
