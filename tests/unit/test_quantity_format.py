"""Quantities written back in the canonical form the API server stores."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pykubelet.api.quantity import BINARY_SI, DECIMAL_SI, format_quantity, parse_quantity


@pytest.mark.parametrize(("value", "fmt", "text"), [
    (2, DECIMAL_SI, "2"),
    (Fraction(19, 10), DECIMAL_SI, "1900m"),
    (110, DECIMAL_SI, "110"),
    (2000, DECIMAL_SI, "2k"),
    (1500, DECIMAL_SI, "1500"),
    (0, BINARY_SI, "0"),
    (100, BINARY_SI, "100"),
    (24585644 * 1024, BINARY_SI, "24585644Ki"),
    (2 * 1024**2, BINARY_SI, "2Mi"),
    (1024**3, BINARY_SI, "1Gi"),
    (94239512857, BINARY_SI, "94239512857"),
    (Fraction(1, 2), BINARY_SI, "500m"),
    (-5, DECIMAL_SI, "-5"),
])
def test_canonical_form(value: Fraction | int, fmt: str, text: str) -> None:
    assert format_quantity(value, fmt) == text


@pytest.mark.parametrize("text", ["1500m", "24585644Ki", "3", "100Mi", "7k"])
def test_round_trip_keeps_the_value(text: str) -> None:
    value = parse_quantity(text)
    fmt = BINARY_SI if text.endswith("i") else DECIMAL_SI
    assert parse_quantity(format_quantity(value, fmt)) == value
