"""A simulation of PyTorch's CUDA caching allocator for one stream.

Given a sequence of allocations and frees it returns what ``torch.cuda.max_memory_reserved()``
and ``max_memory_allocated()`` would report, with the number of times the allocator had to free
its cache and retry ``cudaMalloc``. Every rule below follows ``DeviceCachingAllocator`` in
pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp`` (read at commit 001074d25084, torch 2.9
development line; the rules are unchanged in torch 2.11 which measured the H100 rows) and the
settings parser ``c10/core/AllocatorConfig.cpp`` (commit 065861fba759). Each rule names its
function. Not modelled: several streams (``recordStream`` events), CUDA graph private pools,
``roundup_power2_divisions``, the free-memory callbacks, IPC.

Plain Python, no torch: a 7B step (a few thousand events) runs in milliseconds
(benchmarks/allocator_sim.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import length_hint

from cfgcheck.memory.allocconf import (
    K_LARGE_BUFFER,
    MIB,
    NO_LIMIT,
    AllocConf,
    AllocConfError,
    parse_alloc_conf,
)

__all__ = [
    "END",
    "FREE",
    "MIB",
    "REPEAT",
    "RESET",
    "AllocConf",
    "AllocConfError",
    "CachingAllocator",
    "Event",
    "SimResult",
    "allocation_size",
    "parse_alloc_conf",
    "replay",
    "round_size",
    "simulate",
]

# constants at the top of CUDACachingAllocator.cpp
K_MIN_BLOCK = 512  # kMinBlockSize: "all sizes are rounded to at least 512 bytes"
K_SMALL_SIZE = MIB  # kSmallSize: "largest 'small' allocation is 1 MiB"
K_SMALL_BUFFER = 2 * MIB  # kSmallBuffer: "'small' allocations are packed in 2 MiB blocks"
# kLargeBuffer (allocconf.K_LARGE_BUFFER): "'large' allocations may be packed in 20 MiB blocks"
K_MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: "allocations between 1 and 10 MiB may use
# kLargeBuffer"
K_ROUND_LARGE = 2 * MIB  # kRoundLarge: "round up large allocations to 2 MiB"


def round_size(size: int) -> int:
    """``round_size``: at least kMinBlockSize, then a multiple of it."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the cudaMalloc size of a new segment for a ``size`` request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


@dataclass(eq=False, slots=True)
class Block:
    size: int
    addr: int
    small: bool
    expandable: bool = False
    mapped: bool = True
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None
    gc_base: int = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def key(self) -> int:
        """``BlockComparatorSize``: (stream,) size, then address, as one integer (sizes and
        addresses are below 2**64), whose order is that of the pair and compares faster."""
        return self.size << 64 | self.addr


@dataclass
class Pool:
    """``BlockPool``: free mapped blocks ordered by (size, address): their keys
    (:meth:`Block.key`, all distinct) sorted in ``keys`` and the blocks in the same order in
    ``blocks`` (a block is found by its index: no hashing of the wide keys); unmapped blocks by
    address."""

    small: bool
    keys: list[int] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    unmapped: dict[int, Block] = field(default_factory=dict)
    free_calls: int = 0  # get_free_blocks_call_count

    def insert(self, b: Block) -> None:  # insert_into_blocks (sets gc_count_base)
        b.gc_base = self.free_calls
        k = b.size << 64 | b.addr
        i = bisect_left(self.keys, k)
        self.keys.insert(i, k)
        self.blocks.insert(i, b)

    def erase(self, b: Block) -> None:
        i = bisect_left(self.keys, b.size << 64 | b.addr)
        del self.keys[i]
        del self.blocks[i]

    def get(self, k: int) -> Block | None:
        """The free block whose key is ``k``, if any."""
        i = bisect_left(self.keys, k)
        return self.blocks[i] if i != len(self.keys) and self.keys[i] == k else None

    def lower_bound(self, size: int) -> int:
        return bisect_left(self.keys, size << 64)


@dataclass(frozen=True)
class SimResult:
    peak_reserved: int
    peak_allocated: int
    reserved_at_end: int
    retries: int  # allocations that needed the cache freed (release_*cached_blocks) first
    ooms: int  # allocations that failed even then
    segments: int  # cudaMalloc calls (or expandable maps)

    @property
    def fragmentation(self) -> int:
        """Reserved minus allocated peaks: the cache the run holds but does not use."""
        return self.peak_reserved - self.peak_allocated


