"""Pod validation, the practical subset of the API server's ``ValidatePod``.

Static pods never pass through an API server, so the kubelet validates them
itself before running them: a manifest with a bad name, a missing image or two
containers of the same name must be rejected with a message that tells the
operator which field is wrong. Every error names its field path the way the
API server does (``spec.containers[1].name: Duplicate value: "app"``), so the
messages read the same as ``kubectl apply`` errors.

``decode_pod`` builds a ``V1Pod`` from untrusted JSON (what a manifest file or
URL holds) and names every type and range error, as upstream's typed decoding
would (a pod and its error list); ``validate_pod``
checks the semantics of a decoded, defaulted pod, comparing limits with
requests as exact quantities (``pykubelet.api.quantity``).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client import models as k8s_models
from kubernetes_asyncio.client.models import (
    V1Container,
    V1DownwardAPIVolumeFile,
    V1Pod,
    V1PodSpec,
    V1Probe,
    V1ResourceFieldSelector,
    V1Volume,
)

from pykubelet.api import is_restartable_init_container
from pykubelet.api.gojson import go_quantity
from pykubelet.api.quantity import parse_quantity
from pykubelet.api.yamlsafe import render
from pykubelet.util.gotext import go_json_float

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PULL_POLICIES = ("Always", "Never", "IfNotPresent")
PROTOCOLS = ("SCTP", "TCP", "UDP")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                   "CharDevice", "BlockDevice")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
INT32_MAX = 2**31 - 1
SHOWN_VALUE_MAX = 256  # longer values are cut in messages


def json_name(model: Any, attribute: str) -> str:
    """The camelCase JSON key of a generated model's attribute (``liveness_probe`` ->
    ``livenessProbe``)."""
    names: dict[str, str] = model.attribute_map
    return names[attribute]


def model_attributes(model: Any) -> dict[str, str]:
    """A generated model's attributes and their type names (``list[V1Container]``...)."""
    types: dict[str, str] = model.openapi_types
    return types


# --- field error formatting, in the API server's wording ---------------------------------------

class _Shown(str):
    """A value description printed as is (``object``), not quoted like a string value."""


def _show(value: Any) -> str:
    if isinstance(value, _Shown):
        return str(value)
    return render(value, SHOWN_VALUE_MAX)


def required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_show(value)}: {detail}"


def duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {_show(value)}"


def not_supported(path: str, value: Any, supported: Iterable[str]) -> str:
    choices = ", ".join(json.dumps(s) for s in supported)
    return f"{path}: Unsupported value: {_show(value)}: supported values: {choices}"


def not_found(path: str, value: Any) -> str:
    return f"{path}: Not found: {_show(value)}"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


# --- name checks ---------------------------------------------------------------------------------

