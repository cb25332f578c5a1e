"""The caching-allocator simulation against the rules of PyTorch's
c10/cuda/CUDACachingAllocator.cpp (commit 001074d25084): each case is the consequence of one
rule, worked out by hand from the C++ (the function is named in each test)."""

from __future__ import annotations

import pytest

from cfgcheck.memory.allocsim import (
    FREE,
    MIB,
    RESET,
    AllocConf,
    AllocConfError,
    CachingAllocator,
    allocation_size,
    parse_alloc_conf,
    round_size,
    simulate,
)


def test_round_size_512() -> None:  # round_size
    assert [round_size(n) for n in (1, 511, 512, 513, 1536)] == [512, 512, 512, 1024, 1536]


def test_allocation_size_pools() -> None:  # get_allocation_size
    assert allocation_size(512) == 2 * MIB
    assert allocation_size(MIB) == 2 * MIB  # <= kSmallSize: the small pool's 2 MiB
    assert allocation_size(MIB + 512) == 20 * MIB  # 1 to 10 MiB: a 20 MiB segment
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB  # from 10 MiB: rounded to 2 MiB
    assert allocation_size(11 * MIB + 1) == 12 * MIB


def test_small_requests_pack_into_2mib_segments() -> None:  # should_split, small pool
    r = simulate([(i, 512 * 1024) for i in range(5)])
    assert r.peak_reserved == 4 * MIB  # four 512 KiB blocks fill one segment; the fifth opens one
    assert r.peak_allocated == 5 * 512 * 1024
    assert r.segments == 2


def test_mid_requests_share_a_20mib_segment() -> None:  # get_allocation_size, should_split
    r = simulate([(i, 6 * MIB) for i in range(3)])
    assert r.peak_reserved == 20 * MIB  # 20 -> 14 -> 8 -> 2 MiB left, each remainder > 1 MiB
    r = simulate([(i, 6 * MIB) for i in range(4)])
    assert r.peak_reserved == 40 * MIB  # the 2 MiB remainder cannot hold a fourth


def test_large_remainder_of_1mib_is_not_split() -> None:  # should_split: remaining > kSmallSize
    a = CachingAllocator()
    b = a.malloc(12 * MIB)
    assert b is not None
    a.free(b)
    c = a.malloc(11 * MIB)  # 12 MiB block, 1 MiB left: kept whole
    assert c is not None and c.size == 12 * MIB and a.allocated == 12 * MIB
    a.free(c)
    d = a.malloc(10 * MIB)  # 2 MiB left (> 1 MiB): split
    assert d is not None and d.size == 10 * MIB


def test_best_fit_takes_the_smallest_block() -> None:  # get_free_block: lower_bound on size
    a = CachingAllocator()
    x, y = a.malloc(16 * MIB), a.malloc(12 * MIB)
    assert x is not None and y is not None
    a.free(x)
    a.free(y)
    z = a.malloc(11 * MIB)
    assert z is not None and z.addr == y.addr
    assert a.reserved == 28 * MIB


def test_blocks_never_merge_across_segments() -> None:  # try_merge_blocks: prev/next of a split
    r = simulate([(1, 12 * MIB), (2, 12 * MIB), (1, FREE), (2, FREE), (3, 20 * MIB)])
    assert r.peak_reserved == 44 * MIB


def test_free_neighbours_merge_inside_a_segment() -> None:  # free_block -> try_merge_blocks
    ev = [(i, 6 * MIB) for i in range(3)] + [(i, FREE) for i in (0, 2, 1)] + [(9, 18 * MIB)]
    r = simulate(ev)
    assert r.peak_reserved == 20 * MIB  # the three blocks and the tail merge back to 20 MiB


def test_max_split_size_refuses_oversize_blocks() -> None:  # get_free_block, should_split
    conf = AllocConf(max_split_size=20 * MIB)
    ev = [(1, 30 * MIB), (1, FREE), (2, 15 * MIB)]
    assert simulate(ev).peak_reserved == 30 * MIB  # default: 15 MiB split from the 30
    assert simulate(ev, conf).peak_reserved == 46 * MIB  # oversize block not for a small one
    # an oversize request may take a block up to max_non_split_rounding (20 MiB) bigger
    ev = [(1, 50 * MIB), (1, FREE), (2, 30 * MIB)]
    assert simulate(ev, conf).peak_reserved == 80 * MIB  # 50 >= 30 + 20: refused
    ev = [(1, 50 * MIB), (1, FREE), (2, 40 * MIB)]
    r = simulate(ev, conf)
    assert r.peak_reserved == 50 * MIB and r.peak_allocated == 50 * MIB  # whole block, unsplit


def test_release_and_retry_when_cudamalloc_fails() -> None:  # malloc: release_cached_blocks
    ev = [(1, 24 * MIB), (1, FREE), (2, 26 * MIB)]
    assert simulate(ev).peak_reserved == 50 * MIB
    r = simulate(ev, capacity=40 * MIB)
    assert r.peak_reserved == 26 * MIB and r.retries == 1 and r.ooms == 0


