"""Credential provider exec plugins: the config as upstream validates it, and real plugin runs.

The plugins are small Python scripts written per test; they record each run,
so caching and the one-run-per-image rule are counted, not assumed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec

from pykubelet.credentialprovider import AuthConfig
from pykubelet.credentialprovider.plugin import (
    CredentialProviderConfigError,
    ExecPlugin,
    PluginKeyring,
    PluginProvider,
    ProviderConfig,
    read_config,
    register_plugins,
)
from pykubelet.kuberuntime.images import ImageManager

V1 = "credentialprovider.kubelet.k8s.io/v1"

PLUGIN = """\
import json, os, sys, time
request = json.load(sys.stdin)
assert request["kind"] == "CredentialProviderRequest", request
with open(os.environ["RUNS"], "a") as runs:
    runs.write(request["image"] + "\\n")
mode = os.environ.get("MODE", "ok")
if mode == "hang":
    time.sleep(30)
if mode == "garbage":
    print("<html>not a response</html>")
    sys.exit(0)
if mode == "fail":
    print("registry login refused", file=sys.stderr)
    sys.exit(3)
response = {"apiVersion": os.environ.get("API_VERSION", request["apiVersion"]),
            "kind": "CredentialProviderResponse",
            "cacheKeyType": os.environ.get("KEY_TYPE", "Image"),
            "auth": {"*.example.com": {"username": "plugin", "password": request["image"]}}}
if "DURATION" in os.environ:
    response["cacheDuration"] = os.environ["DURATION"]
print(json.dumps(response))
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_config(path: Path, providers: list[dict[str, Any]],
                 api_version: str = "kubelet.config.k8s.io/v1") -> Path:
    path.write_text(json.dumps({"apiVersion": api_version, "kind": "CredentialProviderConfig",
                                "providers": providers}))
    return path


def provider(name: str = "login", **fields: Any) -> dict[str, Any]:
    return {"name": name, "matchImages": ["*.example.com"], "defaultCacheDuration": "1m",
            "apiVersion": V1, **fields}


def config_error(tmp_path: Path, providers: list[dict[str, Any]]) -> str:
    with pytest.raises(CredentialProviderConfigError) as raised:
        read_config(write_config(tmp_path / "config.json", providers))
    return str(raised.value)


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": "a/b"}, 'providers.name: Invalid value: "a/b": provider name cannot contain \'/\''),
    ({"name": "a b"}, 'providers.name: Invalid value: "a b": provider name cannot contain spaces'),
    ({"name": ".."}, 'providers.name: Invalid value: "..": provider name cannot be \'..\''),
    ({"apiVersion": ""}, "providers.apiVersion: Required value"),
    ({"apiVersion": "v9"}, 'providers.apiVersion: Unsupported value: "v9": supported values: '
                           '"credentialprovider.kubelet.k8s.io/v1", '),
    ({"matchImages": []},
     "providers.matchImages: Required value: at least 1 item in matchImages is required"),
    ({"matchImages": ["registry.example.com:port"]},
     'providers.matchImages: Invalid value: "registry.example.com:port": match image is '
     'invalid: '),
    ({"defaultCacheDuration": None}, "providers.defaultCacheDuration: Required value"),
    ({"defaultCacheDuration": "-1m"}, 'providers.defaultCacheDuration: Invalid value: "-1m": '
                                      'must be greater than or equal to 0'),
])
def test_invalid_configs_are_refused_naming_the_field(tmp_path: Path, fields: dict[str, Any],
                                                      message: str) -> None:
    error = config_error(tmp_path, [provider(**fields)])
    assert error.startswith("failed to validate credential provider config: ")
    assert message in error


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    error = config_error(tmp_path, [provider("a/b"), provider("other", matchImages=[])])
    assert error == ("failed to validate credential provider config: ["
                     'providers.name: Invalid value: "a/b": provider name cannot contain \'/\', '
                     "providers.matchImages: Required value: at least 1 item in matchImages "
                     "is required]")
    # A name given twice is refused while the files are merged, before validation.
    assert config_error(tmp_path, [provider(), provider()]) == \
        'duplicate provider name "login" found in configuration file(s)'
    assert "at least 1 item in plugins is required" in config_error(tmp_path, [])


