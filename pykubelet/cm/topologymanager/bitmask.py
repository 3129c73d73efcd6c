"""Sets of NUMA nodes as bit masks (upstream ``topologymanager/bitmask``).

A hint's affinity is the set of NUMA nodes an allocation would use. What matters
about it is upstream's order: fewer nodes is narrower, and among masks with as
many nodes the one with the lower-numbered nodes (the smaller integer) wins, so
every policy picks the same node upstream's would. Node ids are 0-63, as upstream's
64-bit mask allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import combinations

MAX_BITS = 64


class BitMaskError(ValueError):
    """A node id outside 0-63."""


@dataclass(frozen=True)
class BitMask:
    value: int = 0

    @classmethod
    def of(cls, *bits: int) -> BitMask:
        value = 0
        for bit in bits:
            if not 0 <= bit < MAX_BITS:
                raise BitMaskError("bit number must be in range 0-63")
            value |= 1 << bit
        return cls(value)

    def bits(self) -> list[int]:
        return [bit for bit in range(MAX_BITS) if self.value >> bit & 1]

    def count(self) -> int:
        return self.value.bit_count()

    def is_empty(self) -> bool:
        return self.value == 0

    def is_set(self, bit: int) -> bool:
        return 0 <= bit < MAX_BITS and bool(self.value >> bit & 1)

    def is_narrower_than(self, other: BitMask) -> bool:
        """Fewer nodes; with as many, more of the lower-numbered ones."""
        if self.count() == other.count():
            return self.value < other.value
        return self.count() < other.count()

    def __and__(self, other: BitMask) -> BitMask:
        return BitMask(self.value & other.value)

    def __or__(self, other: BitMask) -> BitMask:
        return BitMask(self.value | other.value)

    def __str__(self) -> str:
        # Binary, highest node first, as upstream logs masks ("01" is node 0).
        return format(self.value, "02b")


def and_all(first: BitMask, masks: Iterable[BitMask]) -> BitMask:
    result = first
    for mask in masks:
        result = result & mask
    return result


def iterate_bit_masks(bits: Iterable[int]) -> Iterator[BitMask]:
    """Every non-empty subset of ``bits``: all single nodes first, then pairs, and so on."""
    ordered = list(bits)
    for size in range(1, len(ordered) + 1):
        for chosen in combinations(ordered, size):
            yield BitMask.of(*chosen)
