"""A container spec as Go's ``encoding/json`` writes the ``v1.Container`` struct.

The Go kubelet up to 1.30 hashes a container's JSON (``kuberuntime/hash.py``
says why that matters), so that JSON must come out byte for byte as Go writes
it, which differs from any Python serialiser in four ways:

- fields in the Go struct's declaration order, not alphabetical, with embedded
  (``json:",inline"``) structs' fields at the place of the embedding;
- ``omitempty`` leaves out empty strings, zero numbers, false, nil pointers and
  empty slices and maps, but never a struct value: ``resources`` is always
  there (``{}``), and so is a ``resourceFieldRef``'s ``divisor`` (``"0"``);
  fields without ``omitempty`` are written at their zero value (``""``, ``0``,
  ``null`` for a nil pointer);
- strings escape ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\u003c`` and so on,
  and control characters other than ``\\n``, ``\\r``, ``\\t`` as ``\\u00XX``;
  other non-ASCII characters are written as they are;
- a ``resource.Quantity`` is written as its parser kept it: the text as written
  when that text was already in the form the parser recognises as canonical
  (``129M``, ``1Gi``, ``100m``, ``1e3``), else the canonical form of its value
  (``0.5`` → ``500m``, ``1000m`` → ``1``, ``1024Ki`` → ``1Mi``); an
  ``IntOrString`` as a number or a string, as it was given. The values of a
  ``ResourceList`` (``limits``, ``requests``) are first rounded up to milli
  units (``100u`` → ``1m``), as v1 defaulting leaves them: the API server
  applies it, and so does the Go kubelet to a static pod, while pykubelet's
  defaulting keeps quantities as written. One difference is left: a decimal
  quantity above 2^63-1 (no resource can use one) is capped by pykubelet's
  parser, while upstream caps binary-suffixed ones only.

``CONTAINER_FIELDS`` is the table of the ``k8s.io/api/core/v1`` types reachable
from ``Container`` as of Kubernetes v1.20: each type's fields in declaration
order, with their kind and ``omitempty``. Fields added after v1.20 (which a
1.20 API server never serves) follow each type's v1.20 fields, in v1.35's
order, so that a static pod using them still hashes the same every time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final, NamedTuple

from pykubelet.api.quantity import (
    BINARY_POWERS,
    BINARY_SI,
    DECIMAL_EXPONENTS,
    DECIMAL_SI,
    format_quantity,
    int64_amount,
    parse_quantity,
)


class GoField(NamedTuple):
    key: str  # the JSON name
    kind: str  # one of the kinds below
    omitempty: bool = True
    of: str = ""  # the struct type, for STRUCT, POINTER and LIST


# Kinds of fields. Scalars are Go values (never nil); SCALAR_POINTER is a *string, *bool or
# *int64; STRUCT a struct value (always written); POINTER a pointer to a struct.
STRING: Final = "string"
INT: Final = "int"
BOOL: Final = "bool"
QUANTITY: Final = "quantity"
INT_OR_STRING: Final = "intOrString"
STRINGS: Final = "[]string"
INTS: Final = "[]int"
QUANTITIES: Final = "map[string]Quantity"
SCALAR_POINTER: Final = "*scalar"
STRUCT: Final = "struct"
POINTER: Final = "*struct"
LIST: Final = "[]struct"


def _f(key: str, kind: str, *, of: str = "", required: bool = False) -> GoField:
    return GoField(key, kind, not required, of)


def _handler(*newer: GoField) -> tuple[GoField, ...]:
    return (_f("exec", POINTER, of="ExecAction"), _f("httpGet", POINTER, of="HTTPGetAction"),
            _f("tcpSocket", POINTER, of="TCPSocketAction"), *newer)


_NAME_INLINE = _f("name", STRING)  # an embedded LocalObjectReference

CONTAINER_FIELDS: Final[Mapping[str, tuple[GoField, ...]]] = {
    "Container": (
        _f("name", STRING, required=True), _f("image", STRING), _f("command", STRINGS),
        _f("args", STRINGS), _f("workingDir", STRING),
        _f("ports", LIST, of="ContainerPort"), _f("envFrom", LIST, of="EnvFromSource"),
        _f("env", LIST, of="EnvVar"), _f("resources", STRUCT, of="ResourceRequirements"),
        _f("volumeMounts", LIST, of="VolumeMount"),
        _f("volumeDevices", LIST, of="VolumeDevice"),
        _f("livenessProbe", POINTER, of="Probe"), _f("readinessProbe", POINTER, of="Probe"),
        _f("startupProbe", POINTER, of="Probe"), _f("lifecycle", POINTER, of="Lifecycle"),
        _f("terminationMessagePath", STRING), _f("terminationMessagePolicy", STRING),
        _f("imagePullPolicy", STRING), _f("securityContext", POINTER, of="SecurityContext"),
        _f("stdin", BOOL), _f("stdinOnce", BOOL), _f("tty", BOOL),
        # Newer than v1.20.
        _f("resizePolicy", LIST, of="ContainerResizePolicy"),
        _f("restartPolicy", SCALAR_POINTER),
        _f("restartPolicyRules", LIST, of="ContainerRestartRule"),
    ),
    "ContainerPort": (
        _f("name", STRING), _f("hostPort", INT), _f("containerPort", INT, required=True),
        _f("protocol", STRING), _f("hostIP", STRING),
    ),
    "EnvFromSource": (
        _f("prefix", STRING), _f("configMapRef", POINTER, of="ConfigMapEnvSource"),
        _f("secretRef", POINTER, of="SecretEnvSource"),
    ),
    "ConfigMapEnvSource": (_NAME_INLINE, _f("optional", SCALAR_POINTER)),
    "SecretEnvSource": (_NAME_INLINE, _f("optional", SCALAR_POINTER)),
    "EnvVar": (
        _f("name", STRING, required=True), _f("value", STRING),
        _f("valueFrom", POINTER, of="EnvVarSource"),
    ),
    "EnvVarSource": (
        _f("fieldRef", POINTER, of="ObjectFieldSelector"),
        _f("resourceFieldRef", POINTER, of="ResourceFieldSelector"),
        _f("configMapKeyRef", POINTER, of="ConfigMapKeySelector"),
        _f("secretKeyRef", POINTER, of="SecretKeySelector"),
        # Newer than v1.20.
        _f("fileKeyRef", POINTER, of="FileKeySelector"),
    ),
    "ObjectFieldSelector": (_f("apiVersion", STRING), _f("fieldPath", STRING, required=True)),
    "ResourceFieldSelector": (
        _f("containerName", STRING), _f("resource", STRING, required=True),
        _f("divisor", QUANTITY),  # a struct value: omitempty does not leave it out
    ),
    "ConfigMapKeySelector": (
        _NAME_INLINE, _f("key", STRING, required=True), _f("optional", SCALAR_POINTER),
    ),
    "SecretKeySelector": (
        _NAME_INLINE, _f("key", STRING, required=True), _f("optional", SCALAR_POINTER),
    ),
    "FileKeySelector": (
        _f("volumeName", STRING, required=True), _f("path", STRING, required=True),
        _f("key", STRING, required=True), _f("optional", SCALAR_POINTER),
    ),
    "ResourceRequirements": (
        _f("limits", QUANTITIES), _f("requests", QUANTITIES),
        # Newer than v1.20.
        _f("claims", LIST, of="ResourceClaim"),
    ),
    "ResourceClaim": (_f("name", STRING, required=True), _f("request", STRING)),
    "ContainerResizePolicy": (
        _f("resourceName", STRING, required=True), _f("restartPolicy", STRING, required=True),
    ),
    "ContainerRestartRule": (
        _f("action", STRING), _f("exitCodes", POINTER, of="ContainerRestartRuleOnExitCodes"),
    ),
    "ContainerRestartRuleOnExitCodes": (_f("operator", STRING), _f("values", INTS)),
    "VolumeMount": (
        _f("name", STRING, required=True), _f("readOnly", BOOL),
        _f("mountPath", STRING, required=True), _f("subPath", STRING),
        _f("mountPropagation", SCALAR_POINTER), _f("subPathExpr", STRING),
        # Newer than v1.20 (declared after readOnly in v1.35).
        _f("recursiveReadOnly", SCALAR_POINTER),
    ),
    "VolumeDevice": (
        _f("name", STRING, required=True), _f("devicePath", STRING, required=True),
    ),
    "Probe": (
        *_handler(),
        _f("initialDelaySeconds", INT), _f("timeoutSeconds", INT), _f("periodSeconds", INT),
        _f("successThreshold", INT), _f("failureThreshold", INT),
        # Newer than v1.20 (grpc belongs to the embedded handler in v1.35).
        _f("grpc", POINTER, of="GRPCAction"),
        _f("terminationGracePeriodSeconds", SCALAR_POINTER),
    ),
    "Handler": _handler(_f("sleep", POINTER, of="SleepAction")),  # sleep: newer than v1.20
    "ExecAction": (_f("command", STRINGS),),
    "HTTPGetAction": (
        _f("path", STRING), _f("port", INT_OR_STRING, required=True), _f("host", STRING),
        _f("scheme", STRING), _f("httpHeaders", LIST, of="HTTPHeader"),
    ),
    "HTTPHeader": (_f("name", STRING, required=True), _f("value", STRING, required=True)),
    "TCPSocketAction": (_f("port", INT_OR_STRING, required=True), _f("host", STRING)),
    "GRPCAction": (
        _f("port", INT, required=True), _f("service", SCALAR_POINTER, required=True),
    ),
    "SleepAction": (_f("seconds", INT, required=True),),
    "Lifecycle": (
        _f("postStart", POINTER, of="Handler"), _f("preStop", POINTER, of="Handler"),
        # Newer than v1.20.
        _f("stopSignal", SCALAR_POINTER),
    ),
    "SecurityContext": (
        _f("capabilities", POINTER, of="Capabilities"), _f("privileged", SCALAR_POINTER),
        _f("seLinuxOptions", POINTER, of="SELinuxOptions"),
        _f("windowsOptions", POINTER, of="WindowsSecurityContextOptions"),
        _f("runAsUser", SCALAR_POINTER), _f("runAsGroup", SCALAR_POINTER),
        _f("runAsNonRoot", SCALAR_POINTER), _f("readOnlyRootFilesystem", SCALAR_POINTER),
        _f("allowPrivilegeEscalation", SCALAR_POINTER), _f("procMount", SCALAR_POINTER),
        _f("seccompProfile", POINTER, of="SeccompProfile"),
        # Newer than v1.20.
        _f("appArmorProfile", POINTER, of="AppArmorProfile"),
    ),
    "Capabilities": (_f("add", STRINGS), _f("drop", STRINGS)),
    "SELinuxOptions": (
        _f("user", STRING), _f("role", STRING), _f("type", STRING), _f("level", STRING),
    ),
    "WindowsSecurityContextOptions": (
        _f("gmsaCredentialSpecName", SCALAR_POINTER), _f("gmsaCredentialSpec", SCALAR_POINTER),
        _f("runAsUserName", SCALAR_POINTER),
        # Newer than v1.20.
        _f("hostProcess", SCALAR_POINTER),
    ),
    "SeccompProfile": (
        _f("type", STRING, required=True), _f("localhostProfile", SCALAR_POINTER),
    ),
    "AppArmorProfile": (
        _f("type", STRING, required=True), _f("localhostProfile", SCALAR_POINTER),
    ),
}


# --- strings ----------------------------------------------------------------------------------

_SHORT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE: Final = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029\ud800-\udfff]')


def _escape(match: re.Match[str]) -> str:
    char = match[0]
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    if "\ud800" <= char <= "\udfff":
        # A lone surrogate comes from a JSON escape, which Go decodes to U+FFFD.
        return "\ufffd"
    return f"\\u{ord(char):04x}"


def go_json_string(text: str) -> str:
    """``text`` as a JSON string the way ``encoding/json`` escapes it (HTML-safe)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


