"""``go_quote`` against what Go's ``strconv.Quote`` (``%q``) prints for the same text."""

from __future__ import annotations

import pytest

from pykubelet.util.gotext import go_quote

# (text, what Go's %q prints), the expected side written as Go prints it.
CASES = [
    ("", '""'),
    ("plain text", '"plain text"'),
    ('say "hi"', r'"say \"hi\""'),
    ("C:\\dir", r'"C:\\dir"'),
    ("line\nnext\ttab\rreturn", r'"line\nnext\ttab\rreturn"'),
    ("\a\b\f\v", r'"\a\b\f\v"'),
    ("\x01", r'"\x01"'),
    ("\x1b[31m", r'"\x1b[31m"'),
    ("\x7f", r'"\x7f"'),
    # C1 controls, non-ASCII spaces, format and line separators are not printable in Go.
    ("\x85", r'"\u0085"'),
    ("no\u00a0break", r'"no\u00a0break"'),
    ("\u200b\u2028\ufeff", r'"\u200b\u2028\ufeff"'),
    ("\U000e0001", r'"\U000e0001"'),
    # Printable non-ASCII is kept as it is, including the replacement character.
    ("héllo 世界 😀", '"héllo 世界 😀"'),
    ("\ufffd", '"\ufffd"'),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_go_quote_prints_what_go_strconv_quote_prints(text: str, expected: str) -> None:
    assert go_quote(text) == expected


def test_bytes_that_were_not_utf8_are_spelled_byte_by_byte_as_go_does() -> None:
    # Go quotes each byte of invalid UTF-8 as \xNN; Python carries such bytes as
    # surrogate escapes (os.fsdecode, surrogateescape) or as lone surrogates.
    assert go_quote(b"ok\xff\xfe".decode("utf-8", "surrogateescape")) == r'"ok\xff\xfe"'
    assert go_quote("\ud800") == r'"\xed\xa0\x80"'
