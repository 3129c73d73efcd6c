"""Python handle on the real Kubernetes control plane (scripts/testbed/controlplane.sh).

Cluster-mode tests, demos and the peer benchmark need a real kube-apiserver
with its controller manager and scheduler, not a hand-written double: the
Node authorizer, NodeRestriction and the CSR approver decide what a kubelet
may do, and only the real ones decide it the way a cluster will. The shell
scripts do the work (so a human can run them by hand); this module builds or
locates the binaries, drives the scripts, and turns their failures into
exceptions that carry the failing component's own log.

The same build yields the upstream Go kubelet (v1.20), found with
:func:`go_kubelet_binary`, for side-by-side measurements, and the kubectl of
the control plane's version, found with :func:`kubectl_binary`: every test,
benchmark and harness runs that one, never a kubectl from PATH (a machine's
own is usually far outside the version skew a 1.20 API server supports),
and the kubeadm of the same version, :func:`kubeadm_binary`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testsupport.testbed import SCRIPTS_DIR, _as_text, _tail, run_script, script_failure

BUILD_SCRIPT = SCRIPTS_DIR / "controlplane-build.sh"
CONTROLPLANE_SCRIPT = SCRIPTS_DIR / "controlplane.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# A cold build takes about 5 minutes on 2 idle cores; a busy machine is slower.
BUILD_TIMEOUT_SECONDS = 45 * 60.0
# Certificates, etcd and three components, each waited for.
START_TIMEOUT_SECONDS = 240.0
SCRIPT_TIMEOUT_SECONDS = 60.0
KUBECTL_TIMEOUT_SECONDS = 60.0
LOG_TAIL_LINES = 30


class ControlPlaneError(RuntimeError):
    """A control-plane script failed; the message includes its output and component logs."""


def _output_tail(output: str) -> str:
    return "\n".join(output.splitlines()[-LOG_TAIL_LINES:])


def build_binaries(timeout: float = BUILD_TIMEOUT_SECONDS) -> Path:
    """Build the Kubernetes binaries unless cached; return their directory (needs root)."""
    argv = [str(BUILD_SCRIPT)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                check=False)
    except subprocess.TimeoutExpired as err:
        output = _as_text(err.stdout) + _as_text(err.stderr)
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} timed out after {timeout:.0f}s\n{_output_tail(output)}") from err
    if result.returncode != 0:
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} failed (exit status {result.returncode})\n"
            f"{_output_tail(result.stdout + result.stderr)}")
    return Path(result.stdout.strip().splitlines()[-1])


def cached_binaries() -> Path | None:
    """The directory of already built binaries, or None; never builds."""
    result = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return Path(result.stdout.strip().splitlines()[-1])


def built_binary(name: str, what: str, *, build: bool = False) -> Path:
    """The program ``name`` of the build (e.g. ``kubelet``), ``what`` it is in errors.

    ``PYKUBELET_K8S_BIN_DIR`` overrides the cache. With ``build`` the binaries
    are built first when missing (root, minutes); without it a missing
    program is a :class:`ControlPlaneError` that says how to build it.
    """
    override = os.environ.get("PYKUBELET_K8S_BIN_DIR")
    bin_dir = Path(override) if override else cached_binaries()
    if bin_dir is None and build:
        bin_dir = build_binaries()
    if bin_dir is None or not (bin_dir / name).is_file():
        raise ControlPlaneError(
            f"no {what} built: run {BUILD_SCRIPT} as root (or set PYKUBELET_K8S_BIN_DIR)")
    return bin_dir / name


def go_kubelet_binary(build: bool = False) -> Path:
    """The upstream Go kubelet built from the same source as the control plane
    (``built_binary`` says where it is looked for)."""
    return built_binary("kubelet", "Go kubelet", build=build)


def kubeadm_binary(build: bool = False) -> Path:
    """The kubeadm built with the control plane, of its version (``built_binary``
    says where it is looked for)."""
    return built_binary("kubeadm", "kubeadm", build=build)


def kubectl_binary(bin_dir: Path | None = None, *, build: bool = False) -> Path:
    """The kubectl built with the control plane: the one in ``bin_dir`` (a running
    plane's own, :attr:`ControlPlane.bin_dir`) or else where ``built_binary`` looks."""
    if bin_dir is None:
        return built_binary("kubectl", "kubectl", build=build)
    path = bin_dir / "kubectl"
    if not path.is_file():
        raise ControlPlaneError(
            f"no kubectl in {bin_dir}: run {BUILD_SCRIPT} as root (it adds the programs "
            "a cache lacks)")
    return path


class ControlPlane:
    """One etcd + kube-apiserver + controller manager + scheduler rooted at ``dir``."""

    def __init__(self, dir: str | Path, signing_duration: str = "", *,
                 advertise_address: str = "") -> None:
        self.dir = Path(dir)
        # kube-controller-manager's --cluster-signing-duration (e.g. "7m"); default one year.
        self.signing_duration = signing_duration
        # An address of this machine the API server listens on and advertises (the
        # kubernetes Service's endpoint), so that test hosts and pods reach it
        # (testsupport/nodehost.py); empty: 127.0.0.1 only, reachable from the host alone.
        self.advertise_address = advertise_address
        self._env: dict[str, str] | None = None

    @classmethod
    def fresh(cls, signing_duration: str = "", *, advertise_address: str = "") -> ControlPlane:
        """A control plane in a new directory under /tmp."""
        return cls(Path("/tmp") / f"pkcp-{secrets.token_hex(4)}", signing_duration,
                   advertise_address=advertise_address)

    # --- facts from DIR/env ---------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The KEY=VALUE facts ``start`` wrote to ``dir/env`` (ports, URLs, paths)."""
        if self._env is None:
            env: dict[str, str] = {}
            for line in (self.dir / "env").read_text().splitlines():
                if line and not line.startswith("#") and "=" in line:
                    key, _, value = line.partition("=")
                    env[key] = value
            self._env = env
        return self._env

    @property
    def server(self) -> str:
        """The API server URL, https://127.0.0.1:PORT."""
        return self.env["APISERVER_URL"]

    @property
    def admin_kubeconfig(self) -> Path:
        return Path(self.env["ADMIN_KUBECONFIG"])

    @property
    def ca_cert(self) -> Path:
        """The cluster CA: signs every serving and client certificate, and CSRs."""
        return Path(self.env["CA_CERT"])

    @property
    def ca_key(self) -> Path:
        return Path(self.env["CA_KEY"])

    @property
    def apiserver_kubelet_client_cert(self) -> Path:
        """The certificate the API server presents when it calls a kubelet."""
        return Path(self.env["APISERVER_KUBELET_CLIENT_CERT"])

    @property
    def bin_dir(self) -> Path:
        return Path(self.env["KUBERNETES_BIN_DIR"])

    @property
    def version(self) -> str:
        """The server's version, e.g. ``v1.20.2``."""
        return self.env["KUBERNETES_VERSION"]

    def log_path(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    def pid(self, component: str) -> int | None:
        """The pid of a running component (one of COMPONENTS), or None."""
        try:
            pid = int((self.dir / "run" / f"{component}.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if f"{self.dir}/".encode() in cmdline else None

    # --- life cycle -----------------------------------------------------------

    def start(self) -> None:
        """Start etcd and the three components; return once all answer as healthy."""
        self._env = None
        self._run("start", timeout=START_TIMEOUT_SECONDS)

    def stop(self) -> None:
        """Stop every component and delete ``dir``."""
        self._run("stop")
        self._env = None

    def is_running(self) -> bool:
        """Every component is up and the API server reports itself ready."""
        result = subprocess.run([str(CONTROLPLANE_SCRIPT), "status", str(self.dir)],
                                capture_output=True, check=False)
        return result.returncode == 0

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- credentials ----------------------------------------------------------

    def node_kubeconfig(self, node_name: str) -> Path:
        """A kubeconfig authenticating as the node (CN=system:node:NAME, O=system:nodes)."""
        return Path(self._run("node-credentials", node_name).strip())

    def proxy_kubeconfig(self) -> Path:
        """A kubeconfig authenticating as kube-proxy (CN=system:kube-proxy, which the
        default RBAC policy binds to the ClusterRole system:node-proxier)."""
        return Path(self._run("proxy-credentials").strip())

    def bootstrap_kubeconfig(self) -> Path:
        """A kubeconfig with a bootstrap token that may request a kubelet client certificate.

        The token is in kubeadm's node-token group, bound as kubeadm binds it:
        node bootstrapper, and auto-approval of its node client CSRs (and of
        a node's CSRs to renew its own certificate).
        """
        return Path(self._run("bootstrap-kubeconfig").strip())

    # --- kubectl --------------------------------------------------------------

    def kubectl_argv(self, *args: str, kubeconfig: Path | None = None) -> list[str]:
        """The command line running the built kubectl (``kubectl_binary``, from this
        plane's binaries) against this cluster, as admin unless ``kubeconfig``; for
        commands that stream (``logs -f``, ``port-forward``) and need their own process."""
        return [str(kubectl_binary(self.bin_dir)),
                "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args]

    def kubectl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
                check: bool = True,
                timeout: float = KUBECTL_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster (``kubectl_argv``) to completion."""
        argv = self.kubectl_argv(*args, kubeconfig=kubeconfig)
        result = subprocess.run(argv, input=input, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"{' '.join(argv)} failed (exit status {result.returncode})\n"
                f"{_output_tail(result.stdout + result.stderr)}")
        return result

    def kubectl_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        """``kubectl ... -o json``, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig).stdout)

    # --- internals ------------------------------------------------------------

    def _run(self, command: str, *args: str, timeout: float = SCRIPT_TIMEOUT_SECONDS) -> str:
        argv = [str(CONTROLPLANE_SCRIPT), command, str(self.dir), *args]
        env = {**os.environ, "PYKUBELET_CONTROLPLANE_SIGNING_DURATION": self.signing_duration,
               "PYKUBELET_CONTROLPLANE_ADVERTISE_ADDRESS": self.advertise_address}
        result = run_script(argv, env=env, timeout=timeout, failed=lambda what, output: (
            ControlPlaneError(self._failure(argv, what, output))))
        return result.stdout

    def _failure(self, argv: list[str], what: str, output: str) -> str:
        message = script_failure(argv, what, output)
        # The script prints the log of the component it gave up on; add the
        # others' only when it printed none (a timeout, a killed script).
        if "last lines of" not in output:
            for component in COMPONENTS:
                tail = _tail(self.log_path(component), LOG_TAIL_LINES)
                if tail:
                    message += f"\n--- {self.log_path(component)} (tail) ---\n{tail}"
        return message


@contextlib.contextmanager
def running_control_plane(signing_duration: str = "", *,
                          advertise_address: str = "") -> Iterator[ControlPlane]:
    """A fresh control plane, started (its binaries built first if need be), then removed.
    ``advertise_address``: see ``ControlPlane``."""
    build_binaries()
    plane = ControlPlane.fresh(signing_duration, advertise_address=advertise_address)
    try:
        plane.start()
    except BaseException:
        with contextlib.suppress(ControlPlaneError):
            plane.stop()
        raise
    try:
        yield plane
    finally:
        plane.stop()
