"""The kernel tunables check (``protectKernelDefaults``), on a directory standing for /proc/sys."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from pykubelet.cm import (
    CgroupManager,
    ContainerManager,
    ContainerManagerError,
    NodeConfig,
    ResourceConfig,
)
from pykubelet.cm.cgroups import V1, CgroupName
from pykubelet.cm.kernel_tunables import (
    KERNEL_TUNABLES,
    KernelTunablesError,
    setup_kernel_tunables,
)
from pykubelet.cm.manager import Capacity
from pykubelet.util import klog
from testsupport.kubelet_process import read_kernel_tunables, write_kernel_tunables

# The host the issue was found on: three of the six differ.
WRONG = {"vm/overcommit_memory": 0, "kernel/panic": 1, "kernel/panic_on_oops": 0}
WANTED = {key: str(value) for key, value in KERNEL_TUNABLES.items()}
# A kernel file any process can read and none can write (there is no write handler).
UNWRITABLE_KERNEL_FILE = Path("/proc/self/oom_score")


@pytest.fixture
def updates(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """The ``Updating kernel flag`` lines logged so far (at V(2))."""
    logger = logging.getLogger("pykubelet")
    logger.addHandler(caplog.handler)  # propagation may be off after a klog.setup()
    caplog.set_level(logging.DEBUG, logger="pykubelet")
    before = klog.verbosity()
    klog.set_verbosity(2)
    try:
        # A record reaches caplog twice when propagation is on: count each once.
        yield lambda: [r.getMessage() for r in dict.fromkeys(caplog.records)
                       if r.getMessage().startswith('"Updating kernel flag"')]
    finally:
        klog.set_verbosity(before)
        logger.removeHandler(caplog.handler)


def test_the_six_tunables_and_the_values_upstream_wants() -> None:
    assert dict(KERNEL_TUNABLES) == {
        "vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
        "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
        "kernel/keys/root_maxbytes": 25000000}


def test_protected_defaults_refuse_each_wrong_flag_and_change_nothing(tmp_path: Path) -> None:
    write_kernel_tunables(tmp_path, WRONG)
    with pytest.raises(KernelTunablesError) as caught:
        setup_kernel_tunables(protect_kernel_defaults=True, kubelet_in_user_namespace=False,
                              sysctl_dir=str(tmp_path))
    assert caught.value.problems == [
        "invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0",
        "invalid kernel flag: kernel/panic, expected value: 10, actual value: 1",
        "invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0"]
    # Upstream's aggregate: several errors in brackets, separated by commas.
    assert str(caught.value) == "[" + ", ".join(caught.value.problems) + "]"
    assert read_kernel_tunables(tmp_path) == {**WANTED, **{k: str(v) for k, v in WRONG.items()}}


def test_one_wrong_flag_is_the_error_itself(tmp_path: Path) -> None:
    write_kernel_tunables(tmp_path, {"vm/panic_on_oom": 1})
    with pytest.raises(KernelTunablesError) as caught:
        setup_kernel_tunables(protect_kernel_defaults=True, kubelet_in_user_namespace=False,
                              sysctl_dir=str(tmp_path))
    assert str(caught.value) == (
        "invalid kernel flag: vm/panic_on_oom, expected value: 0, actual value: 1")


@pytest.mark.parametrize("protect", [True, False])
def test_wanted_values_pass_untouched(tmp_path: Path, protect: bool,
                                      updates: Callable[[], list[str]]) -> None:
    write_kernel_tunables(tmp_path)
    setup_kernel_tunables(protect_kernel_defaults=protect, kubelet_in_user_namespace=False,
                          sysctl_dir=str(tmp_path))
    assert read_kernel_tunables(tmp_path) == WANTED
    assert updates() == []


def test_unprotected_defaults_set_exactly_the_flags_that_differ(
        tmp_path: Path, updates: Callable[[], list[str]]) -> None:
    write_kernel_tunables(tmp_path, WRONG)
    setup_kernel_tunables(protect_kernel_defaults=False, kubelet_in_user_namespace=False,
                          sysctl_dir=str(tmp_path))
    assert read_kernel_tunables(tmp_path) == WANTED
    lines = updates()
    assert [line.split()[3] for line in lines] == [
        'flag="vm/overcommit_memory"', 'flag="kernel/panic"', 'flag="kernel/panic_on_oops"']
    assert "expectedValue=10 actualValue=1" in lines[1]


@pytest.mark.parametrize("protect", [True, False])
def test_a_flag_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path,
                                                          protect: bool) -> None:
    write_kernel_tunables(tmp_path)
    (tmp_path / "kernel/panic").unlink()
    (tmp_path / "vm/panic_on_oom").write_text("never\n")
    with pytest.raises(KernelTunablesError) as caught:
        setup_kernel_tunables(protect_kernel_defaults=protect, kubelet_in_user_namespace=False,
                              sysctl_dir=str(tmp_path))
    first, second = caught.value.problems
    assert first.startswith(f"reading kernel flag vm/panic_on_oom ({tmp_path}/vm/panic_on_oom)")
    assert "'never' is not an integer" in first
    assert second == (f"reading kernel flag kernel/panic ({tmp_path}/kernel/panic): "
                      "No such file or directory")


def unwritable(tmp_path: Path, key: str) -> None:
    """``key`` holds a value other than the wanted one, and writing it fails."""
    write_kernel_tunables(tmp_path)
    (tmp_path / key).unlink()
    (tmp_path / key).symlink_to(UNWRITABLE_KERNEL_FILE)


def test_a_flag_that_cannot_be_set_is_an_error_naming_it(tmp_path: Path) -> None:
    unwritable(tmp_path, "kernel/keys/root_maxkeys")  # an OOM score is at most 2000
    with pytest.raises(KernelTunablesError) as caught:
        setup_kernel_tunables(protect_kernel_defaults=False, kubelet_in_user_namespace=False,
                              sysctl_dir=str(tmp_path), in_user_namespace=lambda: False)
    assert str(caught.value).startswith(
        f"setting kernel flag kernel/keys/root_maxkeys ({tmp_path}/kernel/keys/root_maxkeys) "
        "to 1000000: ")


@pytest.mark.parametrize("gate", [True, False])
def test_in_a_user_namespace_the_gate_lets_a_failed_set_be(tmp_path: Path, gate: bool) -> None:
    unwritable(tmp_path, "kernel/keys/root_maxkeys")
    try:
        setup_kernel_tunables(protect_kernel_defaults=False, kubelet_in_user_namespace=gate,
                              sysctl_dir=str(tmp_path), in_user_namespace=lambda: True)
        failed = False
    except KernelTunablesError:
        failed = True
    assert failed is not gate


def test_the_container_manager_refuses_to_start_before_making_any_cgroup(
        tmp_path: Path) -> None:
    """At start (upstream setupNode), before the cgroup tree: the error names every flag."""
    created: list[object] = []

    class Recording(CgroupManager):
        def exists(self, cgroup: CgroupName) -> bool:
            return True

        def create(self, cgroup: CgroupName, config: ResourceConfig | None = None) -> None:
            created.append(cgroup)

    manager = ContainerManager(
        NodeConfig(protect_kernel_defaults=True), Recording("cgroupfs", version=V1),
        Capacity({"cpu": Fraction(1000), "memory": Fraction(2**30)}),
        sysctl_dir=str(write_kernel_tunables(tmp_path / "sysctl", WRONG)))
    with pytest.raises(ContainerManagerError) as caught:
        manager.start()
    for key in WRONG:
        assert f"invalid kernel flag: {key}," in str(caught.value)
    assert created == [] and not manager.started
