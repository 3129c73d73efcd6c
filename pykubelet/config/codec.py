"""Strict decoding of KubeletConfiguration files and encoding for ``/configz`` and printing.

Decoding follows upstream's strict codec: an unknown or misspelt field, a value of the
wrong JSON type, a duplicated key, or a wrong ``kind``/``apiVersion`` is an error that
names the field by its dotted path. Every problem in a file is collected so that the
operator fixes them in one pass. Encoding mirrors Go's ``encoding/json`` with the
v1beta1 ``omitempty`` tags, so ``/configz`` output has the shape clients expect.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from pykubelet.api.yamlsafe import (
    MAX_DOCUMENT_BYTES,
    DocumentError,
    describe,
    json_type,
    load_document,
    render,
)
from pykubelet.config.defaults import apply_dependent_defaults, zero_means_default
from pykubelet.config.types import (
    API_VERSION,
    KIND,
    FieldSpec,
    KubeletConfiguration,
    config_fields,
    is_config_struct,
)
from pykubelet.config.units import Duration, UnitError

_TYPE_META: Final = ("apiVersion", "kind")
_KEY_SHOWN_MAX: Final = 64
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class DecodeError(ValueError):
    """A config file could not be decoded; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


class _INVALID:
    """Marker for a value that failed to decode (its error is already recorded)."""


def _go_type_name(annotation: Any, spec: FieldSpec) -> str:
    if annotation is bool:
        return "bool"
    if annotation is int:
        return f"{'u' if spec.unsigned else ''}int{spec.int_bits}"
    if annotation is float:
        return "float64"
    if annotation is str:
        return "string"
    if annotation is Duration:
        return "duration string"
    origin = typing.get_origin(annotation)
    if origin is list:
        return "array"
    if origin is dict:
        return "object"
    return "object"


def _shown_key(key: Any) -> str:
    """A map key as it appears in a field path; an absurdly long one is cut."""
    text = key if isinstance(key, str) else render(key)
    return text if len(text) <= _KEY_SHOWN_MAX else text[:_KEY_SHOWN_MAX] + "..."


