"""``batchfuzz vllm``: the short form of ``batchfuzz engine vllm`` (the
release matrix of vLLM's own batch-layout functions, release by release;
``batchfuzz.commands.engine`` says what it runs and its exit codes)."""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz.commands import engine as engine_command


def register(sub: Any) -> None:
    p = sub.add_parser(
        "vllm", help="check vLLM's own functions, release by release (the release matrix; = batchfuzz engine vllm)",
        description="Bind vLLM's own batch-layout functions from each release given and check each against its contract "
                    "on the engine domain, or with --steps engine on steps from the installed vLLM's scheduler "
                    f"(batchfuzz engine vllm). {engine_command.EXIT_CODES}",
    )
    engine_command.add_matrix_options(p, "vLLM")
    p.set_defaults(func=run, name="vllm")


def run(args: argparse.Namespace) -> int:
    return engine_command.run(args)
