"""The ``KubeletConfiguration`` API type (kubelet.config.k8s.io/v1beta1): schema, decoding,
defaults, validation and feature gates.

``load_config_file`` reads a ``--config`` file strictly and returns the defaulted
configuration with the top-level keys the file set; ``validate_configuration`` lists every
problem; ``configz_body`` renders what ``/configz`` serves.
"""

from __future__ import annotations

from pathlib import Path

from pykubelet.config.codec import (
    DecodeError,
    configz_body,
    decode_text,
    dump_yaml,
    read_config_file,
    to_versioned_dict,
)
from pykubelet.config.defaults import apply_legacy_flag_defaults, default_configuration
from pykubelet.config.errors import ConfigurationError
from pykubelet.config.features import KNOWN_FEATURES, FeatureGates, Stage
from pykubelet.config.support import ACTED_ON_FIELDS, fields_not_acted_on, is_acted_on
from pykubelet.config.types import (
    API_VERSION,
    KIND,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    Taint,
)
from pykubelet.config.units import Duration, EvictionThreshold, Quantity, parse_eviction_thresholds
from pykubelet.config.validation import validate_configuration


def eviction_thresholds(config: KubeletConfiguration) -> list[EvictionThreshold]:
    """The configured hard and soft eviction thresholds, parsed (the config must be valid)."""
    return parse_eviction_thresholds(config.eviction_hard, config.eviction_soft,
                                     config.eviction_soft_grace_period,
                                     config.eviction_minimum_reclaim)


def load_config_file(path: str | Path) -> tuple[KubeletConfiguration, set[str]]:
    """Read, strictly decode and default a KubeletConfiguration file.

    Returns the configuration and the top-level keys present in the file. Raises
    ``ConfigurationError`` listing every decoding problem; semantic validation is left to
    ``validate_configuration`` so command-line flags can still override values first.
    """
    try:
        config, keys, errors = read_config_file(path)
    except DecodeError as err:
        raise ConfigurationError(
            [f"failed to load kubelet config file {str(path)!r}: {e}" for e in err.errors]
        ) from None
    if errors:
        raise ConfigurationError(
            [f"failed to load kubelet config file {str(path)!r}: {e}" for e in errors])
    return config, keys


__all__ = [
    "ACTED_ON_FIELDS",
    "API_VERSION",
    "KIND",
    "KNOWN_FEATURES",
    "ConfigurationError",
    "DecodeError",
    "Duration",
    "EvictionThreshold",
    "FeatureGates",
    "KubeletAuthentication",
    "KubeletAuthorization",
    "KubeletConfiguration",
    "Quantity",
    "Stage",
    "Taint",
    "apply_legacy_flag_defaults",
    "configz_body",
    "decode_text",
    "default_configuration",
    "dump_yaml",
    "eviction_thresholds",
    "fields_not_acted_on",
    "is_acted_on",
    "load_config_file",
    "parse_eviction_thresholds",
    "read_config_file",
    "to_versioned_dict",
    "validate_configuration",
]
