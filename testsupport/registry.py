"""Python handle on the testbed's private image registry (scripts/testbed/registry.sh).

A pull with credentials is only tested when something refuses a pull without
them: the registry asks every client for HTTP basic auth and serves TLS from a
CA of its own, which a testbed containerd trusts once ``trust`` wrote its
hosts directory entry. The testbed's images are in it under ``host``, so a
pod naming ``busybox_image`` runs the usual busybox, pulled for real.

``docker_config_json`` and ``dockercfg`` build the two secret payloads upstream
reads (``kubernetes.io/dockerconfigjson`` and the legacy ``kubernetes.io/dockercfg``).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from testsupport.testbed import (
    DEFAULT_IMAGES_DIR,
    SCRIPTS_DIR,
    Testbed,
    _tail,
    run_script,
    script_failure,
)

SCRIPT_TIMEOUT_SECONDS = 120.0
LOG_TAIL_LINES = 30


class RegistryError(RuntimeError):
    """registry.sh failed; the message includes its output and the registry's log."""


class Registry:
    """One private registry rooted at ``dir``; see scripts/testbed/registry.sh."""

    def __init__(self, dir: str | Path, images_dir: str | Path = DEFAULT_IMAGES_DIR) -> None:
        self.dir = Path(dir)
        self.images_dir = Path(images_dir)
        self._env: dict[str, str] = {}

    @classmethod
    def fresh(cls, images_dir: str | Path = DEFAULT_IMAGES_DIR) -> Registry:
        return cls(Path("/tmp") / f"pkr-{secrets.token_hex(4)}", images_dir)

    def start(self) -> None:
        """Start the registry, push the test images and read ``dir/env``."""
        self._run("start")
        self._env = dict(line.split("=", 1)
                         for line in (self.dir / "env").read_text().splitlines() if "=" in line)

    def trust(self, testbed: Testbed) -> None:
        """Make ``testbed``'s containerd trust the registry's CA (read on every pull)."""
        self._run("trust", str(testbed.dir))

    def stop(self) -> None:
        """Stop the registry, remove what ``trust`` wrote and delete ``dir``."""
        self._run("stop")

    def __enter__(self) -> Registry:
        try:
            self.start()
        except BaseException:
            # A half-started registry (daemon up, images not pushed) would outlive the test.
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _value(self, key: str) -> str:
        if key not in self._env:
            raise RegistryError(f"registry in {self.dir} is not started (no {key})")
        return self._env[key]

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, as image names and credentials name the registry."""
        return self._value("REGISTRY_HOST")

    @property
    def ca_path(self) -> Path:
        return Path(self._value("REGISTRY_CA"))

    @property
    def username(self) -> str:
        return self._value("REGISTRY_USER")

    @property
    def password(self) -> str:
        return self._value("REGISTRY_PASSWORD")

    @property
    def busybox_image(self) -> str:
        return self._value("REGISTRY_BUSYBOX_IMAGE")

    @property
    def pause_image(self) -> str:
        return self._value("REGISTRY_PAUSE_IMAGE")

    @property
    def log_path(self) -> Path:
        return self.dir / "registry.log"

    def copy_image(self, source: str, repository: str) -> str:
        """Copy ``source`` (an image of this registry) to ``HOST/repository`` with the same tag,
        inside the registry, and return the new name: an image no containerd has pulled yet
        (its layers may still be present under other names)."""
        tag = source.rsplit(":", 1)[1]
        target = f"{self.host}/{repository}:{tag}"
        creds = f"{self.username}:{self.password}"
        certs = str(self.dir / "client-certs")
        argv = ["skopeo", "--insecure-policy", "copy", "--quiet", "--src-cert-dir", certs,
                "--dest-cert-dir", certs, "--src-creds", creds, "--dest-creds", creds,
                f"docker://{source}", f"docker://{target}"]
        run_script(argv, env=dict(os.environ), timeout=SCRIPT_TIMEOUT_SECONDS,
                   failed=lambda what, output: RegistryError(self._failure(argv, what, output)))
        return target

    def docker_config_json(self, *, server: str | None = None,
                           password: str | None = None) -> str:
        """A ``.dockerconfigjson`` value (base64, as in a Secret's ``data``) for ``server``
        (default: this registry) with this registry's user and ``password`` (default: the
        right one)."""
        return _b64(json.dumps({"auths": self._entries(server, password)}))

    def dockercfg(self, *, server: str | None = None, password: str | None = None) -> str:
        """The legacy ``.dockercfg`` value (base64): the entries without ``auths``."""
        return _b64(json.dumps(self._entries(server, password)))

    def _entries(self, server: str | None, password: str | None) -> dict[str, dict[str, str]]:
        secret = self.password if password is None else password
        token = _b64(f"{self.username}:{secret}")
        return {server or self.host: {"auth": token}}

    def _run(self, command: str, *args: str) -> None:
        # build-images.sh runs python3 from PATH: make that the interpreter running us.
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        env = dict(os.environ, PYKUBELET_IMAGES_DIR=str(self.images_dir), PATH=path)
        argv = [str(SCRIPTS_DIR / "registry.sh"), command, str(self.dir), *args]
        run_script(argv, env=env, timeout=SCRIPT_TIMEOUT_SECONDS,
                   failed=lambda what, output: RegistryError(self._failure(argv, what, output)))

    def _failure(self, argv: list[str], what: str, output: str) -> str:
        message = script_failure(argv, what, output)
        log = _tail(self.log_path, LOG_TAIL_LINES)
        if log and str(self.log_path) not in output:
            message += f"\n--- {self.log_path} (tail) ---\n{log}"
        return message


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def credential_plugin_flags(directory: Path, *, name: str, source: str, match_image: str,
                            cache_duration: str, env: Mapping[str, str]) -> list[str]:
    """The kubelet's flags for one exec credential provider plugin: ``name``, the Python
    ``source`` run with this interpreter, asked for images matching ``match_image``, with
    ``env``. Its file and its CredentialProviderConfig are written under ``directory``."""
    bin_dir = directory / "plugins"
    bin_dir.mkdir()
    plugin = bin_dir / name
    plugin.write_text(f"#!{sys.executable}\n{source}")
    plugin.chmod(0o755)
    config = directory / "credential-providers.json"
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
        "providers": [{
            "name": name, "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "defaultCacheDuration": cache_duration, "matchImages": [match_image],
            "env": [{"name": key, "value": value} for key, value in env.items()]}]}))
    return ["--image-credential-provider-config", str(config),
            "--image-credential-provider-bin-dir", str(bin_dir)]
