"""The iptables command-line tools, one IP family at a time (upstream ``pkg/util/iptables``).

The kubelet asks little of iptables: make a chain unless it exists, add a rule
unless it is there (at the head or the tail of a chain), and watch a canary
chain to notice that someone flushed the tables. Each is one run of the
``iptables`` or ``ip6tables`` binary, as upstream does it:

- The binary is the one named ``iptables`` (``ip6tables``) on ``PATH``. Whether
  it drives nf_tables or the legacy x_tables is the host's choice (Debian's
  alternatives, a distribution's default), never the kubelet's; the kubelet
  leaves a hint chain there (``kubelet/network_linux.py``) so that components
  shipping their own iptables, such as kube-proxy's image, pick the same one.
- ``iptables --version``, read once per family, sets the flags that wait for
  the xtables lock instead of failing at once: ``-w 5 -W 100000`` from 1.6.1,
  ``-w 5`` from 1.4.22, ``-w`` from 1.4.20. A version that cannot be read
  counts as 1.4.11, the oldest with ``-C``, so no wait flag.
- A family is used only when ``-S POSTROUTING -t nat`` works (upstream's
  ``Present`` and ``NewBestEffort``): a host without ip6tables support, or
  without iptables at all, is not an error.
- Exit status 1 means "the chain exists" to ``-N`` and "no such rule" to
  ``-C``; 4 is a resource problem (the lock stayed taken), which says nothing
  about the tables either way.

Commands go through a ``CommandRunner``, the seam unit tests fake;
``SubprocessRunner`` runs them for real with asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

from pykubelet.util import klog


class IPFamily(enum.StrEnum):
    """The family and, by it, the binary (upstream ``Protocol``)."""

    IPV4 = "IPv4"
    IPV6 = "IPv6"

    @property
    def binary(self) -> str:
        return "iptables" if self is IPFamily.IPV4 else "ip6tables"


class Table(enum.StrEnum):
    NAT = "nat"
    FILTER = "filter"
    MANGLE = "mangle"


class Position(enum.StrEnum):
    """Where ``ensure_rule`` puts a missing rule: the head of the chain or its tail."""

    PREPEND = "-I"
    APPEND = "-A"


# The operations, by their iptables option.
CREATE_CHAIN, LIST_CHAIN, CHECK_RULE = "-N", "-S", "-C"

# Exit statuses with a meaning beyond "failed".
EXIT_EXISTS_OR_MISSING = 1
EXIT_RESOURCE_PROBLEM = 4

# The oldest version with -C; what an unreadable version counts as.
MIN_CHECK_VERSION = (1, 4, 11)
# The lock-wait flags by the oldest version that takes them, newest first.
WAIT_FLAGS: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((1, 6, 1), ("-w", "5", "-W", "100000")),
    ((1, 4, 22), ("-w", "5")),
    ((1, 4, 20), ("-w",)),
)
_VERSION = re.compile(r"v([0-9]+(?:\.[0-9]+)+)")

# A rule check that takes longer than this is given up (upstream's context timeout).
CHECK_RULE_TIMEOUT = 300.0
# Once the first canary is gone, how long and how often to look for the others going.
FLUSH_TIMEOUT = 5.0
FLUSH_POLL = 0.1


@dataclass(frozen=True)
class CommandResult:
    """How a command ended: its exit status (None: it could not be run) and its output,
    stdout and stderr together."""

    code: int | None
    output: str

    def status(self) -> str:
        return "not run" if self.code is None else f"exit status {self.code}"


class CommandRunner(Protocol):
    """Runs one command line; the seam unit tests fake."""

    async def run(self, argv: Sequence[str]) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands as child processes; one cancelled mid-run is killed, never left behind."""

    async def run(self, argv: Sequence[str]) -> CommandResult:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT)
        except OSError as err:  # the binary is missing or cannot be run
            return CommandResult(None, str(err))
        try:
            output, _ = await process.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return CommandResult(process.returncode, output.decode(errors="replace").strip())


