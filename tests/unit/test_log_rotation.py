"""Container log rotation: size trigger, reopen through CRI, compression, file count limit."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path

from cri_api.v1 import api_pb2

from pykubelet.logs import ContainerLogManager, LogRotatePolicy, remove_container_logs


@dataclass
class FakeRuntime:
    """CRI at the seam: one running container whose log path the test owns."""

    log_path: Path
    reopened: list[str] = field(default_factory=list)
    fail_reopen: bool = False

    async def list_containers(self, _filter: object = None) -> list[api_pb2.Container]:
        return [api_pb2.Container(id="c1", state=api_pb2.CONTAINER_RUNNING)]

    async def container_status(self, container_id: str,
                               verbose: bool = False) -> api_pb2.ContainerStatusResponse:
        return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
            id=container_id, state=api_pb2.CONTAINER_RUNNING, log_path=str(self.log_path)))

    async def reopen_container_log(self, container_id: str) -> None:
        if self.fail_reopen:
            raise RuntimeError("reopen failed")
        self.reopened.append(container_id)
        self.log_path.write_bytes(b"")  # the runtime starts a new file


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def manager(runtime: FakeRuntime, max_files: int = 3) -> ContainerLogManager:
    return ContainerLogManager(runtime, LogRotatePolicy(max_size=100, max_files=max_files),  # type: ignore[arg-type]
                               workers=2, clock=Clock())


async def test_small_logs_are_left_alone(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"x" * 99)
    runtime = FakeRuntime(log)
    assert await manager(runtime).rotate_logs() == 0
    assert runtime.reopened == [] and sorted(p.name for p in tmp_path.iterdir()) == ["0.log"]


async def test_rotation_reopens_compresses_older_and_keeps_max_files(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    runtime = FakeRuntime(log)
    logs = manager(runtime, max_files=3)
    for round_ in range(4):
        log.write_bytes(f"round {round_}\n".encode() * 20)
        assert await logs.rotate_logs() == 1
    assert runtime.reopened == ["c1"] * 4
    names = sorted(p.name for p in tmp_path.iterdir())
    # The current file plus at most two rotated ones; only the newest rotated is plain.
    assert len(names) == 3 and "0.log" in names
    rotated = [n for n in names if n != "0.log"]
    assert rotated[0].endswith(".gz") and not rotated[1].endswith(".gz")
    assert gzip.decompress((tmp_path / rotated[0]).read_bytes()).startswith(b"round 2")
    assert (tmp_path / rotated[1]).read_bytes().startswith(b"round 3")


async def test_failed_reopen_puts_the_log_back(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"y" * 200)
    runtime = FakeRuntime(log, fail_reopen=True)
    assert await manager(runtime).rotate_logs() == 0
    assert log.read_bytes() == b"y" * 200
    assert [p.name for p in tmp_path.iterdir()] == ["0.log"]


async def test_leftovers_of_an_interrupted_rotation_are_cleaned(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"z" * 200)
    (tmp_path / "0.log.20240101-000000").write_bytes(b"a")
    (tmp_path / "0.log.20240101-000000.gz").write_bytes(gzip.compress(b"a"))
    (tmp_path / "0.log.20240101-000001.gz.tmp").write_bytes(b"partial")
    assert await manager(FakeRuntime(log), max_files=5).rotate_logs() == 1
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "0.log.20240101-000000" not in names
    assert not any(n.endswith(".tmp") for n in names)
    remove_container_logs(str(log))
    assert list(tmp_path.iterdir()) == []
