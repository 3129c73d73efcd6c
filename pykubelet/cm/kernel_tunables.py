"""The kernel settings the kubelet needs, checked or set at start-up (``protectKernelDefaults``).

Upstream's container manager (``setupKernelTunables``, called from
``setupNode`` while the container manager starts, right after node
allocatable is validated) wants six sysctls at fixed values: memory
overcommit always allowed, the OOM killer rather than a panic on OOM, a
reboot ten seconds after a panic, a panic on an oops, and room for a key per
container in root's keyring. What happens when one differs depends on
``protectKernelDefaults``:

- true: the kubelet does not touch the kernel; each wrong value is an error
  (``invalid kernel flag: <key>, expected value: <v>, actual value: <a>``),
  all of them in one, and the kubelet does not start;
- false (the default): the kubelet writes the wanted value (logged at V(2)),
  and a write that fails is an error. Inside a user namespace such writes
  fail by nature; with the ``KubeletInUserNamespace`` gate they are ignored.

A value that cannot be read is an error either way. ``KERNEL_TUNABLES`` is the
one table of keys and values (test support masks the same files with it).
The sysctl directory is a parameter so that tests work on a directory of
their own and never on the host's ``/proc/sys``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from pykubelet.util import klog

SYSCTL_DIR: Final = "/proc/sys"

# Keys (paths under /proc/sys) and the values the kubelet wants, as upstream's
# component-helpers/node/util/sysctl names them.
VM_OVERCOMMIT_MEMORY: Final = "vm/overcommit_memory"
VM_PANIC_ON_OOM: Final = "vm/panic_on_oom"
KERNEL_PANIC: Final = "kernel/panic"
KERNEL_PANIC_ON_OOPS: Final = "kernel/panic_on_oops"
ROOT_MAX_KEYS: Final = "kernel/keys/root_maxkeys"
ROOT_MAX_BYTES: Final = "kernel/keys/root_maxbytes"
# A key per container (runtimes make one each), 25 bytes per key.
ROOT_MAX_KEYS_SETTING: Final = 1_000_000

KERNEL_TUNABLES: Final[Mapping[str, int]] = MappingProxyType({
    VM_OVERCOMMIT_MEMORY: 1,  # always overcommit: limits are the cgroups' business
    VM_PANIC_ON_OOM: 0,  # run the OOM killer, which picks by oom_score_adj
    KERNEL_PANIC: 10,  # reboot 10 s after a panic
    KERNEL_PANIC_ON_OOPS: 1,  # an oops panics (and so reboots)
    ROOT_MAX_KEYS: ROOT_MAX_KEYS_SETTING,
    ROOT_MAX_BYTES: ROOT_MAX_KEYS_SETTING * 25,
})

USER_NAMESPACE_HINT: Final = (
    "Updating kernel flag failed (Hint: enable KubeletInUserNamespace feature flag to ignore "
    "the error)")
# The identity mapping of the initial user namespace (moby's userns.RunningInUserNS).
_INITIAL_UID_MAP: Final = ["0", "0", "4294967295"]


class KernelTunablesError(Exception):
    """One message per key that is wrong, unreadable or could not be set; rendered as
    upstream's aggregate error (one message alone, several in brackets)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        super().__init__(text)


def running_in_user_namespace(uid_map: str = "/proc/self/uid_map") -> bool:
    """Whether this process lives in a user namespace other than the initial one."""
    try:
        with open(uid_map, encoding="ascii") as file:
            lines = file.read().splitlines()
    except OSError:
        return False
    return not (len(lines) == 1 and lines[0].split() == _INITIAL_UID_MAP)


def _path(sysctl_dir: str, key: str) -> str:
    return os.path.join(sysctl_dir, key)


def read_kernel_flag(key: str, *, sysctl_dir: str = SYSCTL_DIR) -> int:
    """The integer value of ``key``; ``KernelTunablesError`` names the key otherwise."""
    path = _path(sysctl_dir, key)
    try:
        with open(path, encoding="ascii") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise KernelTunablesError([f"reading kernel flag {key} ({path}): {reason}"]) from err
    try:
        return int(text.strip(" \n"))
    except ValueError as err:
        raise KernelTunablesError(
            [f"reading kernel flag {key} ({path}): {text.strip()!r} is not an integer"]) from err


def write_kernel_flag(key: str, value: int, *, sysctl_dir: str = SYSCTL_DIR) -> None:
    path = _path(sysctl_dir, key)
    try:
        with open(path, "w", encoding="ascii") as file:
            file.write(str(value))
    except OSError as err:
        raise KernelTunablesError(
            [f"setting kernel flag {key} ({path}) to {value}: {err.strerror or err}"]) from err


def setup_kernel_tunables(*, protect_kernel_defaults: bool, kubelet_in_user_namespace: bool,
                          sysctl_dir: str = SYSCTL_DIR,
                          in_user_namespace: Callable[[], bool] = running_in_user_namespace
                          ) -> None:
    """Check (``protect_kernel_defaults``) or set every tunable that differs from
    ``KERNEL_TUNABLES``; raise ``KernelTunablesError`` with every problem found.

    ``sysctl_dir`` and ``in_user_namespace`` are test seams; production keeps the defaults.
    """
    problems: list[str] = []
    for key, expected in KERNEL_TUNABLES.items():
        try:
            actual = read_kernel_flag(key, sysctl_dir=sysctl_dir)
        except KernelTunablesError as err:
            problems += err.problems
            continue
        if actual == expected:
            continue
        if protect_kernel_defaults:
            problems.append(f"invalid kernel flag: {key}, expected value: {expected}, "
                            f"actual value: {actual}")
            continue
        klog.v(2).info("Updating kernel flag", flag=key, expectedValue=expected,
                       actualValue=actual)
        try:
            write_kernel_flag(key, expected, sysctl_dir=sysctl_dir)
        except KernelTunablesError as err:
            if in_user_namespace():
                if kubelet_in_user_namespace:
                    klog.v(2).info("Updating kernel flag failed (running in UserNS, ignoring)",
                                   flag=key, err=str(err))
                    continue
                klog.error(USER_NAMESPACE_HINT, err, flag=key)
            problems += err.problems
    if problems:
        raise KernelTunablesError(problems)


__all__ = [
    "KERNEL_TUNABLES",
    "SYSCTL_DIR",
    "KernelTunablesError",
    "read_kernel_flag",
    "running_in_user_namespace",
    "setup_kernel_tunables",
    "write_kernel_flag",
]