class CachingAllocator:
    """``DeviceCachingAllocator`` for one device and one stream. ``capacity``: the bytes
    cudaMalloc can hand out (the GPU less the CUDA context); ``None`` for unlimited."""

    def __init__(
        self,
        conf: AllocConf | None = None,
        capacity: int | None = None,
        addresses: Iterable[int] | None = None,
    ) -> None:
        self.conf = conf or AllocConf()
        self.capacity = capacity
        self.small = Pool(True)
        self.large = Pool(False)
        self.reserved = 0  # total_allocated_memory / stats.reserved_bytes
        self.allocated = 0  # stats.allocated_bytes (rounded block sizes)
        self.peak_reserved = 0
        self.peak_allocated = 0
        self.retries = 0
        self.ooms = 0
        self.segments = 0
        self._next_addr = 1 << 40  # expandable segments' address space, upward
        self._top = 1 << 56  # cudaMalloc'ed segments, downward (:meth:`_new_address`)
        # where a recorded run's cudaMalloc calls placed its segments, in order
        self._placed: Iterator[int] | None = None if addresses is None else iter(addresses)
        self._expandable: dict[bool, int] = {}  # pool (small?) -> its segment's base address
        fraction = self.conf.memory_fraction
        self.allowed = (
            int(fraction * capacity) if fraction is not None and capacity is not None else None
        )
        # malloc and get_free_block: "set_fraction && garbage_collection_threshold() > 0.0"
        self._gc = self.allowed is not None and self.conf.garbage_collection_threshold > 0.0
        # no expandable segments, no garbage collection: malloc's found-block path inline
        self._plain = not self.conf.expandable_segments and not self._gc
        # :func:`_run_plain`: blocks a free merged away, reused for the next split's rest
        self._spare: list[Block] = []

    # -- the public calls ----------------------------------------------------------------
    def malloc(self, orig: int) -> Block | None:
        """``malloc``: the block handed out, or None on out-of-memory."""
        # round_size, then get_pool
        size = K_MIN_BLOCK if orig < K_MIN_BLOCK else -(-orig // K_MIN_BLOCK) * K_MIN_BLOCK
        small = size <= K_SMALL_SIZE
        pool = self.small if small else self.large
        if self._plain:
            # get_free_block and alloc_found_block as below, inline (most requests end here)
            keys, blocks = pool.keys, pool.blocks
            i = bisect_left(keys, size << 64)
            if i != len(keys):
                b = blocks[i]
                bsize = b.size
                conf = self.conf
                mss = conf.max_split_size
                # "Do not return an oversized block for a large request"; "Allow oversized
                # block size to be rounded up but within a limit"
                limit = mss if size < mss else size + conf.max_non_split_rounding
                if bsize < limit:
                    del keys[i]
                    del blocks[i]
                    remaining = bsize - size
                    if (
                        remaining >= K_MIN_BLOCK
                        if small
                        else size < mss and remaining > K_SMALL_SIZE
                    ):
                        addr = b.addr + size
                        rest = Block(remaining, addr, small)
                        nxt = b.next
                        rest.prev, rest.next = b, nxt
                        if nxt is not None:
                            nxt.prev = rest
                        b.next = rest
                        b.size = bsize = size
                        rest.gc_base = pool.free_calls
                        rk = remaining << 64 | addr
                        i = bisect_left(keys, rk)
                        keys.insert(i, rk)
                        blocks.insert(i, rest)
                    b.allocated = True
                    self.allocated = allocated = self.allocated + bsize
                    if allocated > self.peak_allocated:
                        self.peak_allocated = allocated
                    return b
                return self._no_free_block(pool, size)
            return self._no_free_block(pool, size)
        block = self._get_free_block(pool, size, self._gc)
        if block is None:
            return self._no_free_block(pool, size)
        return self._alloc_found_block(pool, block, size)

    def _no_free_block(self, pool: Pool, size: int) -> Block | None:
        """``malloc`` when ``get_free_block`` found nothing: a new segment, else free cache
        and retry, else out of memory."""
        alloc_size = allocation_size(size)
        if self._gc:
            self._garbage_collect()
        # alloc_block || (release_available_cached_blocks && alloc_block)
        #   || (release_cached_blocks && alloc_block(isRetry=true))
        block = self._alloc_block(pool, size, alloc_size)
        if block is None:
            self.retries += 1
            if self._release_available(pool, size):
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self._release_cached()
                block = self._alloc_block(pool, size, alloc_size)
        if block is None:
            self.ooms += 1
            return None
        return self._alloc_found_block(pool, block, size)

    def free(self, block: Block) -> None:
        """``free`` -> ``free_block``: merge with free neighbours, back into the pool."""
        block.allocated = False
        self.allocated -= block.size
        pool = self.small if block.small else self.large
        keys, blocks = pool.keys, pool.blocks
        prev = block.prev
        if prev is not None and not prev.allocated:
            if prev.mapped:  # try_merge_blocks with the block before, inline
                i = bisect_left(keys, prev.size << 64 | prev.addr)
                del keys[i]
                del blocks[i]
                block.addr = prev.addr
                block.prev = before = prev.prev
                if before is not None:
                    before.next = block
                block.size += prev.size
            else:
                self._try_merge(block, prev, pool)
        nxt = block.next  # unchanged by a merge with ``prev``
        if nxt is not None and not nxt.allocated:
            if nxt.mapped:  # and with the block after
                i = bisect_left(keys, nxt.size << 64 | nxt.addr)
                del keys[i]
                del blocks[i]
                block.next = after = nxt.next
                if after is not None:
                    after.prev = block
                block.size += nxt.size
            else:
                self._try_merge(block, nxt, pool)
        block.gc_base = pool.free_calls  # insert_into_blocks
        k = block.size << 64 | block.addr
        i = bisect_left(keys, k)
        keys.insert(i, k)
        blocks.insert(i, block)

    def result(self) -> SimResult:
        return SimResult(
            self.peak_reserved,
            self.peak_allocated,
            self.reserved,
            self.retries,
            self.ooms,
            self.segments,
        )

    def reset_peaks(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()``: the peaks restart at what is current."""
        self.peak_reserved, self.peak_allocated = self.reserved, self.allocated

    # -- malloc's helpers ----------------------------------------------------------------
    def _get_free_block(self, pool: Pool, size: int, gc: bool) -> Block | None:
        """``get_free_block``: best fit (the smallest block >= size, then lowest address)."""
        if gc:
            pool.free_calls += 1  # "Track block reuse interval only when GC is enabled"
        keys = pool.keys
        i = bisect_left(keys, size << 64)
        if i == len(keys):
            return None
        b = pool.blocks[i]
        if b.expandable:
            # "for the purposes of best fit we consider its size to be the size it can expand
            # to": skip to a later block whose expandable size is smaller
            j = i + 1
            while b.expandable and j < len(keys):
                nxt = pool.blocks[j]
                if _expandable_size(nxt) >= _expandable_size(b):
                    break
                b, i, j = nxt, j, j + 1
        mss = self.conf.max_split_size
        # "Do not return an oversized block for a large request"
        if size < mss and b.size >= mss:
            return None
        # "Allow oversized block size to be rounded up but within a limit"
        if size >= mss and b.size >= size + self.conf.max_non_split_rounding:
            return None
        del keys[i]  # pool.erase(b): b's key is keys[i]
        del pool.blocks[i]
        return b

    def _alloc_block(self, pool: Pool, size: int, alloc_size: int) -> Block | None:
        """``alloc_block``: a new segment of ``alloc_size`` (``cudaMalloc``), or with
        expandable segments ``try_allocate_expandable_block`` for ``size``."""
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None  # "set_fraction && total_allocated_memory + size > allowed"
        if self.conf.expandable_segments:
            return self._try_allocate_expandable(pool, size)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None  # cudaErrorMemoryAllocation
        b = Block(alloc_size, self._new_address(alloc_size), pool.small)
        self._reserve(alloc_size)
        return b

    def _alloc_found_block(self, pool: Pool, block: Block, size: int) -> Block:
        """``should_split`` then ``alloc_found_block``: the block, its remainder back to the
        pool when the split rule allows."""
        remaining = block.size - size
        if pool.small or self.conf.expandable_segments:
            split = remaining >= K_MIN_BLOCK
        else:
            split = size < self.conf.max_split_size and remaining > K_SMALL_SIZE
        if split:
            # the block keeps its address and previous neighbour; the rest follows it
            rest = Block(remaining, block.addr + size, pool.small, block.expandable)
            nxt = block.next
            rest.prev, rest.next = block, nxt
            if nxt is not None:
                nxt.prev = rest
            block.next = rest
            block.size = size
            pool.insert(rest)
        block.allocated = True
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return block

    def _try_merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        """``try_merge_blocks``: absorb a free neighbour of the same mapping state."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if src.mapped:
            pool.erase(src)
        else:
            del pool.unmapped[src.addr]
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- freeing the cache ---------------------------------------------------------------
    def _release_block(self, pool: Pool, b: Block) -> None:
        """``release_block``: cudaFree a whole free segment."""
        pool.erase(b)
        self.reserved -= b.size

    def _release_available(self, pool: Pool, size: int) -> bool:
        """``release_available_cached_blocks``: only with max_split_size set, free one
        oversize block of at least the request, else oversize blocks from the largest down."""
        mss = self.conf.max_split_size
        if mss == NO_LIMIT:
            return False
        key = max(size, mss)
        i = pool.lower_bound(key)
        if i < len(pool.keys):
            self._release_block(pool, pool.blocks[i])
            return True
        released = 0
        while i > 0 and released < key:
            b = pool.blocks[i - 1]
            if b.size < mss:
                break
            released += b.size
            self._release_block(pool, b)
            i -= 1
        return released >= key

    def _release_cached(self) -> None:
        """``release_cached_blocks`` -> ``release_blocks``: free every free block that is a
        whole segment (not split), both pools; expandable segments unmap their free pages
        (``unmap_block``)."""
        for pool in (self.large, self.small):
            for k in list(pool.keys):
                b = pool.get(k)
                if b is None:
                    continue
                if b.expandable:
                    self._unmap_block(pool, b)
                elif not b.is_split():
                    self._release_block(pool, b)

    def _garbage_collect(self) -> None:
        """``garbage_collect_cached_blocks``: above ``threshold * allowed`` reserved, free
        unsplit large free blocks at least as old (in get_free_block calls) as the average."""
        assert self.allowed is not None
        threshold = int(self.conf.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool = self.large

        def age(b: Block) -> int:
            return pool.free_calls - b.gc_base

        cands = [b for b in pool.blocks if not b.is_split()]
        total_age = sum(age(b) for b in cands)
        count = len(cands)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and count > 0:
            avg = total_age / count
            freed = False
            for k in list(pool.keys):
                b = pool.get(k)
                if b is None or b.is_split() or b.expandable or age(b) < avg:
                    continue
                freed = True
                reclaimed += b.size
                total_age -= age(b)
                count -= 1
                self._release_block(pool, b)

    # -- expandable segments -------------------------------------------------------------
    def _page(self, pool: Pool) -> int:
        # find_expandable_block: "segment_size = pool->is_small ? kSmallBuffer : kLargeBuffer"
        return K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER

    def _segment(self, pool: Pool) -> None:
        """The pool's expandable segment (``find_expandable_block`` makes one whose address
        space is 1 1/8 of the GPU; one per stream and pool), all unmapped at first."""
        if pool.small not in self._expandable:
            space = (self.capacity or 1 << 50) * 9 // 8
            space = -(-space // self._page(pool)) * self._page(pool)
            head = Block(space, self._next_addr, pool.small, True, mapped=False)
            self._next_addr += space + K_LARGE_BUFFER
            pool.unmapped[head.addr] = head
            self._expandable[pool.small] = head.addr

    def _try_allocate_expandable(self, pool: Pool, size: int) -> Block | None:
        """``try_allocate_expandable_block``: from the lowest-address unmapped range (with the
        free block before it) that has room, map pages until the candidate holds ``size``."""
        self._segment(pool)
        cand: Block | None = None
        for addr in sorted(pool.unmapped):
            c = pool.unmapped[addr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            room = 0
            walk: Block | None = c
            while walk is not None and room < size and not walk.allocated:
                room += walk.size
                walk = walk.next
            if room >= size:
                cand = c
                break
        if cand is None:  # a new segment: not reached with one stream (the space is 9/8)
            return None
        if not cand.mapped:
            mapped = self._map_block(pool, cand, min(cand.size, size))
            if mapped is None:
                return None
            cand = mapped
        while cand.size < size:
            nxt = cand.next
            assert nxt is not None and not nxt.mapped
            mapped = self._map_block(pool, nxt, min(size - cand.size, nxt.size))
            if mapped is None:
                return None
            cand = mapped
        pool.erase(cand)
        return cand

    def _map_block(self, pool: Pool, b: Block, size: int) -> Block | None:
        """``map_block``: map whole pages (``ExpandableSegment::map`` rounds the range to the
        segment size), split off the unmapped rest, merge with free neighbours."""
        page = self._page(pool)
        n = min(b.size, -(-size // page) * page)
        if self.capacity is not None and self.reserved + n > self.capacity:
            return None  # cuMemCreate fails: "failed to map the memory"
        del pool.unmapped[b.addr]
        b.mapped = True
        if n < b.size:
            rest = Block(b.size - n, b.addr + n, pool.small, True, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = n
            pool.unmapped[rest.addr] = rest
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert(b)
        self._reserve(n)
        return b

    def _unmap_block(self, pool: Pool, b: Block) -> None:
        """``unmap_block``: give back the whole pages inside a free block
        (``ExpandableSegment::unmap`` keeps partial pages at both ends)."""
        page, base = self._page(pool), self._expandable[pool.small]
        # pages are counted from the segment's start (segmentLeft / segmentRight)
        start = base + -(-(b.addr - base) // page) * page
        end = base + (b.addr + b.size - base) // page * page
        if start >= end:
            return
        pool.erase(b)
        before, after = start - b.addr, b.addr + b.size - end
        if before:
            pre = Block(before, b.addr, pool.small, True)
            pre.prev, pre.next = b.prev, b
            if b.prev is not None:
                b.prev.next = pre
            b.prev = pre
            pool.insert(pre)
        if after:
            post = Block(after, end, pool.small, True)
            post.prev, post.next = b, b.next
            if b.next is not None:
                b.next.prev = post
            b.next = post
            pool.insert(post)
        b.addr, b.size, b.mapped = start, end - start, False
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.unmapped[b.addr] = b
        self.reserved -= end - start

    # -- bookkeeping ---------------------------------------------------------------------
    def _reserve(self, n: int) -> None:
        self.reserved += n
        self.segments += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _new_address(self, size: int) -> int:
        """Where cudaMalloc places a new segment. Only the order of the segments' addresses
        matters: blocks merge within a segment only, and best fit breaks a tie between free
        blocks of one size by address (``BlockComparatorSize``: stream, size, then ptr). The
        CUDA driver hands fresh virtual ranges out downward: in the allocator histories of
        four H200 runs (benchmarks/calibration/traces/, ``segment_alloc`` addresses) each new
        segment lies below the one before, except where the driver refills a range freed
        outside torch's allocator, which is not modelled. The order matters: replaying the
        OLMoE full fine-tuning history with upward addresses gives 2.0 % less reserved; with
        downward ones it is exact, as with the recorded addresses (tests/
        test_allocsim_cuda_traces.py)."""
        if self._placed is not None:
            addr = next(self._placed, None)
            if addr is not None:
                return addr
        # segments are far apart: no two are ever adjacent (merges stay within a segment)
        self._top -= -(-size // K_LARGE_BUFFER) * K_LARGE_BUFFER + K_LARGE_BUFFER
        return self._top


def _expandable_size(b: Block) -> int:
    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)


Event = tuple[int, int]  # (id, size) allocates ``size`` bytes as ``id``; (id, -1) frees ``id``
FREE = -1
RESET = -2  # (0, RESET): torch.cuda.reset_peak_memory_stats()
REPEAT = -3  # (n, REPEAT) ... (0, END): the events between run n times
END = -4


def simulate(
    events: list[Event],
    conf: AllocConf | None = None,
    capacity: int | None = None,
    addresses: Iterable[int] | None = None,
) -> SimResult:
    """Run ``events`` through the allocator: ``(id, size)`` allocates, ``(id, FREE)`` frees,
    ``(0, RESET)`` resets the peaks, ``(n, REPEAT) ... (0, END)`` repeats a block that frees
    what it allocates (a micro-batch of gradient accumulation). A repetition that leaves the
    allocator as it found it would do so again, with the same peaks: the rest are skipped.
    ``addresses``: where cudaMalloc placed each new segment, in order (a recorded run's
    ``segment_alloc`` addresses); by default each lies below the last."""
    return replay(events, conf, capacity, addresses)[0]


def replay(
    events: list[Event],
    conf: AllocConf | None = None,
    capacity: int | None = None,
    addresses: Iterable[int] | None = None,
) -> tuple[SimResult, int | None]:
    """:func:`simulate`, with the repetitions a REPEAT block needed: the result is the same
    for any count of at least that many (the skipped repetitions change nothing); None when a
    block ran all its repetitions without reaching that point (then it depends on the count)."""
    a = CachingAllocator(conf, capacity, addresses)
    live: dict[int, Block] = {}
    needed: int | None = 0
    i, n = 0, len(events)
    while i < n:
        i = _run(a, live, events, i, n, True)
        if i < n:  # events[i] is (count, REPEAT)
            count, done = events[i][0], False
            j = n  # the block's (0, END): the first repetition stops there and returns it
            for rep in range(1, count + 1):
                before = _state(a)
                j = _run(a, live, events, i + 1, j, False)
                if _state(a) == before:
                    done = True
                    if needed is not None:
                        needed = max(needed, rep)
                    break
            if not done:
                needed = None
            if j == n:  # no repetition ran (or there is no END: ValueError, as it always was)
                j = events.index((0, END), i)
            i = j + 1
    return a.result(), needed


def _run(
    a: CachingAllocator, live: dict[int, Block], events: list[Event], start: int, stop: int,
    top: bool,
) -> int:  # fmt: skip
    """Replay ``events[start:stop]``; at the top level stop at a REPEAT and return its index,
    inside a REPEAT block at its ``(0, END)`` (``stop`` when there is none). Without
    expandable segments or garbage collection the found-block paths of
    :meth:`CachingAllocator.malloc` and :meth:`CachingAllocator.free` run inline
    (:func:`_run_plain`: the same steps)."""
    if a._plain:
        return _run_plain(a, live, events, start, stop, top)
    malloc, free, pop = a.malloc, a.free, live.pop
    for k in range(start, stop):
        ident, size = events[k]
        if size >= 0:
            got = malloc(size)
            if got is not None:
                live[ident] = got
        elif size == FREE:
            blk = pop(ident, None)
            if blk is not None:
                free(blk)
        elif size == RESET:
            a.reset_peaks()
        elif size == REPEAT if top else size == END and ident == 0:
            return k
        else:  # a marker out of place: taken as an allocation, as it always was
            got = malloc(size)
            if got is not None:
                live[ident] = got
    return stop


def _run_plain(
    a: CachingAllocator, live: dict[int, Block], events: list[Event], start: int, stop: int,
    top: bool,
) -> int:  # fmt: skip
    """:func:`_run` without expandable segments or garbage collection: ``malloc``'s
    found-block path and ``free`` inline, the allocated bytes and their peak in locals
    (written back before any method that reads them). Every block is mapped, and no block's
    ``gc_base`` changes (``free_calls`` counts only with garbage collection on)."""
    pop = live.pop
    small, large = a.small, a.large
    skeys, sblocks, lkeys, lblocks = small.keys, small.blocks, large.keys, large.blocks
    # A block merged into a neighbour is unreachable (out of its pool, unlinked, never in
    # ``live``); it becomes a later split's rest, all of whose fields are set here or are
    # those of every free block on this path (mapped, not expandable, not allocated, gc_base
    # 0): recycling saves the Block() call, a third of a split's time.
    spare = a._spare
    recycle = spare.append
    mss = a.conf.max_split_size
    mnsr = a.conf.max_non_split_rounding
    allocated, peak = a.allocated, a.peak_allocated
    try:
        todo = iter(events[start:stop])  # a list iterator: the fastest loop, and it counts
        for ident, size in todo:
            if size >= 0:
                if size & 511 or not size:  # round_size (kMinBlockSize is 512 = 511 + 1)
                    size = (size | 511) + 1
                if size <= K_SMALL_SIZE:
                    keys, blocks, is_small = skeys, sblocks, True
                else:
                    keys, blocks, is_small = lkeys, lblocks, False
                i = bisect_left(keys, size << 64)
                try:
                    b = blocks[i]
                except IndexError:  # no free block as large (rare): a new segment, below
                    pass
                else:
                    bsize = b.size
                    # "Do not return an oversized block for a large request"; "Allow oversized
                    # block size to be rounded up but within a limit"
                    if bsize < (mss if size < mss else size + mnsr):
                        remaining = bsize - size
                        if (
                            remaining >= K_MIN_BLOCK
                            if is_small
                            else size < mss and remaining > K_SMALL_SIZE
                        ):  # should_split, then alloc_found_block
                            addr = b.addr + size
                            nxt = b.next
                            if spare:
                                rest = spare.pop()
                                rest.size, rest.addr, rest.small = remaining, addr, is_small
                            else:
                                rest = Block(remaining, addr, is_small)
                            rest.prev, rest.next = b, nxt
                            if nxt is not None:
                                nxt.prev = rest
                            b.next = rest
                            b.size = bsize = size
                            key = remaining << 64 | addr
                            # the rest is below the block in the pool's order: most often just
                            # below, where it takes the block's place (no list shifted)
                            if i == 0 or keys[i - 1] < key:
                                keys[i] = key
                                blocks[i] = rest
                            else:
                                del keys[i]
                                del blocks[i]
                                i = bisect_left(keys, key, 0, i)
                                keys.insert(i, key)
                                blocks.insert(i, rest)
                        else:
                            del keys[i]
                            del blocks[i]
                        b.allocated = True
                        allocated += bsize
                        if allocated > peak:
                            peak = allocated
                        live[ident] = b
                        continue
                a.allocated, a.peak_allocated = allocated, peak
                got = a._no_free_block(small if is_small else large, size)
                allocated, peak = a.allocated, a.peak_allocated
                if got is not None:
                    live[ident] = got
            elif size == FREE:
                blk = pop(ident, None)
                if blk is None:
                    continue
                # free -> free_block: merge with free neighbours, back into the pool
                blk.allocated = False
                bsize = blk.size
                allocated -= bsize
                if blk.small:
                    keys, blocks = skeys, sblocks
                else:
                    keys, blocks = lkeys, lblocks
                prev = blk.prev
                if prev is not None and not prev.allocated:
                    i = bisect_left(keys, prev.size << 64 | prev.addr)
                    del keys[i]
                    del blocks[i]
                    blk.addr = prev.addr
                    blk.prev = before = prev.prev
                    if before is not None:
                        before.next = blk
                    bsize += prev.size
                    recycle(prev)
                nxt = blk.next
                if nxt is not None and not nxt.allocated:
                    i = bisect_left(keys, nxt.size << 64 | nxt.addr)
                    blk.next = after = nxt.next
                    if after is not None:
                        after.prev = blk
                    bsize += nxt.size
                    recycle(nxt)
                    blk.size = bsize
                    key = bsize << 64 | blk.addr
                    # above the block after it in the pool's order (keys[:i] are below that):
                    # often just above, where it takes that block's place
                    if i + 1 == len(keys) or keys[i + 1] > key:
                        keys[i] = key
                        blocks[i] = blk
                        continue
                    del keys[i]
                    del blocks[i]
                    i = bisect_left(keys, key, i)
                else:
                    blk.size = bsize
                    key = bsize << 64 | blk.addr
                    i = bisect_left(keys, key)
                keys.insert(i, key)
                blocks.insert(i, blk)
            elif size == RESET:  # reset_peaks
                peak = allocated
                a.peak_reserved = a.reserved
            elif size == REPEAT if top else size == END and ident == 0:
                return stop - 1 - length_hint(todo)  # this marker's index
            else:  # a marker out of place: taken as an allocation, as it always was
                a.allocated, a.peak_allocated = allocated, peak
                got = a.malloc(size)
                allocated, peak = a.allocated, a.peak_allocated
                if got is not None:
                    live[ident] = got
        return stop
    finally:
        a.allocated, a.peak_allocated = allocated, peak


def _state(a: CachingAllocator) -> tuple[object, ...]:
    """What decides the allocator's future: its free blocks, mappings and counters."""
    return (
        tuple(a.small.keys),
        tuple(a.large.keys),
        tuple(a.small.unmapped),
        tuple(a.large.unmapped),
        a.reserved,
        a.allocated,
        a.retries,
        a.ooms,
    )
