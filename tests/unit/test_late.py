"""The composition root's late-bound holder fails loudly instead of answering a default."""

from __future__ import annotations

import pytest

from pykubelet.util.late import LateBound


def test_a_late_value_read_before_it_is_built_names_what_is_missing() -> None:
    workers: LateBound[list[str]] = LateBound("the pod workers")
    with pytest.raises(RuntimeError, match="the pod workers read before it was built"):
        workers.get()


def test_a_late_value_is_read_after_it_is_set_and_set_only_once() -> None:
    workers: LateBound[list[str]] = LateBound("the pod workers")
    built = ["worker"]
    workers.set(built)
    assert workers.get() is built
    with pytest.raises(RuntimeError, match="set twice"):
        workers.set([])
