"""Feature gates: known names, defaults, locked gates and the --feature-gates syntax."""

from __future__ import annotations

import pytest

from pykubelet.config.features import (
    KNOWN_FEATURES,
    FeatureGateError,
    FeatureGates,
    Stage,
    parse_feature_gates_flag,
)


def test_table_holds_the_kubelet_gates_with_their_stage() -> None:
    assert len(KNOWN_FEATURES) >= 40
    assert KNOWN_FEATURES["SidecarContainers"].stage is Stage.GA
    assert KNOWN_FEATURES["SidecarContainers"].locked
    assert KNOWN_FEATURES["InPlacePodVerticalScaling"].stage is Stage.GA
    assert KNOWN_FEATURES["GracefulNodeShutdown"].stage is Stage.BETA
    assert KNOWN_FEATURES["EventedPLEG"].default is False


def test_defaults_and_overrides() -> None:
    gates = FeatureGates({"EventedPLEG": True, "GracefulNodeShutdown": False})
    assert gates.enabled("EventedPLEG") is True
    assert gates.enabled("GracefulNodeShutdown") is False
    assert gates.enabled("PodReadyToStartContainersCondition") is True
    assert gates.enabled("RotateKubeletServerCertificate") is True
    assert gates.explicitly_set() == {"EventedPLEG": True, "GracefulNodeShutdown": False}


def test_unknown_gate_is_named() -> None:
    assert FeatureGates.check({"NoSuchThing": True}) == ["unrecognized feature gate: NoSuchThing"]
    with pytest.raises(FeatureGateError, match="NoSuchThing"):
        FeatureGates({"NoSuchThing": False})


def test_locked_gate_cannot_be_flipped_but_may_be_restated() -> None:
    assert FeatureGates.check({"KubeletTracing": False}) == [
        "cannot set feature gate KubeletTracing to false, feature is locked to true"]
    assert FeatureGates.check({"KubeletTracing": True}) == []


def test_flag_syntax() -> None:
    assert parse_feature_gates_flag("A=true, B=false,C=1") == {"A": True, "B": False, "C": True}
    with pytest.raises(FeatureGateError, match="invalid value of A=maybe"):
        parse_feature_gates_flag("A=maybe")
    with pytest.raises(FeatureGateError, match="missing bool value for A"):
        parse_feature_gates_flag("A")


def test_help_lines_skip_ga_gates() -> None:
    lines = FeatureGates.known_features()
    assert any(line.startswith("EventedPLEG=true|false (ALPHA - default=false)") for line in lines)
    assert not any(line.startswith("SidecarContainers=") for line in lines)