# --- quantities -------------------------------------------------------------------------------

_QUANTITY_PARTS: Final = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_DECIMAL_EXPONENT = "DecimalExponent"


def go_quantity(value: Any, *, round_up_to_milli: bool = False) -> str:
    """The string a ``resource.Quantity`` parsed from ``value`` marshals to (``"0"`` for
    None, the zero quantity). ``value`` must be a valid quantity. ``round_up_to_milli``:
    as v1 defaulting leaves the values of a ``ResourceList`` (a finer value is rounded up
    to milli units and loses its text)."""
    if value is None:
        return "0"
    text = str(value).strip()
    if text == "0":
        return text
    parts = _QUANTITY_PARTS.fullmatch(text)
    if parts is None:  # unreachable for a valid quantity; its value decides
        return format_quantity(parse_quantity(text))
    num, denom, suffix = parts[2] or "0", parts[3] or "", parts[4]
    if suffix in DECIMAL_EXPONENTS:
        fmt, exponent = DECIMAL_SI, DECIMAL_EXPONENTS[suffix]
    elif suffix in BINARY_POWERS:
        fmt, exponent = BINARY_SI, BINARY_POWERS[suffix]
    else:
        fmt, exponent = _DECIMAL_EXPONENT, int(suffix[1:])
    fast = int64_amount(num, denom, binary=fmt == BINARY_SI, exponent=exponent)
    rounded = round_up_to_milli and (fast is None or fast.scale < -3)
    if fast is not None and not rounded and fast.canonical:
        return text
    amount = parse_quantity(text)
    if rounded:
        milli = math.ceil(abs(amount) * 1000)  # away from zero, as upstream's RoundUp
        amount = Fraction(milli if amount >= 0 else -milli, 1000)
    if fmt != _DECIMAL_EXPONENT:
        return format_quantity(amount, fmt)
    # The same digits as DecimalSI, with the power of ten written as an exponent.
    decimal = format_quantity(amount, DECIMAL_SI)
    letters = decimal.lstrip("+-0123456789")
    digits = decimal[:len(decimal) - len(letters)]
    power = DECIMAL_EXPONENTS.get(letters, 0)
    return f"{digits}e{power}" if power else digits