def _unwrap_optional(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


class _Decoder:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.present: set[str] = set()

    def type_error(self, path: str, value: Any, annotation: Any, spec: FieldSpec) -> type[_INVALID]:
        self.errors.append(f"{path}: cannot unmarshal {describe(value)} into a field of type "
                           f"{_go_type_name(annotation, spec)}")
        return _INVALID

    def value(self, annotation: Any, spec: FieldSpec, raw: Any, path: str) -> Any:
        annotation = _unwrap_optional(annotation)
        if annotation is bool:
            return raw if isinstance(raw, bool) else self.type_error(path, raw, annotation, spec)
        if annotation is int:
            if not isinstance(raw, int) or isinstance(raw, bool):
                return self.type_error(path, raw, annotation, spec)
            low, high = ((0, 2**spec.int_bits - 1) if spec.unsigned
                         else (-(2 ** (spec.int_bits - 1)), 2 ** (spec.int_bits - 1) - 1))
            if not low <= raw <= high:
                self.errors.append(f"{path}: number {raw} overflows "
                                   f"{_go_type_name(annotation, spec)}")
                return _INVALID
            return raw
        if annotation is float:
            if not isinstance(raw, int | float) or isinstance(raw, bool):
                return self.type_error(path, raw, annotation, spec)
            return float(raw)
        if annotation is str:
            return raw if isinstance(raw, str) else self.type_error(path, raw, annotation, spec)
        if annotation is Duration:
            if spec.accepts_int_nanoseconds and isinstance(raw, int) and not isinstance(raw, bool):
                if not _INT64_MIN <= raw <= _INT64_MAX:
                    self.errors.append(f"{path}: number {raw} overflows int64 nanoseconds")
                    return _INVALID
                return Duration(raw)
            if not isinstance(raw, str):
                return self.type_error(path, raw, annotation, spec)
            try:
                return Duration.parse(raw)
            except UnitError as err:
                self.errors.append(f"{path}: {err}")
                return _INVALID
        if annotation is typing.Any:
            return raw
        origin = typing.get_origin(annotation)
        if origin is list:
            if not isinstance(raw, list):
                return self.type_error(path, raw, annotation, spec)
            (element,) = typing.get_args(annotation)
            items = [self.value(element, spec, item, f"{path}[{index}]")
                     for index, item in enumerate(raw)]
            return [item for item in items if item is not _INVALID]
        if origin is dict:
            if not isinstance(raw, dict):
                return self.type_error(path, raw, annotation, spec)
            _, element = typing.get_args(annotation)
            result: dict[str, Any] = {}
            for key, item in raw.items():
                decoded = self.value(element, spec, item, f"{path}.{_shown_key(key)}")
                if decoded is not _INVALID:
                    result[str(key)] = decoded
            return result
        if is_config_struct(annotation):
            return self.struct(annotation, raw, path)
        raise TypeError(f"no decoder for {annotation!r} at {path}")

    def struct(self, cls: type[Any], raw: Any, path: str) -> Any:
        if not isinstance(raw, dict):
            self.errors.append(f"{path or 'configuration'}: cannot unmarshal {describe(raw)} "
                               f"into an object")
            return _INVALID
        hints = typing.get_type_hints(cls)
        by_json = {spec.json: (f, spec) for f, spec in config_fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, item in raw.items():
            if not path and key in _TYPE_META:
                continue
            child = f"{path}.{_shown_key(key)}" if path else _shown_key(key)
            entry = by_json.get(str(key))
            if entry is None:
                self.errors.append(f'unknown field "{child}"')
                continue
            f, spec = entry
            if item is None:
                continue  # JSON null leaves the field to its default, as in Go
            decoded = self.value(hints[f.name], spec, item, child)
            if decoded is _INVALID or zero_means_default(spec, decoded):
                continue
            kwargs[f.name] = decoded
            self.present.add(child)
        return cls(**kwargs)


def parse_document(data: bytes | str) -> Any:
    """Parse YAML or JSON (a YAML subset), strictly: a repeated key is an error."""
    try:
        return load_document(data, strict=True)
    except DocumentError as err:
        if err.duplicate_keys:
            raise DecodeError([f"strict decoding error: {msg}" for msg in err.errors]) from None
        raise DecodeError([f"error converting YAML to JSON: {msg}" for msg in err.errors]) \
            from None


def _check_type_meta(document: Mapping[str, Any]) -> list[str]:
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    errors: list[str] = []
    if not kind:
        errors.append(f"Object 'Kind' is missing: expected kind {KIND!r}")
    if not api_version:
        errors.append(f"Object 'apiVersion' is missing: expected apiVersion {API_VERSION!r}")
    if errors:
        return errors
    if kind != KIND or api_version != API_VERSION:
        shown_kind = kind if isinstance(kind, str) else render(kind)
        shown_version = api_version if isinstance(api_version, str) else render(api_version)
        return [f'no kind "{_shown_key(shown_kind)}" is registered for version '
                f'"{_shown_key(shown_version)}"; expected kind "{KIND}" in version '
                f'"{API_VERSION}"']
    return []


def decode_document(document: Any) -> tuple[KubeletConfiguration, set[str], list[str]]:
    """Decode a parsed document into a defaulted configuration.

    Returns the configuration, the top-level keys present, and every decoding error;
    fields that failed to decode keep their defaults so validation can still run.
    """
    if not isinstance(document, dict):
        raise DecodeError([f"configuration must be an object, got {json_type(document)}"])
    type_errors = _check_type_meta(document)
    if type_errors:
        raise DecodeError(type_errors)
    decoder = _Decoder()
    config = decoder.struct(KubeletConfiguration, document, "")
    assert isinstance(config, KubeletConfiguration)
    apply_dependent_defaults(config, decoder.present)
    keys = {str(key) for key in document if key not in _TYPE_META}
    return config, keys, decoder.errors


def decode_text(text: bytes | str) -> tuple[KubeletConfiguration, set[str], list[str]]:
    return decode_document(parse_document(text))


def read_config_file(path: str | Path) -> tuple[KubeletConfiguration, set[str], list[str]]:
    """Read and decode a config file; decoding errors are returned, not raised."""
    try:
        with open(path, "rb") as config_file:
            data = config_file.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as err:
        raise DecodeError([f"failed to read kubelet config file {str(path)!r}: "
                           f"{err.strerror or err}"]) from None
    return decode_text(data)


def _is_go_zero(value: Any) -> bool:
    if isinstance(value, bool):
        return value is False
    if isinstance(value, int | float):
        return value == 0
    if isinstance(value, str | list | dict):
        return len(value) == 0
    return False


def encode_value(value: Any) -> Any:
    if isinstance(value, Duration):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_struct(value)
    if isinstance(value, list):
        return [encode_value(item) for item in value]
    if isinstance(value, dict):
        return {key: encode_value(item) for key, item in value.items()}
    return value


def encode_struct(obj: Any) -> dict[str, Any]:
    """Encode a config dataclass to camelCase JSON with Go's omitempty rules.

    Pointer fields appear whenever set; non-pointer scalars, lists and maps are left out
    when empty; nested structs and durations (Go structs) always appear.
    """
    result: dict[str, Any] = {}
    for f, spec in config_fields(type(obj)):
        value = getattr(obj, f.name)
        if value is None:
            continue
        if spec.omitempty and not spec.pointer and _is_go_zero(value):
            continue
        result[spec.json] = encode_value(value)
    return result


def to_versioned_dict(config: KubeletConfiguration) -> dict[str, Any]:
    """The configuration as a complete v1beta1 document, ``kind`` and ``apiVersion`` included."""
    return {"kind": KIND, "apiVersion": API_VERSION, **encode_struct(config)}


def mask_secrets(config: KubeletConfiguration) -> KubeletConfiguration:
    """A copy safe to log or serve: header values of the manifest URL are masked as upstream."""
    masked = dataclasses.replace(config)
    masked.static_pod_url_header = {key: ["<masked>"] for key in config.static_pod_url_header}
    return masked


def configz_body(config: KubeletConfiguration) -> dict[str, Any]:
    """The ``/configz`` response body: ``{"kubeletconfig": {...}}`` with secrets masked."""
    return {"kubeletconfig": encode_struct(mask_secrets(config))}


def dump_yaml(config: KubeletConfiguration) -> str:
    return yaml.safe_dump(to_versioned_dict(mask_secrets(config)), sort_keys=False,
                          default_flow_style=False, allow_unicode=True)
