"""A model of a prefix-caching scheduler: the steps it schedules are the
*realizable* steps of contract E (docs/contracts.md, contract E, "Realizable
steps"). Random block tables test the definitions; the steps that matter most
are the ones a real scheduler produces, made here by running a small model of
a prefix-caching scheduler (our own design, modelled on the
behaviour of vLLM's v1 scheduler and KV-cache manager) for a few steps and
emitting the last one, as it is scheduled and before it runs.

The model:

- **Requests** carry token ids (small ints). Prompts come from a tree of
  prefixes: fresh prompts, prompts sharing a prefix with an earlier one
  (block-aligned or not), identical prompts (a later copy, or ``n`` copies
  arriving together as parallel sampling does), and follow-up turns that
  extend an earlier request's prompt and output. Output tokens come from an
  output stream; copies of a prompt may share one (greedy sampling).
- **KV-cache groups**: group 0 is full attention; further groups are full
  attention or sliding window, each with its own block size.
- **Block pool**: one pool shared by all groups (block ids unique across
  groups, as with a hybrid allocator) or one pool per group (the same id may
  then appear in two groups). Block 0 is the null block, never allocated.
  Free blocks form an LRU queue; allocating a block that is still in the
  prefix cache evicts it from there.
- **Prefix cache**, per group, keyed by the hash of the full-block token
  chain (parent hash, block tokens). A full block is registered as soon as it
  is *allocated* for tokens that fill it, before the step that writes it
  runs: a request admitted later in the same step can hit it (a
  **same-step hit**). Hits only on full blocks; the partly filled last block
  is private. The hit length is at most ``num_tokens - 1`` (the last token is
  always recomputed to get logits) and a multiple of every group's block
  size; so a prompt whose every full block is cached and whose length is
  ``k * B + 1`` arrives with ``q == 1`` and ``c == k * B > 0``. A sliding
  window group needs only the blocks inside the window before the hit point;
  blocks before them are null.
- **Sliding window**: before allocating, blocks lying wholly before
  ``c - window + 1`` are freed and replaced by the null block, so a sliding
  window row holds nulls exactly in columns ``j`` with
  ``(j + 1) * B <= c - window + 1``.
- **Scheduling** (v1-like): running requests first, in order, each taking
  ``min(need, budget)`` tokens (decodes need 1; a long prompt is split
  across steps: chunked prefill); when the pool runs out, the last running
  request is preempted (blocks freed, back to the front of the waiting
  queue with ``c == 0``). Then, unless something was preempted, waiting
  requests in arrival order under the token budget and ``max_num_seqs``; the
  first that does not fit stops admission.
- **Batch order**: a persistent batch (removed requests leave holes, new
  ones fill the lowest holes, then the batch is condensed by moving the last
  request into the first hole), then decodes first: requests with
  ``q <= reorder_batch_threshold`` moved to the front, stably (default) or by
  swapping the last decodes with the first prefills (``reorder="swap"``).

The model schedules whatever is added to it (``add_request``, ``schedule``,
``run``) and ``emit_step`` turns a scheduled step into contract E's
arguments with its labels; drawing the workloads it is fed (the small steps
of the strategies, the large ones of the benchmarks) is
``batchfuzz.workloads``'s job.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz.reference._args import ceil_div
from batchfuzz.reference._step import Step

# Labels: scheduler-level input classes of the emitted step.
SAME_STEP_HIT = "same-step hit"
READER_BEFORE_WRITER = "same-step hit, reader before writer"
FULLY_CACHED = "fully cached prompt (q == 1, c > 0)"
PREFIX_HIT = "prefix hit"
DECODE = "decode"
CHUNKED_PREFILL = "chunked prefill"
SLIDING_NULLS = "sliding-window nulls"
IDENTICAL_PROMPTS = "identical prompts"
SEVERAL_GROUPS = "several groups"
DIFFERENT_BLOCK_SIZES = "different block sizes"
PREEMPTION = "preempted and resumed"
EVICTION = "evicted cache block reused"
IDS_ACROSS_GROUPS = "block id in several groups"
REORDERED = "decodes moved to the front"
SPEC_DECODE = "spec decode (q = 1 + drafts)"

LABELS = (
    SAME_STEP_HIT, READER_BEFORE_WRITER, FULLY_CACHED, PREFIX_HIT, DECODE, CHUNKED_PREFILL, SLIDING_NULLS,
    IDENTICAL_PROMPTS, SEVERAL_GROUPS, DIFFERENT_BLOCK_SIZES, PREEMPTION, EVICTION, IDS_ACROSS_GROUPS, REORDERED,
    SPEC_DECODE,
)


# ---------------------------------------------------------------------------
# Engine configuration
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSpec:
    """One KV-cache group: block size, and a sliding window (None: full attention)."""

    block_size: int
    window: int | None = None

    @property
    def kind(self) -> str:
        return "full" if self.window is None else "sliding"


REORDERS = ("stable", "swap", "regions")


@dataclass(frozen=True)
class EngineConfig:
    """What the modelled scheduler is configured with."""

    groups: tuple[GroupSpec, ...]
    num_blocks: int  # real blocks per pool (ids 1..num_blocks); 0 is the null block
    shared_pool: bool
    token_budget: int
    max_num_seqs: int
    max_model_len: int
    reorder_batch_threshold: int = 1
    reorder: str = "stable"  # "stable" | "swap" | "regions"
    num_spec_tokens: int = 0  # draft tokens a decode schedules on top of its one token
    long_prefill_token_threshold: int = 0  # > 0: a prefill (chunk) schedules at most this many tokens
    admit_whole_sequence: bool = False  # admit a waiting request only if blocks for all its tokens fit

    def __post_init__(self) -> None:
        if not self.groups or self.groups[0].window is not None:
            raise ValueError(f"groups must start with a full-attention group, got {self.groups!r}")
        if self.num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens must be >= 0, got {self.num_spec_tokens}")
        if self.reorder not in REORDERS:
            raise ValueError(f"reorder must be one of {REORDERS}, got {self.reorder!r}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be >= 0, got {self.long_prefill_token_threshold}")
        for g in self.groups:
            if g.block_size < 1 or (g.window is not None and g.window < 1):
                raise ValueError(f"block_size and window must be >= 1, got {g!r}")

    @property
    def hit_alignment(self) -> int:
        """Hit lengths are multiples of every group's block size."""
        out = 1
        for g in self.groups:
            out = out * g.block_size // math.gcd(out, g.block_size)
        return out