# --- values -----------------------------------------------------------------------------------

def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return go_json_string(str(value))


def _field(field: GoField, value: Any) -> str | None:
    """The JSON of one field's value, or None when ``omitempty`` leaves it out."""
    kind, omit = field.kind, field.omitempty
    if kind == STRING:
        text = "" if value is None else str(value)
        return None if omit and not text else go_json_string(text)
    if kind == INT:
        number = int(value or 0)
        return None if omit and number == 0 else str(number)
    if kind == BOOL:
        return None if omit and not value else ("true" if value else "false")
    if kind == SCALAR_POINTER:
        if value is None:
            return None if omit else "null"
        return _scalar(value)
    if kind == QUANTITY:
        return go_json_string(go_quantity(value))
    if kind == INT_OR_STRING:
        if isinstance(value, str):
            return go_json_string(value)
        return str(int(value or 0))
    if kind in (STRINGS, INTS, LIST):
        if not value:
            return None if omit else "null"
        if kind == STRINGS:
            items = [go_json_string(str(item)) for item in value]
        elif kind == INTS:
            items = [str(int(item)) for item in value]
        else:
            items = [render_go_struct(item, field.of) for item in value]
        return "[" + ",".join(items) + "]"
    if kind == QUANTITIES:
        if not value:
            return None if omit else "null"
        # Keys sorted, as Go writes maps; values as v1 defaulting leaves a ResourceList.
        quantities = {key: go_quantity(value[key], round_up_to_milli=True) for key in value}
        return "{" + ",".join(f"{go_json_string(key)}:{go_json_string(quantities[key])}"
                              for key in sorted(quantities)) + "}"
    if kind == POINTER:
        if value is None:
            return None if omit else "null"
        return render_go_struct(value, field.of)
    if kind == STRUCT:
        return render_go_struct(value or {}, field.of)
    raise ValueError(f"unknown Go field kind {kind!r}")


def render_go_struct(data: Mapping[str, Any], type_name: str) -> str:
    """The JSON ``encoding/json`` writes for the ``k8s.io/api/core/v1`` struct ``type_name``
    (a type of ``CONTAINER_FIELDS``) holding ``data``, its camelCase JSON dictionary
    (``pykubelet.api.to_dict``). Keys the Go type does not have are left out."""
    members = []
    for field in CONTAINER_FIELDS[type_name]:
        rendered = _field(field, data.get(field.key))
        if rendered is not None:
            members.append(f'"{field.key}":{rendered}')
    return "{" + ",".join(members) + "}"


__all__ = ["CONTAINER_FIELDS", "GoField", "go_json_string", "go_quantity", "render_go_struct"]