def dns1123_label_errors(value: str) -> list[str]:
    """Why ``value`` is not an RFC 1123 label (empty list when it is)."""
    problems = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        problems.append(f"must be no more than {DNS1123_LABEL_MAX_LENGTH} characters")
    if not _DNS1123_LABEL.match(value):
        problems.append("must be a lowercase RFC 1123 label: lowercase alphanumerics or '-', "
                        "starting and ending with an alphanumeric (e.g. 'my-name' or '123-abc')")
    return problems


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Why ``value`` is not an RFC 1123 subdomain (empty list when it is)."""
    problems = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        problems.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        problems.append("must be a lowercase RFC 1123 subdomain: lowercase alphanumerics, '-' or "
                        "'.', starting and ending with an alphanumeric (e.g. 'example.com')")
    return problems


def _port_name_errors(value: str) -> list[str]:
    problems = []
    if len(value) > 15:
        problems.append("must be no more than 15 characters")
    if not _IANA_SVC_NAME.match(value):
        problems.append("must contain only lowercase alphanumerics or '-' and start and end "
                        "with an alphanumeric")
    if "--" in value:
        problems.append("must not contain consecutive hyphens")
    if not any(ch.isalpha() for ch in value):
        problems.append("must contain at least one letter")
    return problems


def qualified_name_errors(value: str) -> list[str]:
    """Upstream ``IsQualifiedName``: an optional DNS subdomain prefix, then a 63-char name."""
    prefix, slash, name = value.rpartition("/")
    problems = []
    if slash:
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems.extend(f"prefix part {p}" for p in dns1123_subdomain_errors(prefix))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        problems.append("name part must be at most 63 alphanumerics, '-', '_' or '.', "
                        "starting and ending with an alphanumeric")
    return problems


def _env_var_name_errors(value: str) -> list[str]:
    # The relaxed rule the API server applies today: any printable ASCII except '='.
    if all(32 <= ord(ch) <= 126 and ch != "=" for ch in value):
        return []
    return ["must consist only of printable ASCII characters other than '='"]


# --- raw JSON shape ------------------------------------------------------------------------------

# Quantity maps may hold bare numbers in YAML (cpu: 1); every other string field must be a string.
_QUANTITY_MAP_KEYS = frozenset({"limits", "requests", "overhead", "capacity", "allocatable",
                                "hard", "used", "allocatedResources"})
# The integers upstream's core/v1 and meta/v1 types declare as int64; every other one is int32.
_INT64_FIELDS = frozenset({
    ("V1ObjectMeta", "generation"), ("V1ObjectMeta", "deletion_grace_period_seconds"),
    ("V1PodSpec", "termination_grace_period_seconds"), ("V1PodSpec", "active_deadline_seconds"),
    ("V1Probe", "termination_grace_period_seconds"), ("V1SleepAction", "seconds"),
    ("V1PodSecurityContext", "run_as_user"), ("V1PodSecurityContext", "run_as_group"),
    ("V1PodSecurityContext", "fs_group"), ("V1PodSecurityContext", "supplemental_groups"),
    ("V1SecurityContext", "run_as_user"), ("V1SecurityContext", "run_as_group"),
    ("V1ServiceAccountTokenProjection", "expiration_seconds"),
    ("V1Toleration", "toleration_seconds"),
    ("V1LinuxContainerUser", "uid"), ("V1LinuxContainerUser", "gid"),
    ("V1LinuxContainerUser", "supplemental_groups"),
    ("V1PodStatus", "observed_generation"), ("V1PodCondition", "observed_generation"),
})
# Quantity fields outside the quantity maps: strings in the models, but Go's Quantity
# takes a bare JSON number too (``divisor: 1e6``, ``sizeLimit: 1e9``).
_QUANTITY_FIELDS = frozenset({("V1ResourceFieldSelector", "divisor"),
                              ("V1EmptyDirVolumeSource", "size_limit")})
# ``IntOrString`` fields; the generated models type them as any ``object``.
_INT_OR_STRING_FIELDS = frozenset({("V1HTTPGetAction", "port"), ("V1TCPSocketAction", "port")})
# Go's time.RFC3339 as metav1.Time reads it (any number of fraction digits).
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                      r"(?:(Z)|([+-])(\d{2}):(\d{2}))")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
MAX_SHAPE_ERRORS = 100
_PATH_KEY_MAX = 64


class _Problems:
    """Field errors, the first ``MAX_SHAPE_ERRORS`` kept: a hostile manifest may have millions."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def add(self, message: str) -> None:
        if len(self.items) < MAX_SHAPE_ERRORS:
            self.items.append(message)
        else:
            self.dropped += 1

    def result(self) -> list[str]:
        if self.dropped:
            return [*self.items, f"... and {self.dropped} more errors"]
        return self.items


@functools.cache
def _required_attributes(model: Any) -> frozenset[str]:
    """The attributes the generated model refuses to hold as None: the schema's required fields."""
    probe = object.__new__(model)
    probe.local_vars_configuration = Configuration()
    needed = set()
    for attribute in model_attributes(model):
        try:
            setattr(probe, attribute, None)
        except ValueError:
            needed.add(attribute)
    return frozenset(needed)


@functools.cache
def _attributes_by_json_key(model: Any) -> dict[str, str]:
    return {json_key: attribute for attribute, json_key in model.attribute_map.items()}


def _zero(type_name: str) -> Any:
    """What Go's decoder leaves for a JSON ``null`` list item or map value of this type."""
    zeros: dict[str, Any] = {"str": "", "int": 0, "float": 0.0, "bool": False}
    if type_name in zeros:
        return zeros[type_name]
    if type_name.startswith("list["):
        return []
    if type_name.startswith("dict(") or _model_class(type_name) is not None:
        return {}
    return None


