"""The reason cache remembers why containers could not start, within bounds."""

from __future__ import annotations

from pykubelet.container import START_CONTAINER, PodSyncResult, SyncResult
from pykubelet.status.reason_cache import ReasonCache, ReasonInfo


def sync_result(*outcomes: tuple[str, str, str | None]) -> PodSyncResult:
    """Outcomes are (action, container, failure reason or None for success)."""
    result = PodSyncResult()
    for action, target, reason in outcomes:
        entry = result.add(SyncResult(action, target))
        if reason is not None:
            entry.fail(RuntimeError(f"{reason} happened"), reason)
    return result


def test_start_failures_are_remembered_and_successes_forget_them() -> None:
    cache = ReasonCache()
    cache.update("pod-a", sync_result((START_CONTAINER, "app", "ImagePullBackOff"),
                                      (START_CONTAINER, "db", None)))
    assert cache.get("pod-a", "app") == ReasonInfo("ImagePullBackOff", "ImagePullBackOff happened")
    assert cache.get("pod-a", "db") is None
    assert cache.get("pod-b", "app") is None

    cache.update("pod-a", sync_result((START_CONTAINER, "app", None)))
    assert cache.get("pod-a", "app") is None


def test_other_actions_do_not_touch_the_cache() -> None:
    cache = ReasonCache()
    cache.update("pod-a", sync_result((START_CONTAINER, "app", "RunContainerError")))
    cache.update("pod-a", sync_result(("KillContainer", "app", "KillError"),
                                      ("KillContainer", "app", None)))
    assert cache.get("pod-a", "app") == ReasonInfo("RunContainerError",
                                                   "RunContainerError happened")


def test_least_recently_used_entry_is_evicted_first() -> None:
    cache = ReasonCache(capacity=2)
    cache.add("pod", "a", "ErrImagePull")
    cache.add("pod", "b", "ErrImagePull")
    assert cache.get("pod", "a") is not None
    cache.add("pod", "c", "ErrImagePull")

    assert len(cache) == 2
    assert cache.get("pod", "b") is None
    assert cache.get("pod", "a") is not None and cache.get("pod", "c") is not None


def test_forget_pod_drops_only_that_pod() -> None:
    cache = ReasonCache()
    cache.add("pod-a", "app", "CrashLoopBackOff")
    cache.add("pod-b", "app", "CrashLoopBackOff")
    cache.forget_pod("pod-a")
    assert cache.get("pod-a", "app") is None
    assert cache.get("pod-b", "app") is not None
