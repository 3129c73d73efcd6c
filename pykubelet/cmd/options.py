"""The kubelet command line: node-local flags, config-field flags, and their precedence.

Upstream splits kubelet settings into node-local flags (``KubeletFlags``: identity, paths,
credentials) and ``KubeletConfiguration`` fields, most of which can also be given as
(deprecated) flags. pykubelet keeps the same names and the same rules:

- ``--config`` loads a v1beta1 file, which is defaulted with the v1beta1 defaults; without
  it, the legacy flag defaults apply (anonymous auth on, AlwaysAllow, read-only port 10255).
- Flags for config fields that are given on the command line override the file, exactly
  as upstream re-parses the command line over the loaded file. Map flags replace the
  file's map, except ``--feature-gates``, which is merged over the file's gates.
- ``--max_pods`` and ``--max-pods`` are the same flag.
- A deprecated flag still works and prints pflag's warning, ``Flag --name has been
  deprecated, <reason>``, on stderr. Flags upstream removed after v1.20 that v1.20
  command lines carry are accepted the same way and ignored, as the v1.20 kubelet
  ignored them with a CRI runtime: ``--container-runtime=remote`` and
  ``--network-plugin``, which kubeadm 1.20 writes into
  ``/var/lib/kubelet/kubeadm-flags.env``, and dockershim's other networking flags.
- Every problem (unknown flag, bad value, invalid configuration) is reported at once.

The config-field flags are generated from the field declarations in
``pykubelet.config.types``, so a new field with a flag needs no change here.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TextIO

from pykubelet.api.wellknown import KUBELET_LABEL_NAMESPACES, KUBELET_LABELS
from pykubelet.cmd.version import get as build_info
from pykubelet.cmd.version import version_string
from pykubelet.config.codec import DecodeError, configz_body, read_config_file
from pykubelet.config.defaults import apply_legacy_flag_defaults, default_configuration
from pykubelet.config.errors import ConfigurationError
from pykubelet.config.features import (
    FeatureGateError,
    FeatureGates,
    parse_bool,
    parse_feature_gates_flag,
)
from pykubelet.config.server import KubeletFlags, KubeletServer
from pykubelet.config.support import fields_not_acted_on, is_acted_on
from pykubelet.config.types import (
    FieldSpec,
    FlagStyle,
    KubeletConfiguration,
    MemoryReservation,
    Taint,
    VModuleItem,
    config_fields,
    is_config_struct,
)
from pykubelet.config.units import Duration, UnitError
from pykubelet.config.validation import (
    is_qualified_name,
    is_valid_label_value,
    taint_errors,
    validate_configuration,
)

__all__ = [
    "ConfigurationError",
    "configz_body",
    "not_acted_on",
    "parse_command_line",
    "version_string",
]

CONFIG_FLAG_DEPRECATION: Final = ("DEPRECATED: this parameter should be set via the config file "
                                  "specified by the kubelet's --config flag")


def not_acted_on(server: KubeletServer) -> list[str]:
    """What the user set that pykubelet accepts but does not implement yet.

    Config file fields by their camelCase name, flags as ``--name``; sorted, for
    the one start-up notice. The same marks show in ``--help``.
    """
    node_flags = {flag.name: flag for flag in _NODE_FLAGS}
    config_flags = {flag.name: flag for flag in _CONFIG_FLAGS}
    flags = [f"--{name}" for name in server.flags_given
             if (name in node_flags and not node_flags[name].acted_on)
             or (name in config_flags
                 and not is_acted_on(config_flags[name].json_path, server.config))]
    return fields_not_acted_on(server.config_file_keys, server.config) + sorted(flags)


class _FlagValueError(ValueError):
    """A flag's text does not parse; the message is the part after 'flag: '."""


@dataclass(frozen=True)
class _NodeFlag:
    name: str
    attr: str  # "" for a flag upstream removed: its value is checked, then dropped
    kind: str  # "str" | "bool" | "int" | "duration" | "labels"
    help: str
    deprecated: str = ""
    # False: accepted so kubelet command lines work, but nothing reads it yet.
    acted_on: bool = True
    # The only values accepted, when not empty.
    choices: tuple[str, ...] = ()


_DOCKERSHIM_GONE: Final = "will be removed along with dockershim."

