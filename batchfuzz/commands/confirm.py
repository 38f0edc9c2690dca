"""``batchfuzz confirm``: what the engine's own attention kernel does with a counterexample.

Each case is replayed through the kernel (``--kernel``, default ``unified``;
its files extracted from a release by ``--extract``) beside its control, the
oracle's result on the same case, in a worker process that a device fault
costs (``batchfuzz.confirm``). ``--kernel model`` runs a torch model of the
kernel on any device. The two steps, the exit codes and the detectors are in
docs/confirm.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from batchfuzz.commands import _options
from batchfuzz.output import write_json_atomic
from batchfuzz.progress import Progress
from batchfuzz.usage import ExitCode, UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("confirm", help="replay counterexamples through the engine's own attention kernel (GPU)",
                       description="Replay counterexamples through an engine release's attention kernel, with detectors "
                                   "built into the data, beside the oracle's layout as the control.")
    p.add_argument("--extract", action="store_true",
                   help="extract the kernel files of a release (--release, --vllm-wheel or --vllm-dir) into --kernels, then stop")
    _options.release(p, help="with --extract: a vLLM release, its wheel downloaded into the cache")
    p.add_argument("--vllm-wheel", metavar="FILE", help="with --extract: a vLLM release wheel")
    p.add_argument("--vllm-dir", metavar="DIR", help="with --extract: a vLLM source checkout")
    p.add_argument("--kernels", metavar="DIR",
                   help="the kernel folder (default for --extract: the cache's kernels/vllm-VERSION; "
                        "required otherwise unless --kernel model, or $BATCHFUZZ_KERNELS)")
    p.add_argument("--kernel", default="unified", help="unified (default), decode, prefix_prefill, or model (a torch model of the kernel)")
    _options.device(p, default="cuda", help="cuda (default) or cpu (only with --kernel model)")
    _options.contracts(p, help="confirm only this contract's variants (repeatable; default every contract that reaches attention)")
    p.add_argument("--all-variants", action="store_true", help="every catalogue variant, not only the shipped ones")
    p.add_argument("--variant", action="append", default=None, metavar="NAME",
                   help="only this catalogue variant (repeatable; e.g. remainder_to_last.input_batch)")
    p.add_argument("--corpus", action="append", default=None, metavar="PATH",
                   help="confirm these corpus entries (files or folders) instead of the catalogue's variants")
    p.add_argument("--block-size", type=int, default=None, metavar="B",
                   help="KV block size of contracts A-C (default: the largest power of two <= 16 dividing max_model_len)")
    _options.json_output(p, help="write every verdict as JSON")
    p.set_defaults(func=run)


def _extract(args: argparse.Namespace) -> int:
    from batchfuzz.confirm import kernels
    from batchfuzz.engines import SourceError, fetch_wheel
    from batchfuzz.engines.vllm import ReleaseSource

    chosen = [x for x in (args.release, args.vllm_wheel, args.vllm_dir) if x]
    if len(chosen) != 1:
        raise UsageError("--extract needs exactly one of --release, --vllm-wheel, --vllm-dir")
    try:
        if args.release:
            source = ReleaseSource.from_wheel(fetch_wheel("vllm", args.release))
        elif args.vllm_wheel:
            source = ReleaseSource.from_wheel(args.vllm_wheel)
        else:
            source = ReleaseSource.from_dir(args.vllm_dir)
        folder = kernels.extract(source, args.kernels)
    except (SourceError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    manifest = kernels.read_manifest(folder)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"vllm {manifest['version']}: kernel files in {folder} ({size / 1024:.0f} kB)")
    for name, status in manifest["kernels"].items():
        print(f"  {name:<8} {status}")
    return ExitCode.OK


def _corpus_cases(paths: list[str]) -> list[tuple[str, str, Any, Any]]:
    from batchfuzz import registry
    from batchfuzz.confirm.layouts import BUILDERS
    from batchfuzz.fuzz import corpus
    from batchfuzz.targets import TargetError

    out = []
    for root in paths:
        if not Path(root).exists():
            raise UsageError(f"--corpus {root}: no such file or directory")
        for path in corpus.files(root):
            try:
                entry = corpus.load(path)
            except corpus.CorpusError as exc:
                print(f"  skip {path.name}: {exc}")
                continue
            if entry.contract not in BUILDERS:
                print(f"  skip {path.name}: contract {entry.contract} does not reach attention")
                continue
            ref = entry.ref
            if ref.kind not in ("impl", "variant", "oracle"):
                print(f"  skip {path.name}: target {entry.target} is not the project's own code (confirm replays "
                      "implementations and variants)")
                continue
            try:
                fn = ref.load(registry.get(entry.contract))
            except TargetError as exc:
                print(f"  skip {path.name}: {exc}")
                continue
            out.append((entry.contract, entry.target, entry.case, fn))
    return out


def run(args: argparse.Namespace) -> int:
    if args.extract:
        return _extract(args)
    from batchfuzz import confirm
    from batchfuzz.confirm import kernels

    if args.kernel != confirm.MODEL and args.kernel not in kernels.KERNELS:
        raise UsageError(f"--kernel must be model or one of {sorted(kernels.KERNELS)}, got {args.kernel!r}")
    folder = args.kernels or os.environ.get("BATCHFUZZ_KERNELS")
    if args.kernel != confirm.MODEL:
        if not folder:
            raise UsageError("--kernels DIR is needed (make one with `batchfuzz confirm --extract --release VERSION`)")
        try:
            manifest = kernels.read_manifest(folder)
        except kernels.KernelError as exc:
            raise UsageError(str(exc)) from None
        status = manifest["kernels"].get(args.kernel, "absent")
        if status != "extracted":
            raise UsageError(f"--kernel {args.kernel}: vllm {manifest['version']}: {status}")
        if not args.device.startswith("cuda"):
            raise UsageError(f"--device {args.device}: the engine's Triton kernels run on a CUDA device (use --kernel model on a CPU)")
        label = f"vllm {manifest['version']} {args.kernel}"
    else:
        label = "model (a torch model of the unified kernel, not the engine's)"
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {args.device}: no CUDA device here")
    _options.check_outputs((args.json_path, "--json"))
    print(f"batchfuzz confirm: kernel {label}, device {args.device}")
    verdicts: list[Any] = []

    cases = _corpus_cases(args.corpus) if args.corpus else None
    bar = Progress("confirm", total=len(cases) if cases is not None else None)

    def show(v: Any) -> None:
        control = "clean" if v.control_clean else f"NOT CLEAN: {v.control.summary()}"
        bar.advance(f"  {v.contract:<20} {v.target}\n      kernel: {v.consequence()}\n      control (oracle): {control}")

    with confirm.Worker(folder, args.kernel, args.device) as worker, bar:
        if cases is not None:
            for contract, target, case, fn in cases:
                bar.update(now=f"{contract} {target}")
                v = confirm.confirm_or_explain(contract, case, fn, target, worker, args.block_size)
                verdicts.append(v)
                show(v)
        else:  # the catalogue's variants are found (searched for) one by one as they are confirmed: no total ahead
            verdicts = confirm.confirm_catalogue(worker, args.contract, args.all_variants, args.block_size, on_verdict=show,
                                                 names=args.variant)
    bad = [v for v in verdicts if not v.control_clean]
    consequences = [v for v in verdicts if not v.target_replay.clean]
    print(f"{len(verdicts)} cases: {len(consequences)} with a consequence, {len(verdicts) - len(consequences)} clean; "
          f"controls: {len(verdicts) - len(bad)} clean, {len(bad)} not clean")
    if args.json_path:
        doc = {"kernel": label, "device": args.device, "verdicts": [v.to_json() for v in verdicts]}
        write_json_atomic(args.json_path, doc, fsync=False, default=str)
    return ExitCode.COUNTEREXAMPLE if bad else ExitCode.OK
