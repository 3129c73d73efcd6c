"""Kubernetes resource quantities (``500m``, ``64Mi``, ``1.5``, ``1e3``) as exact numbers.

Container resources reach the runtime as integers: CPU in millicores (then
shares and CFS quota), memory in bytes. Floats would turn ``0.1`` CPU into
99 millicores, so quantities are parsed into ``Fraction`` and rounded up the
way upstream's ``Quantity.MilliValue()`` / ``Value()`` do. Going the other
way, ``format_quantity`` writes a value in the canonical form the API server
stores (``2``, ``1500m``, ``16331264Ki``), so that a node status the kubelet
computes compares equal to the one it reads back.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))$")


class QuantityError(ValueError):
    pass


def parse_quantity(text: Any) -> Fraction:
    """The exact value of a quantity string; ints and floats are accepted as plain numbers."""
    if isinstance(text, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    if not isinstance(text, str):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    match = _QUANTITY.match(text)  # upstream rejects surrounding spaces too
    if match is None:
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    value = Fraction(match["number"])
    if match["exponent"]:
        value *= Fraction(10) ** int(match["exponent"][1:])
    else:
        suffix = match["suffix"] or ""
        value *= _BINARY_SUFFIXES.get(suffix) or _DECIMAL_SUFFIXES[suffix]
    return -value if match["sign"] == "-" else value


def cpu_to_millis(quantity: Any) -> int:
    """Millicores, rounded up (``0.0001`` is 1m, as upstream ``MilliValue``)."""
    return math.ceil(parse_quantity(quantity) * 1000)


def memory_to_bytes(quantity: Any) -> int:
    """Bytes, rounded up (as upstream ``Value``)."""
    return math.ceil(parse_quantity(quantity))


DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"

# Decimal exponents a canonical quantity may use, largest first (E ... n).
_DECIMAL_STEPS = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""),
                  (-3, "m"), (-6, "u"), (-9, "n"))
_BINARY_STEPS = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))


def format_quantity(value: Fraction | int, fmt: str = DECIMAL_SI) -> str:
    """The canonical string of ``value`` as upstream ``Quantity.String()`` writes it.

    ``BinarySI`` values that are whole numbers of at least 1024 use the largest
    power-of-1024 suffix that divides them exactly (``16331264Ki``, a plain
    ``94239512857`` otherwise); everything else is written in ``DecimalSI``
    with the largest power-of-1000 suffix that keeps the number whole
    (``2``, ``1500m``, ``2k``), rounding up to nano units.
    """
    exact = Fraction(value)
    sign = "-" if exact < 0 else ""
    magnitude = abs(exact)
    if fmt == BINARY_SI and magnitude >= 1024 and magnitude.denominator == 1:
        whole = magnitude.numerator
        for shift, suffix in _BINARY_STEPS:
            if whole % (1 << shift) == 0:
                return f"{sign}{whole >> shift}{suffix}"
        return f"{sign}{whole}"
    nanos = math.ceil(magnitude * 10**9)
    if nanos == 0:
        return "0"
    for exponent, suffix in _DECIMAL_STEPS:
        unit = 10 ** (exponent + 9)
        if nanos % unit == 0:
            return f"{sign}{nanos // unit}{suffix}"
    return f"{sign}{nanos}n"  # unreachable: every nano count is a whole number of nanos


__all__ = [
    "BINARY_SI",
    "DECIMAL_SI",
    "QuantityError",
    "cpu_to_millis",
    "format_quantity",
    "memory_to_bytes",
    "parse_quantity",
]
