"""Value grammars used by the kubelet configuration: durations, quantities, percentages
and eviction thresholds.

The Go kubelet parses these with ``time.ParseDuration``, ``resource.ParseQuantity`` and
the eviction manager's threshold parser. Operators copy values between kubelets and
pykubelet, so the same strings must be accepted, the same ones rejected, and durations
must print back the way Go prints them (``2m0s``, ``4h0m0s``, ``100ms``).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from pykubelet.api.quantity import QuantityError, parse_quantity

NANOSECOND: Final = 1
MICROSECOND: Final = 1_000
MILLISECOND: Final = 1_000_000
SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

_MAX_DURATION: Final = (1 << 63) - 1
_MAX_DURATION_DIGITS: Final = 19  # digits of _MAX_DURATION
_DURATION_NUMBER: Final = re.compile(r"([0-9]*)(\.([0-9]*))?")
_DURATION_UNIT: Final = re.compile(r"[^0-9.]*")

# Go accepts both the micro sign (U+00B5) and the Greek mu (U+03BC) for microseconds.
_DURATION_UNITS: Final[dict[str, int]] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,
    "\u03bcs": MICROSECOND,
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}


class UnitError(ValueError):
    """A value does not match the grammar of its unit; the message follows upstream's."""


def _parse_duration_nanos(text: str) -> int:
    original = text
    if len(original) > 64:
        original = original[:64] + "..."
    invalid = UnitError(f'time: invalid duration "{original}"')
    if text == "":
        raise invalid
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if text == "":
        raise invalid
    # Go's limit: the magnitude must fit in an int64 (2^63 is allowed for a negative one).
    limit = _MAX_DURATION + (1 if negative else 0)
    total = Fraction(0)
    while text:
        match = _DURATION_NUMBER.match(text)
        assert match is not None  # the pattern can match the empty string
        whole, frac = match.group(1), match.group(3) or ""
        if whole == "" and frac == "":
            raise invalid
        text = text[match.end():]
        unit_match = _DURATION_UNIT.match(text)
        assert unit_match is not None
        unit = unit_match.group(0)
        if unit == "":
            raise UnitError(f'time: missing unit in duration "{original}"')
        if unit not in _DURATION_UNITS:
            shown = unit if len(unit) <= 16 else unit[:16] + "..."
            raise UnitError(f'time: unknown unit "{shown}" in duration "{original}"')
        text = text[unit_match.end():]
        whole = whole.lstrip("0")
        if len(whole) > _MAX_DURATION_DIGITS:
            raise invalid  # Go's leadingInt overflows
        # Go stops reading fraction digits once they no longer change a nanosecond.
        frac = frac[:_MAX_DURATION_DIGITS]
        scale = _DURATION_UNITS[unit]
        value = Fraction(int(whole or "0")) * scale
        if frac:
            value += Fraction(int(frac), 10 ** len(frac)) * scale
        total += value
        if total > limit:
            raise invalid
    nanos = int(total)  # Go truncates sub-nanosecond fractions
    return -nanos if negative else nanos


def _format_fraction(value: int, precision: int) -> str:
    """Print ``value / 10**precision`` without trailing zeros, as Go's fmtFrac does."""
    whole, frac = divmod(value, 10**precision)
    if frac == 0:
        return str(whole)
    digits = f"{frac:0{precision}d}".rstrip("0")
    return f"{whole}.{digits}"


