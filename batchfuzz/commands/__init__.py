"""Subcommands of the batchfuzz CLI, one module each."""
