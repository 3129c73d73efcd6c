"""Kubernetes resource quantities (``500m``, ``64Mi``, ``1.5``, ``1e3``) as exact numbers.

Container resources reach the runtime as integers: CPU in millicores (then
shares and CFS quota), memory in bytes. Floats would turn ``0.1`` CPU into
99 millicores, so quantities are parsed into ``Fraction`` and rounded up the
way upstream's ``Quantity.MilliValue()`` / ``Value()`` do. Going the other
way, ``format_quantity`` writes a value in the canonical form the API server
stores (``2``, ``1500m``, ``16331264Ki``), so that a node status the kubelet
computes compares equal to the one it reads back.

A quantity's text comes from manifests anyone may write, so its value is
bounded the way upstream's ``resource.ParseQuantity`` bounds it, without ever
computing a power the text asks for: an exponent must fit 32 bits (upstream's
suffix type), a non-zero magnitude below one nano unit rounds up to ``1n``
(upstream keeps nano precision, rounding away from zero), and a magnitude
above 2^63-1 is capped there. Upstream caps binary-suffixed values only; no
consumer of a quantity can use more than an int64, so pykubelet caps every
format, which keeps ``1e9999999`` from costing anything.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Final, NamedTuple

# Suffixes and the power of two or ten each stands for.
BINARY_POWERS: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL_EXPONENTS: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                             "P": 15, "E": 18}
_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))")
_FORMAT_MESSAGE: Final = ("quantities must match the regular expression "
                          "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")

NANO: Final = 10**9
MAX_MAGNITUDE: Final = 2**63 - 1  # upstream's cap (math.MaxInt64)
_MAX_NANOS: Final = MAX_MAGNITUDE * NANO
_INT32_DIGITS: Final = 10
# Digits kept for exact arithmetic: a capped value has 19 integer digits, and nano precision
# 9 more; digits beyond only decide whether to round up.
_KEPT_DIGITS: Final = 40


class QuantityError(ValueError):
    pass


def _nanos(digits: str, exponent10: int, power2: int) -> int:
    """``ceil(int(digits) * 10**exponent10 * 2**power2 * 1e9)``, capped at the maximum."""
    digits = digits.lstrip("0")
    trimmed = digits.rstrip("0")
    exponent10 += len(digits) - len(trimmed)
    if not trimmed:
        return 0
    rest = ""
    if len(trimmed) > _KEPT_DIGITS:
        trimmed, rest = trimmed[:_KEPT_DIGITS], trimmed[_KEPT_DIGITS:]
        exponent10 += len(rest)
    # Orders of magnitude of the value in nano units, give or take one, before any power.
    magnitude = len(trimmed) + exponent10 + 9 + (power2 * 3 + 9) // 10
    if magnitude > 30:  # at least 10**29 nano units: above the cap
        return _MAX_NANOS
    if magnitude < -1:  # less than one nano unit: rounds up to one
        return 1
    scale = exponent10 + 9
    numerator = int(trimmed) * 2**power2 * 10 ** max(scale, 0)
    denominator = 10 ** max(-scale, 0)
    nanos = -(-numerator // denominator)
    if rest and numerator % denominator == 0:
        nanos += 1  # the dropped digits were not all zero
    return min(nanos, _MAX_NANOS)


def parse_quantity(text: Any) -> Fraction:
    """The value of a quantity string (nano precision, capped); ints and floats are accepted
    as plain numbers."""
    if isinstance(text, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    if isinstance(text, int):
        return Fraction(max(-MAX_MAGNITUDE, min(text, MAX_MAGNITUDE)))
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"quantities must be finite numbers, not {text!r}")
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"quantities must be strings or numbers, not {type(text).__name__}")
    match = _QUANTITY.fullmatch(text)  # upstream rejects surrounding spaces too
    if match is None or not (match["whole"] or match["fraction"]):
        shown = text if len(text) <= 64 else text[:64] + "..."
        raise QuantityError(f"{_FORMAT_MESSAGE}: {shown!r}")
    fraction = match["fraction"] or ""
    exponent10, power2 = -len(fraction), 0
    if match["exponent"] is not None:
        written = match["exponent"]
        body = written.lstrip("+-").lstrip("0") or "0"
        exponent = -int(body) if written.startswith("-") and len(body) <= _INT32_DIGITS else (
            int(body) if len(body) <= _INT32_DIGITS else 2**31)
        if not -(2**31) <= exponent < 2**31:
            raise QuantityError("unable to parse quantity's suffix: the exponent does not fit "
                                "in 32 bits")
        exponent10 += exponent
    elif match["suffix"] in BINARY_POWERS:
        power2 = BINARY_POWERS[match["suffix"]]
    else:
        exponent10 += DECIMAL_EXPONENTS[match["suffix"] or ""]
    nanos = _nanos((match["whole"] or "") + fraction, exponent10, power2)
    return Fraction(-nanos if match["sign"] == "-" else nanos, NANO)


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


# Decimal digits an int64 always holds: upstream's maxInt64Factors.
MAX_INT64_FACTORS: Final = 18


class Int64Amount(NamedTuple):
    """A quantity as 1.20's parser stores it on its exact int64 path."""

    magnitude: int  # the value at ``scale``, without its sign
    scale: int  # a power of ten
    canonical: bool  # the parser keeps the written text as the quantity's string


def int64_amount(whole: str, fraction: str, *, binary: bool, exponent: int) -> Int64Amount | None:
    """What Go 1.20's ``ParseQuantity`` makes of the digits ``whole.fraction`` (leading
    zeros removed) with a suffix of ``exponent`` (a power of two when ``binary``, else of
    ten), on its exact int64 path; None when the text takes its arbitrary-precision path.

    Both renderings of Go's encoders (``gojson``, ``gospew_pod``) read this one rule.
    """
    if binary:
        if fraction or 15 - len(whole) - exponent * 3 // 10 - 1 < 0:
            return None
        scale, magnitude = 0, int(whole) << exponent
        canonical = int(whole) & 0x07 != 0
    else:
        if MAX_INT64_FACTORS - len(whole) - len(fraction) < 0:
            return None
        shifted = whole + fraction
        scale, magnitude = exponent - len(fraction), int(shifted)
        canonical = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
    if scale < -9 or magnitude > MAX_MAGNITUDE:
        return None
    return Int64Amount(magnitude, scale, canonical)


__all__ = [
    "BINARY_POWERS",
    "BINARY_SI",
    "DECIMAL_EXPONENTS",
    "DECIMAL_SI",
    "MAX_INT64_FACTORS",
    "MAX_MAGNITUDE",
    "NANO",
    "Int64Amount",
    "QuantityError",
    "cpu_to_millis",
    "format_quantity",
    "int64_amount",
    "memory_to_bytes",
    "parse_quantity",
]