@functools.cache
def _model_class(type_name: str) -> Any:
    """The generated model a type name denotes, or None for a primitive or ``object``."""
    if type_name in ("str", "int", "float", "bool", "object", "datetime", "date"):
        return None
    return getattr(k8s_models, type_name, None)


def _timestamp(text: str) -> datetime.datetime | None:
    """``text`` as an RFC 3339 time in UTC, or None if it is not one (or the instant is
    outside the years 1 to 9999)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        offset = datetime.timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        zone = datetime.timezone(-offset if sign == "-" else offset) if not zulu else datetime.UTC
        return datetime.datetime(int(year), int(month), int(day), int(hour), int(minute),
                                 int(second), int((fraction or "0")[:6].ljust(6, "0")),
                                 tzinfo=zone).astimezone(datetime.UTC)
    except (ValueError, OverflowError):
        return None


def _date(text: str) -> datetime.date | None:
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    try:
        return datetime.date(*(int(part) for part in match.groups()))
    except ValueError:
        return None


def _scalar(data: Any, type_name: str, path: str, problems: _Problems, owner: tuple[str, str]
            ) -> Any:
    is_number = isinstance(data, int | float) and not isinstance(data, bool)
    if type_name == "str":
        if isinstance(data, str):
            return data
        if is_number and owner in _QUANTITY_FIELDS:
            return _quantity_text(data, path, problems)
        problems.add(invalid(path, _brief(data), "expected a string"))
    elif type_name == "int":
        if isinstance(data, int) and not isinstance(data, bool):
            bits = 64 if owner in _INT64_FIELDS else 32
            if -(2 ** (bits - 1)) <= data < 2 ** (bits - 1):
                return data
            problems.add(invalid(path, data, f"must fit in an int{bits}"))
        else:
            problems.add(invalid(path, _brief(data), "expected an integer"))
    elif type_name == "float":
        if is_number and math.isfinite(data):
            return data
        problems.add(invalid(path, _brief(data), "expected a number"))
    elif type_name == "bool":
        if isinstance(data, bool):
            return data
        problems.add(invalid(path, _brief(data), "expected a boolean"))
    elif type_name == "datetime":
        when = _timestamp(data) if isinstance(data, str) else None
        if when is not None:
            return when
        problems.add(invalid(path, _brief(data), "expected an RFC 3339 time string "
                             "(e.g. 2006-01-02T15:04:05Z) between the years 1 and 9999"))
    elif type_name == "date":
        day = _date(data) if isinstance(data, str) else None
        if day is not None:
            return day
        problems.add(invalid(path, _brief(data), "expected a date (e.g. 2006-01-02)"))
    elif owner in _INT_OR_STRING_FIELDS:
        if isinstance(data, str) or (isinstance(data, int) and not isinstance(data, bool)
                                     and -(2**31) <= data < 2**31):
            return data
        problems.add(invalid(path, _brief(data), "expected a 32-bit integer or a string"))
    else:  # any JSON value (``fieldsV1``): the document reader has made it JSON already
        return data
    return None


def _value(data: Any, type_name: str, path: str, problems: _Problems,
           owner: tuple[str, str]) -> Any:
    if data is None:
        return None
    if type_name.startswith("list["):
        if not isinstance(data, list):
            problems.add(invalid(path, _brief(data), "expected a list"))
            return None
        item_type = type_name[5:-1]
        if item_type == "str":  # the common case (command, args), checked at C speed
            texts = ["" if item is None else item for item in data]
            if all(type(text) is str for text in texts):
                return texts
        return [_value(_zero(item_type) if item is None else item, item_type,
                       f"{path}[{index}]", problems, owner)
                for index, item in enumerate(data)]
    if type_name.startswith("dict("):
        if not isinstance(data, dict):
            problems.add(invalid(path, _brief(data), "expected an object"))
            return None
        value_type = type_name[len("dict(str, "):-1]
        quantity_map = path.rsplit(".", 1)[-1] in _QUANTITY_MAP_KEYS
        if value_type == "str" and not quantity_map:  # labels, annotations, selectors
            mapping = {key: "" if item is None else item for key, item in data.items()}
            if all(type(key) is str and type(text) is str for key, text in mapping.items()):
                return mapping
        result: dict[str, Any] = {}
        for key, item in data.items():
            item_path = index_path(path, key)
            if not isinstance(key, str):
                problems.add(invalid(item_path, _brief(key), "a key must be a string"))
            elif quantity_map and (item is None or (isinstance(item, int | float)
                                                    and not isinstance(item, bool))):
                # A bare YAML number is a quantity's text; null is a zero quantity.
                result[key] = _quantity_text(item, item_path, problems)
            else:
                zero = _zero(value_type) if item is None else item
                result[key] = _value(zero, value_type, item_path, problems, owner)
        return result
    model = _model_class(type_name)
    if model is not None:
        return _model(data, model, path, problems)
    return _scalar(data, type_name, path, problems, owner)


def _quantity_text(number: float | None, path: str, problems: _Problems) -> str | None:
    if number is None:
        return "0"
    if isinstance(number, float):
        if not math.isfinite(number):
            problems.add(invalid(path, number, "expected a finite number"))
            return None
        return go_json_float(number)  # the text upstream's YAML-to-JSON step gives it
    return str(number)


def _model(data: Any, model: Any, path: str, problems: _Problems) -> Any:
    if not isinstance(data, dict):
        problems.add(invalid(path, _brief(data), "expected an object"))
        return None
    attribute_map: dict[str, str] = model.attribute_map
    types = model_attributes(model)
    for required_attribute in sorted(_required_attributes(model)):
        if data.get(attribute_map[required_attribute]) is None:
            problems.add(required(_join(path, attribute_map[required_attribute])))
    by_json_key = _attributes_by_json_key(model)
    values: dict[str, Any] = {}
    for key, value in data.items():
        attribute = by_json_key.get(key) if isinstance(key, str) else None
        if attribute is not None:  # unknown fields are dropped, as in upstream's decoding
            values[attribute] = _value(value, types[attribute], _join(path, key), problems,
                                       (model.__name__, attribute))
    try:
        return model(**values)
    except ValueError:  # a required field is missing, which is reported above
        return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def index_path(path: str, key: Any) -> str:
    """``path[key]`` for a map entry, with an over-long key shortened for the message."""
    text = key if isinstance(key, str) else render(key)
    if len(text) > _PATH_KEY_MAX:
        text = text[:_PATH_KEY_MAX] + "..."
    return f"{path}[{text}]"


def _brief(value: Any) -> Any:
    if isinstance(value, dict):
        return _Shown("object")
    if isinstance(value, list):
        return _Shown("list")
    return value


def decode_pod(data: Any) -> tuple[V1Pod | None, list[str]]:
    """A ``V1Pod`` built from its JSON form by Go's decoding rules, and every error by field.

    Upstream decodes a manifest into typed Go structs, which is where type errors surface;
    this does the same checks while building the model: unknown fields are dropped; a
    ``null`` list item or map value becomes its type's zero value (``containers: [null]``
    is a container without a name); integers must fit the int32 or int64 upstream declares;
    times must be RFC 3339 within the years 1 to 9999 (and are held in UTC); ``IntOrString``
    ports must be one or the other. The pod is usable only when the error list is empty.
    """
    problems = _Problems()
    pod = _model(data, V1Pod, "", problems)
    errors = problems.result()
    return (pod if not errors else None), errors


# --- semantics of a decoded pod ------------------------------------------------------------------

def validate_pod(pod: V1Pod) -> list[str]:
    """Every reason ``pod`` would be refused by the API server, one string per field error."""
    errors: list[str] = []
    meta = pod.metadata
    name = meta.name if meta is not None else None
    namespace = meta.namespace if meta is not None else None
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    else:
        errors.extend(invalid("metadata.name", name, p) for p in dns1123_subdomain_errors(name))
    if not namespace:
        errors.append(required("metadata.namespace"))
    else:
        errors.extend(invalid("metadata.namespace", namespace, p)
                      for p in dns1123_label_errors(namespace))
    if meta is not None and meta.labels:
        errors.extend(_label_errors(meta.labels, "metadata.labels"))
    errors.extend(_spec_errors(pod.spec or V1PodSpec(containers=[])))
    return errors


def _label_errors(labels: dict[str, str], path: str) -> list[str]:
    errors: list[str] = []
    for key, value in labels.items():
        errors.extend(invalid(path, key, p) for p in qualified_name_errors(key))
        if len(value or "") > 63 or not _LABEL_VALUE.match(value or ""):
            errors.append(invalid(index_path(path, key), value, "a label value must be at most 63 "
                                  "alphanumerics, '-', '_' or '.', starting and ending with "
                                  "an alphanumeric"))
    return errors


def _spec_errors(spec: V1PodSpec) -> list[str]:
    errors: list[str] = []
    volumes = spec.volumes or []
    volume_names = _volume_errors(volumes, errors)

    containers = spec.containers or []
    init_containers = spec.init_containers or []
    if not containers:
        errors.append(required("spec.containers"))
    seen_names: set[str] = set()
    host_ports: set[tuple[int, str, str]] = set()
    for index, container in enumerate(init_containers):
        path = f"spec.initContainers[{index}]"
        errors.extend(_container_errors(container, path, volume_names, seen_names, spec,
                                        host_ports))
        sidecar = is_restartable_init_container(container)
        if container.restart_policy is not None and not sidecar:
            errors.append(not_supported(f"{path}.restartPolicy", container.restart_policy,
                                        ["Always"]))
        if not sidecar:
            for probe_field in ("lifecycle", "liveness_probe", "readiness_probe",
                                "startup_probe"):
                if getattr(container, probe_field) is not None:
                    errors.append(forbidden(f"{path}.{json_name(V1Container, probe_field)}",
                                            "may not be set for init containers without "
                                            "restartPolicy=Always"))
    for index, container in enumerate(containers):
        path = f"spec.containers[{index}]"
        errors.extend(_container_errors(container, path, volume_names, seen_names, spec,
                                        host_ports))
        if container.restart_policy is not None:
            errors.append(forbidden(f"{path}.restartPolicy",
                                    "may not be set for non-init containers"))

    if spec.restart_policy is not None and spec.restart_policy not in RESTART_POLICIES:
        errors.append(not_supported("spec.restartPolicy", spec.restart_policy, RESTART_POLICIES))
    if spec.dns_policy is not None and spec.dns_policy not in DNS_POLICIES:
        errors.append(not_supported("spec.dnsPolicy", spec.dns_policy, DNS_POLICIES))
    grace = spec.termination_grace_period_seconds
    if grace is not None and grace < 0:
        errors.append(invalid("spec.terminationGracePeriodSeconds", grace,
                              "must be greater than or equal to 0"))
    deadline = spec.active_deadline_seconds
    if deadline is not None and not 1 <= deadline <= INT32_MAX:
        errors.append(invalid("spec.activeDeadlineSeconds", deadline,
                              f"must be between 1 and {INT32_MAX}, inclusive"))
    if spec.hostname:
        errors.extend(invalid("spec.hostname", spec.hostname, p)
                      for p in dns1123_label_errors(spec.hostname))
    if spec.node_selector:
        errors.extend(_label_errors(spec.node_selector, "spec.nodeSelector"))
    for index, toleration in enumerate(spec.tolerations or []):
        path = f"spec.tolerations[{index}]"
        operator = toleration.operator or "Equal"
        if operator not in TOLERATION_OPERATORS:
            errors.append(not_supported(f"{path}.operator", operator, TOLERATION_OPERATORS))
        if operator == "Exists" and toleration.value:
            errors.append(invalid(f"{path}.operator", toleration.value,
                                  "value must be empty when `operator` is 'Exists'"))
        if not toleration.key and operator != "Exists":
            errors.append(invalid(f"{path}.operator", operator,
                                  "operator must be Exists when `key` is empty"))
        if toleration.effect and toleration.effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{path}.effect", toleration.effect, TAINT_EFFECTS))
    return errors


def _volume_errors(volumes: list[V1Volume], errors: list[str]) -> set[str]:
    names: set[str] = set()
    source_fields = [f for f in model_attributes(V1Volume) if f != "name"]
    for index, volume in enumerate(volumes):
        path = f"spec.volumes[{index}]"
        if not volume.name:
            errors.append(required(f"{path}.name"))
        else:
            errors.extend(invalid(f"{path}.name", volume.name, p)
                          for p in dns1123_label_errors(volume.name))
            if volume.name in names:
                errors.append(duplicate(f"{path}.name", volume.name))
            names.add(volume.name)
        kinds = [f for f in source_fields if getattr(volume, f) is not None]
        if not kinds:
            errors.append(required(path, "must specify a volume type"))
        elif len(kinds) > 1:
            errors.append(forbidden(f"{path}.{json_name(V1Volume, kinds[1])}",
                                    "may not specify more than 1 volume type"))
        if volume.host_path is not None:
            if not volume.host_path.path:
                errors.append(required(f"{path}.hostPath.path"))
            kind = volume.host_path.type
            if kind is not None and kind not in HOST_PATH_TYPES:
                errors.append(not_supported(f"{path}.hostPath.type", kind, HOST_PATH_TYPES))
        for files, files_path in _downward_api_files(volume, path):
            for number, file in enumerate(files):
                if file.resource_field_ref is not None:
                    errors.extend(_resource_field_ref_errors(
                        file.resource_field_ref, f"{files_path}[{number}].resourceFieldRef",
                        in_volume=True))
    return names


def _downward_api_files(volume: V1Volume,
                        path: str) -> list[tuple[list[V1DownwardAPIVolumeFile], str]]:
    """The downward API file lists of a volume (its own, or its projected sources')."""
    found = []
    if volume.downward_api is not None:
        found.append((volume.downward_api.items or [], f"{path}.downwardAPI.items"))
    if volume.projected is not None:
        for number, source in enumerate(volume.projected.sources or []):
            if source.downward_api is not None:
                found.append((source.downward_api.items or [],
                              f"{path}.projected.sources[{number}].downwardAPI.items"))
    return found


def _container_errors(container: V1Container, path: str, volume_names: set[str],
                      seen_names: set[str], spec: V1PodSpec,
                      host_ports: set[tuple[int, str, str]]) -> list[str]:
    errors: list[str] = []
    if not container.name:
        errors.append(required(f"{path}.name"))
    else:
        errors.extend(invalid(f"{path}.name", container.name, p)
                      for p in dns1123_label_errors(container.name))
        if container.name in seen_names:
            errors.append(duplicate(f"{path}.name", container.name))
        seen_names.add(container.name)
    image = container.image or ""
    if not image:
        errors.append(required(f"{path}.image"))
    elif image != image.strip():
        errors.append(invalid(f"{path}.image", image,
                              "must not have leading or trailing whitespace"))
    policy = container.image_pull_policy
    if policy is not None and policy not in PULL_POLICIES:
        errors.append(not_supported(f"{path}.imagePullPolicy", policy, PULL_POLICIES))
    message_policy = container.termination_message_policy
    if message_policy is not None and message_policy not in TERMINATION_MESSAGE_POLICIES:
        errors.append(not_supported(f"{path}.terminationMessagePolicy", message_policy,
                                    TERMINATION_MESSAGE_POLICIES))
    errors.extend(_port_errors(container, path, spec, host_ports))
    errors.extend(_env_errors(container, path))
    mount_paths: set[str] = set()
    for index, mount in enumerate(container.volume_mounts or []):
        mount_path = f"{path}.volumeMounts[{index}]"
        if not mount.name:
            errors.append(required(f"{mount_path}.name"))
        elif mount.name not in volume_names:
            errors.append(not_found(f"{mount_path}.name", mount.name))
        if not mount.mount_path:
            errors.append(required(f"{mount_path}.mountPath"))
        elif mount.mount_path in mount_paths:
            errors.append(invalid(f"{mount_path}.mountPath", mount.mount_path, "must be unique"))
        else:
            mount_paths.add(mount.mount_path)
    errors.extend(_resource_errors(container, path))
    for probe_field, must_be_one in (("liveness_probe", True), ("readiness_probe", False),
                                     ("startup_probe", True)):
        probe = getattr(container, probe_field)
        if probe is not None:
            probe_path = f"{path}.{json_name(V1Container, probe_field)}"
            errors.extend(_probe_errors(probe, probe_path, must_be_one))
    return errors


def _port_errors(container: V1Container, path: str, spec: V1PodSpec,
                 host_ports: set[tuple[int, str, str]]) -> list[str]:
    errors: list[str] = []
    port_names: set[str] = set()
    for index, port in enumerate(container.ports or []):
        port_path = f"{path}.ports[{index}]"
        if port.name:
            errors.extend(invalid(f"{port_path}.name", port.name, p)
                          for p in _port_name_errors(port.name))
            if port.name in port_names:
                errors.append(duplicate(f"{port_path}.name", port.name))
            port_names.add(port.name)
        number = port.container_port
        if number is None:
            errors.append(required(f"{port_path}.containerPort"))
        elif not 1 <= number <= 65535:
            errors.append(invalid(f"{port_path}.containerPort", number,
                                  "must be between 1 and 65535, inclusive"))
        host_port = port.host_port or 0
        if host_port and not 1 <= host_port <= 65535:
            errors.append(invalid(f"{port_path}.hostPort", host_port,
                                  "must be between 1 and 65535, inclusive"))
        protocol = port.protocol
        if protocol is not None and protocol not in PROTOCOLS:
            errors.append(not_supported(f"{port_path}.protocol", protocol, PROTOCOLS))
        if spec.host_network and host_port and host_port != number:
            errors.append(invalid(f"{port_path}.hostPort", host_port,
                                  "must match `containerPort` when `hostNetwork` is true"))
        if host_port:
            key = (host_port, protocol or "TCP", port.host_ip or "")
            if key in host_ports:
                errors.append(duplicate(f"{port_path}.hostPort", f"{host_port}/{key[1]}"))
            host_ports.add(key)
    return errors


def _env_errors(container: V1Container, path: str) -> list[str]:
    errors: list[str] = []
    for index, env in enumerate(container.env or []):
        env_path = f"{path}.env[{index}]"
        if not env.name:
            errors.append(required(f"{env_path}.name"))
        else:
            errors.extend(invalid(f"{env_path}.name", env.name, p)
                          for p in _env_var_name_errors(env.name))
        if env.value_from is not None:
            refs = [k for k, v in env.value_from.to_dict().items() if v is not None]
            if len(refs) != 1:
                errors.append(invalid(f"{env_path}.valueFrom", "",
                                      "must specify exactly one of: `fieldRef`, "
                                      "`resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` "
                                      "or `fileKeyRef`"))
            if env.value:
                errors.append(invalid(f"{env_path}.valueFrom", "",
                                      "may not be specified when `value` is not empty"))
            if env.value_from.resource_field_ref is not None:
                errors.extend(_resource_field_ref_errors(
                    env.value_from.resource_field_ref, f"{env_path}.valueFrom.resourceFieldRef",
                    in_volume=False))
    return errors


# What a resourceFieldRef (env or downward API file) may expose, and with which divisors.
_RESOURCE_FIELD_PATHS = ("limits.cpu", "limits.ephemeral-storage", "limits.memory",
                         "requests.cpu", "requests.ephemeral-storage", "requests.memory")
_HUGE_PAGES_FIELD_PREFIXES = ("limits.hugepages-", "requests.hugepages-")
_BYTE_DIVISORS = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi",
                  "1Ei")