def test_split_segments_are_not_released() -> None:  # release_blocks: only !prev && !next
    # a 20 MiB segment with a live 6 MiB block: its free 14 MiB cannot go back to the driver
    ev = [(1, 6 * MIB), (2, 30 * MIB), (2, FREE), (3, 32 * MIB)]
    r = simulate(ev, capacity=60 * MIB)
    assert r.retries == 1 and r.ooms == 0 and r.peak_reserved == 52 * MIB
    r = simulate(ev, capacity=50 * MIB)
    assert r.ooms == 1  # 20 MiB stay reserved, 32 more do not fit


def test_release_available_frees_an_oversize_block_first() -> None:
    # release_available_cached_blocks: with max_split_size set, one oversize block >= request
    conf = AllocConf(max_split_size=20 * MIB)
    ev = [(1, 40 * MIB), (2, 6 * MIB), (1, FREE), (3, 42 * MIB)]
    r = simulate(ev, conf, capacity=70 * MIB)
    assert r.retries == 1 and r.ooms == 0 and r.peak_reserved == 62 * MIB


def test_expandable_segments_reuse_what_cudamalloc_cannot() -> None:
    # try_allocate_expandable_block / map_block: pages of 20 MiB (kLargeBuffer) in one segment
    ev = [(1, 12 * MIB), (1, FREE), (2, 14 * MIB)]
    assert simulate(ev).peak_reserved == 26 * MIB
    r = simulate(ev, AllocConf(expandable_segments=True))
    assert r.peak_reserved == 20 * MIB  # one page mapped: 12 then 14 MiB inside it
    # a request that outgrows the free tail maps just the pages it lacks
    ev = [(1, 30 * MIB), (2, 30 * MIB)]
    r = simulate(ev, AllocConf(expandable_segments=True))
    assert r.peak_reserved == 60 * MIB and r.peak_allocated == 60 * MIB


def test_expandable_segments_unmap_free_pages_on_retry() -> None:  # release_blocks -> unmap_block
    conf = AllocConf(expandable_segments=True)
    ev = [(1, 40 * MIB), (2, 20 * MIB), (3, 1000), (1, FREE), (4, 100 * MIB)]
    # 62 MiB mapped (40 + 20 large, 2 small); 100 more at the segment's end do not fit in 130
    # until the free 40 MiB at its start are unmapped
    r = simulate(ev, conf, capacity=130 * MIB)
    assert r.retries == 1 and r.ooms == 0 and r.peak_reserved == 122 * MIB
    # without the cap, the free 40 MiB could not take 100 MiB and stay mapped
    assert simulate(ev, conf).peak_reserved == 162 * MIB


def test_gc_threshold_needs_a_memory_fraction() -> None:  # malloc: set_fraction && gc > 0
    ev = [(1, 40 * MIB), (1, FREE), (2, 42 * MIB), (2, FREE), (3, 44 * MIB)]
    cap = 100 * MIB
    assert simulate(ev, capacity=cap).peak_reserved == 82 * MIB  # retry frees both at 126
    gc = AllocConf(garbage_collection_threshold=0.5)
    assert simulate(ev, gc).peak_reserved == 126 * MIB  # no fraction: no collection
    r = simulate(ev, AllocConf(garbage_collection_threshold=0.5, memory_fraction=1.0), cap)
    # garbage_collect_cached_blocks: 82 > 50 MiB, the older block (40 MiB, age 2 > 1.5) goes
    assert r.peak_reserved == 86 * MIB and r.retries == 0


def test_reset_peaks() -> None:
    r = simulate([(1, 30 * MIB), (1, FREE), (0, RESET), (2, 10 * MIB)])
    assert r.peak_reserved == 30 * MIB and r.peak_allocated == 10 * MIB


def test_parse_alloc_conf() -> None:  # AllocatorConfig::parseArgs
    c = parse_alloc_conf("expandable_segments:True, max_split_size_mb:128")
    assert c.expandable_segments and c.max_split_size == 128 * MIB
    assert parse_alloc_conf("garbage_collection_threshold:0.6").garbage_collection_threshold == 0.6
    for bad in ("max_split_size_mb:10", "expandable_segments:true", "nope:1", "x"):
        with pytest.raises(AllocConfError):
            parse_alloc_conf(bad)


def test_repeated_block_is_the_block_written_out() -> None:
    from cfgcheck.memory.allocsim import END, REPEAT

    block = [(5, 12 * MIB), (6, 3 * MIB), (5, FREE), (7, 14 * MIB), (6, FREE), (7, FREE)]
    head = [(1, 30 * MIB), (2, 100)]
    r = simulate([*head, (4, REPEAT), *block, (0, END), (3, 40 * MIB)])
    assert r == simulate([*head, *block * 4, (3, 40 * MIB)])