_NODE_FLAGS: Final[tuple[_NodeFlag, ...]] = (
    _NodeFlag("config", "config", "str",
              "Load the initial configuration from this KubeletConfiguration file. Flags for "
              "configuration fields given on the command line override values from the file."),
    _NodeFlag("kubeconfig", "kubeconfig", "str",
              "Path to a kubeconfig file for the API server; omitting it means standalone mode."),
    _NodeFlag("bootstrap-kubeconfig", "bootstrap_kubeconfig", "str",
              "Kubeconfig used to obtain a client certificate when --kubeconfig does not exist."),
    _NodeFlag("hostname-override", "hostname_override", "str",
              "Use this name as the node's identity instead of the hostname."),
    _NodeFlag("node-ip", "node_ip", "str",
              "IP address (or comma-separated dual-stack addresses) of the node."),
    _NodeFlag("root-dir", "root_dir", "str",
              "Directory for kubelet files (volume mounts, pod data, ...)."),
    _NodeFlag("cert-dir", "cert_dir", "str",
              "Directory holding the TLS certificates; ignored when --tls-cert-file and "
              "--tls-private-key-file are given."),
    _NodeFlag("cloud-provider", "cloud_provider", "str",
              "Cloud provider: empty for none, or 'external' when a cloud controller manager "
              "initializes the Node (it registers with the NoSchedule taint "
              "node.cloudprovider.kubernetes.io/uninitialized, and --node-ip is passed on in "
              "the alpha.kubernetes.io/provided-node-ip annotation). No other value is "
              "accepted: built-in cloud providers are gone."),
    _NodeFlag("node-labels", "node_labels", "labels",
              "Labels to add when registering the node, as key=value pairs separated by ','. "
              "Labels in the kubernetes.io namespace must use an allowed prefix "
              f"({', '.join(KUBELET_LABEL_NAMESPACES)}) or be a well-known kubelet label."),
    _NodeFlag("lock-file", "lock_file", "str",
              "<Warning: Alpha feature> Path to a file the kubelet uses as a lock file."),
    _NodeFlag("exit-on-lock-contention", "exit_on_lock_contention", "bool",
              "Exit when another process contends for --lock-file."),
    _NodeFlag("image-credential-provider-config", "image_credential_provider_config", "str",
              "Path to the credential provider plugin config file (a CredentialProviderConfig) "
              "or a directory of such files."),
    _NodeFlag("image-credential-provider-bin-dir", "image_credential_provider_bin_dir", "str",
              "Directory holding the credential provider plugin binaries."),
    _NodeFlag("pod-infra-container-image", "pod_infra_container_image", "str",
              "Sandbox image; the container runtime's own setting is used instead.",
              deprecated="will be removed in a future release; the image garbage collector "
                         "takes the sandbox image from the container runtime",
              acted_on=False),
    _NodeFlag("minimum-container-ttl-duration", "minimum_container_ttl_duration", "duration",
              "Minimum age of a finished container before it is garbage collected.",
              deprecated="use --eviction-hard or --eviction-soft instead"),
    _NodeFlag("maximum-dead-containers-per-container", "maximum_dead_containers_per_container",
              "int", "Maximum number of old instances to retain per container.",
              deprecated="use --eviction-hard or --eviction-soft instead"),
    _NodeFlag("maximum-dead-containers", "maximum_dead_containers", "int",
              "Maximum number of old container instances to retain globally (negative "
              "disables).", deprecated="use --eviction-hard or --eviction-soft instead"),
    # Removed upstream after v1.20 (dockershim's, and the runtime switch), yet kubeadm 1.20
    # writes them into kubeadm-flags.env: accepted with the warning upstream printed
    # before removing them, and ignored, as v1.20 ignored them with a CRI runtime.
    _NodeFlag("container-runtime", "", "str",
              "The container runtime: only 'remote', a CRI runtime at "
              "--container-runtime-endpoint, is supported ('docker' meant dockershim, which "
              "is gone).",
              deprecated="will be removed in 1.27 as the only valid value is 'remote'",
              choices=("remote",)),
    _NodeFlag("network-plugin", "", "str",
              "Ignored: dockershim's network plugin. Pod networking is the container "
              "runtime's (its CNI configuration).",
              deprecated=_DOCKERSHIM_GONE),
    _NodeFlag("cni-conf-dir", "", "str",
              "Ignored: dockershim's CNI configuration directory; the container runtime "
              "has its own.", deprecated=_DOCKERSHIM_GONE),
    _NodeFlag("cni-bin-dir", "", "str",
              "Ignored: dockershim's CNI plugin directories; the container runtime has "
              "its own.", deprecated=_DOCKERSHIM_GONE),
    _NodeFlag("cni-cache-dir", "", "str",
              "Ignored: dockershim's CNI cache directory; the container runtime has its own.",
              deprecated=_DOCKERSHIM_GONE),
    _NodeFlag("network-plugin-mtu", "", "int",
              "Ignored: dockershim's network plugin MTU.", deprecated=_DOCKERSHIM_GONE),
    _NodeFlag("print-config", "print_config", "bool",
              "pykubelet: validate, print the effective configuration as /configz serves it "
              "(JSON, manifest URL headers masked) and exit."),
)


