"""Hypothesis strategies for batch-layout inputs.

Shapes and sizes are drawn first, contents second; every strategy documents
the direction it shrinks in, so a minimal counterexample reads naturally.
"""