# ---------------------------------------------------------------------------
# The scheduler model
# ---------------------------------------------------------------------------


@dataclass
class _Request:
    rid: int
    prompt: list[int]
    max_tokens: int
    stream: int
    tokens: list[int]
    blocks: list[list[int]]
    num_cached_blocks: list[int]
    hashes: list[list[int]]
    num_computed: int = 0
    num_generated: int = 0
    was_preempted: bool = False
    finished: bool = False


class _Pool:
    """A block pool: ids 1..n, LRU free queue, reference counts, prefix cache."""

    def __init__(self, num_blocks: int) -> None:
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks + 1))
        self.ref: dict[int, int] = {}
        self.cache: dict[tuple[int, int], list[int]] = {}
        self.key_of: dict[int, tuple[int, int]] = {}
        self.evictions = 0

    def num_free(self) -> int:
        return len(self.free)

    def allocate(self) -> int:
        block, _ = self.free.popitem(last=False)
        key = self.key_of.pop(block, None)
        if key is not None:
            holders = self.cache[key]
            holders.remove(block)
            if not holders:
                del self.cache[key]
            self.evictions += 1
        self.ref[block] = 1
        return block

    def touch(self, block: int) -> None:
        if self.ref.get(block, 0) == 0:
            del self.free[block]
        self.ref[block] = self.ref.get(block, 0) + 1

    def release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free[block] = None

    def register(self, key: tuple[int, int], block: int) -> None:
        if block in self.key_of:
            return
        self.key_of[block] = key
        self.cache.setdefault(key, []).append(block)

    def lookup(self, key: tuple[int, int]) -> int | None:
        holders = self.cache.get(key)
        return holders[0] if holders else None


