"""Generators of malformed input for the three decoders that read bytes from outside.

A static pod file, the manifest URL's body (anyone's server) and the ``--config`` file
are hostile input. These strategies start from a valid document and break it the
ways seen in the field and in fuzzing: values of the wrong type or beyond every
numeric range, YAML that JSON cannot express (tags, complex keys, aliases, merge
keys), nesting and alias fan-out, and bytes that are not text at all.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import strategies as st

from pykubelet.config.types import KubeletConfiguration, config_fields, is_config_struct

PLACEHOLDER = "__HOSTILE_FRAGMENT__"

BASE_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                 "annotations": {"team": "a"}, "creationTimestamp": None},
    "spec": {
        "containers": [{
            "name": "app",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "sleep 3600"],
            "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"}],
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"},
                          "requests": {"cpu": "50m"}},
            "livenessProbe": {"httpGet": {"port": 80, "path": "/"}, "periodSeconds": 5},
            "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "securityContext": {"runAsUser": 1000},
        }],
        "initContainers": [{"name": "init", "image": "busybox:1.36", "args": ["true"]}],
        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                    {"name": "cfg", "hostPath": {"path": "/etc", "type": "Directory"}}],
        "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5,
                         "effect": "NoExecute"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "terminationGracePeriodSeconds": 30,
        "activeDeadlineSeconds": 600,
        "securityContext": {"fsGroup": 2000, "supplementalGroups": [1, 2]},
        "dnsPolicy": "ClusterFirst",
    },
    "status": {"phase": "Pending", "startTime": "2024-01-01T00:00:00Z",
               "conditions": [{"type": "Ready", "status": "False",
                               "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
}

BASE_CONFIG: dict[str, Any] = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "staticPodPath": "/etc/kubernetes/manifests",
    "syncFrequency": "10s",
    "fileCheckFrequency": "20s",
    "maxPods": 110,
    "podPidsLimit": -1,
    "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
    "evictionSoft": {"memory.available": "200Mi"},
    "evictionSoftGracePeriod": {"memory.available": "1m"},
    "evictionMinimumReclaim": {"memory.available": "0Mi"},
    "kubeReserved": {"cpu": "100m", "memory": "128Mi"},
    "qosReserved": {"memory": "50%"},
    "featureGates": {"GracefulNodeShutdown": True},
    "shutdownGracePeriod": "30s",
    "registerWithTaints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
    "logging": {"format": "text", "verbosity": 2, "flushFrequency": "5s"},
    "memoryThrottlingFactor": 0.9,
    "containerLogMaxSize": "10Mi",
    "imageMinimumGCAge": "2m",
    "staticPodURLHeader": {"Authorization": ["Bearer x"]},
    "clusterDNS": ["10.96.0.10"],
    "clusterDomain": "cluster.local",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
    "authentication": {"anonymous": {"enabled": False}, "webhook": {"cacheTTL": "2m"}},
    "readOnlyPort": 0,
    "tlsCipherSuites": ["TLS_AES_128_GCM_SHA256"],
}


def _config_paths() -> list[tuple[str, ...]]:
    """Every field of the configuration as a path of JSON names, nested structs included."""
    import typing

    paths: list[tuple[str, ...]] = []

    def walk(cls: type[Any], prefix: tuple[str, ...]) -> None:
        hints = typing.get_type_hints(cls)
        for f, spec in config_fields(cls):
            path = (*prefix, spec.json)
            paths.append(path)
            if is_config_struct(hints[f.name]):
                walk(hints[f.name], path)

    walk(KubeletConfiguration, ())
    return paths


CONFIG_FIELD_PATHS = _config_paths()

# Values that have broken decoders: each is a class of trouble, not a single case.
HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**25,
    1.5, -0.0, 1e308, 1e-308, "", " ", "x", "-", "0", "1e9999999", "1e-9999999", "-1e400",
    "1e2147483648", "9Ei", "9223372036854775807", "0.0001", "1.", ".", "100%", "nan%",
    "1e999%", "-5%", "9999999999999999999h", "1.5", "10s", "-10s", "0s", "2562047h48m",
    "1" * 5000, "1." + "1" * 5000 + "s", "0-" + "9" * 5000, "x" * 5000, "a/" * 3000,
    "\x00", "\u202e\u200b", "é", "2024-01-01T00:00:00Z", "x",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2024-02-30T00:00:00Z",
    "2024-01-01T00:00:00.1234567890123Z", "0000-01-01T00:00:00Z",
    [], [None], [[[]]], [1, "a", None], {}, {"a": None}, {"": ""}, {"a": {"b": {"c": []}}},
    {"cpu": None}, {"memory": 1e30}, [{"name": None}], [{}],
]

# Raw YAML that JSON cannot express or that stresses the reader; substituted for a value.
HOSTILE_FRAGMENTS: list[str] = [
    "!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2001-12-14", "!!omap [{a: 1}]",
    "!foo bar", "!!python/object:os.system ls", "!!int 1x", "!!float inf", "!!null x",
    "!!str 12", "! 12", "!!bool maybe", "&a [*a]", "&b {k: *b}", "*nowhere", ".inf", "-.Inf",
    ".NaN", "[" * 300 + "]" * 300, "{a: " * 120 + "1" + "}" * 120, "1" + "0" * 5000,
    "0x" + "f" * 40, "-0b" + "1" * 70, "1" + "0" * 400 + ".5", "1.0e+400", "0b_", "0_8",
    "{1: x}", "{~: x}", "{[a]: b}", "{{a: 1}: b}", "{1.5: a, true: b}", "{<<: [1]}",
    "{<<: {a: 1}, a: 2}", "'\\x00'", '"\\u0000"', '"\\ud800"', '"\\U0010FFFF"', "<<",
    "2001-12-14 21:59:43.10 -5", "8080:80", "=", "~", "null", "yes", "on", "0755",
    "{a: 1, a: 2}", "[&x a, *x, *x]",
]


def alias_fanout(levels: int, width: int) -> str:
    """The classic billion-laughs shape: each level lists the previous one ``width`` times."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "{" + ", ".join(lines) + "}"


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return document