def test_a_config_of_another_kind_or_group_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n")
    with pytest.raises(CredentialProviderConfigError, match=r'"KubeletConfiguration" \(wrong Kind'):
        read_config(path)
    write_config(path, [provider()], api_version="example.com/v1")
    with pytest.raises(CredentialProviderConfigError, match=r"unexpected Group: example\.com"):
        read_config(path)


def test_a_config_directory_is_merged_in_file_name_order(tmp_path: Path) -> None:
    write_config(tmp_path / "20-second.json", [provider("second")])
    write_config(tmp_path / "10-first.json", [provider("first")])
    (tmp_path / "notes.txt").write_text("ignored")
    assert [p.name for p in read_config(tmp_path)] == ["first", "second"]
    write_config(tmp_path / "30-again.json", [provider("first")])
    with pytest.raises(CredentialProviderConfigError,
                       match='duplicate provider name "first" found in configuration file'):
        read_config(tmp_path)


def test_registration_checks_the_bin_dir_and_each_executable(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", [provider("login")])
    with pytest.raises(CredentialProviderConfigError, match=r"plugin binary directory .* did not"):
        register_plugins(str(config), str(tmp_path / "missing"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    with pytest.raises(CredentialProviderConfigError,
                       match=re.escape(f"plugin binary executable {bin_dir}/login did not")):
        register_plugins(str(config), str(bin_dir))


TOKEN_ATTRIBUTES = {"serviceAccountTokenAudience": "registry.example.com",
                    "requireServiceAccount": True, "cacheType": "ServiceAccount"}


def test_token_attributes_are_refused_as_gated_only_when_the_gate_is_off(
        tmp_path: Path) -> None:
    """The gate is beta and on by default in v1.35: the config is not refused as
    'feature gate is disabled' unless the kubelet's gates turn it off."""
    path = write_config(tmp_path / "config.json",
                        [provider(tokenAttributes=TOKEN_ATTRIBUTES)])
    gated = ("providers.tokenAttributes: Forbidden: tokenAttributes is not supported when "
             "KubeletServiceAccountTokenForCredentialProviders feature gate is disabled")
    with pytest.raises(CredentialProviderConfigError) as off:
        read_config(path, sa_tokens=False)
    assert gated in str(off.value)
    for sa_tokens in (True, None):  # on, and the gate table's default
        with pytest.raises(CredentialProviderConfigError) as on:
            read_config(path, sa_tokens=sa_tokens)
        assert "feature gate is disabled" not in str(on.value)
        # Valid for upstream; refused because pykubelet would send the plugin no token.
        assert str(on.value).endswith(
            "providers.tokenAttributes: Forbidden: pykubelet does not request service "
            "account tokens for credential provider plugins")


@pytest.mark.parametrize(("attributes", "api_version", "message"), [
    ({**TOKEN_ATTRIBUTES, "serviceAccountTokenAudience": ""}, V1,
     "providers.tokenAttributes.serviceAccountTokenAudience: Required value"),
    ({k: v for k, v in TOKEN_ATTRIBUTES.items() if k != "requireServiceAccount"}, V1,
     "providers.tokenAttributes.requireServiceAccount: Required value"),
    (TOKEN_ATTRIBUTES, "credentialprovider.kubelet.k8s.io/v1beta1",
     "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for "
     "credentialprovider.kubelet.k8s.io/v1 API version"),
    ({**TOKEN_ATTRIBUTES, "requireServiceAccount": False,
      "requiredServiceAccountAnnotationKeys": ["example.com/role"]}, V1,
     "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: "
     "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"),
    ({**TOKEN_ATTRIBUTES, "requiredServiceAccountAnnotationKeys": ["a", "a"]}, V1,
     'providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "a"'),
    ({**TOKEN_ATTRIBUTES, "requiredServiceAccountAnnotationKeys": ["a", "b"],
      "optionalServiceAccountAnnotationKeys": ["b", "a"]}, V1,
     'providers.tokenAttributes: Invalid value: []string{"a", "b"}: annotation keys cannot '
     "be both required and optional"),
    ({**TOKEN_ATTRIBUTES, "optionalServiceAccountAnnotationKeys": ["-bad-"]}, V1,
     'providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: '
     '"-bad-": '),
    ({**TOKEN_ATTRIBUTES, "cacheType": ""}, V1,
     "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set "
     "when tokenAttributes is specified. Supported values are: ServiceAccount, Token"),
    ({**TOKEN_ATTRIBUTES, "cacheType": "Pod"}, V1,
     'providers.tokenAttributes.cacheType: Unsupported value: "Pod": supported values: '
     '"ServiceAccount", "Token"'),
])
def test_token_attributes_are_validated_as_upstream_does_with_the_gate_on(
        tmp_path: Path, attributes: dict[str, Any], api_version: str, message: str) -> None:
    path = write_config(tmp_path / "config.json",
                        [provider(apiVersion=api_version, tokenAttributes=attributes)])
    with pytest.raises(CredentialProviderConfigError) as raised:
        read_config(path, sa_tokens=True)
    assert message in str(raised.value)
    assert "pykubelet does not request" not in str(raised.value)


def make_provider(tmp_path: Path, clock: Clock, env: dict[str, str] | None = None, *,
                  timeout: float = 10.0) -> PluginProvider:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "login"
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(0o755)
    config = ProviderConfig(name="login", match_images=("*.example.com",),
                            default_cache_duration=60.0, api_version=V1,
                            env=(("RUNS", str(tmp_path / "runs")), *(env or {}).items()))
    return PluginProvider(ExecPlugin(config, bin_dir, timeout=timeout), clock=clock)


def runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs"
    return path.read_text().split() if path.exists() else []


async def lookup(provider: PluginProvider, image: str) -> list[tuple[str, str]]:
    found = await PluginKeyring([provider]).lookup(image)
    return [(auth.username, auth.password) for auth in found]


async def test_a_plugin_answers_for_the_images_it_matches(tmp_path: Path) -> None:
    provider = make_provider(tmp_path, Clock())
    assert await lookup(provider, "eu.example.com/team/app") == \
        [("plugin", "eu.example.com/team/app")]
    assert await lookup(provider, "quay.io/team/app") == []
    assert runs(tmp_path) == ["eu.example.com/team/app"]


async def test_answers_are_cached_for_the_default_duration_per_image(tmp_path: Path) -> None:
    clock = Clock()
    provider = make_provider(tmp_path, clock)
    await lookup(provider, "eu.example.com/app")
    await lookup(provider, "eu.example.com/app")
    await lookup(provider, "eu.example.com/other")
    assert runs(tmp_path) == ["eu.example.com/app", "eu.example.com/other"]
    clock.now += 61
    await lookup(provider, "eu.example.com/app")
    assert len(runs(tmp_path)) == 3


@pytest.mark.parametrize(("key_type", "duration", "expected_runs"), [
    ("Registry", "5m", 1),   # one answer for the registry
    ("Global", "5m", 1),     # one answer for everything the provider matches
    ("Image", "0s", 3),      # a zero duration: never cached
    ("Bogus", "5m", 3),      # an invalid cacheKeyType: the answer is dropped
])
async def test_the_response_chooses_its_cache_key_and_duration(
        tmp_path: Path, key_type: str, duration: str, expected_runs: int) -> None:
    clock = Clock()
    provider = make_provider(tmp_path, clock, {"KEY_TYPE": key_type, "DURATION": duration})
    found = [await lookup(provider, image) for image in
             ("eu.example.com/a", "eu.example.com/b", "eu.example.com/a")]
    assert len(runs(tmp_path)) == expected_runs
    assert all(found) is (key_type != "Bogus")
    clock.now += 301
    await lookup(provider, "eu.example.com/a")
    assert len(runs(tmp_path)) == expected_runs + 1


@pytest.mark.parametrize("env", [{"MODE": "garbage"}, {"MODE": "fail"},
                                 {"API_VERSION": "credentialprovider.kubelet.k8s.io/v1beta1"}])
async def test_a_plugin_without_a_usable_answer_gives_no_credentials(
        tmp_path: Path, env: dict[str, str]) -> None:
    provider = make_provider(tmp_path, Clock(), env)
    assert await lookup(provider, "eu.example.com/app") == []
    # Nothing was cached: the next pull asks again.
    await lookup(provider, "eu.example.com/app")
    assert len(runs(tmp_path)) == 2


async def test_a_hanging_plugin_is_killed_at_its_timeout(tmp_path: Path) -> None:
    provider = make_provider(tmp_path, Clock(), {"MODE": "hang"}, timeout=0.5)
    started = time.monotonic()
    assert await lookup(provider, "eu.example.com/app") == []
    assert time.monotonic() - started < 5


async def test_concurrent_lookups_of_one_image_run_the_plugin_once(tmp_path: Path) -> None:
    provider = make_provider(tmp_path, Clock(), {"DURATION": "0s"})
    answers = await asyncio.gather(*(lookup(provider, "eu.example.com/app") for _ in range(4)))
    assert all(answer == [("plugin", "eu.example.com/app")] for answer in answers)
    assert runs(tmp_path) == ["eu.example.com/app"]


class FixedPlugins(PluginKeyring):
    """Stands in for the configured plugins: always the same answer."""

    def __init__(self, username: str) -> None:
        super().__init__([])
        self.username = username
        self.asked: list[str] = []

    async def lookup(self, image: str) -> list[AuthConfig]:
        self.asked.append(image)
        return [AuthConfig(username=self.username, password="p")]


class RecordingImages:
    """An image service that has nothing and accepts only the user ``accept``."""

    def __init__(self, accept: str) -> None:
        self.accept = accept
        self.tried: list[str] = []

    async def image_status(self, image: str, verbose: bool = False) -> None:
        return None

    async def pull_image(self, image: str, auth: Any = None, sandbox_config: Any = None) -> str:
        self.tried.append(auth.username if auth else "")
        if not auth or auth.username != self.accept:
            raise RuntimeError("401 Unauthorized")
        return "sha256:pulled"


async def test_the_plugins_are_asked_after_the_pull_secrets() -> None:
    secret = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(
        json.dumps({"auths": {"registry.example.com": {"username": "from-secret"}}}))}}
    images, plugins = RecordingImages(accept="from-plugin"), FixedPlugins("from-plugin")
    manager = ImageManager(images, credential_plugins=plugins)  # type: ignore[arg-type]
    pod = V1Pod(metadata=V1ObjectMeta(name="p", namespace="ns", uid="u"),
                spec=V1PodSpec(containers=[V1Container(name="app",
                                                       image="registry.example.com/app:1")]))
    pulled = await manager.ensure_image_exists(pod, pod.spec.containers[0], [secret])
    assert pulled.ref == "sha256:pulled"
    assert images.tried == ["from-secret", "from-plugin"]
    assert plugins.asked == ["registry.example.com/app"]


async def test_expired_answers_nobody_asks_for_again_are_purged_every_15_minutes(
        tmp_path: Path) -> None:
    clock = Clock()
    provider = make_provider(tmp_path, clock)
    for image in ("eu.example.com/a", "eu.example.com/b", "eu.example.com/c"):
        await lookup(provider, image)
    # Expired (the default duration is a minute), but no purge is due yet: the lookup of
    # another image leaves them.
    clock.now += 14 * 60
    await lookup(provider, "eu.example.com/d")
    assert len(provider.cached_keys()) == 4
    # Past 15 minutes since the first lookup's purge: the next lookup drops them all.
    clock.now += 2 * 60
    await lookup(provider, "eu.example.com/d")
    assert provider.cached_keys() == ["eu.example.com/d"]