@dataclass
class Scheduled:
    """One scheduled step, before it runs."""

    entries: list[tuple[_Request, int]]  # (request, num scheduled tokens) in scheduling order
    computed: dict[int, int]  # rid -> c at the start of the step
    new: set[int]  # rids admitted from the waiting queue this step
    hits: list[tuple[int, int, int, int]]  # (group, reader rid, writer rid, block): same-step hits
    preempted: bool


class SchedulerModel:
    """A small prefix-caching scheduler; see the module docstring."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        n_pools = 1 if cfg.shared_pool else len(cfg.groups)
        self.pools = [_Pool(cfg.num_blocks) for _ in range(n_pools)]
        self.requests: list[_Request] = []
        self.waiting: list[_Request] = []
        self.running: list[_Request] = []
        self.slots: list[int | None] = []  # persistent batch: rid per slot
        self.step_index = 0
        self._next_token = 1
        self._streams: dict[tuple[int, int], int] = {}
        self._num_streams = 0
        self.any_preemption = False
        self._eligible = 0  # requests running or waiting as this step began
        self._writers: dict[tuple[int, int], int] = {}  # (pool, block) -> rid registering it this step

    # -- tokens ---------------------------------------------------------------
    def fresh_tokens(self, n: int) -> list[int]:
        out = list(range(self._next_token, self._next_token + n))
        self._next_token += n
        return out

    def new_stream(self) -> int:
        self._num_streams += 1
        return self._num_streams

    def set_outputs(self, stream: int, tokens: Sequence[int]) -> None:
        """Fix the first tokens ``stream`` samples (a workload given from outside)."""
        for k, t in enumerate(tokens):
            self._streams[(stream, k)] = int(t)

    def _output_token(self, stream: int, index: int) -> int:
        key = (stream, index)
        if key not in self._streams:
            self._streams[key] = self.fresh_tokens(1)[0]
        return self._streams[key]

    # -- requests -------------------------------------------------------------
    def add_request(self, prompt: Sequence[int], max_tokens: int, stream: int | None = None) -> _Request:
        prompt = list(prompt)
        if not 1 <= len(prompt) < self.cfg.max_model_len:
            raise ValueError(f"prompt length must be in [1, max_model_len), got {len(prompt)}")
        max_tokens = max(1, min(max_tokens, self.cfg.max_model_len - len(prompt)))
        g = len(self.cfg.groups)
        req = _Request(len(self.requests), prompt, max_tokens, self.new_stream() if stream is None else stream,
                       list(prompt), [[] for _ in range(g)], [0] * g, [[] for _ in range(g)])
        self.requests.append(req)
        self.waiting.append(req)
        return req

    def _pool(self, g: int) -> int:
        return 0 if self.cfg.shared_pool else g

    def _hashes(self, req: _Request, g: int, n: int) -> list[int]:
        """The chain hashes of the first ``n`` full blocks of ``req`` in group ``g``."""
        b = self.cfg.groups[g].block_size
        hs = req.hashes[g]
        while len(hs) < n:
            j = len(hs)
            parent = hs[-1] if hs else 0
            hs.append(hash((parent, tuple(req.tokens[j * b:(j + 1) * b]))))
        return hs[:n]

    def _find_hit(self, req: _Request) -> tuple[int, list[list[int]]]:
        """Longest prefix-cache hit: length and per-group block lists (nulls included)."""
        cfg = self.cfg
        max_hit = len(req.tokens) - 1
        align = cfg.hit_alignment
        cached: list[list[int | None]] = []
        for g, spec in enumerate(cfg.groups):
            pool = self.pools[self._pool(g)]
            cached.append([pool.lookup((g, h)) for h in self._hashes(req, g, max_hit // spec.block_size)])

        def ok(g: int, h: int) -> bool:
            spec = cfg.groups[g]
            n = h // spec.block_size
            start = 0 if spec.window is None else max(0, n - ceil_div(spec.window - 1, spec.block_size))
            return all(b is not None for b in cached[g][start:n])

        h = (max_hit // align) * align
        while h > 0 and not all(ok(g, h) for g in range(len(cfg.groups))):
            h -= align
        blocks: list[list[int]] = []
        for g, spec in enumerate(cfg.groups):
            n = h // spec.block_size
            start = 0 if spec.window is None else max(0, n - ceil_div(spec.window - 1, spec.block_size))
            blocks.append([0] * start + [int(b) for b in cached[g][start:n] if b is not None])
        return h, blocks

    def _skipped(self, g: int, c: int) -> int:
        """Leading blocks of a sliding-window group wholly outside the window of position ``c``."""
        spec = self.cfg.groups[g]
        if spec.window is None:
            return 0
        return max(0, c - spec.window + 1) // spec.block_size

    def _allocate(self, req: _Request, n: int, hit: list[list[int]] | None, fit: int = 0) -> bool:
        """Give ``req`` blocks for positions up to ``c + n``; all or nothing.

        ``hit`` (new requests only) is the per-group cache hit; ``req.num_computed``
        is already its length. ``fit`` > ``c + n``: succeed only if blocks for
        positions up to ``fit`` would fit (allocating still only up to ``c + n``).
        """
        c = req.num_computed
        end = c + n
        kept, to_drop = self._outside_window(hit if hit is not None else req.blocks, c)
        if not self._fits(kept, to_drop, hit is not None, max(end, fit)):
            return False
        if hit is None:
            for g, b in to_drop:
                self.pools[self._pool(g)].release(b)
        else:  # touch every group's hit blocks before any allocation can evict them
            for g in range(len(self.cfg.groups)):
                for b in kept[g]:
                    if b != 0:
                        self.pools[self._pool(g)].touch(b)
                req.num_cached_blocks[g] = len(kept[g])
        for g in range(len(self.cfg.groups)):
            self._fill(req, g, kept[g], c, end)
        return True

    def _outside_window(self, current: list[list[int]], c: int) -> tuple[list[list[int]], list[tuple[int, int]]]:
        """Each group's row with its sliding-window blocks outside the window
        of position ``c`` zeroed, and those blocks (group, id): dropped first."""
        to_drop: list[tuple[int, int]] = []
        kept: list[list[int]] = []
        for g in range(len(self.cfg.groups)):
            row = list(current[g])
            for j in range(min(self._skipped(g, c), len(row))):
                if row[j] != 0:
                    to_drop.append((g, row[j]))
                    row[j] = 0
            kept.append(row)
        return kept, to_drop

    def _fits(self, kept: list[list[int]], to_drop: list[tuple[int, int]], new: bool, need_end: int) -> bool:
        """Whether every pool has the blocks for positions up to ``need_end``
        (a ``new`` request's evictable hit blocks count as taken; a running
        one's dropped blocks as freed)."""
        need = [0] * len(self.pools)
        for g, spec in enumerate(self.cfg.groups):
            need[self._pool(g)] += max(0, ceil_div(need_end, spec.block_size) - len(kept[g]))
        if new:  # touching an evictable hit block takes it out of the free queue
            for g in range(len(self.cfg.groups)):
                pool = self.pools[self._pool(g)]
                need[self._pool(g)] += sum(1 for b in kept[g] if b != 0 and pool.ref.get(b, 0) == 0)
        freed = [0] * len(self.pools)
        if not new:
            for g, b in to_drop:
                if self.pools[self._pool(g)].ref[b] == 1:
                    freed[self._pool(g)] += 1
        return not any(need[p] > self.pools[p].num_free() + freed[p] for p in range(len(self.pools)))

    def _fill(self, req: _Request, g: int, row: list[int], c: int, end: int) -> None:
        """Allocate group ``g``'s row up to position ``end`` and register the
        blocks this step fills completely, before the step runs."""
        spec = self.cfg.groups[g]
        pool = self.pools[self._pool(g)]
        while len(row) < ceil_div(end, spec.block_size):
            row.append(pool.allocate())
        req.blocks[g] = row
        full = min(end, len(req.tokens)) // spec.block_size  # draft positions are never cached
        hs = self._hashes(req, g, full)
        for j in range(req.num_cached_blocks[g], full):
            if row[j] != 0:
                pool.register((g, hs[j]), row[j])
                if (j + 1) * spec.block_size > c:  # written in this step (accepted drafts were written earlier)
                    self._writers[(self._pool(g), row[j])] = req.rid
        req.num_cached_blocks[g] = max(req.num_cached_blocks[g], full)

    def _free(self, req: _Request) -> None:
        for g in range(len(self.cfg.groups)):
            pool = self.pools[self._pool(g)]
            for b in reversed(req.blocks[g]):  # tail first: it is evicted first
                if b != 0:
                    pool.release(b)
            req.blocks[g] = []
            req.num_cached_blocks[g] = 0

    def _preempt(self) -> _Request:
        victim = self.running.pop()
        self._free(victim)
        victim.num_computed = 0
        victim.was_preempted = True
        self.waiting.insert(0, victim)
        self.any_preemption = True
        return victim

    def schedule(self, token_budget: int | None = None) -> Scheduled:
        """Schedule one step (allocating and registering blocks); does not run it.

        ``token_budget`` overrides the configured budget for this step only.
        """
        cfg = self.cfg
        self._writers = {}
        budget = cfg.token_budget if token_budget is None else token_budget
        self._eligible = len(self.running) + len(self.waiting)
        entries: list[tuple[_Request, int]] = []
        computed: dict[int, int] = {}
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(self._chunk(len(req.tokens) - req.num_computed) + self._num_drafts(req), budget)
            scheduled = True
            while not self._allocate(req, n, None):
                preempted = True
                if self._preempt() is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            entries.append((req, n))
            computed[req.rid] = req.num_computed
            budget -= n
            i += 1
        new: set[int] = set()
        hits: list[tuple[int, int, int, int]] = []
        while not preempted and self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            h, hit = self._find_hit(req)
            n = min(self._chunk(len(req.tokens) - h), budget)
            req.num_computed = h
            if not self._allocate(req, n, hit, len(req.tokens) if cfg.admit_whole_sequence else 0):
                req.num_computed = 0
                break
            for g in range(len(cfg.groups)):
                for b in req.blocks[g][: h // cfg.groups[g].block_size]:
                    writer = self._writers.get((self._pool(g), b))
                    if b != 0 and writer is not None and writer != req.rid:
                        hits.append((g, req.rid, writer, b))
            self.waiting.pop(0)
            self.running.append(req)
            entries.append((req, n))
            computed[req.rid] = h
            new.add(req.rid)
            budget -= n
        return Scheduled(entries, computed, new, hits, preempted)

    def _chunk(self, need: int) -> int:
        """Tokens a request schedules of the ``need`` it has, before the budget:
        at most ``long_prefill_token_threshold`` when it is set and more than
        one request was running or waiting as the step began (one alone
        starves nobody; vLLM 0.32's rule)."""
        lpt = self.cfg.long_prefill_token_threshold
        return min(need, lpt) if lpt > 0 and self._eligible > 1 else need

    def _num_drafts(self, req: _Request) -> int:
        """Draft tokens a decode schedules (speculative decoding), within max_model_len."""
        if self.cfg.num_spec_tokens == 0 or len(req.tokens) - req.num_computed != 1 or len(req.tokens) <= len(req.prompt):
            return 0
        return max(0, min(self.cfg.num_spec_tokens, self.cfg.max_model_len - len(req.tokens) - 1))

    def run(self, sched: Scheduled) -> None:
        """Run a scheduled step: advance, sample one token per finished prompt
        (a decode with drafts keeps a deterministic pseudo-random number of
        them, plus one), retire finished requests."""
        for req, n in sched.entries:
            need = len(req.tokens) - req.num_computed
            new_tokens = 0
            if n > need:  # a decode with n - 1 drafts: verification accepts `accepted` of them
                accepted = (req.rid * 40503 + self.step_index * 2654435761) % n
                req.num_computed += 1 + accepted
                new_tokens = accepted + 1
            else:
                req.num_computed += n
                new_tokens = 1 if req.num_computed == len(req.tokens) else 0
            for _ in range(new_tokens):
                req.tokens.append(self._output_token(req.stream, req.num_generated))
                req.num_generated += 1
            if new_tokens:
                if req.num_generated >= req.max_tokens or len(req.tokens) >= self.cfg.max_model_len:
                    req.finished = True
                    self.running.remove(req)
                    self._free(req)
        self.step_index += 1

    def _by_regions(self, slots: list[int], scheduled: dict[int, int], sched: Scheduled) -> list[int]:
        """Four regions, in order: decodes (``q <= thr``, prompt done), short
        extends (``q <= thr``, ``0 < c`` < prompt), long extends (``q > thr``,
        ``c > 0``), prefills (``c == 0``); only rows not in their region's
        span move: those rows, in batch order, take the moved requests sorted
        stably by region (the permutation vLLM's
        ``reorder_batch_to_split_decodes_and_prefills`` applies by swaps)."""
        thr = self.cfg.reorder_batch_threshold
        by_id = {req.rid: req for req, _ in sched.entries}

        def region(rid: int) -> int:
            c, q = sched.computed[rid], scheduled[rid]
            if c == 0:
                return 3
            if q > thr:
                return 2
            return 1 if c < len(by_id[rid].prompt) else 0

        regions = [region(rid) for rid in slots]
        target = sorted(regions)
        moved = [k for k in range(len(slots)) if regions[k] != target[k]]
        out = list(slots)
        for dst, src in zip(moved, sorted(moved, key=lambda k: regions[k]), strict=True):
            out[dst] = slots[src]
        return out

    def batch_order(self, sched: Scheduled) -> tuple[list[_Request], bool]:
        """Update the persistent batch for this step; return its order and whether
        the decodes-first reorder moved anything."""
        scheduled = {req.rid: n for req, n in sched.entries}
        slots = [rid if rid in scheduled else None for rid in self.slots]
        present = {rid for rid in slots if rid is not None}
        for req, _ in sched.entries:
            if req.rid in present:
                continue
            hole = next((k for k, rid in enumerate(slots) if rid is None), None)
            if hole is None:
                slots.append(req.rid)
            else:
                slots[hole] = req.rid
        # Condense: move the last request into the first hole.
        while None in slots:
            while slots and slots[-1] is None:
                slots.pop()
            if None not in slots:
                break
            slots[slots.index(None)] = slots.pop()
        thr = self.cfg.reorder_batch_threshold
        is_dec = [scheduled[rid] <= thr for rid in slots]  # type: ignore[index]
        if self.cfg.reorder == "stable":
            order = [k for k in range(len(slots)) if is_dec[k]] + [k for k in range(len(slots)) if not is_dec[k]]
            new_slots = [slots[k] for k in order]
        elif self.cfg.reorder == "regions":
            by_regions: list[int | None] = list(self._by_regions([rid for rid in slots if rid is not None], scheduled, sched))
            new_slots = by_regions
        else:
            new_slots = list(slots)
            num_dec = sum(is_dec)
            front_prefills = [k for k in range(num_dec) if not is_dec[k]]
            back_decodes = [k for k in range(num_dec, len(slots)) if is_dec[k]]
            for a, b in zip(front_prefills, reversed(back_decodes), strict=False):
                new_slots[a], new_slots[b] = new_slots[b], new_slots[a]
        moved = new_slots != slots
        self.slots = list(new_slots)
        by_id = {req.rid: req for req, _ in sched.entries}
        return [by_id[rid] for rid in new_slots if rid is not None], moved


# ---------------------------------------------------------------------------
# Emitting a step
# ---------------------------------------------------------------------------


def emit_step(model: SchedulerModel, sched: Scheduled, pad: str, dtype: Any, table_dtype: Any) -> tuple[Step, dict[str, Any]]:
    """The scheduled step as contract E sees it. ``pad``: table widths are the
    widest row ("tight"), one more ("plus one") or ``cdiv(max_model_len, B)``."""
    cfg = model.cfg
    order, moved = model.batch_order(sched)
    q_of = {req.rid: n for req, n in sched.entries}
    c = np.array([sched.computed[req.rid] for req in order], dtype=dtype)
    q = np.array([q_of[req.rid] for req in order], dtype=dtype)
    tables = _tables(cfg, order, pad, table_dtype)
    step = Step(c, q, tables, [g.block_size for g in cfg.groups])
    pos = {req.rid: i for i, req in enumerate(order)}
    hits = sorted({(g, pos[a], pos[b], blk) for g, a, b, blk in sched.hits})
    new_flags = [req.rid in sched.new for req in order]
    labels = _step_labels(model, order, c, q, tables, hits, new_flags, moved)
    info: dict[str, Any] = {
        "labels": labels,
        "reorder_batch_threshold": cfg.reorder_batch_threshold,
        "reorder": cfg.reorder,
        "group_kinds": [g.kind for g in cfg.groups],
        "sliding_windows": [g.window for g in cfg.groups],
        "shared_pool": cfg.shared_pool,
        "same_step_hits": hits,  # (group, reader row, writer row, block) in batch order
        "new_request": new_flags,
        "prompt_lens": [len(req.prompt) for req in order],
        # Positions [0, c + q) per row; -1 marks a draft token (speculative decoding).
        "token_ids": [list(req.tokens[: int(c[i] + q[i])]) + [-1] * max(0, int(c[i] + q[i]) - len(req.tokens))
                      for i, req in enumerate(order)],
        "num_spec_tokens": cfg.num_spec_tokens,
        "num_steps": model.step_index + 1,
        "token_budget": cfg.token_budget,
        "max_num_seqs": cfg.max_num_seqs,
        "max_model_len": cfg.max_model_len,
    }
    return step, info


def _tables(cfg: EngineConfig, order: list[Any], pad: str, table_dtype: Any) -> list[np.ndarray]:
    """Each group's block table in batch order, its width as ``pad`` says."""
    tables = []
    for g in range(len(cfg.groups)):
        need = max((len(req.blocks[g]) for req in order), default=0)
        w = {"tight": need, "plus one": need + 1}.get(pad, max(need, ceil_div(cfg.max_model_len, cfg.groups[g].block_size)))
        t = np.zeros((len(order), w), dtype=table_dtype)
        for i, req in enumerate(order):
            t[i, : len(req.blocks[g])] = req.blocks[g]
        tables.append(t)
    return tables


def _step_labels(model: SchedulerModel, order: list[Any], c: np.ndarray, q: np.ndarray, tables: list[np.ndarray],
                 hits: list[tuple[int, int, int, int]], new_flags: list[bool], moved: bool) -> list[str]:
    """The input classes the emitted step falls in, in a fixed order."""
    cfg, r = model.cfg, len(order)
    labels: list[str] = []
    if hits:
        labels.append(SAME_STEP_HIT)
        if any(rd < wr for _, rd, wr, _ in hits):
            labels.append(READER_BEFORE_WRITER)
    if any(new_flags[i] and q[i] == 1 and c[i] > 0 for i in range(r)):
        labels.append(FULLY_CACHED)
    if any(new_flags[i] and c[i] > 0 for i in range(r)):
        labels.append(PREFIX_HIT)
    if any(int(c[i]) >= len(req.prompt) for i, req in enumerate(order)):
        labels.append(DECODE)
    if any(int(c[i]) < len(req.prompt) and (int(c[i] + q[i]) < len(req.prompt) or not new_flags[i])
           for i, req in enumerate(order)):
        labels.append(CHUNKED_PREFILL)
    if any(spec.window is not None and any(0 in req.blocks[g][:1] for req in order) for g, spec in enumerate(cfg.groups)):
        labels.append(SLIDING_NULLS)
    prompts = [tuple(req.prompt) for req in order]
    if len(set(prompts)) < len(prompts):
        labels.append(IDENTICAL_PROMPTS)
    if len(cfg.groups) > 1:
        labels.append(SEVERAL_GROUPS)
        if len({g.block_size for g in cfg.groups}) > 1:
            labels.append(DIFFERENT_BLOCK_SIZES)
    if model.any_preemption:
        labels.append(PREEMPTION)
    if any(p.evictions for p in model.pools):
        labels.append(EVICTION)
    if not cfg.shared_pool:
        seen: list[set[int]] = [{int(b) for b in np.unique(t)} - {0} for t in tables]
        if any(seen[a] & seen[b] for a in range(len(seen)) for b in range(a + 1, len(seen))):
            labels.append(IDS_ACROSS_GROUPS)
    if moved:
        labels.append(REORDERED)
    if any(int(c[i] + q[i]) > len(req.tokens) for i, req in enumerate(order)):
        labels.append(SPEC_DECODE)
    return labels