_BYTE_DIVISORS_SPELLED = ", ".join(_BYTE_DIVISORS)
# Resource (after "limits."/"requests.") -> the divisors it takes, and the refusal's words.
_DIVISORS = {
    "cpu": (("1m", "1"), "1m and 1 are supported with the cpu resource"),
    "memory": (_BYTE_DIVISORS, f"{_BYTE_DIVISORS_SPELLED} are supported with the memory "
                               f"resource"),
    "ephemeral-storage": (_BYTE_DIVISORS, f"{_BYTE_DIVISORS_SPELLED} are supported with the "
                                          f"local ephemeral storage resource"),
    "hugepages-": (_BYTE_DIVISORS, f"{_BYTE_DIVISORS_SPELLED} are supported with the "
                                   f"hugepages resource"),
}


def _resource_field_ref_errors(ref: V1ResourceFieldSelector, path: str, *,
                              in_volume: bool) -> list[str]:
    """Upstream's checks of a ``resourceFieldRef``: a container named (in a volume), a
    resource the downward API exposes, and a divisor that resource supports."""
    errors: list[str] = []
    resource = ref.resource or ""
    huge_pages = resource.startswith(_HUGE_PAGES_FIELD_PREFIXES)
    exposed = huge_pages or resource in _RESOURCE_FIELD_PATHS
    if in_volume and not ref.container_name:
        errors.append(required(f"{path}.containerName"))
    elif not resource:
        errors.append(required(f"{path}.resource"))
    elif not exposed:
        errors.append(not_supported(f"{path}.resource", resource, _RESOURCE_FIELD_PATHS))
    if ref.divisor is None:
        return errors
    try:
        if parse_quantity(ref.divisor) == 0:
            return errors  # the zero quantity is an unset divisor: 1
    except ValueError as err:
        return [*errors, invalid(f"{path}.divisor", str(ref.divisor), str(err))]
    if not exposed:
        return errors
    allowed, supported = _DIVISORS["hugepages-" if huge_pages else resource.partition(".")[2]]
    if go_quantity(ref.divisor) not in allowed:
        errors.append(invalid(f"{path}.divisor", resource,
                              f"only divisor's values {supported}"))
    return errors


