"""Go's spellings against what Go prints: ``strconv.Quote`` (``%q``) for text,
``strconv.FormatFloat`` and ``encoding/json`` for floats."""

from __future__ import annotations

import pytest

from pykubelet.util.gotext import go_format_float, go_json_float, go_quote

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


# (value, FormatFloat 'g', 'f', 'e' with precision -1, encoding/json), as Go prints them.
FLOATS = [
    (1.0, "1", "1", "1e+00", "1"),
    (-2.5, "-2.5", "-2.5", "-2.5e+00", "-2.5"),
    (-0.0, "-0", "-0", "-0e+00", "-0"),
    (123456.0, "123456", "123456", "1.23456e+05", "123456"),
    (1e6, "1e+06", "1000000", "1e+06", "1000000"),
    (2e9, "2e+09", "2000000000", "2e+09", "2000000000"),
    (1e16, "1e+16", "10000000000000000", "1e+16", "10000000000000000"),
    (1.5e21, "1.5e+21", "1500000000000000000000", "1.5e+21", "1.5e+21"),
    (0.0001, "0.0001", "0.0001", "1e-04", "0.0001"),
    (0.00001, "1e-05", "0.00001", "1e-05", "0.00001"),
    (1.5e-7, "1.5e-07", "0.00000015", "1.5e-07", "1.5e-7"),
    (0.30000000000000004, "0.30000000000000004", "0.30000000000000004",
     "3.0000000000000004e-01", "0.30000000000000004"),
    (1e100, "1e+100", "1" + "0" * 100, "1e+100", "1e+100"),
]


@pytest.mark.parametrize(("value", "g", "f", "e", "json"), FLOATS)
def test_floats_are_spelled_as_go_spells_them(value: float, g: str, f: str, e: str,
                                              json: str) -> None:
    assert [go_format_float(value, "g"), go_format_float(value, "f"),
            go_format_float(value, "e"), go_json_float(value)] == [g, f, e, json]
