"""``ACTED_ON_FIELDS`` tells the truth: it names exactly the fields the kubelet reads.

The check parses ``pykubelet/`` (outside ``pykubelet/config/``, which decodes, defaults
and validates every field; the one it applies itself is ``ACTED_ON_BY_DEFAULTING``, and
``KubeletServer``'s accessors are followed to their callers) and collects reads of
``KubeletConfiguration`` fields. An attribute name alone proves nothing (``port``,
``address`` and ``authentication`` belong to many objects, and option objects such as
``cm.NodeConfig`` copy the configuration's names), so a read counts only when its base
is known to hold a ``KubeletConfiguration``:

- a name annotated ``KubeletConfiguration`` (a parameter or ``x: T = ...``), or bound to
  a call whose return annotation is ``KubeletConfiguration`` (also one element of a
  ``tuple[...]`` return, as ``read_config_file`` has) or to ``KubeletConfiguration()``;
- ``<server>.config`` where ``<server>`` is annotated ``KubeletServer``, and the names
  bound to either by plain assignment (``config, flags = server.config, server.flags``);
- ``self.<attr>`` in a class that declares or assigns ``<attr>`` as one of the above.

Methods count as reads of the fields they read: ``KubeletServer.feature_gates()`` reads
``featureGates``, ``KubeletConfiguration.effective_image_service_endpoint()`` the two
endpoints. Values copied into option objects are counted where they are copied.

What the rules cannot see is caught instead of guessed: a field-named attribute read
from an unresolved base that looks like a configuration holder (its last part names
``config`` or ``cfg``, as an unannotated ``def f(config)`` would) fails the test unless
it is in ``OTHER_CONFIG_HOLDERS``, a short list of objects known to be something else.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pykubelet
from pykubelet.config import (
    ACTED_ON_FIELDS,
    KubeletConfiguration,
    fields_not_acted_on,
    load_config_file,
)
from pykubelet.config.support import ACTED_ON_BY_DEFAULTING, READ_BUT_NOT_ACTED_ON
from pykubelet.config.types import config_fields

PACKAGE = Path(pykubelet.__file__).resolve().parent
ROOT = PACKAGE.parent
CONFIG_PACKAGE = PACKAGE / "config"

# python attribute name -> camelCase JSON name
FIELDS: dict[str, str] = {f.name: spec.json for f, spec in config_fields(KubeletConfiguration)}
NOT_FIELDS = frozenset({"kind", "apiVersion"})  # the type header, not fields that do anything

# Unresolved bases that look like a configuration but are not one: (file, base) -> what
# they are. Each must still occur, so the list cannot go stale.
OTHER_CONFIG_HOLDERS: dict[tuple[str, str], str] = {
    ("pykubelet/kubelet/resources.py", "manager.config"): "cm.NodeConfig",
    ("pykubelet/kubelet/kubelet.py", "self.resources.container_manager.config"):
        "cm.NodeConfig",
}

CONFIG, SERVER, OTHER = "config", "server", "other"
CONFIG_TYPES = {"KubeletConfiguration": CONFIG, "KubeletServer": SERVER}
_HOLDER_NAME = re.compile(r"(config|cfg)", re.IGNORECASE)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _type_kind(node: ast.expr | None) -> str | None:
    """CONFIG or SERVER for annotations naming those types (``| None`` too), else OTHER."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return OTHER
    for part in ast.walk(node):
        name = (part.id if isinstance(part, ast.Name)
                else part.attr if isinstance(part, ast.Attribute) else None)
        if name in CONFIG_TYPES:
            return CONFIG_TYPES[name]
    return OTHER


