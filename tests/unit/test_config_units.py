"""Duration, quantity, percentage and eviction-threshold grammars match upstream's."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pykubelet.config.units import (
    Duration,
    Quantity,
    UnitError,
    parse_eviction_thresholds,
    parse_threshold_value,
)


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("2m0s", "2m0s"),
        ("4h0m0s", "4h0m0s"),
        ("100ms", "100ms"),
        ("1m", "1m0s"),
        ("60s", "1m0s"),
        ("90s", "1m30s"),
        ("1.5s", "1.5s"),
        ("1h30m", "1h30m0s"),
        ("-1.5h", "-1h30m0s"),
        ("300us", "300\u00b5s"),
        ("1\u00b5s", "1\u00b5s"),
        ("10ns", "10ns"),
        ("0", "0s"),
        (".5s", "500ms"),
        ("1h1m1.001s", "1h1m1.001s"),
    ],
)
def test_duration_prints_like_go(text: str, printed: str) -> None:
    assert str(Duration.parse(text)) == printed
    assert Duration.parse(printed) == Duration.parse(text)


def test_duration_value_is_exact_nanoseconds() -> None:
    assert Duration.parse("1m30s").total_seconds() == 90.0
    assert Duration.parse("1.5ms").nanoseconds == 1_500_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5 minutes", 'unknown unit " minutes"'),
        ("", "invalid duration"),
        ("10", "missing unit"),
        ("1x", 'unknown unit "x"'),
        ("abc", "invalid duration"),
        ("3000000h", "invalid duration"),
    ],
)
def test_bad_durations_are_rejected(text: str, message: str) -> None:
    with pytest.raises(UnitError, match=message):
        Duration.parse(text)


@pytest.mark.parametrize(
    ("text", "canonical", "value"),
    [
        ("100Mi", "100Mi", Fraction(100 * 1024**2)),
        ("1.5Gi", "1536Mi", Fraction(3 * 1024**3, 2)),
        ("500m", "500m", Fraction(1, 2)),
        ("1000", "1k", Fraction(1000)),
        ("1e3", "1k", Fraction(1000)),
        ("10Mi", "10Mi", Fraction(10 * 1024**2)),
        ("0.5Ki", "512", Fraction(512)),
        ("150G", "150G", Fraction(150 * 10**9)),
    ],
)
def test_quantities_parse_and_canonicalize(text: str, canonical: str, value: Fraction) -> None:
    quantity = Quantity.parse(text)
    assert quantity.value == value
    assert str(quantity) == canonical
    assert Quantity.parse(str(quantity)).value == value


@pytest.mark.parametrize("text", ["100MB", "1.5 Gi", "", "Mi", "1Kb", "--1"])
def test_bad_quantities_are_rejected(text: str) -> None:
    with pytest.raises(UnitError, match="quantities must match"):
        Quantity.parse(text)


def test_threshold_values_follow_the_eviction_manager_rules() -> None:
    hard_memory = parse_threshold_value("memory.available", "100Mi")
    assert hard_memory is not None and hard_memory.quantity == Quantity.parse("100Mi")
    nodefs = parse_threshold_value("nodefs.available", "10%")
    assert nodefs is not None and nodefs.percentage == 10.0
    assert parse_threshold_value("nodefs.available", "0%") is None  # explicitly disabled
    with pytest.raises(UnitError, match="must be <= 100%"):
        parse_threshold_value("nodefs.available", "110%")
    with pytest.raises(UnitError, match="unsupported eviction signal"):
        parse_threshold_value("memory.free", "1Gi")
    with pytest.raises(UnitError, match="must be positive"):
        parse_threshold_value("memory.available", "0")


def test_soft_thresholds_need_a_grace_period() -> None:
    thresholds = parse_eviction_thresholds(
        {"memory.available": "100Mi"}, {"memory.available": "300Mi"},
        {"memory.available": "1m30s"}, {"memory.available": "50Mi"})
    soft = [t for t in thresholds if not t.hard]
    assert soft[0].grace_period == Duration.parse("90s")
    assert thresholds[0].min_reclaim is not None
    with pytest.raises(UnitError, match="grace period must be specified"):
        parse_eviction_thresholds({}, {"memory.available": "300Mi"}, {}, {})