def format_duration(nanos: int) -> str:
    """Render nanoseconds exactly as Go's ``time.Duration.String`` does."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)
    if magnitude < SECOND:
        if magnitude < MICROSECOND:
            return f"{sign}{magnitude}ns"
        if magnitude < MILLISECOND:
            return f"{sign}{_format_fraction(magnitude, 3)}\u00b5s"
        return f"{sign}{_format_fraction(magnitude, 6)}ms"
    hours, rest = divmod(magnitude, HOUR)
    minutes, rest = divmod(rest, MINUTE)
    seconds = _format_fraction(rest, 9)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


@dataclass(frozen=True, order=True)
class Duration:
    """A Go ``metav1.Duration``: a signed count of nanoseconds printed in Go's format."""

    nanoseconds: int = 0

    @classmethod
    def parse(cls, text: str) -> Duration:
        return cls(_parse_duration_nanos(text))

    @classmethod
    def of(cls, *, hours: float = 0, minutes: float = 0, seconds: float = 0,
           milliseconds: float = 0) -> Duration:
        total = hours * HOUR + minutes * MINUTE + seconds * SECOND + milliseconds * MILLISECOND
        return cls(int(total))

    def total_seconds(self) -> float:
        return self.nanoseconds / SECOND

    def __bool__(self) -> bool:
        return self.nanoseconds != 0

    def __str__(self) -> str:
        return format_duration(self.nanoseconds)


def seconds(value: Duration | float) -> float:
    """A configuration duration (a ``Duration``, or a number of seconds) in seconds."""
    total = getattr(value, "total_seconds", None)
    return float(total()) if callable(total) else float(value)  # type: ignore[arg-type]


_PERCENTAGE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_QUANTITY_SHAPE: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6,
}
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}
_DECIMAL_BY_EXPONENT: Final = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER: Final = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}


