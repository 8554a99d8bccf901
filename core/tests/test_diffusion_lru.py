"""The encoder caches' LRU map (``omni_core.diffusion.LRUCache``): least recently used out
first, hits and misses counted, capacity 0 keeps nothing, safe across threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from omni_core.diffusion import LRUCache


def test_least_recently_used_goes_first_and_hits_are_counted() -> None:
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert (cache.hits, cache.misses, len(cache)) == (3, 1, 2)
    assert cache.hit_rate == 0.75


def test_capacity_zero_keeps_nothing() -> None:
    cache = LRUCache(0)
    cache.put("a", 1)
    assert cache.get("a") is None and len(cache) == 0 and cache.hit_rate == 0.0


def test_threads_share_it() -> None:
    cache = LRUCache(8)

    def work(i: int) -> None:
        cache.put(i % 8, i)
        cache.get(i % 8)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(400)))
    assert len(cache) == 8 and cache.hits + cache.misses == 400