@dataclass(frozen=True)
class _ConfigFlag:
    name: str
    path: tuple[str, ...]  # attribute names from KubeletConfiguration down to the field
    json_path: str
    annotation: Any
    spec: FieldSpec


def _collect_config_flags() -> tuple[_ConfigFlag, ...]:
    found: list[_ConfigFlag] = []

    def walk(cls: type[Any], attrs: tuple[str, ...], json_prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f, spec in config_fields(cls):
            annotation = hints[f.name]
            path, json_path = (*attrs, f.name), f"{json_prefix}{spec.json}"
            if is_config_struct(annotation):
                walk(annotation, path, f"{json_path}.")
            elif spec.flag:
                found.append(_ConfigFlag(spec.flag, path, json_path, annotation, spec))

    walk(KubeletConfiguration, (), "")
    return tuple(found)


_CONFIG_FLAGS: Final = _collect_config_flags()
_BOOL_FLAGS: Final = frozenset(
    ["version"]
    + [flag.name for flag in _NODE_FLAGS if flag.kind == "bool"]
    + [flag.name for flag in _CONFIG_FLAGS
       if flag.spec.flag_style is FlagStyle.SCALAR and flag.annotation is bool]
)


def _parse_int(text: str, bits: int, unsigned: bool = False) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise _FlagValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not low <= value <= high:
        raise _FlagValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _parse_flag_bool(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as err:
        raise _FlagValueError(str(err)) from None


def _parse_flag_duration(text: str) -> Duration:
    try:
        return Duration.parse(text)
    except UnitError as err:
        raise _FlagValueError(str(err)) from None


def _split_pairs(text: str, separator: str, split: bool = True) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in (text.split(",") if split else [text]):
        if not item.strip():
            continue
        key, sep, value = item.partition(separator)
        if not sep:
            raise _FlagValueError(f"malformed pair, expect string{separator}string")
        pairs.append((key.strip(), value.strip()))
    return pairs


def parse_taints(text: str) -> list[Taint]:
    """Parse ``key=value:Effect,key2:Effect`` as ``--register-with-taints`` does."""
    taints: list[Taint] = []
    for spec in text.split(","):
        if not spec:
            continue
        head, sep, effect = spec.rpartition(":")
        if not sep:
            raise _FlagValueError(f'invalid taint spec: {spec}')
        key, _, value = head.partition("=")
        taint = Taint(key=key, value=value, effect=effect)
        problems = taint_errors(taint)
        if problems:
            raise _FlagValueError(f"invalid taint spec: {spec}, {'; '.join(problems)}")
        taints.append(taint)
    return taints


def _parse_reserved_memory(text: str) -> list[MemoryReservation]:
    reservations: list[MemoryReservation] = []
    for entry in text.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        node, sep, limits = entry.partition(":")
        if not sep:
            raise _FlagValueError(f"the reserved memory has incorrect format, expected "
                                  f"numaNodeID:type=quantity[,type=quantity...], got {entry}")
        numa = _parse_int(node.strip(), 32)
        parsed = dict(_split_pairs(limits, "="))
        if not parsed:
            raise _FlagValueError(f"the reserved memory has incorrect format, expected "
                                  f"numaNodeID:type=quantity[,type=quantity...], got {entry}")
        reservations.append(MemoryReservation(numa_node=numa, limits=parsed))
    return reservations


def _parse_vmodule(text: str) -> list[VModuleItem]:
    items: list[VModuleItem] = []
    for pattern, level in _split_pairs(text, "="):
        items.append(VModuleItem(file_pattern=pattern, verbosity=_parse_int(level, 32, True)))
    return items


def _scalar_parser(flag: _ConfigFlag) -> Callable[[str], Any]:
    annotation = flag.annotation
    if annotation is bool:
        return _parse_flag_bool
    if annotation is int:
        return lambda text: _parse_int(text, flag.spec.int_bits, flag.spec.unsigned)
    if annotation is float:
        def parse_float(text: str) -> float:
            try:
                return float(text)
            except ValueError:
                raise _FlagValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') \
                    from None
        return parse_float
    if annotation is Duration:
        return _parse_flag_duration
    if flag.spec.flag_style is FlagStyle.IP:
        def parse_ip(text: str) -> str:
            try:
                ipaddress.ip_address(text)
            except ValueError:
                raise _FlagValueError(f'"{text}" is not a valid IP address') from None
            return text
        return parse_ip
    return lambda text: text


def _apply_config_flag(config: KubeletConfiguration, flag: _ConfigFlag, values: list[str]) -> None:
    """Set one config field from every occurrence of its flag, with pflag's accumulation rules."""
    owner: Any = config
    for attr in flag.path[:-1]:
        owner = getattr(owner, attr)
    attr = flag.path[-1]
    style = flag.spec.flag_style
    if style is FlagStyle.SCALAR or style is FlagStyle.IP:
        parse = _scalar_parser(flag)
        parsed = [parse(value) for value in values]
        setattr(owner, attr, parsed[-1])
    elif style is FlagStyle.CSV:
        items: list[str] = []
        for value in values:
            items.extend(part for part in value.split(",") if part != "")
        setattr(owner, attr, items)
    elif style in (FlagStyle.MAP, FlagStyle.MAP_NO_SPLIT, FlagStyle.LANGLE_MAP):
        separator = "<" if style is FlagStyle.LANGLE_MAP else "="
        mapping: dict[str, str] = {}
        for value in values:
            split = style is not FlagStyle.MAP_NO_SPLIT
            mapping.update(_split_pairs(value, separator, split=split))
        setattr(owner, attr, mapping)
    elif style is FlagStyle.COLON_MULTIMAP:
        headers: dict[str, list[str]] = {}
        for value in values:
            for key, item in _split_pairs(value, ":"):
                headers.setdefault(key, []).append(item)
        setattr(owner, attr, headers)
    elif style is FlagStyle.FEATURE_GATES:
        from_flags: dict[str, bool] = {}
        for value in values:
            try:
                from_flags.update(parse_feature_gates_flag(value))
            except FeatureGateError as err:
                raise _FlagValueError(str(err)) from None
        # Upstream merges the file's gates back in for every gate the flags did not name.
        setattr(owner, attr, {**getattr(owner, attr), **from_flags})
    elif style is FlagStyle.TAINTS:
        setattr(owner, attr, parse_taints(values[-1]))
    elif style is FlagStyle.RESERVED_MEMORY:
        reservations: list[MemoryReservation] = []
        for value in values:
            reservations.extend(_parse_reserved_memory(value))
        setattr(owner, attr, reservations)
    elif style is FlagStyle.VMODULE:
        setattr(owner, attr, _parse_vmodule(values[-1]))
    else:  # pragma: no cover - every FlagStyle is handled above
        raise AssertionError(style)


def _apply_node_flag(flags: KubeletFlags, flag: _NodeFlag, values: list[str]) -> None:
    if flag.choices and values[-1] not in flag.choices:
        raise _FlagValueError(f"must be one of: {', '.join(flag.choices)}")
    if not flag.attr:
        if flag.kind == "int":
            _parse_int(values[-1], 32)
        return
    if flag.kind == "str":
        setattr(flags, flag.attr, values[-1])
    elif flag.kind == "bool":
        setattr(flags, flag.attr, _parse_flag_bool(values[-1]))
    elif flag.kind == "int":
        setattr(flags, flag.attr, _parse_int(values[-1], 32))
    elif flag.kind == "duration":
        setattr(flags, flag.attr, _parse_flag_duration(values[-1]))
    elif flag.kind == "labels":
        for value in values:
            for item in value.split(","):
                if not item:
                    continue
                key, _, label_value = item.partition("=")
                flags.node_labels[key.strip()] = label_value.strip()
    else:  # pragma: no cover
        raise AssertionError(flag.kind)


def _label_namespace(key: str) -> str:
    namespace, sep, _ = key.partition("/")
    return namespace if sep else ""


def _is_kubernetes_label(key: str) -> bool:
    namespace = _label_namespace(key)
    return any(namespace == base or namespace.endswith("." + base)
               for base in ("kubernetes.io", "k8s.io"))


def _is_kubelet_label(key: str) -> bool:
    if key in KUBELET_LABELS:
        return True
    namespace = _label_namespace(key)
    return any(namespace == allowed or namespace.endswith("." + allowed)
               for allowed in KUBELET_LABEL_NAMESPACES)


def validate_flags(flags: KubeletFlags) -> list[str]:
    """Upstream ``ValidateKubeletFlags`` plus the node-local checks done at start-up."""
    errors: list[str] = []
    unknown = sorted(key for key in flags.node_labels
                     if _is_kubernetes_label(key) and not _is_kubelet_label(key))
    if unknown:
        errors.append(
            f"unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {unknown}; "
            f"--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
            f"({', '.join(KUBELET_LABEL_NAMESPACES)}) or be in the specifically allowed set "
            f"({', '.join(sorted(KUBELET_LABELS))})")
    for key, value in sorted(flags.node_labels.items()):
        problems = is_qualified_name(key) + is_valid_label_value(value)
        if problems:
            errors.append(f"invalid node labels (--node-labels): '{key}={value}' - "
                          f"{', '.join(problems)}")
    node_ips = flags.node_ips()
    for ip in node_ips:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            errors.append(f'invalid --node-ip "{flags.node_ip}": "{ip}" is not a valid IP address')
    if len(node_ips) > 2:
        errors.append(f'invalid --node-ip "{flags.node_ip}": at most two addresses, one per IP '
                      f'family, may be given')
    if flags.cloud_provider and not flags.external_cloud_provider:
        # Upstream refuses this in NewMainKubelet (cloudprovider.ErrorForDisabledProvider),
        # with this message; pykubelet refuses it before anything is touched.
        quoted = json.dumps(flags.cloud_provider, ensure_ascii=False)  # Go's %q, near enough
        errors.append(f"cloud provider {quoted} was specified, but built-in cloud providers "
                      f"are disabled. Please set --cloud-provider=external and migrate to an "
                      f"external cloud provider")
    if flags.exit_on_lock_contention and not flags.lock_file:
        errors.append("cannot exit on lock file contention (--exit-on-lock-contention): no lock "
                      "file specified (--lock-file)")
    return errors


class _ParseFailure(Exception):
    pass


# argparse's complaint about a flag given without its value, e.g.
# "argument --port: expected one argument".
_MISSING_VALUE: Final = re.compile(r"argument (?P<flag>-[^\s/:]+)[^:]*: expected one argument")


class _Parser(argparse.ArgumentParser):
    """argparse that reports problems instead of exiting, so they can be collected.

    A flag missing its value is reported in the Go kubelet's (pflag's) words, as the
    unknown flags are, so scripts that read the Go kubelet's errors read these too.
    """

    def error(self, message: str) -> NoReturn:
        missing = _MISSING_VALUE.fullmatch(message)
        if missing:
            raise _ParseFailure(f"flag needs an argument: {missing['flag']}")
        raise _ParseFailure(message)


def _metavar(flag: _ConfigFlag) -> str:
    style = flag.spec.flag_style
    if style is FlagStyle.SCALAR:
        if flag.annotation is bool:
            return "true|false"
        if flag.annotation is int:
            return f"{'u' if flag.spec.unsigned else ''}int{flag.spec.int_bits}"
        if flag.annotation is float:
            return "float"
        if flag.annotation is Duration:
            return "duration"
        return "string"
    return {
        FlagStyle.IP: "ip",
        FlagStyle.CSV: "strings",
        FlagStyle.MAP: "key=value,...",
        FlagStyle.MAP_NO_SPLIT: "key=value",
        FlagStyle.LANGLE_MAP: "signal<value,...",
        FlagStyle.COLON_MULTIMAP: "Header:value,...",
        FlagStyle.FEATURE_GATES: "Gate=true|false,...",
        FlagStyle.TAINTS: "key=value:Effect,...",
        FlagStyle.RESERVED_MEMORY: "node:type=quantity,...",
        FlagStyle.VMODULE: "pattern=N,...",
    }[style]


def _default_text(flag: _ConfigFlag, defaults: KubeletConfiguration) -> str:
    value: Any = defaults
    for attr in flag.path:
        value = getattr(value, attr)
    if value in ("", [], {}, None):
        return ""
    if isinstance(value, bool):
        return f" (default {str(value).lower()})"
    if isinstance(value, dict):
        joiner = "<" if flag.spec.flag_style is FlagStyle.LANGLE_MAP else "="
        return " (default " + ",".join(f"{k}{joiner}{v}" for k, v in value.items()) + ")"
    if isinstance(value, list):
        return " (default " + ",".join(str(item) for item in value) + ")"
    return f" (default {value})"


NOT_ACTED_ON_MARK: Final = "[not acted on yet]"


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="pykubelet",
        usage="pykubelet [flags]",
        description="pykubelet: the Kubernetes node agent. It runs the pods of its node "
                    "through a CRI container runtime.\n\n"
                    f"Flags marked {NOT_ACTED_ON_MARK} are accepted, so that kubelet command "
                    "lines and\nconfiguration files work unchanged, but pykubelet does not "
                    "implement them yet;\nstart-up lists the ones given.",
        add_help=False,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    general = parser.add_argument_group("General flags")
    general.add_argument("-h", "--help", action="store_true", dest="help",
                         help="Show this help and exit.")
    general.add_argument("--version", action="append", dest="version", nargs="?", const="true",
                         metavar="true|false|raw",
                         help="Print version information and exit.")

    node = parser.add_argument_group("Node-local flags (not part of KubeletConfiguration)")
    for flag in _NODE_FLAGS:
        help_text = flag.help if flag.acted_on else f"{NOT_ACTED_ON_MARK} {flag.help}"
        if flag.deprecated:
            help_text += f" (DEPRECATED: {flag.deprecated})"
        node.add_argument(f"--{flag.name}", dest=f"node:{flag.name}", action="append",
                          default=argparse.SUPPRESS, metavar=_node_metavar(flag), help=help_text)

    legacy_defaults = default_configuration()
    apply_legacy_flag_defaults(legacy_defaults)
    logging = parser.add_argument_group("Logging flags (KubeletConfiguration logging.*)")
    config = parser.add_argument_group(
        "KubeletConfiguration flags (override --config; prefer setting them in the file). "
        "Defaults shown are those of a kubelet started without --config")
    for cfg_flag in _CONFIG_FLAGS:
        group = logging if cfg_flag.json_path.startswith("logging.") else config
        help_text = (cfg_flag.spec.help or cfg_flag.json_path) + f" [{cfg_flag.json_path}]"
        if not is_acted_on(cfg_flag.json_path):
            help_text = f"{NOT_ACTED_ON_MARK} {help_text}"
        help_text += _default_text(cfg_flag, legacy_defaults)
        if cfg_flag.spec.flag_style is FlagStyle.FEATURE_GATES:
            help_text += ". Options are: " + "; ".join(FeatureGates.known_features())
        if cfg_flag.spec.flag_deprecated:
            help_text += f" ({CONFIG_FLAG_DEPRECATION})"
        names = [f"--{cfg_flag.name}"]
        if cfg_flag.name == "v":
            names.insert(0, "-v")
        group.add_argument(*names, dest=f"cfg:{cfg_flag.name}", action="append",
                           default=argparse.SUPPRESS, metavar=_metavar(cfg_flag),
                           help=help_text.replace("%", "%%"))
    return parser


def _node_metavar(flag: _NodeFlag) -> str:
    return {"str": "string", "bool": "true|false", "int": "int32", "duration": "duration",
            "labels": "key=value,..."}[flag.kind]


def _normalize_argv(argv: Sequence[str]) -> list[str]:
    """Rewrite the command line into one argparse reads the way pflag reads the original.

    Underscores in flag names become dashes; a bare boolean flag means ``=true`` (so a
    following word is never taken as its value); ``-v=3`` and ``-v3`` mean ``--v=3``.
    """
    normalized: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--":
            normalized.extend(argv[index:])
            break
        if arg.startswith("--") and len(arg) > 2:
            name, sep, value = arg[2:].partition("=")
            name = name.replace("_", "-")
            if not sep and name in _BOOL_FLAGS:
                normalized.append(f"--{name}=true")
            else:
                normalized.append(f"--{name}{sep}{value}")
        elif arg.startswith("-v") and len(arg) > 2 and arg[1] != "-":
            normalized.append("--v=" + arg[2:].removeprefix("="))
        else:
            normalized.append(arg)
    return normalized


def _print_help(parser: _Parser, out: TextIO) -> None:
    out.write(parser.format_help())


def parse_command_line(argv: Sequence[str], *, stdout: TextIO | None = None,
                       stderr: TextIO | None = None) -> KubeletServer:
    """Parse kubelet arguments (without the program name) into a validated ``KubeletServer``.

    Loads ``--config`` if given, applies flag precedence and defaults, and validates the
    result. Raises ``ConfigurationError`` listing every problem. ``--help``, ``--version``
    and ``--print-config`` print to ``stdout`` and raise ``SystemExit(0)``; a deprecated
    flag's warning goes to ``stderr``. Nothing but the config file is read; nothing on
    disk is created.
    """
    out = stdout or sys.stdout
    parser = _build_parser()
    args = _normalize_argv(argv)
    try:
        namespace, leftovers = parser.parse_known_args(args)
    except _ParseFailure as failure:
        raise ConfigurationError([str(failure)]) from None
    values: dict[str, Any] = vars(namespace)

    if values.get("help"):
        _print_help(parser, out)
        raise SystemExit(0)
    version_values = values.get("version") or []
    if version_values and version_values[-1] != "false":
        if version_values[-1] not in ("true", "raw"):
            raise ConfigurationError(
                [f'invalid argument "{version_values[-1]}" for "--version" flag'])
        if version_values[-1] == "raw":
            out.write(build_info().go_struct_text() + "\n")
        else:
            out.write(version_string() + "\n")
        raise SystemExit(0)

    errors: list[str] = []
    for leftover in leftovers:
        if leftover.startswith("-") and leftover != "-":
            errors.append(f"unknown flag: {leftover.split('=', 1)[0]}")
        else:
            errors.append(f'unknown command "{leftover}" (pykubelet takes no positional '
                          f'arguments)')

    flags_given = {key.split(":", 1)[1] for key in values
                   if key.startswith(("node:", "cfg:"))}
    flags = KubeletFlags()
    for node_flag in _NODE_FLAGS:
        given = values.get(f"node:{node_flag.name}")
        if given:
            if node_flag.deprecated:
                print(f"Flag --{node_flag.name} has been deprecated, {node_flag.deprecated}",
                      file=stderr or sys.stderr)
            try:
                _apply_node_flag(flags, node_flag, given)
            except _FlagValueError as err:
                errors.append(f'invalid argument "{given[-1]}" for "--{node_flag.name}" flag: '
                              f'{err}')

    config_file_keys: set[str] = set()
    if flags.config:
        try:
            config, config_file_keys, decode_errors = read_config_file(flags.config)
        except DecodeError as err:
            raise ConfigurationError(errors + [f"failed to load kubelet config file "
                                               f"{flags.config!r}: {e}" for e in err.errors]) \
                from None
        errors.extend(f"failed to load kubelet config file {flags.config!r}: {e}"
                      for e in decode_errors)
    else:
        config = default_configuration()
        apply_legacy_flag_defaults(config)

    for config_flag in _CONFIG_FLAGS:
        given = values.get(f"cfg:{config_flag.name}")
        if not given:
            continue
        try:
            _apply_config_flag(config, config_flag, given)
        except _FlagValueError as err:
            errors.append(f'invalid argument "{",".join(given)}" for "--{config_flag.name}" '
                          f'flag: {err}')

    flags.v = config.logging.verbosity
    errors.extend(validate_configuration(config))
    errors.extend(validate_flags(flags))
    if errors:
        raise ConfigurationError(errors)
    if flags.print_config:
        out.write(json.dumps(configz_body(config), indent=2, sort_keys=True) + "\n")
        raise SystemExit(0)
    return KubeletServer(flags=flags, config=config, config_file_keys=config_file_keys,
                         flags_given=flags_given)