@dataclass(frozen=True)
class Quantity:
    """A ``resource.Quantity``: an exact decimal value plus the suffix family it was written in.

    ``str()`` gives the canonical form upstream prints (``1.5Gi`` becomes ``1536Mi``,
    ``1000`` becomes ``1k``).
    """

    value: Fraction
    binary: bool = False

    @classmethod
    def parse(cls, text: str) -> Quantity:
        try:
            value = parse_quantity(text)
        except QuantityError as err:
            if str(err).startswith("quantities must match"):
                raise UnitError(f"quantities must match the regular expression "
                                f"'{_QUANTITY_SHAPE}'") from None
            raise UnitError(str(err)) from None
        return cls(value, binary=text[-2:] in _BINARY_SUFFIXES)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def __str__(self) -> str:
        if self.value == 0:
            return "0"
        sign = "-" if self.value < 0 else ""
        magnitude = abs(self.value)
        if self.binary and magnitude.denominator == 1:
            whole = int(magnitude)
            for power in range(6, -1, -1):
                unit = 1024**power
                if whole % unit == 0 and whole >= unit:
                    return f"{sign}{whole // unit}{_BINARY_BY_POWER.get(power, '')}"
        # Upstream rounds values finer than a nano unit up to the next nano.
        nanos = magnitude * 10**9
        if nanos.denominator != 1:
            nanos = Fraction(-(-nanos.numerator // nanos.denominator))
        whole_nanos = int(nanos)
        for exponent in range(18, -10, -3):
            unit = 10 ** (exponent + 9)
            if whole_nanos % unit == 0:
                return f"{sign}{whole_nanos // unit}{_DECIMAL_BY_EXPONENT[exponent]}"
        return f"{sign}{whole_nanos}n"


def parse_percentage(text: str) -> float:
    """Parse ``10%`` into 10.0; the caller decides which range is allowed."""
    shown = text if len(text) <= 64 else text[:64] + "..."
    if not text.endswith("%"):
        raise UnitError(f'percentage "{shown}" must end with "%"')
    if not _PERCENTAGE.fullmatch(text[:-1]):
        raise UnitError(f'invalid percentage "{shown}"')
    value = float(text[:-1])
    if not math.isfinite(value):
        raise UnitError(f'invalid percentage "{shown}": out of range')
    return value


# Signals the Linux eviction manager knows (pkg/kubelet/eviction/api).
EVICTION_SIGNALS: Final = frozenset({
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
})


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass(frozen=True)
class ThresholdValue:
    """An eviction threshold amount: an absolute quantity or a percentage of capacity."""

    quantity: Quantity | None = None
    percentage: float | None = None

    def __str__(self) -> str:
        if self.quantity is not None:
            return str(self.quantity)
        return f"{self.percentage:g}%"

    def amount(self, capacity: int) -> int:
        """The absolute amount: the quantity, or the percentage of ``capacity`` (rounded down).

        Upstream keeps the fraction as a float32 and multiplies in float64, so
        ``10%`` of 100 GiB is a few bytes over a tenth; node allocatable shows it.
        """
        if self.quantity is not None:
            return math.ceil(self.quantity.value)
        return math.trunc(capacity * _float32(_float32(self.percentage or 0) / 100))


@dataclass(frozen=True)
class EvictionThreshold:
    """One parsed eviction threshold: ``signal < value``, with its grace period and reclaim."""

    signal: str
    value: ThresholdValue
    grace_period: Duration = Duration(0)
    min_reclaim: ThresholdValue | None = None
    hard: bool = True


def _check_signal(signal: str) -> None:
    if signal not in EVICTION_SIGNALS:
        raise UnitError(f"unsupported eviction signal {signal}")


def parse_threshold_value(signal: str, text: str) -> ThresholdValue | None:
    """Parse the right-hand side of ``signal<value``; ``None`` means disabled (0% or 100%)."""
    _check_signal(signal)
    if text.endswith("%"):
        if text in ("0%", "100%"):
            return None
        percentage = parse_percentage(text)
        if percentage < 0:
            raise UnitError(f"eviction percentage threshold {signal} must be >= 0%: {text}")
        if percentage > 100:
            raise UnitError(f"eviction percentage threshold {signal} must be <= 100%: {text}")
        return ThresholdValue(percentage=percentage)
    quantity = Quantity.parse(text)
    if quantity.sign() <= 0:
        raise UnitError(f"eviction threshold {signal} must be positive: {quantity}")
    return ThresholdValue(quantity=quantity)


def parse_min_reclaim(signal: str, text: str) -> ThresholdValue:
    _check_signal(signal)
    if text.endswith("%"):
        percentage = parse_percentage(text)
        if percentage < 0:
            raise UnitError(f"minimum reclaim for {signal} must be >= 0%: {text}")
        if percentage > 100:
            raise UnitError(f"minimum reclaim for {signal} must be <= 100%: {text}")
        return ThresholdValue(percentage=percentage)
    quantity = Quantity.parse(text)
    if quantity.sign() < 0:
        raise UnitError(f"negative reclaim defined for {signal}: {quantity}")
    return ThresholdValue(quantity=quantity)


def parse_grace_period(signal: str, text: str) -> Duration:
    _check_signal(signal)
    grace = Duration.parse(text)
    if grace.nanoseconds < 0:
        raise UnitError(
            f"invalid eviction grace period specified: {text}, must be a positive value")
    return grace


def parse_eviction_thresholds(
    hard: dict[str, str],
    soft: dict[str, str],
    soft_grace: dict[str, str],
    min_reclaim: dict[str, str],
) -> list[EvictionThreshold]:
    """Combine the four eviction maps into thresholds, as the eviction manager does.

    Raises ``UnitError`` for the first problem; validation reports every problem itself.
    """
    reclaims = {signal: parse_min_reclaim(signal, text) for signal, text in min_reclaim.items()}
    thresholds: list[EvictionThreshold] = []
    for signal, text in hard.items():
        value = parse_threshold_value(signal, text)
        if value is not None:
            thresholds.append(EvictionThreshold(signal, value, Duration(0),
                                                reclaims.get(signal), hard=True))
    for signal, text in soft.items():
        value = parse_threshold_value(signal, text)
        if value is None:
            continue
        if signal not in soft_grace:
            raise UnitError(
                f"grace period must be specified for the soft eviction threshold {signal}")
        grace = parse_grace_period(signal, soft_grace[signal])
        thresholds.append(EvictionThreshold(signal, value, grace, reclaims.get(signal), hard=False))
    return thresholds
