"""A kubelet started by a script (scripts/run-cluster.sh) through ``masked_exec`` writes
its kernel tunables and device-plugin sockets into its own directory, never the machine's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pykubelet.cm.kernel_tunables import KERNEL_TUNABLES, VM_OVERCOMMIT_MEMORY
from testsupport.kubelet_process import DEVICE_PLUGIN_DIR, read_kernel_tunables


def test_a_masked_kubelet_writes_its_own_files_not_the_machines(tmp_path: Path) -> None:
    base, root = tmp_path / "node", tmp_path / "node" / "root"
    host_value = Path("/proc/sys", VM_OVERCOMMIT_MEMORY).read_text()
    host_plugins = sorted(DEVICE_PLUGIN_DIR.iterdir()) if DEVICE_PLUGIN_DIR.is_dir() else []
    # What a kubelet does at start-up: set a tunable, create its registration socket.
    script = (f"echo 2 > /proc/sys/{VM_OVERCOMMIT_MEMORY} && "
              f"touch {DEVICE_PLUGIN_DIR}/kubelet.sock && "
              f"grep -c ' {root} ' /proc/self/mountinfo")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "testsupport.kubelet_process", "--base", str(base),
             "--root-dir", str(root), "--", "sh", "-c", script],
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert read_kernel_tunables(base / "kernel-tunables")[VM_OVERCOMMIT_MEMORY] == "2"
        assert set(read_kernel_tunables(base / "kernel-tunables")) == set(KERNEL_TUNABLES)
        assert (base / "device-plugins" / "kubelet.sock").exists()
        # Its root directory is a mount the host shares, so its volume mounts reach containerd.
        mounts = Path("/proc/self/mountinfo").read_text()
        assert any(line.split()[4] == str(root) and "shared:" in line
                   for line in mounts.splitlines())
    finally:
        subprocess.run(["umount", str(root)], check=False, capture_output=True)
    assert Path("/proc/sys", VM_OVERCOMMIT_MEMORY).read_text() == host_value
    now = sorted(DEVICE_PLUGIN_DIR.iterdir()) if DEVICE_PLUGIN_DIR.is_dir() else []
    assert now == host_plugins
