"""Every decoder of outside input keeps its contract, whatever the bytes.

- A static pod file or a manifest URL's body: a validated pod (or pods), or a
  ``ManifestError`` that names the file or URL; never another exception.
- A ``--config`` file: a configuration, or exit status 1 with the errors listed and no
  traceback; ``--print-config`` prints valid JSON for any configuration that loaded.
- No input costs more than a bounded time.

Property-based with a fixed seed and a modest budget, so CI runs the same examples
every time; ``hostile_corpus/`` holds the minimal examples found so far.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from pykubelet.api import to_dict
from pykubelet.api.validation import validate_pod
from pykubelet.cmd.app import main
from pykubelet.sources.static import ManifestError, decode_static_pod, decode_static_pods
from tests.unit.hostile_input import (
    BASE_CONFIG,
    BASE_POD,
    BASE_POD_LIST,
    CONFIG_FIELD_PATHS,
    broken_documents,
)

FILE = "/etc/kubernetes/manifests/hostile.yaml"
URL = "http://manifests.example/pods"
# A generous bound for CI machines: the worst shapes measure well under two seconds.
TIME_BOUND = 5.0
CORPUS = Path(__file__).parent / "hostile_corpus"

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _no_nan(text: str) -> None:
    raise AssertionError(f"non-JSON constant {text} in the output")


def check_pod(pod: Any) -> None:
    """What holds for any pod a decoder hands to the kubelet."""
    assert validate_pod(pod) == []
    assert pod.metadata.uid and pod.metadata.name.endswith("-node-1")
    json.dumps(to_dict(pod), allow_nan=False)  # serialisable for /pods and the hash


def decode_pod_contract(data: bytes) -> str:
    start = time.monotonic()
    try:
        pod = decode_static_pod(data, node_name="node-1", source="file", location=FILE)
    except ManifestError as err:
        assert str(err).startswith(f"{FILE}: ") and err.reason
        outcome = "error"
    else:
        check_pod(pod)
        outcome = "pod"
    assert time.monotonic() - start < TIME_BOUND
    return outcome


def decode_pod_list_contract(data: bytes) -> str:
    start = time.monotonic()
    try:
        pods = decode_static_pods(data, node_name="node-1", source="http", location=URL)
    except ManifestError as err:
        assert str(err).startswith(f"{URL}: ") and err.reason
        outcome = "error"
    else:
        for pod in pods:
            check_pod(pod)
        outcome = "pods"
    assert time.monotonic() - start < TIME_BOUND
    return outcome


def config_contract(data: bytes) -> tuple[int, str]:
    """Run the command as an operator would (with --print-config, so nothing starts)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "kubelet.yaml"
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        start = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["--config", str(path), "--print-config"])
            except SystemExit as exit_:
                code = exit_.code  # type: ignore[assignment]
        assert time.monotonic() - start < TIME_BOUND
    stderr = err.getvalue()
    assert "Traceback" not in stderr
    assert "a pykubelet bug" not in stderr, stderr
    if code == 0:
        body = json.loads(out.getvalue(), parse_constant=_no_nan)
        assert isinstance(body["kubeletconfig"], dict)
        return 0, ""
    assert code == 1, (code, stderr)
    lines = stderr.splitlines()
    assert lines[-1].endswith("configuration error(s); nothing was started")
    assert all(line.startswith("pykubelet: ") and len(line) > len("pykubelet: ")
               for line in lines)
    return 1, stderr


# --- the properties ------------------------------------------------------------------------------

@settings(FUZZ, max_examples=600)
@given(broken_documents(BASE_POD))
def test_any_static_pod_file_is_a_pod_or_a_named_error(data: bytes) -> None:
    decode_pod_contract(data)


@settings(FUZZ, max_examples=300)
@given(broken_documents(BASE_POD_LIST))
def test_any_manifest_url_body_is_pods_or_a_named_error(data: bytes) -> None:
    decode_pod_list_contract(data)


@settings(FUZZ, max_examples=400)
@given(broken_documents(BASE_CONFIG, CONFIG_FIELD_PATHS))
def test_any_config_file_loads_or_exits_1_with_its_errors(data: bytes) -> None:
    config_contract(data)


