"""Credential provider exec plugins (upstream ``pkg/credentialprovider/plugin``).

``--image-credential-provider-config`` names a ``CredentialProviderConfig``
(``kubelet.config.k8s.io/v1``, ``v1beta1`` or ``v1alpha1``), a file or a
directory of ``*.json``/``*.yaml``/``*.yml`` files read in lexical order and
merged; ``--image-credential-provider-bin-dir`` holds one executable per
provider, named as the provider. Both are read once at start-up: a config that
does not validate, or a plugin that is missing, stops the kubelet with
upstream's field path (``providers.matchImages: Required value: ...``).

For a pull whose repository one of a provider's ``matchImages`` covers (the
keyring's matching, ``keyring.urls_match``), the plugin is run with a
``CredentialProviderRequest`` (``{"image": repository}``) on stdin and must
print a ``CredentialProviderResponse`` of the provider's ``apiVersion``: an
``auth`` map of registry locations to username/password, filed in a keyring
of its own and looked up with the same repository. The answer is cached under
the image, its registry (the first path component) or one global key, as the
response's ``cacheKeyType`` says, for its ``cacheDuration``, else the
provider's ``defaultCacheDuration``; zero means not cached. Concurrent
lookups of one image run the plugin once. A plugin that fails, prints
garbage or runs past ``EXEC_TIMEOUT`` (upstream's catch-all minute) is killed
and logged, and the pull goes on without its credentials: it only ever holds
up the pulls that wait for it. Expired answers that are not asked for again are
dropped by a purge that a lookup runs once ``CACHE_PURGE_INTERVAL`` has passed
since the last one, as upstream's ``getCachedCredentials`` does.

A provider's ``tokenAttributes`` (a service account token for the plugin) is
validated as upstream does when ``KubeletServiceAccountTokenForCredentialProviders``
is on, and refused with upstream's words when it is off. pykubelet does not
request those tokens, so a provider that asks for one is then refused all the
same, naming that: it would otherwise run without the token it was set up for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubelet.api.validation import qualified_name_errors
from pykubelet.api.yamlsafe import DocumentError, load_document
from pykubelet.config.features import KNOWN_FEATURES
from pykubelet.config.units import Duration
from pykubelet.credentialprovider.keyring import (
    AuthConfig,
    DockerKeyring,
    parse_schemeless_url,
    urls_match,
)
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote

CONFIG_GROUP = "kubelet.config.k8s.io"
CONFIG_VERSIONS = ("v1", "v1beta1", "v1alpha1")
CONFIG_KIND = "CredentialProviderConfig"
PLUGIN_API_VERSIONS = ("credentialprovider.kubelet.k8s.io/v1",
                       "credentialprovider.kubelet.k8s.io/v1alpha1",
                       "credentialprovider.kubelet.k8s.io/v1beta1")
REQUEST_KIND = "CredentialProviderRequest"
RESPONSE_KIND = "CredentialProviderResponse"
CACHE_KEY_IMAGE = "Image"
CACHE_KEY_REGISTRY = "Registry"
CACHE_KEY_GLOBAL = "Global"
_GLOBAL_CACHE_KEY = "global"
CONFIG_FILE_SUFFIXES = (".json", ".yaml", ".yml")
# Upstream's catch-all for one plugin run, retries inside the plugin included.
EXEC_TIMEOUT = 60.0
# How often a lookup drops the expired answers of every key (upstream cachePurgeInterval).
CACHE_PURGE_INTERVAL = 15 * 60.0
SA_TOKEN_GATE = "KubeletServiceAccountTokenForCredentialProviders"
TOKEN_CACHE_TYPES = ("ServiceAccount", "Token")


class CredentialProviderConfigError(ValueError):
    """The config or the bin directory is unusable; the message says where."""


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    match_images: tuple[str, ...]
    default_cache_duration: float  # seconds
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


# --- reading and validating the config -------------------------------------------------------

def _quote(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _config_files(path: Path) -> list[Path]:
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise CredentialProviderConfigError(
            f'unable to access path "{path}": {err.strerror or err}') from err
    if not stat.S_ISDIR(mode):
        return [path]
    files = sorted(p for p in path.iterdir()
                   if p.suffix in CONFIG_FILE_SUFFIXES and not p.is_dir())
    if not files:
        raise CredentialProviderConfigError(f'no configuration files found in directory "{path}"')
    return files


def _decode(path: Path) -> list[dict[str, Any]]:
    """The providers of one file, as raw objects; ``ValueError`` says what is wrong."""
    try:
        document = load_document(path.read_bytes())
    except OSError as err:
        raise ValueError(f"unable to read file: {err.strerror or err}") from err
    except DocumentError as err:
        raise ValueError(str(err)) from err
    if not isinstance(document, dict):
        raise ValueError("not a CredentialProviderConfig object")
    api_version, kind = str(document.get("apiVersion") or ""), str(document.get("kind") or "")
    group, _, version = api_version.rpartition("/")
    if kind != CONFIG_KIND:
        raise ValueError(f'failed to decode "{kind}" (wrong Kind)')
    if group != CONFIG_GROUP:
        raise ValueError(f"failed to decode CredentialProviderConfig, unexpected Group: {group}")
    if version not in CONFIG_VERSIONS:
        raise ValueError(f'no kind "{kind}" is registered for version "{api_version}"')
    providers = document.get("providers") or []
    if not isinstance(providers, list) or not all(isinstance(p, dict) for p in providers):
        raise ValueError("providers: expected a list of objects")
    return providers


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CredentialProviderConfigError(f"{where}: expected a list of strings")
    return tuple(value)


def validate_providers(raw: Sequence[dict[str, Any]], *, sa_tokens: bool) -> list[str]:
    """Upstream ``validateCredentialProviderConfig``'s errors, in its words and order;
    ``sa_tokens``: whether ``KubeletServiceAccountTokenForCredentialProviders`` is on."""
    errors: list[str] = []
    if not raw:
        errors.append("providers: Required value: at least 1 item in plugins is required")
    seen: set[str] = set()
    for provider in raw:
        name = str(provider.get("name") or "")
        for bad, why in (("/" in name, "provider name cannot contain '/'"),
                         (" " in name, "provider name cannot contain spaces"),
                         (name == ".", "provider name cannot be '.'"),
                         (name == "..", "provider name cannot be '..'")):
            if bad:
                errors.append(f"providers.name: Invalid value: {_quote(name)}: {why}")
        if name in seen:
            errors.append(f"providers.name: Duplicate value: {_quote(name)}")
        seen.add(name)
        api_version = str(provider.get("apiVersion") or "")
        if not api_version:
            errors.append("providers.apiVersion: Required value")
        elif api_version not in PLUGIN_API_VERSIONS:
            supported = ", ".join(_quote(v) for v in sorted(PLUGIN_API_VERSIONS))
            errors.append(f"providers.apiVersion: Unsupported value: {_quote(api_version)}: "
                          f"supported values: {supported}")
        match_images = provider.get("matchImages") or []
        if not match_images:
            errors.append("providers.matchImages: Required value: at least 1 item in "
                          "matchImages is required")
        for image in match_images if isinstance(match_images, list) else []:
            try:
                parse_schemeless_url(str(image))
            except ValueError as err:
                errors.append(f"providers.matchImages: Invalid value: {_quote(image)}: "
                              f"match image is invalid: {err}")
        duration = provider.get("defaultCacheDuration")
        if duration is None:
            errors.append("providers.defaultCacheDuration: Required value")
        else:
            try:
                parsed = Duration.parse(str(duration))
            except ValueError as err:
                errors.append(f"providers.defaultCacheDuration: Invalid value: "
                              f"{_quote(duration)}: {err}")
            else:
                if parsed.nanoseconds < 0:
                    errors.append(f"providers.defaultCacheDuration: Invalid value: "
                                  f"{_quote(str(duration))}: must be greater than or equal to 0")
        attributes = provider.get("tokenAttributes")
        if attributes is not None:
            errors.extend(_token_attribute_errors(attributes, api_version,
                                                  sa_tokens=sa_tokens))
    return errors


def _token_attribute_errors(attributes: Any, api_version: str, *, sa_tokens: bool
                            ) -> list[str]:
    """Upstream's checks of one provider's ``tokenAttributes``, in its order."""
    path = "providers.tokenAttributes"
    errors: list[str] = []
    if not sa_tokens:
        errors.append(f"{path}: Forbidden: tokenAttributes is not supported when "
                      f"{SA_TOKEN_GATE} feature gate is disabled")
    if not isinstance(attributes, dict):
        return [*errors, f"{path}: expected an object"]
    if not attributes.get("serviceAccountTokenAudience"):
        errors.append(f"{path}.serviceAccountTokenAudience: Required value")
    require = attributes.get("requireServiceAccount")
    if require is None:
        errors.append(f"{path}.requireServiceAccount: Required value")
    if api_version != PLUGIN_API_VERSIONS[0]:
        errors.append(f"{path}: Forbidden: tokenAttributes is only supported for "
                      f"{PLUGIN_API_VERSIONS[0]} API version")
    required = _strings(attributes.get("requiredServiceAccountAnnotationKeys"),
                        f"{path}.requiredServiceAccountAnnotationKeys")
    optional = _strings(attributes.get("optionalServiceAccountAnnotationKeys"),
                        f"{path}.optionalServiceAccountAnnotationKeys")
    if require is False and required:
        errors.append(f"{path}.requiredServiceAccountAnnotationKeys: Forbidden: "
                      f"requireServiceAccount cannot be false when "
                      f"requiredServiceAccountAnnotationKeys is set")
    for field_name, keys in (("requiredServiceAccountAnnotationKeys", required),
                             ("optionalServiceAccountAnnotationKeys", optional)):
        seen: set[str] = set()
        for key in keys:
            errors.extend(f"{path}.{field_name}: Invalid value: {_quote(key)}: {problem}"
                          for problem in qualified_name_errors(key.lower()))
            if key in seen:
                errors.append(f"{path}.{field_name}: Duplicate value: {_quote(key)}")
            seen.add(key)
    both = sorted(set(required) & set(optional))
    if both:
        listed = ", ".join(go_quote(key) for key in both)  # Go's %#v of a []string
        errors.append(f"{path}: Invalid value: []string{{{listed}}}: annotation keys cannot "
                      f"be both required and optional")
    cache_type = attributes.get("cacheType") or ""
    if not cache_type:
        errors.append(f"{path}.cacheType: Required value: cacheType is required to be set "
                      f"when tokenAttributes is specified. Supported values are: "
                      f"{', '.join(TOKEN_CACHE_TYPES)}")
    elif cache_type not in TOKEN_CACHE_TYPES:
        supported = ", ".join(_quote(v) for v in TOKEN_CACHE_TYPES)
        errors.append(f"{path}.cacheType: Unsupported value: {_quote(cache_type)}: "
                      f"supported values: {supported}")
    if not errors:
        # A valid request for tokens that this kubelet would never send.
        errors.append(f"{path}: Forbidden: pykubelet does not request service account "
                      f"tokens for credential provider plugins")
    return errors


def _provider(raw: dict[str, Any]) -> ProviderConfig:
    env: list[tuple[str, str]] = []
    for item in raw.get("env") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise CredentialProviderConfigError("providers.env: expected objects with a name")
        env.append((item["name"], str(item.get("value") or "")))
    return ProviderConfig(
        name=str(raw["name"]),
        match_images=_strings(raw.get("matchImages"), "providers.matchImages"),
        default_cache_duration=Duration.parse(str(raw["defaultCacheDuration"])).total_seconds(),
        api_version=str(raw["apiVersion"]), args=_strings(raw.get("args"), "providers.args"),
        env=tuple(env))


def gate_default() -> bool:
    """``KubeletServiceAccountTokenForCredentialProviders`` as the gate table sets it when
    no ``--feature-gates`` flips it."""
    return KNOWN_FEATURES[SA_TOKEN_GATE].default


def read_config(path: str | Path, *, sa_tokens: bool | None = None) -> list[ProviderConfig]:
    """The validated providers of the config at ``path`` (a file or a directory);
    ``sa_tokens`` is the kubelet's ``KubeletServiceAccountTokenForCredentialProviders``
    (None: the gate's default)."""
    if not str(path):
        raise CredentialProviderConfigError("credential provider config path is empty")
    raw: list[dict[str, Any]] = []
    names: set[str] = set()
    for file in _config_files(Path(path)):
        try:
            providers = _decode(file)
        except ValueError as err:
            raise CredentialProviderConfigError(f'error decoding config "{file}": {err}') from err
        for provider in providers:
            name = str(provider.get("name") or "")
            if name in names:
                raise CredentialProviderConfigError(
                    f'duplicate provider name "{name}" found in configuration file(s)')
            names.add(name)
            raw.append(provider)
    errors = validate_providers(raw, sa_tokens=gate_default() if sa_tokens is None
                                else sa_tokens)
    if errors:
        joined = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        raise CredentialProviderConfigError(
            f"failed to validate credential provider config: {joined}")
    return [_provider(provider) for provider in raw]


# --- running a plugin ----------------------------------------------------------------------

class PluginError(RuntimeError):
    """One plugin run gave no usable answer."""


@dataclass(frozen=True)
class PluginResponse:
    cache_key_type: str
    cache_duration: float | None  # seconds; None: the provider's default
    auth: tuple[tuple[str, AuthConfig], ...]


def parse_response(data: bytes, *, api_version: str) -> PluginResponse:
    """A plugin's stdout as a ``CredentialProviderResponse`` of ``api_version``."""
    try:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError("not an object")
    except ValueError as err:
        raise PluginError(f"error reading GVK from response: {err}") from err
    actual = str(document.get("apiVersion") or "")
    if actual != api_version:
        raise PluginError(f"apiVersion from credential plugin response did not match expected "
                          f"apiVersion:{api_version}, actual apiVersion:{actual}")
    if document.get("kind") != RESPONSE_KIND:
        raise PluginError(f"failed to decode CredentialProviderResponse, unexpected Kind: "
                          f"{_quote(str(document.get('kind') or ''))}")
    try:
        duration = document.get("cacheDuration")
        auth = document.get("auth") or {}
        if not isinstance(auth, dict):
            raise ValueError("auth")
        entries = []
        for location, entry in auth.items():
            if not isinstance(entry, dict):
                raise ValueError("auth entry")
            entries.append((str(location), AuthConfig(username=str(entry.get("username") or ""),
                                                      password=str(entry.get("password") or ""))))
        return PluginResponse(
            cache_key_type=str(document.get("cacheKeyType") or ""),
            cache_duration=None if duration is None
            else Duration.parse(str(duration)).total_seconds(),
            auth=tuple(entries))
    except ValueError as err:
        # Not the error's text: it could quote the credentials.
        raise PluginError("error decoding credential provider plugin response from "
                          "stdout") from err


class ExecPlugin:
    """Runs the plugin binary for one provider."""

    def __init__(self, provider: ProviderConfig, bin_dir: str | Path, *,
                 timeout: float = EXEC_TIMEOUT) -> None:  # timeout: tests shorten it
        self.provider = provider
        self.path = Path(bin_dir) / provider.name
        self.timeout = timeout

    async def run(self, image: str) -> PluginResponse:
        request = json.dumps({"apiVersion": self.provider.api_version, "kind": REQUEST_KIND,
                              "image": image}).encode()
        env = {**os.environ, **dict(self.provider.env)}
        what = f"error execing credential provider plugin {self.provider.name} for image {image}"
        try:
            process = await asyncio.create_subprocess_exec(
                str(self.path), *self.provider.args, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as err:
            raise PluginError(f"{what}: {err}") from err
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(request), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise PluginError(f"{what}: context deadline exceeded") from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        if process.returncode != 0:
            raise PluginError(f"{what}: exit status {process.returncode}: "
                              f"{stderr.decode(errors='replace').strip()}")
        return parse_response(stdout, api_version=self.provider.api_version)


# --- one provider: matching, caching, one run per image at a time ----------------------------

@dataclass
class _CacheEntry:
    entries: tuple[tuple[str, AuthConfig], ...]
    expires_at: float


def _registry_of(image: str) -> str:
    return image.split("/", 1)[0]


@dataclass
class PluginProvider:
    """Upstream ``pluginProvider``: the credentials one plugin gives for an image."""

    plugin: ExecPlugin
    clock: Callable[[], float] = time.monotonic  # tests only: an injected clock
    _cache: dict[str, _CacheEntry] = field(default_factory=dict)
    _in_flight: dict[str, asyncio.Future[PluginResponse]] = field(default_factory=dict)
    # None: no purge yet, so the first lookup runs one (upstream's zero time).
    _last_purge: float | None = None

    @property
    def name(self) -> str:
        return self.plugin.provider.name

    def matches(self, image: str) -> bool:
        return any(urls_match(pattern, image) for pattern in self.plugin.provider.match_images)

    def _purge_expired(self, now: float) -> None:
        """Drop every expired answer, at most once per ``CACHE_PURGE_INTERVAL``: a key
        nobody looks up again (a registry left, an image no pod uses) would otherwise
        stay for the kubelet's life."""
        if self._last_purge is not None and now - self._last_purge <= CACHE_PURGE_INTERVAL:
            return
        self._last_purge = now
        for key in [k for k, entry in self._cache.items() if entry.expires_at <= now]:
            del self._cache[key]

    def cached_keys(self) -> list[str]:  # tests only
        """The cache keys held now, expired or not (what the purge bounds)."""
        return list(self._cache)

    def _cached(self, image: str) -> tuple[tuple[str, AuthConfig], ...] | None:
        now = self.clock()
        self._purge_expired(now)
        for key in (image, _registry_of(image), _GLOBAL_CACHE_KEY):
            entry = self._cache.get(key)
            if entry is None:
                continue
            if entry.expires_at <= now:
                del self._cache[key]
                continue
            return entry.entries
        return None

    async def provide(self, image: str) -> tuple[tuple[str, AuthConfig], ...]:
        """(location, credential) pairs for the repository ``image``; none on any failure."""
        if not self.matches(image):
            return ()
        cached = self._cached(image)
        if cached is not None:
            return cached
        try:
            response = await self._run_once(image)
        except PluginError as err:
            klog.error("Failed getting credential from external registry credential provider",
                       provider=self.name, err=str(err))
            return ()
        if response.cache_key_type == CACHE_KEY_IMAGE:
            key = image
        elif response.cache_key_type == CACHE_KEY_REGISTRY:
            key = _registry_of(image)
        elif response.cache_key_type == CACHE_KEY_GLOBAL:
            key = _GLOBAL_CACHE_KEY
        else:
            klog.error("credential provider plugin did not return a valid cacheKeyType",
                       provider=self.name, cacheKeyType=response.cache_key_type)
            return ()
        duration = (self.plugin.provider.default_cache_duration
                    if response.cache_duration is None else response.cache_duration)
        if duration > 0:
            self._cache[key] = _CacheEntry(response.auth, self.clock() + duration)
        return response.auth

    async def _run_once(self, image: str) -> PluginResponse:
        """The plugin's answer for ``image``; callers asking meanwhile share the one run."""
        running = self._in_flight.get(image)
        if running is not None:
            return await asyncio.shield(running)
        task = asyncio.ensure_future(self.plugin.run(image))
        self._in_flight[image] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._in_flight.pop(image, None)
            else:
                task.add_done_callback(lambda _: self._in_flight.pop(image, None))


class PluginKeyring:
    """Every provider's credentials for an image, in the config's order (upstream
    ``providersDockerKeyring``)."""

    def __init__(self, providers: Sequence[PluginProvider]) -> None:
        self.providers = list(providers)

    async def lookup(self, image: str) -> list[AuthConfig]:
        keyring = DockerKeyring()
        for provider in self.providers:
            keyring.add(await provider.provide(image))
        return keyring.lookup(image)


def register_plugins(config_path: str, bin_dir: str, *, sa_tokens: bool | None = None
                     ) -> PluginKeyring:
    """Upstream ``RegisterCredentialProviderPlugins``: the config read and validated, the bin
    directory and each provider's executable checked; ``CredentialProviderConfigError``.

    ``sa_tokens``: the kubelet's ``KubeletServiceAccountTokenForCredentialProviders``
    gate; None reads the gate table's default (a caller without the kubelet's gates)."""
    bin_path = Path(bin_dir)
    if not bin_dir or not bin_path.exists():
        raise CredentialProviderConfigError(f"plugin binary directory {bin_dir} did not exist")
    providers = read_config(config_path, sa_tokens=sa_tokens)
    plugins = []
    for provider in providers:
        plugin = ExecPlugin(provider, bin_path)
        if not plugin.path.exists():
            raise CredentialProviderConfigError(
                f"plugin binary executable {plugin.path} did not exist")
        plugins.append(PluginProvider(plugin))
    return PluginKeyring(plugins)
