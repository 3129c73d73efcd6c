"""The Docker keyring: registry credentials indexed by registry host and path.

Upstream ``pkg/credentialprovider/keyring.go``. Each credential is filed
under the key its ``.dockercfg`` / ``config.json`` entry names, with the scheme
dropped and ``/v1/`` or ``/v2/`` read as the bare host (``https://index.docker.io/v1/``
is ``index.docker.io``). A lookup names an image's repository as the runtimes
normalise it (``docker.io/library/busybox``, no tag) and collects, for every key
that matches, that key's credentials; keys are tried in reverse lexical order,
so ``quay.io/team`` comes before ``quay.io`` and every credential that matches
is offered in turn (a rotated password and its successor both work).

A key matches a repository when the ports are equal (an absent port matches
only an absent port), the hosts have as many dot-separated labels and each of
the key's labels matches the repository's as a shell glob (``*.example.com``
covers ``eu.example.com``, not ``a.b.example.com``), and the key's path is a
string prefix of the repository's. When nothing matched, an image on Docker
Hub falls back to the ``index.docker.io`` credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pykubelet.util import klog

DEFAULT_REGISTRY_HOST = "index.docker.io"
_DOCKER_HUB_NAMES = ("docker.io", DEFAULT_REGISTRY_HOST)


@dataclass(frozen=True)
class AuthConfig:
    """One credential, as the runtime's ``AuthConfig`` carries it."""

    username: str = ""
    password: str = ""
    email: str = ""
    # Filled only by credential sources that name them (never by pull secrets).
    server_address: str = ""
    identity_token: str = ""
    registry_token: str = ""


@dataclass(frozen=True)
class _Location:
    host: str
    path: str


def _parse_url(url: str) -> _Location:
    """Host (userinfo dropped) and path of ``url`` (with its scheme), as Go's ``url.Parse``
    splits them: glob characters are welcome in the host, a port must be digits.
    ``ValueError`` when it is no URL."""
    rest = url.split("://", 1)[1]
    for mark in "?#":
        rest = rest.split(mark, 1)[0]
    slash = rest.find("/")
    authority, path = (rest, "") if slash == -1 else (rest[:slash], rest[slash:])
    host = authority.rpartition("@")[2]
    if any(c.isspace() or ord(c) < 0x20 for c in host):
        raise ValueError(f"invalid character in host name {host!r}")
    _, colon, port = (host.rpartition("]")[2] if host.startswith("[") else host).rpartition(":")
    if colon and port and not port.isdigit():
        raise ValueError(f'invalid port ":{port}" after host')
    return _Location(host, path)


def parse_schemeless_url(location: str) -> tuple[str, str]:
    """(host, path) of ``location``, a URL without its scheme; ``ValueError`` when it is none."""
    parsed = _parse_url("https://" + location)
    return parsed.host, parsed.path


def registry_key(location: str) -> str:
    """The index key of a credential entry named ``location`` (scheme and /v1/ dropped)."""
    url = location if location.startswith(("https://", "http://")) else "https://" + location
    parsed = _parse_url(url)
    path = parsed.path
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return parsed.host + path if path and path != "/" else parsed.host


def _split_host(host: str) -> tuple[list[str], str]:
    """The host's dot-separated labels and its port ("" when it has none)."""
    name, port = host, ""
    if host.startswith("["):
        bracket = host.find("]")
        if bracket != -1 and host[bracket + 1:bracket + 2] == ":":
            name, port = host[1:bracket], host[bracket + 2:]
    elif host.count(":") == 1:
        name, port = host.split(":")
    return name.split("."), port


def _glob_regex(pattern: str) -> re.Pattern[str] | None:
    """A shell glob as Go's ``filepath.Match`` reads it (``[^...]`` negates, ``\\`` escapes);
    None for a malformed pattern, which matches nothing."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 >= len(pattern):
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            negate = pattern[i + 1:i + 2] == "^"
            start = i + 2 if negate else i + 1
            # A "]" right after the opening is a member, not the end.
            end = pattern.find("]", start + 1)
            if end == -1:
                return None
            members = re.sub(r"([\\\[\]])", r"\\\1", pattern[start:end])
            out.append(f"[{'^' if negate else ''}{members}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def urls_match(glob: str, target: str) -> bool:
    """Whether the key ``glob`` (a schemeless URL, globs in its host) covers ``target``."""
    try:
        glob_location = _parse_url("https://" + glob)
        target_location = _parse_url("https://" + target)
    except ValueError:
        return False
    glob_labels, glob_port = _split_host(glob_location.host)
    target_labels, target_port = _split_host(target_location.host)
    if glob_port != target_port or len(glob_labels) != len(target_labels):
        return False
    if not target_location.path.startswith(glob_location.path):
        return False
    for pattern, label in zip(glob_labels, target_labels, strict=True):
        regex = _glob_regex(pattern)
        if regex is None or regex.match(label) is None:
            return False
    return True


def is_default_registry_match(image: str) -> bool:
    """Whether ``image`` (a repository name) is pulled from Docker Hub."""
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep or first in _DOCKER_HUB_NAMES:
        return True
    # Docker reads a first component with a dot or a port as a registry host.
    return "." not in first and ":" not in first


class DockerKeyring:
    """Credentials by registry location (upstream ``BasicDockerKeyring``)."""

    def __init__(self) -> None:
        self._creds: dict[str, list[AuthConfig]] = {}
        self._index: list[str] = []

    def add(self, entries: Iterable[tuple[str, AuthConfig]]) -> None:
        """File each (location, credential); a location that is no URL is skipped."""
        for location, auth in entries:
            try:
                key = registry_key(location)
            except ValueError as err:
                klog.error("Entry in dockercfg invalid, ignoring", entry=location, err=str(err))
                continue
            self._creds.setdefault(key, []).append(auth)
        self._index = sorted(self._creds, reverse=True)

    def lookup(self, image: str) -> list[AuthConfig]:
        """Every credential for the repository ``image``, in the order to try them."""
        found = [auth for key in self._index if urls_match(key, image)
                 for auth in self._creds[key]]
        if not found and is_default_registry_match(image):
            found = list(self._creds.get(DEFAULT_REGISTRY_HOST, ()))
        return found

    def __bool__(self) -> bool:
        return bool(self._creds)