def test_the_unbroken_documents_decode() -> None:
    """The generators start from valid documents: a failure here would hide the others."""
    import yaml

    assert decode_pod_contract(yaml.safe_dump(BASE_POD).encode()) == "pod"
    assert decode_pod_list_contract(json.dumps(BASE_POD_LIST).encode()) == "pods"
    assert config_contract(yaml.safe_dump(BASE_CONFIG).encode()) == (0, "")


# --- the regression corpus -----------------------------------------------------------------------

def _corpus(kind: str) -> list[Any]:
    return [pytest.param(path, id=path.name) for path in sorted((CORPUS / kind).iterdir())]


def _expectation(path: Path) -> tuple[bytes, str]:
    """A corpus file starts with ``# expect: <outcome or message fragment>``."""
    raw = path.read_bytes()
    first, _, rest = raw.partition(b"\n")
    assert first.startswith(b"# expect: "), path
    return rest, first.removeprefix(b"# expect: ").decode()


@pytest.mark.parametrize("path", _corpus("pods"))
def test_corpus_static_pods(path: Path) -> None:
    data, expected = _expectation(path)
    if expected == "pod":
        assert decode_pod_contract(data) == "pod"
        return
    with pytest.raises(ManifestError) as info:
        decode_static_pod(data, node_name="node-1", source="file", location=FILE)
    assert expected in info.value.reason
    assert decode_pod_contract(data) == "error"


@pytest.mark.parametrize("path", _corpus("podlists"))
def test_corpus_pod_lists(path: Path) -> None:
    data, expected = _expectation(path)
    if expected == "pods":
        assert decode_pod_list_contract(data) == "pods"
        return
    with pytest.raises(ManifestError) as info:
        decode_static_pods(data, node_name="node-1", source="http", location=URL)
    assert expected in info.value.reason


@pytest.mark.parametrize("path", _corpus("configs"))
def test_corpus_configs(path: Path) -> None:
    data, expected = _expectation(path)
    code, stderr = config_contract(data)
    if expected == "config":
        assert code == 0
    else:
        assert code == 1 and expected in stderr, stderr


def test_number_bounds_are_exact_at_the_edges() -> None:
    """Quantities, durations and integers: the last accepted value and the first refused."""
    from pykubelet.api.quantity import MAX_MAGNITUDE, QuantityError, parse_quantity
    from pykubelet.config.units import Duration, UnitError

    assert parse_quantity("8Ei") == MAX_MAGNITUDE  # 2^63 is capped, as upstream caps it
    assert parse_quantity("1e2147483647") == MAX_MAGNITUDE
    assert parse_quantity("1e-2147483648") == parse_quantity("1n")  # rounds up to one nano
    with pytest.raises(QuantityError, match="suffix"):
        parse_quantity("1e2147483648")
    assert Duration.parse("-2562047h47m16.854775808s").nanoseconds == -(2**63)
    assert Duration.parse("2562047h47m16.854775807s").nanoseconds == 2**63 - 1
    with pytest.raises(UnitError, match="invalid duration"):
        Duration.parse("2562047h47m16.854775808s")
    assert not math.isinf(parse_quantity(1e308))


def test_size_and_node_limits_name_the_limit() -> None:
    from pykubelet.api.yamlsafe import MAX_DOCUMENT_BYTES, MAX_NODES

    header = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
    oversized = header + b"# " + b"x" * MAX_DOCUMENT_BYTES + b"\n"
    with pytest.raises(ManifestError, match=f"larger than {MAX_DOCUMENT_BYTES} bytes"):
        decode_static_pod(oversized, node_name="node-1", source="file", location=FILE)
    many = header + b"spec: {containers: [{name: a, image: b, args: [" + b"x," * MAX_NODES + b"]}]}"
    with pytest.raises(ManifestError, match=f"more than {MAX_NODES} nodes"):
        decode_static_pod(many, node_name="node-1", source="file", location=FILE)
    code, stderr = config_contract(b"kind: KubeletConfiguration\n# " + b"x" * MAX_DOCUMENT_BYTES)
    assert code == 1 and f"larger than {MAX_DOCUMENT_BYTES} bytes" in stderr
