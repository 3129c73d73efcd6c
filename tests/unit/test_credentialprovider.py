"""Which credentials a pull offers: the keyring's matching and the pull secrets' formats.

Cases follow upstream's ``keyring_test.go`` and ``secrets_test.go`` in what a
user configures: host, path prefix, globs, ports, Docker Hub's names, several
matches, and the two secret types.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from pykubelet.credentialprovider import (
    AuthConfig,
    DockerKeyring,
    PullSecretError,
    make_docker_keyring,
    registry_key,
    urls_match,
)
from pykubelet.kuberuntime.images import pull_credentials


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def config_json_secret(auths: dict[str, Any], *, name: str = "pull") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64(json.dumps({"auths": auths}))}}


def dockercfg_secret(entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "legacy"},
            "type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64(json.dumps(entries))}}


def users(image: str, *secrets: dict[str, Any]) -> list[str]:
    return [auth.username for auth in pull_credentials(image, secrets)]


@pytest.mark.parametrize(("location", "key"), [
    ("registry.example.com", "registry.example.com"),
    ("https://registry.example.com", "registry.example.com"),
    ("http://registry.example.com:5000/", "registry.example.com:5000"),
    ("https://index.docker.io/v1/", "index.docker.io"),
    ("registry.example.com/v2/team", "registry.example.com/team"),
    ("registry.example.com/team/app", "registry.example.com/team/app"),
])
def test_credential_locations_lose_scheme_and_api_version(location: str, key: str) -> None:
    assert registry_key(location) == key


@pytest.mark.parametrize(("glob", "target", "matches"), [
    ("registry.example.com", "registry.example.com/app", True),
    ("registry.example.com/team", "registry.example.com/team/app", True),
    ("registry.example.com/team", "registry.example.com/other/app", False),
    # The path is a string prefix, as upstream compares it.
    ("registry.example.com/team", "registry.example.com/teamwork/app", True),
    ("*.example.com", "eu.example.com/app", True),
    ("*.example.com", "a.b.example.com/app", False),
    ("*.example.com", "example.com/app", False),
    ("eu-*.example.com", "eu-west.example.com/app", True),
    ("registry.*.com", "registry.example.com/app", True),
    ("registry-[0-9].example.com", "registry-7.example.com/app", True),
    ("registry-[^0-9].example.com", "registry-7.example.com/app", False),
    ("registry-[0-9.example.com", "registry-7.example.com/app", False),  # bad glob
    # Ports: equal, or both absent; never a glob.
    ("127.0.0.1:5000", "127.0.0.1:5000/app", True),
    ("127.0.0.1", "127.0.0.1:5000/app", False),
    ("127.0.0.1:5000", "127.0.0.1/app", False),
    ("127.0.0.1:5000", "127.0.0.1:5001/app", False),
    ("*.example.com:5000", "eu.example.com:5000/app", True),
    ("registry.example.com:*", "registry.example.com:5000/app", False),
])
def test_keys_match_repositories_as_upstream(glob: str, target: str, matches: bool) -> None:
    assert urls_match(glob, target) is matches


def test_every_match_is_offered_most_specific_key_first() -> None:
    keyring = DockerKeyring()
    keyring.add([("quay.io", AuthConfig("host")),
                 ("quay.io/team", AuthConfig("team")),
                 ("*.io", AuthConfig("glob")),
                 ("quay.io/team", AuthConfig("team-rotated"))])
    assert [a.username for a in keyring.lookup("quay.io/team/app")] == \
        ["team", "team-rotated", "host", "glob"]
    assert [a.username for a in keyring.lookup("quay.io/other/app")] == ["host", "glob"]
    assert keyring.lookup("gcr.io.example/app") == []


def test_docker_hub_images_fall_back_to_index_docker_io() -> None:
    secret = config_json_secret({"https://index.docker.io/v1/": {"username": "hub"},
                                 "registry.example.com": {"username": "private"}})
    assert users("busybox:1.35", secret) == ["hub"]
    assert users("docker.io/library/busybox:1.35", secret) == ["hub"]
    assert users("me/app:1", secret) == ["hub"]
    assert users("registry.example.com/app:1", secret) == ["private"]
    assert users("quay.io/app:1", secret) == []


def test_a_docker_io_key_with_a_path_covers_only_that_path() -> None:
    secret = config_json_secret({"docker.io/team": {"username": "team"}})
    assert users("team/app:1", secret) == ["team"]
    assert users("busybox:1", secret) == []


def test_auth_field_wins_and_decodes_padded_or_not() -> None:
    padded = b64("robot:s3cret:with:colons")
    secret = config_json_secret({
        "a.example.com": {"auth": padded, "username": "ignored", "password": "ignored"},
        "b.example.com": {"auth": padded.rstrip("=")},
        "c.example.com": {"Username": "upper", "Password": "case"},
    })
    [a] = pull_credentials("a.example.com/app:1", [secret])
    assert (a.username, a.password) == ("robot", "s3cret:with:colons")
    [b] = pull_credentials("b.example.com/app:1", [secret])
    assert (b.username, b.password) == ("robot", "s3cret:with:colons")
    [c] = pull_credentials("c.example.com/app:1", [secret])
    assert (c.username, c.password) == ("upper", "case")


def test_legacy_dockercfg_secrets_are_read() -> None:
    secret = dockercfg_secret({"https://registry.example.com": {"auth": b64("old:pw")}})
    [auth] = pull_credentials("registry.example.com/app:1", [secret])
    assert (auth.username, auth.password) == ("old", "pw")


def test_secrets_of_another_type_or_key_are_ignored() -> None:
    entries = {"registry.example.com": {"username": "u"}}
    wrong_type = dockercfg_secret(entries) | {"type": "Opaque"}
    swapped = {"type": "kubernetes.io/dockercfg",
               "data": {".dockerconfigjson": b64(json.dumps({"auths": entries}))}}
    empty = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": ""}}
    assert users("registry.example.com/app:1", wrong_type, swapped, empty) == []


def test_several_secrets_share_one_keyring_in_pod_order() -> None:
    first = config_json_secret({"registry.example.com": {"username": "first"}})
    second = config_json_secret({"registry.example.com": {"username": "second"},
                                 "registry.example.com/team": {"username": "team"}})
    assert users("registry.example.com/team/app:1", first, second) == \
        ["team", "first", "second"]


@pytest.mark.parametrize(("data", "complaint"), [
    ("not base64!", ".dockerconfigjson"),
    (b64("{not json"), ".dockerconfigjson"),
    (b64(json.dumps({"auths": {"r.example.com": "user:pw"}})), "r.example.com"),
    (b64(json.dumps({"auths": {"r.example.com": {"auth": b64("no-colon")}}})),
     "base64(username:password)"),
])
def test_an_undecodable_secret_fails_naming_it(data: str, complaint: str) -> None:
    secret = {"metadata": {"namespace": "ns", "name": "broken"},
              "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": data}}
    with pytest.raises(PullSecretError, match='"ns/broken"') as raised:
        make_docker_keyring([secret])
    assert complaint in str(raised.value)


def test_a_location_that_is_no_url_is_skipped() -> None:
    secret = config_json_secret({"registry.example.com:port": {"username": "bad"},
                                 "registry.example.com": {"username": "good"}})
    assert users("registry.example.com/app:1", secret) == ["good"]