def _resource_errors(container: V1Container, path: str) -> list[str]:
    errors: list[str] = []
    resources = container.resources
    if resources is None:
        return errors
    parsed: dict[str, dict[str, Fraction]] = {"limits": {}, "requests": {}}
    for kind in ("limits", "requests"):
        for resource, raw in (getattr(resources, kind) or {}).items():
            field_path = f"{path}.resources.{kind}[{resource}]"
            try:
                amount = parse_quantity(raw)
            except ValueError as err:
                errors.append(invalid(field_path, str(raw), str(err)))
                continue
            if amount < 0:
                errors.append(invalid(field_path, str(raw), "must be greater than or equal to 0"))
            parsed[kind][resource] = amount
    for resource, request in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        if limit is not None and request > limit:
            raw_request = str((resources.requests or {})[resource])
            raw_limit = str((resources.limits or {})[resource])
            errors.append(invalid(f"{path}.resources.requests[{resource}]", raw_request,
                                  f"must be less than or equal to {resource} limit of "
                                  f"{raw_limit}"))
    return errors


def _probe_errors(probe: V1Probe, path: str, success_threshold_must_be_one: bool) -> list[str]:
    errors: list[str] = []
    handlers = [h for h in ("_exec", "http_get", "tcp_socket", "grpc")
                if getattr(probe, h) is not None]
    if not handlers:
        errors.append(required(path, "must specify a handler type"))
    elif len(handlers) > 1:
        errors.append(forbidden(f"{path}.{json_name(V1Probe, handlers[1])}",
                                "may not specify more than 1 handler type"))
    for attribute in ("initial_delay_seconds", "timeout_seconds", "period_seconds",
                      "success_threshold", "failure_threshold",
                      "termination_grace_period_seconds"):
        value = getattr(probe, attribute)
        if value is not None and value < 0:
            errors.append(invalid(f"{path}.{json_name(V1Probe, attribute)}", value,
                                  "must be greater than or equal to 0"))
    threshold = probe.success_threshold
    if success_threshold_must_be_one and threshold is not None and threshold not in (0, 1):
        errors.append(invalid(f"{path}.successThreshold", threshold, "must be 1"))
    if probe.http_get is not None:
        port = probe.http_get.port
        if isinstance(port, int) and not 1 <= port <= 65535:
            errors.append(invalid(f"{path}.httpGet.port", port,
                                  "must be between 1 and 65535, inclusive"))
    return errors


__all__ = [
    "decode_pod",
    "dns1123_label_errors",
    "dns1123_subdomain_errors",
    "index_path",
    "validate_pod",
]
