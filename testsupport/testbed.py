"""Python handle on the real containerd testbed (scripts/testbed/containerd.sh).

Integration tests, benchmarks and the README run script all need the same
thing: a private containerd 1.6 with the CRI plugin, CNI networking and the
two test images already imported. The shell scripts do the work so that a
human can run them by hand; this module only drives them and turns their
failures into exceptions that carry the daemon's own log, because "containerd
did not start" is useless without the reason containerd gave.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PAUSE_IMAGE = "pykubelet.local/pause:3.9"
BUSYBOX_IMAGE = "pykubelet.local/busybox:1.35"
# The pod network every testbed shares (see containerd.sh).
POD_SUBNET = ipaddress.ip_network("10.88.0.0/16")
CNI_BRIDGE = "pykcni0"
CNI_LEASE_DIR = Path("/var/lib/cni/networks/pykubelet")

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = REPO_ROOT / "scripts" / "testbed"
# CI may point this at a cached directory.
DEFAULT_IMAGES_DIR = Path(os.environ.get("PYKUBELET_IMAGES_DIR", "/tmp/pykubelet-images"))
# Generous: a cold start also compiles the pause binary and packs both images.
SCRIPT_TIMEOUT_SECONDS = 180.0
LOG_TAIL_LINES = 30


class TestbedError(RuntimeError):
    """A testbed script failed; the message includes its output and the daemon log."""

    __test__ = False


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_script(argv: list[str], *, env: dict[str, str], timeout: float,
               failed: Callable[[str, str], Exception],
               record: Callable[[subprocess.CompletedProcess[str]], None] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    """Run one of the testbed's scripts. ``record`` sees every run that completed; a
    timeout or a non-zero exit raises ``failed(what went wrong, the script's output)``."""
    try:
        result = subprocess.run(argv, env=env, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        output = _as_text(err.stdout) + _as_text(err.stderr)
        raise failed(f"timed out after {err.timeout:.0f}s", output) from err
    if record is not None:
        record(result)
    if result.returncode != 0:
        raise failed(f"exit status {result.returncode}", result.stdout + result.stderr)
    return result


def script_failure(argv: list[str], what: str, output: str) -> str:
    """The first lines of a script failure's message: the command, why, its output's tail."""
    message = f"{' '.join(argv)} failed ({what})"
    if output.strip():
        message += "\n--- script output (tail) ---\n" + "\n".join(
            output.splitlines()[-LOG_TAIL_LINES:])
    return message


def _as_text(output: bytes | str | None) -> str:
    # TimeoutExpired carries raw bytes even when the call asked for text.
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


class Testbed:
    """One private containerd rooted at ``dir``; see scripts/testbed/containerd.sh."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, dir: str | Path, images_dir: str | Path = DEFAULT_IMAGES_DIR) -> None:
        self.dir = Path(dir)
        self.images_dir = Path(images_dir)
        self.pause_image = PAUSE_IMAGE
        self.busybox_image = BUSYBOX_IMAGE

    @classmethod
    def fresh(cls, images_dir: str | Path = DEFAULT_IMAGES_DIR) -> Testbed:
        """A testbed in a new short directory under /tmp (socket paths are length-limited)."""
        return cls(Path("/tmp") / f"pkt-{secrets.token_hex(4)}", images_dir)

    @property
    def socket_path(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def endpoint(self) -> str:
        """The CRI endpoint URL, as passed to ``--container-runtime-endpoint``."""
        return f"unix://{self.socket_path}"

    @property
    def containerd_log(self) -> Path:
        return self.dir / "containerd.log"

    @property
    def script_log(self) -> Path:
        """Output of every script call; lives next to ``dir`` so it survives ``stop``."""
        return self.dir.with_name(self.dir.name + ".testbed.log")

    def build_images(self) -> None:
        """Build (or reuse) the pause and busybox archives in ``images_dir``."""
        self._run(SCRIPTS_DIR / "build-images.sh", str(self.images_dir))

    def build_e2e_images(self, bin_dir: Path) -> list[Path]:
        """Build (or reuse) the images upstream's e2e suite asks for (see build-images.sh)
        from the programs in the control-plane cache ``bin_dir``; returns their archives."""
        self._run(SCRIPTS_DIR / "build-images.sh", str(self.images_dir), "--e2e", str(bin_dir))
        return sorted((self.images_dir / "e2e").glob("*.tar"))

    def build_kubeadm_images(self, bin_dir: Path) -> list[Path]:
        """Build (or reuse) the images kubeadm 1.20's manifests and add-ons name (see
        build-images.sh) from the programs in ``bin_dir``; returns their archives."""
        self._run(SCRIPTS_DIR / "build-images.sh", str(self.images_dir), "--kubeadm", str(bin_dir))
        return sorted((self.images_dir / "kubeadm").glob("*.tar"))

    def import_archives(self, archives: list[Path]) -> None:
        """Import more image archives into the running containerd."""
        self._containerd("import", *(str(archive) for archive in archives))

    def start(self) -> None:
        """Start containerd, import the test images and write ``dir/env``."""
        self._containerd("start")

    def stop(self) -> None:
        """Remove all pods and containers, stop containerd and delete ``dir``."""
        self._containerd("stop")
        self.script_log.unlink(missing_ok=True)

    def stop_daemon(self) -> None:
        """Stop only the daemon; shims and containers keep running (a runtime outage)."""
        self._containerd("stop-daemon")

    def start_daemon(self) -> None:
        """Restart the daemon on the existing root; it re-attaches to running shims."""
        self._containerd("start")

    def is_running(self) -> bool:
        result = subprocess.run([str(SCRIPTS_DIR / "containerd.sh"), "status", str(self.dir)],
                                capture_output=True, check=False)
        return result.returncode == 0

    def __enter__(self) -> Testbed:
        self.build_images()
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _containerd(self, command: str, *args: str) -> None:
        self._run(SCRIPTS_DIR / "containerd.sh", command, str(self.dir), *args)

    def _run(self, script: Path, *args: str) -> None:
        # The scripts run python3 from PATH for their CRI helper (grpc, the CRI
        # stubs): make that the interpreter running us, e.g. the project venv's.
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        env = dict(os.environ, PYKUBELET_IMAGES_DIR=str(self.images_dir), PATH=path)
        argv = [str(script), *args]

        def record(result: subprocess.CompletedProcess[str]) -> None:
            with self.script_log.open("a") as log:
                log.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}")

        run_script(argv, env=env, timeout=SCRIPT_TIMEOUT_SECONDS, record=record,
                   failed=lambda what, output: TestbedError(self._failure(argv, what, output)))

    def _failure(self, argv: list[str], what: str, output: str) -> str:
        message = script_failure(argv, what, output)
        daemon_log = _tail(self.containerd_log, LOG_TAIL_LINES)
        # containerd.sh already prints the log tail when it gives up.
        if daemon_log and str(self.containerd_log) not in output:
            message += f"\n--- {self.containerd_log} (tail) ---\n{daemon_log}"
        return message
