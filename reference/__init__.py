"""Reference oracles (installed as ``batchfuzz.reference``): each contract of
docs/contracts.md written as plain code, one module per contract.

Oracles are slow on purpose: loops over requests and positions, each line
traceable to a sentence of the contract. Implementations in
``batchfuzz.impl`` are always checked against these, never against
themselves. ``_args`` holds the argument checks every oracle and
implementation share; ``_step`` the vocabulary of contract E.
"""
