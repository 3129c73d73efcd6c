"""One architecture name per machine: the Node's labels, its nodeInfo and ``--version`` agree.

The name is Go's ``GOARCH`` spelling of what ``platform.machine()`` reports;
on an ``i686`` or ``armv6l`` host a scheduler matching ``kubernetes.io/arch``
and an operator reading ``--version=raw`` must see the same word.
"""

from __future__ import annotations

import platform

import pytest

from pykubelet.cmd import version
from pykubelet.events import LoggingRecorder
from pykubelet.nodestatus import NodeStatusManager, NodeStatusOptions
from pykubelet.nodestatus import setters as s
from tests.unit.fake_nodes import FakeCache, FakeNodeAPI

MACHINES = [
    ("x86_64", "amd64"), ("AMD64", "amd64"),
    ("aarch64", "arm64"), ("arm64", "arm64"),
    ("armv7l", "arm"), ("armv6l", "arm"),
    ("i386", "386"), ("i686", "386"),
    ("ppc64le", "ppc64le"), ("s390x", "s390x"), ("riscv64", "riscv64"),
    ("mips64", "mips64"),  # not in the table: passed through as it is
]


@pytest.mark.parametrize(("machine", "goarch"), MACHINES)
async def test_node_labels_node_info_and_version_name_the_same_architecture(
        monkeypatch: pytest.MonkeyPatch, machine: str, goarch: str) -> None:
    monkeypatch.setattr(platform, "machine", lambda: machine)
    api = FakeNodeAPI()
    manager = NodeStatusManager(NodeStatusOptions(node_name="n1", hostname="n1"), api, api,
                                FakeCache(), LoggingRecorder())
    manager.set_setters([s.go_runtime()])

    node = await manager.initial_node()

    labels = node.metadata.labels
    assert labels["kubernetes.io/arch"] == labels["beta.kubernetes.io/arch"] == goarch
    assert node.status.node_info.architecture == goarch
    assert version.get().Platform.rsplit("/", 1)[1] == goarch
