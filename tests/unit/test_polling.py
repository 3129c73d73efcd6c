"""The integration tests' one polling helper: what it returns and what its timeout says."""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport.polling import WaitTimeout, wait_until, wait_until_async


def test_the_first_truthy_value_is_returned() -> None:
    answers = iter([None, 0, {"phase": "Running"}])
    assert wait_until(lambda: next(answers), 5, "the pod", interval=0) == {"phase": "Running"}


def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: [], 0, "pod web Running",
                   on_timeout=lambda: "log tail")
    assert isinstance(caught.value, AssertionError)
    message = str(caught.value)
    assert "pod web Running" in message and "last: []" in message and "log tail" in message


def test_ignored_errors_are_retried_and_reported_others_end_the_wait() -> None:
    calls = iter([FileNotFoundError("not yet"), "written"])

    def read() -> str:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until(read, 5, "the file", interval=0, ignore=(OSError,)) == "written"
    with pytest.raises(WaitTimeout, match="last error: FileNotFoundError"):
        wait_until(Path("/nonexistent/file").read_text, 0, "the file", ignore=(OSError,))
    with pytest.raises(KeyError):
        wait_until(lambda: {}["missing"], 5, "a key", ignore=(OSError,))


async def test_the_async_form_awaits_a_coroutine_condition() -> None:
    answers = iter([False, True])

    async def ready() -> bool:
        return next(answers)

    assert await wait_until_async(ready, 5, "ready", interval=0) is True
    with pytest.raises(WaitTimeout, match="never"):
        await wait_until_async(lambda: False, 0, "never")
