"""The systemd unit and kubeadm drop-in an operator installs, checked by systemd itself.

``systemd-analyze verify --root`` loads the units from a temporary root laid out as a
node's: pykubelet's unit in /etc/systemd/system with its drop-in in
pykubelet.service.d, the console script at /opt/pykubelet/bin/pykubelet, systemd's own
targets and, where a test says so, the Go kubelet's packages (kubelet.service and its
10-kubeadm.conf, /usr/bin/kubelet left out so that systemd complains if it would run
it). ``systemctl --root`` enables and disables units in that root without a running
systemd, as it would on the node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEMCTL = shutil.which("systemctl")
PACKAGING = Path(__file__).resolve().parents[2] / "packaging" / "systemd"
UNIT = PACKAGING / "pykubelet.service"
DROP_IN = PACKAGING / "20-kubeadm.conf"
PYKUBELET = "/opt/pykubelet/bin/pykubelet"
# Where Debian's systemd keeps its targets (sysinit.target, multi-user.target, ...).
SYSTEM_UNITS = next((d for d in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
                     if d.is_dir()), None)

# The Go kubelet's unit and kubeadm's drop-in for it, as the 1.20 packages install them
# (the settings that matter here, not the packages' text).
GO_KUBELET_UNIT = """\
[Unit]
Description=the Go kubelet
[Service]
ExecStart=/usr/bin/kubelet
Restart=always
[Install]
WantedBy=multi-user.target
"""
GO_KUBEADM_DROP_IN = """\
[Service]
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
"""

pytestmark = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is absent")


def node_root(tmp_path: Path, *, drop_in_text: str | None = None, with_exec: bool = True,
              go_kubelet: bool = False) -> Path:
    root = tmp_path / "root"
    system = root / "etc/systemd/system"
    (system / "pykubelet.service.d").mkdir(parents=True)
    shutil.copy(UNIT, system / "pykubelet.service")
    (system / "pykubelet.service.d" / DROP_IN.name).write_text(
        DROP_IN.read_text() if drop_in_text is None else drop_in_text)
    assert SYSTEM_UNITS is not None, "systemd-analyze without systemd's unit directory"
    vendor = root / "usr/lib/systemd/system"
    vendor.mkdir(parents=True)
    for target in SYSTEM_UNITS.glob("*.target"):
        shutil.copy(target, vendor / target.name, follow_symlinks=True)
    if go_kubelet:
        (vendor / "kubelet.service").write_text(GO_KUBELET_UNIT)
        (system / "kubelet.service.d").mkdir()
        (system / "kubelet.service.d/10-kubeadm.conf").write_text(GO_KUBEADM_DROP_IN)
    if with_exec:
        script = root / PYKUBELET.lstrip("/")
        script.parent.mkdir(parents=True)
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
    return root


def verify(root: Path, unit: str = "pykubelet.service") -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}", "--man=no", "--generators=no", unit],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})


def systemctl(root: Path, *args: str) -> str:
    assert SYSTEMCTL is not None
    result = subprocess.run([SYSTEMCTL, f"--root={root}", *args], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0 or args[0] == "is-enabled", result
    return result.stdout.strip()


def test_the_unit_with_kubeadms_drop_in_verifies_cleanly(tmp_path: Path) -> None:
    result = verify(node_root(tmp_path))
    # Not even a warning: systemd-analyze reports unknown keys without failing.
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_verification_reads_the_drop_in(tmp_path: Path) -> None:
    # Without its empty ExecStart=, the drop-in adds a second command: systemd refuses.
    text = DROP_IN.read_text().replace("ExecStart=\n", "")
    assert text != DROP_IN.read_text()
    result = verify(node_root(tmp_path, drop_in_text=text))
    assert result.returncode != 0
    assert "more than one ExecStart=" in result.stderr
    # A misspelt setting in the drop-in is reported with its file.
    result = verify(node_root(tmp_path / "typo", drop_in_text=DROP_IN.read_text().replace(
        "EnvironmentFile=-/etc/default/kubelet", "EnvironmentFiles=-/etc/default/kubelet")))
    assert DROP_IN.name in result.stderr and "EnvironmentFiles" in result.stderr


def test_verification_needs_the_installed_command(tmp_path: Path) -> None:
    result = verify(node_root(tmp_path, with_exec=False))
    assert result.returncode != 0
    assert f"{PYKUBELET} is not executable" in result.stderr


@pytest.mark.skipif(SYSTEMCTL is None, reason="systemctl is absent")
def test_enabled_pykubelet_answers_to_kubelet_service_and_disabling_gives_it_back(
        tmp_path: Path) -> None:
    root = node_root(tmp_path, go_kubelet=True)
    # A node run by the Go kubelet...
    systemctl(root, "enable", "kubelet.service")
    result = verify(root, "kubelet.service")
    assert result.returncode != 0 and "/usr/bin/kubelet is not executable" in result.stderr
    # ...switched to pykubelet: kubeadm's `systemctl restart kubelet` now runs pykubelet,
    # with pykubelet's drop-in applied after the Go package's 10-kubeadm.conf.
    systemctl(root, "disable", "kubelet.service")
    systemctl(root, "enable", "pykubelet.service")
    assert systemctl(root, "is-enabled", "kubelet.service") == "alias"
    assert systemctl(root, "is-enabled", "pykubelet.service") == "enabled"
    result = verify(root, "kubelet.service")
    assert (result.returncode, result.stderr) == (0, "")
    # ...and back to the Go kubelet.
    systemctl(root, "disable", "pykubelet.service")
    systemctl(root, "enable", "kubelet.service")
    assert systemctl(root, "is-enabled", "kubelet.service") == "enabled"
    assert systemctl(root, "is-enabled", "pykubelet.service") == "disabled"
    result = verify(root, "kubelet.service")
    assert result.returncode != 0 and "/usr/bin/kubelet is not executable" in result.stderr


def test_the_unit_and_the_drop_in_run_the_same_installed_command() -> None:
    commands = [line.removeprefix("ExecStart=").split()[0]
                for text in (UNIT.read_text(), DROP_IN.read_text())
                for line in text.splitlines() if line.startswith("ExecStart=/")]
    assert commands == [PYKUBELET, PYKUBELET]
