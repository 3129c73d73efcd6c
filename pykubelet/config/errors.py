"""The error type for a configuration that cannot be used.

Start-up collects every problem (decoding, flag parsing, validation) before giving up,
so the error carries a list and prints one problem per line.
"""

from __future__ import annotations

from collections.abc import Iterable


class ConfigurationError(Exception):
    """The kubelet configuration is unusable; ``errors`` lists every reason."""

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors: list[str] = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)