def _return_kinds(node: ast.expr | None) -> tuple[str | None, ...] | None:
    """What a return annotation gives: (kind,) for one value, one kind per tuple element."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "tuple" and isinstance(node.slice, ast.Tuple)):
        return tuple(_type_kind(e) for e in node.slice.elts)
    return (_type_kind(node),)


def _own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of one scope: not the bodies of nested functions and classes (lambdas and
    comprehensions close over the scope's names, so they belong to it)."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, Function | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


@dataclass
class Scan:
    """What a scan found: field reads and unresolved holder-looking bases, with places."""

    reads: dict[str, list[str]] = field(default_factory=dict)
    unresolved: dict[tuple[str, str], list[int]] = field(default_factory=dict)


@dataclass
class _Scanner:
    returns: dict[str, tuple[str | None, ...]]  # function name -> kinds it returns
    config_methods: dict[str, set[str]]  # KubeletConfiguration method -> fields it reads
    server_methods: dict[str, set[str]]  # KubeletServer method -> fields it reads
    scan: Scan = field(default_factory=Scan)

    def kind(self, node: ast.expr, names: dict[str, str], attrs: dict[str, str]) -> str | None:
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return attrs.get(node.attr)
            if node.attr == "config" and self.kind(node.value, names, attrs) == SERVER:
                return CONFIG
            return None
        if isinstance(node, ast.Call):
            callee = node.func
            name = (callee.id if isinstance(callee, ast.Name)
                    else callee.attr if isinstance(callee, ast.Attribute) else "")
            if name in CONFIG_TYPES:
                return CONFIG_TYPES[name]
            kinds = self.returns.get(name)
            return kinds[0] if kinds is not None and len(kinds) == 1 else None
        return None

    def _bindings(self, node: ast.AST, names: dict[str, str],
                  attrs: dict[str, str]) -> Iterator[tuple[ast.expr, str | None]]:
        if isinstance(node, ast.AnnAssign):
            yield node.target, _type_kind(node.annotation)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple):
                    if isinstance(node.value, ast.Tuple):
                        for t, v in zip(target.elts, node.value.elts, strict=False):
                            yield t, self.kind(v, names, attrs)
                    elif isinstance(node.value, ast.Call):
                        callee = node.value.func
                        name = (callee.id if isinstance(callee, ast.Name)
                                else callee.attr if isinstance(callee, ast.Attribute) else "")
                        kinds = self.returns.get(name, ())
                        for t, k in zip(target.elts, kinds, strict=False):
                            yield t, k
                else:
                    yield target, self.kind(node.value, names, attrs)

    def names_of(self, scope: ast.AST, inherited: dict[str, str], attrs: dict[str, str],
                 nodes: list[ast.AST]) -> dict[str, str]:
        """The kinds of the names of ``scope`` (whose own ``nodes`` are given): parameters,
        then assignments to a fixed point (a name keeps the first kind it gets)."""
        names = dict(inherited)
        if isinstance(scope, Function | ast.Lambda):
            args = scope.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                kind = _type_kind(arg.annotation)
                if kind is not None:
                    names[arg.arg] = kind
        assignments = [n for n in nodes if isinstance(n, ast.Assign | ast.AnnAssign)]
        bound: set[str] = set()
        changed = True
        while changed:
            changed = False
            for node in assignments:
                for target, kind in self._bindings(node, names, attrs):
                    if (isinstance(target, ast.Name) and kind is not None
                            and target.id not in bound):
                        names[target.id] = kind
                        bound.add(target.id)
                        changed = True
        return names

    def self_attrs(self, cls: ast.ClassDef, inherited: dict[str, str]) -> dict[str, str]:
        """The kinds of ``self.<attr>`` in a class: annotated fields, then assignments."""
        attrs: dict[str, str] = {}
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                attrs[node.target.id] = _type_kind(node.annotation) or OTHER
        for method in cls.body:
            if not isinstance(method, Function):
                continue
            nodes = list(_own_nodes(method))
            names = self.names_of(method, inherited, attrs, nodes)
            for node in nodes:
                for target, kind in self._bindings(node, names, attrs):
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self" and kind is not None):
                        attrs.setdefault(target.attr, kind)
        return attrs

    def visit(self, scope: ast.AST, path: str, inherited: dict[str, str],
              attrs: dict[str, str]) -> None:
        nodes = list(_own_nodes(scope))
        names = self.names_of(scope, inherited, attrs, nodes)
        # A class body's names are not visible in its methods.
        enclosing = inherited if isinstance(scope, ast.ClassDef) else names
        for node in nodes:
            if isinstance(node, Function):
                self.visit(node, path, enclosing, attrs)
            elif isinstance(node, ast.ClassDef):
                self.visit(node, path, enclosing, self.self_attrs(node, enclosing))
            elif isinstance(node, ast.Attribute):
                self.attribute(node, path, names, attrs)

    def attribute(self, node: ast.Attribute, path: str, names: dict[str, str],
                  attrs: dict[str, str]) -> None:
        kind = self.kind(node.value, names, attrs)
        where = f"{path}:{node.lineno}"
        read: set[str] = set()
        if kind == CONFIG:
            read = {node.attr} if node.attr in FIELDS else self.config_methods.get(node.attr, set())
        elif kind == SERVER:
            read = self.server_methods.get(node.attr, set())
        elif kind is None and node.attr in FIELDS:
            base = ast.unparse(node.value)
            if _HOLDER_NAME.search(base.rsplit(".", 1)[-1]):
                self.scan.unresolved.setdefault((path, base), []).append(node.lineno)
        for attr in read:
            self.scan.reads.setdefault(FIELDS[attr], []).append(where)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _fields_read_by_methods(tree: ast.Module, cls_name: str,
                            base: tuple[str, ...]) -> dict[str, set[str]]:
    """For class ``cls_name``: method -> the fields it reads as ``self.<base...>.<field>``."""
    methods: dict[str, set[str]] = {}
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name == cls_name):
            continue
        for method in cls.body:
            if not isinstance(method, Function):
                continue
            fields = set()
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and node.attr in FIELDS:
                    chain: list[str] = []
                    value: ast.expr = node.value
                    while isinstance(value, ast.Attribute):
                        chain.insert(0, value.attr)
                        value = value.value
                    if isinstance(value, ast.Name) and (value.id, *chain) == ("self", *base):
                        fields.add(node.attr)
            methods[method.name] = fields
    return methods


@functools.cache
def _package_sources() -> dict[str, ast.Module]:
    """Every module of ``pykubelet/``, parsed once per test run (it is not modified)."""
    return {str(p.relative_to(ROOT)): _parse(p) for p in sorted(PACKAGE.rglob("*.py"))}


def scan_package(modules: dict[str, ast.Module] | None = None) -> Scan:
    """Scan ``modules`` (default: ``pykubelet/`` less ``pykubelet/config/``)."""
    everything = _package_sources()
    returns: dict[str, tuple[str | None, ...]] = {}
    for tree in everything.values():
        for node in ast.walk(tree):
            if isinstance(node, Function):
                kinds = _return_kinds(node.returns)
                if kinds and any(k in (CONFIG, SERVER) for k in kinds):
                    returns.setdefault(node.name, kinds)
    scanner = _Scanner(
        returns,
        config_methods=_fields_read_by_methods(everything["pykubelet/config/types.py"],
                                               "KubeletConfiguration", ()),
        server_methods=_fields_read_by_methods(everything["pykubelet/config/server.py"],
                                               "KubeletServer", ("config",)))
    if modules is None:
        modules = {path: tree for path, tree in everything.items()
                   if not path.startswith("pykubelet/config/")}
    for path, tree in modules.items():
        scanner.visit(tree, path, {}, {})
    return scanner.scan


@pytest.fixture(scope="module")
def scan() -> Scan:
    return scan_package()


def _snippet(source: str) -> Scan:
    return scan_package({"snippet.py": ast.parse(source)})


# --- the list is true -----------------------------------------------------------------------

def test_every_field_the_kubelet_reads_is_listed_as_acted_on(scan: Scan) -> None:
    missing = {name: places for name, places in scan.reads.items()
               if name not in ACTED_ON_FIELDS and name not in READ_BUT_NOT_ACTED_ON}
    assert missing == {}, "read, so add them to ACTED_ON_FIELDS in pykubelet/config/support.py"


def test_every_field_listed_as_acted_on_is_read_somewhere(scan: Scan) -> None:
    unread = ACTED_ON_FIELDS - NOT_FIELDS - ACTED_ON_BY_DEFAULTING - scan.reads.keys()
    assert unread == set(), "nothing reads them: remove them from ACTED_ON_FIELDS"


def test_no_configuration_holder_is_left_unresolved(scan: Scan) -> None:
    unknown = {key: lines for key, lines in scan.unresolved.items()
               if key not in OTHER_CONFIG_HOLDERS}
    assert unknown == {}, ("cannot tell whether these hold a KubeletConfiguration: annotate "
                           "them, or list them in OTHER_CONFIG_HOLDERS if they do not")
    assert set(OTHER_CONFIG_HOLDERS) <= set(scan.unresolved), "stale OTHER_CONFIG_HOLDERS"


def test_the_documented_exceptions_still_hold(scan: Scan) -> None:
    listed = set(ACTED_ON_FIELDS)
    assert listed <= set(FIELDS.values()) | NOT_FIELDS, "not a top-level field"
    # Read, but deliberately not listed.
    assert scan.reads.keys() >= READ_BUT_NOT_ACTED_ON
    assert not READ_BUT_NOT_ACTED_ON & listed
    # Listed though unread outside the config package: defaulting consumes them there.
    assert listed >= ACTED_ON_BY_DEFAULTING
    assert not ACTED_ON_BY_DEFAULTING & scan.reads.keys(), "read now: drop the exception"
    defaults = (CONFIG_PACKAGE / "defaults.py").read_text(encoding="utf-8")
    python_names = {json: name for name, json in FIELDS.items()}
    for name in ACTED_ON_BY_DEFAULTING:
        assert f"config.{python_names[name]}" in defaults, name


def test_fields_the_kubelet_now_implements_are_not_reported() -> None:
    keys = {"serverTLSBootstrap", "configMapAndSecretChangeDetectionStrategy",
            "allowedUnsafeSysctls", "featureGates", "podsPerCore",
            "mergeDefaultEvictionSettings", "hairpinMode", "seccompDefault", "contentType"}
    assert fields_not_acted_on(keys) == ["contentType", "hairpinMode"]



def test_a_feature_a_file_switches_off_with_zero_is_not_reported(tmp_path: Path) -> None:
    # kubeadm 1.20's config.yaml writes these three as 0s on every node.
    file = tmp_path / "config.yaml"
    file.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                    "shutdownGracePeriod: 0s\nshutdownGracePeriodCriticalPods: 0s\n"
                    "streamingConnectionIdleTimeout: 0s\n")
    config, keys = load_config_file(file)
    # 0s there is not "off": defaulting makes it 4h, which pykubelet does not enforce.
    assert fields_not_acted_on(keys, config) == ["streamingConnectionIdleTimeout"]
    file.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                    "shutdownGracePeriod: 30s\nstreamingConnectionIdleTimeout: 4h\n")
    config, keys = load_config_file(file)
    assert fields_not_acted_on(keys, config) == ["shutdownGracePeriod",
                                                 "streamingConnectionIdleTimeout"]

# --- the scan sees what it must, and nothing it must not ------------------------------------

def test_scan_follows_the_server_to_its_configuration() -> None:
    found = _snippet(
        "def f(server: KubeletServer, other: Thing):\n"
        "    config, flags = server.config, server.flags\n"
        "    use(config.pods_per_core, server.config.max_pods, other.port)\n"
        "    gates = server.feature_gates()\n"
        "    cb = lambda: config.seccomp_default\n"
        "    def inner():\n"
        "        return config.cluster_dns\n")
    assert sorted(found.reads) == ["clusterDNS", "featureGates", "maxPods", "podsPerCore",
                                   "seccompDefault"]
    assert found.unresolved == {}


def test_scan_follows_return_annotations_and_self() -> None:
    found = _snippet(
        "def g(path):\n"
        "    config, keys, errors = read_config_file(path)\n"
        "    fresh = default_configuration()\n"
        "    return config.logging, fresh.address, fresh.effective_image_service_endpoint()\n"
        "class Holder:\n"
        "    def __init__(self, cfg: KubeletConfiguration) -> None:\n"
        "        self._cfg = cfg\n"
        "    def port(self) -> int:\n"
        "        return self._cfg.port\n")
    assert sorted(found.reads) == ["address", "containerRuntimeEndpoint",
                                   "imageServiceEndpoint", "logging", "port"]


def test_scan_ignores_other_objects_and_flags_unannotated_configs() -> None:
    found = _snippet(
        "def h(config: NodeConfig, probe, config2):\n"
        "    use(config.cgroup_root, probe.port, probe.address)\n"
        "    return config2.max_pods\n")
    assert found.reads == {}
    assert found.unresolved == {("snippet.py", "config2"): [3]}
