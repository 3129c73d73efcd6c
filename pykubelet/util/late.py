"""A value that some modules need before it can be built: set once, read afterwards.

The composition root (``kubelet.new_main_kubelet``) builds every module complete,
but a few needs run in a circle, as upstream's do (its kubelet hands itself to the
runtime manager it is building): the pod workers wrap the pod syncer, which with the
status and volume managers asks the pod workers about pods; the lifecycle hook runner
asks the runtime manager, which runs the hooks, for a pod's IP. Such a need holds a
``LateBound`` and reads it only when called, long after construction. Reading it
before it is set is a construction bug, so it raises at once, naming what was missing,
instead of answering with a default that looks plausible.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class LateBound(Generic[T]):
    """Holds one value that is set once, after the objects that read it were built."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._value: T | None = None
        self._set = False

    def set(self, value: T) -> None:
        if self._set:
            raise RuntimeError(f"{self._what} was set twice")
        self._value = value
        self._set = True

    def get(self) -> T:
        if not self._set:
            raise RuntimeError(f"{self._what} read before it was built")
        return self._value  # type: ignore[return-value]


__all__ = ["LateBound"]