def _ensure(document: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set a nested field, creating (or replacing non-object) parents on the way."""
    parent: Any = document
    for step in path[:-1]:
        if not isinstance(parent.get(step), dict):
            parent[step] = {}
        parent = parent[step]
    parent[path[-1]] = value


def _serialise(document: Any, style: str, fragments: list[str]) -> bytes:
    if style == "json":
        text = json.dumps(document)
    else:
        text = yaml.safe_dump(document, default_flow_style=style == "flow", width=4096)
    for fragment in fragments:
        quoted = [f'"{PLACEHOLDER}"', f"'{PLACEHOLDER}'", PLACEHOLDER]
        for form in quoted:
            if form in text:
                text = text.replace(form, fragment, 1)
                break
    return text.encode()


@st.composite
def broken_documents(draw: st.DrawFn, base: dict[str, Any],
                     field_paths: list[tuple[str, ...]] | None = None) -> bytes:
    """``base`` with a few of its values, keys or raw text replaced by hostile ones."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.binary(max_size=300))
    if choice == 1:
        text = yaml.safe_dump(base)
        cut = draw(st.integers(0, len(text)))
        noise = draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
        return (text[:cut] + noise + text[cut:]).encode("utf-8", "surrogatepass")
    document = copy.deepcopy(base)
    fragments: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.integers(0, 5))
        if action == 5 and field_paths and isinstance(document, dict):
            path: tuple[Any, ...] = draw(st.sampled_from(field_paths))
            _ensure(document, path, copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES))))
            continue
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        if action <= 1:
            document = _set(document, path, copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES))))
        elif action == 2:
            fragments.append(draw(st.sampled_from(HOSTILE_FRAGMENTS)))
            document = _set(document, path, PLACEHOLDER)
        elif action == 3:
            document = _set(document, path, draw(st.recursive(
                st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                                      allow_infinity=False)
                | st.text(max_size=10),
                lambda children: st.lists(children, max_size=3)
                | st.dictionaries(st.text(max_size=5), children, max_size=3),
                max_leaves=8)))
        elif action == 4 and path and isinstance(document, dict):
            parent: Any = document
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict):
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.append(None)
    if draw(st.integers(0, 9)) == 0:
        fragments.append(alias_fanout(draw(st.integers(2, 6)), draw(st.integers(2, 12))))
        path = draw(st.sampled_from(_paths(document)))
        document = _set(document, path, PLACEHOLDER)
    style = draw(st.sampled_from(["block", "flow", "json"]))
    return _serialise(document, style, fragments)


def pod_list_of(pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodList", "items": pods}


BASE_POD_LIST = pod_list_of([BASE_POD, {**copy.deepcopy(BASE_POD),
                                        "metadata": {"name": "second"}}])


def heavy_manifest(name: str, image: str = "busybox:1.36") -> str:
    """A valid pod near the document reader's node limit: the most decoding work allowed."""
    args = ", ".join(f"a{i}" for i in range(90_000))
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n"
            f"  - name: main\n    image: {image}\n    args: [{args}]\n")


# What the kubelet's log says when it refuses each of hostile_manifests(): words of
# pykubelet's own refusal, or None where the refusal may come from a library first.
# deep.yaml is one: pykubelet bounds nesting as it reads the parser's events, but libyaml
# (PyYAML's C parser, from 0.2.5) bounds flow nesting too and its scanner reads ahead of
# the events, so with it the parser's own message comes first. Either way the file is
# refused and named; tests/unit/test_yamlsafe.py holds pykubelet's own bound to account
# with a parser that has none.
HOSTILE_MANIFEST_REFUSALS: dict[str, str | None] = {
    "fanout.yaml": "excessive aliasing",
    "deep.yaml": None,
    "binary.yaml": "not valid UTF-8",
    "huge.yaml": "larger than",
    "heavy-but-bad.yaml": "args[0]: Invalid value: 1: expected a string",
}


def refused_manifests_missing_from(log_lines: list[str]) -> list[str]:
    """The hostile manifests that no log line reports as refused, with the expected words.

    A refusal is a line naming the file and, where pykubelet's own words are known
    (HOSTILE_MANIFEST_REFUSALS), carrying them.
    """
    missing = []
    for name, words in HOSTILE_MANIFEST_REFUSALS.items():
        if not any(name in line and (words is None or words in line) for line in log_lines):
            missing.append(f"{name} ({words or 'any reason'})")
    return missing


def hostile_manifests() -> dict[str, bytes]:
    """Manifest files of each hostile class, by file name (none of them is a usable pod)."""
    return {
        "fanout.yaml": (b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nx: "
                        + alias_fanout(9, 10).encode() + b"\n"),
        "deep.yaml": b"apiVersion: v1\nkind: Pod\nspec: " + b"[" * 100_000 + b"\n",
        "binary.yaml": bytes(range(256)) * 64,
        "huge.yaml": b"# " + b"x" * (11 * 1024 * 1024) + b"\n",
        "heavy-but-bad.yaml": heavy_manifest("heavy").replace("a0,", "1,").encode(),
    }