class IPTablesError(Exception):
    """An iptables command failed; ``code`` is its exit status (None: it did not run)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    def is_resource_error(self) -> bool:
        return self.code == EXIT_RESOURCE_PROBLEM


def parse_version(text: str) -> tuple[int, ...] | None:
    match = _VERSION.search(text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def wait_flag(version: tuple[int, ...]) -> tuple[str, ...]:
    """The lock-wait flags this version of iptables takes (none before 1.4.20)."""
    return next((flags for oldest, flags in WAIT_FLAGS if version >= oldest), ())


class IPTables:
    """One family's iptables (upstream's ``runner``). Built by ``new_iptables``."""

    def __init__(self, runner: CommandRunner, family: IPFamily, *,
                 wait: tuple[str, ...]) -> None:
        self.runner = runner
        self.family = family
        self.wait = wait

    def is_ipv6(self) -> bool:
        return self.family is IPFamily.IPV6

    async def _run(self, operation: str, table: Table, chain: str,
                   *args: str) -> CommandResult:
        return await self.runner.run(
            [self.family.binary, *self.wait, operation, chain, "-t", table, *args])

    async def present(self) -> bool:
        """Whether this family's iptables works here: its nat POSTROUTING can be listed."""
        return (await self._run(LIST_CHAIN, Table.NAT, "POSTROUTING")).code == 0

    async def ensure_chain(self, table: Table, chain: str) -> bool:
        """Make ``chain`` unless it exists; whether it existed."""
        result = await self._run(CREATE_CHAIN, table, chain)
        if result.code == 0:
            return False
        if result.code == EXIT_EXISTS_OR_MISSING:
            return True
        raise IPTablesError(f'error creating chain "{chain}": {result.status()}: '
                            f'{result.output}', result.code)

    async def ensure_rule(self, position: Position, table: Table, chain: str,
                          *args: str) -> bool:
        """Add the rule at ``position`` unless ``-C`` finds it; whether it was there."""
        try:
            check = await asyncio.wait_for(self._run(CHECK_RULE, table, chain, *args),
                                           CHECK_RULE_TIMEOUT)
        except TimeoutError:
            raise IPTablesError("timed out while checking rules") from None
        if check.code == 0:
            return True
        if check.code != EXIT_EXISTS_OR_MISSING:
            raise IPTablesError(f"error checking rule: {check.status()}: {check.output}",
                                check.code)
        result = await self._run(position, table, chain, *args)
        if result.code != 0:
            raise IPTablesError(f"error appending rule: {result.status()}: {result.output}",
                                result.code)
        return False

    async def chain_exists(self, table: Table, chain: str) -> bool:
        """Whether ``-S chain`` lists it. A resource problem raises: it tells neither way."""
        result = await self._run(LIST_CHAIN, table, chain)
        if result.code == EXIT_RESOURCE_PROBLEM:
            raise IPTablesError(f'error listing chain "{chain}": {result.status()}: '
                                f'{result.output}', result.code)
        return result.code == 0

    async def monitor(self, canary: str, tables: Sequence[Table],
                      reload: Callable[[], Awaitable[object]], *, interval: float,
                      clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> NoReturn:
        """Upstream ``Monitor``: make ``canary`` in each of ``tables``, look for the first
        one every ``interval`` and, once it is gone (the tables were flushed), give the
        others a moment to go too, call ``reload`` and start over.

        It never returns; cancelling it leaves the canaries in place, as the kubelet's
        never-closed stop channel does upstream. ``clock`` and ``sleep`` are a test seam
        (a fake clock); production keeps the defaults.
        """
        while True:
            while not await self._make_canaries(canary, tables):
                await sleep(interval)
            while True:
                await sleep(interval)
                if await self._canary_gone(canary, tables[0]):
                    break
            await self._wait_for_flush(canary, tables[1:], clock=clock, sleep=sleep)
            klog.v(2).info("Reloading after iptables flush")
            await reload()

    async def _make_canaries(self, canary: str, tables: Sequence[Table]) -> bool:
        for table in tables:
            try:
                await self.ensure_chain(table, canary)
            except IPTablesError as err:
                klog.error("Could not set up iptables canary", err, table=table, chain=canary)
                return False
        return True

    async def _canary_gone(self, canary: str, table: Table) -> bool:
        try:
            if await self.chain_exists(table, canary):
                return False
        except IPTablesError as err:
            klog.error("Could not check for iptables canary", err, table=table, chain=canary)
            return False
        klog.v(2).info("IPTables canary deleted", table=table, chain=canary)
        return True

    async def _wait_for_flush(self, canary: str, tables: Sequence[Table], *,
                              clock: Callable[[], float],
                              sleep: Callable[[float], Awaitable[None]]) -> None:
        """Reloading while a flush is still under way would be undone by it: wait (a
        little) until the other tables' canaries are gone too."""
        deadline = clock() + FLUSH_TIMEOUT
        while True:
            try:
                flushed = [not await self.chain_exists(t, canary) for t in tables]
            except IPTablesError:
                flushed = [False]
            if all(flushed):
                return
            if clock() >= deadline:
                klog.info("Inconsistent iptables state detected")
                return
            await sleep(FLUSH_POLL)


async def new_iptables(runner: CommandRunner, family: IPFamily) -> IPTables:
    """The family's iptables with the wait flags its version takes (upstream ``New``)."""
    result = await runner.run([family.binary, "--version"])
    version = parse_version(result.output) if result.code == 0 else None
    if version is None:
        klog.info("Error checking iptables version, assuming version at least",
                  version=".".join(map(str, MIN_CHECK_VERSION)),
                  err=f"{result.status()}: {result.output}")
        version = MIN_CHECK_VERSION
    return IPTables(runner, family, wait=wait_flag(version))


async def new_best_effort(runner: CommandRunner) -> list[IPTables]:
    """Upstream ``NewBestEffort``: an ``IPTables`` for each family that works here, IPv4
    first; none, one or both, and neither lack is an error."""
    working = []
    for family in IPFamily:
        iptables = await new_iptables(runner, family)
        if await iptables.present():
            working.append(iptables)
    return working


__all__ = ["CommandResult", "CommandRunner", "IPFamily", "IPTables", "IPTablesError",
           "Position", "SubprocessRunner", "Table", "new_best_effort", "new_iptables",
           "parse_version", "wait_flag"]
