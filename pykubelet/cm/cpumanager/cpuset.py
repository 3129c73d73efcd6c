"""CPU sets in the Linux list syntax (``0-2,5``), as upstream's ``k8s.io/utils/cpuset``.

A set is a ``frozenset[int]``; ``parse`` and ``format`` convert. The canonical form
(ascending, runs of consecutive ids as ranges) is what the checkpoint and the
runtime receive, so it must be upstream's exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

CPUSet = frozenset[int]


class CPUSetError(ValueError):
    """Text that is not a cpuset."""


def parse(text: str) -> CPUSet:
    """``"0-2,5"`` → {0, 1, 2, 5}; the empty string is the empty set."""
    cpus: set[int] = set()
    if text == "":
        return frozenset()
    for part in text.split(","):
        bounds = part.split("-")
        if len(bounds) > 2 or not all(bound.isdigit() for bound in bounds):
            raise CPUSetError(f"invalid cpuset element {part!r}")
        start, end = int(bounds[0]), int(bounds[-1])
        if start > end:
            raise CPUSetError(f"invalid range {part!r} ({start} > {end})")
        cpus.update(range(start, end + 1))
    return frozenset(cpus)


def format(cpus: Iterable[int]) -> str:
    """The canonical text: ascending, consecutive runs as ``a-b``."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[index], ordered[end]
        parts.append(str(first) if first == last else f"{first}-{last}")
        index = end + 1
    return ",".join(parts)
