"""makeIPTablesUtilChains: the chains and rules the kubelet keeps, and their re-creation.

The iptables binaries are replaced at the command seam by ``FakeXtables``, a small
model of what ``iptables``/``ip6tables`` do with the options the kubelet uses
(``-N -S -C -I -A`` on named tables), so the tests assert on the resulting tables,
as ``iptables -S`` would show them. Time is a ``ManualClock``: the minute between
canary checks passes when a test says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pykubelet.kubelet.network_linux import (
    CANARY_CHAIN,
    FIREWALL_CHAIN,
    HINT_CHAIN,
    LOCALNET_RULE,
    MONITOR_INTERVAL,
    IPTablesUtilChains,
)
from pykubelet.util.iptables import (
    FLUSH_POLL,
    FLUSH_TIMEOUT,
    CommandResult,
    IPFamily,
    Table,
    new_iptables,
    wait_flag,
)
from tests.unit.kubelet_fakes import new_kubelet
from tests.unit.waiting import ManualClock, until

BUILTIN = {"filter": ["INPUT", "FORWARD", "OUTPUT"],
           "nat": ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
           "mangle": ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]}
BINARIES = {"iptables": IPFamily.IPV4, "ip6tables": IPFamily.IPV6}


@dataclass
class Family:
    """One family's tables: table -> chain -> rules (each the argument tuple)."""

    tables: dict[str, dict[str, list[tuple[str, ...]]]] = field(default_factory=lambda: {
        table: {chain: [] for chain in chains} for table, chains in BUILTIN.items()})
    supported: bool = True

    def chains(self, table: str) -> set[str]:
        return set(self.tables[table])

    def flush(self) -> None:
        """``iptables -F && iptables -X`` on every table, as a firewall reload does."""
        for table, chains in self.tables.items():
            for chain in list(chains):
                if chain in BUILTIN[table]:
                    chains[chain].clear()
                else:
                    del chains[chain]


class FakeXtables:
    """``iptables`` and ``ip6tables`` as far as the kubelet uses them.

    ``version`` is what ``--version`` prints (None: it fails); a family that is not
    ``supported`` fails every table operation as a kernel without it does. ``fail``
    maps (family, option, table, chain) to the result that command gets instead;
    ``crash`` makes every command of that family raise, as a bug would.
    """

    def __init__(self, version: str | None = "1.8.9") -> None:
        self.version = version
        self.families = {family: Family() for family in IPFamily}
        self.fail: dict[tuple[IPFamily, str, str, str], CommandResult] = {}
        self.commands: list[list[str]] = []
        self.crash: IPFamily | None = None

    def __getitem__(self, family: IPFamily) -> Family:
        return self.families[family]

    async def run(self, argv: Sequence[str]) -> CommandResult:
        self.commands.append(list(argv))
        await asyncio.sleep(0)  # a command takes a turn of the loop, as a process would
        binary, *args = argv
        family = BINARIES[binary]
        if family is self.crash:
            raise RuntimeError("a bug")
        if args == ["--version"]:
            if self.version is None:
                return CommandResult(None, f'exec: "{binary}": executable file not found')
            return CommandResult(0, f"{binary} v{self.version} (nf_tables)")
        args = _without_wait_flags(args)
        option, chain, dash_t, table, *rule = args
        assert dash_t == "-t", argv
        injected = self.fail.get((family, option, table, chain))
        if injected is not None:
            return injected
        state = self.families[family]
        if not state.supported:
            return CommandResult(3, f"{binary} v1.8.9: can't initialize {binary} table `{table}'")
        chains = state.tables[table]
        if option == "-N":
            if chain in chains:
                return CommandResult(1, "iptables: Chain already exists.")
            chains[chain] = []
            return CommandResult(0, "")
        if option == "-S":
            return CommandResult(0 if chain in chains else 1, "")
        if chain not in chains or (rule[:1] == ["-j"] and rule[1] not in chains
                                   and rule[1] not in ("DROP", "ACCEPT")):
            return CommandResult(2, f"Chain '{chain}' does not exist")
        if option == "-C":
            return CommandResult(0 if tuple(rule) in chains[chain] else 1, "")
        if option == "-I":
            chains[chain].insert(0, tuple(rule))
        elif option == "-A":
            chains[chain].append(tuple(rule))
        else:
            raise AssertionError(f"unexpected command {argv}")
        return CommandResult(0, "")


def _without_wait_flags(args: list[str]) -> list[str]:
    rest = list(args)
    while rest and rest[0] in ("-w", "-W"):
        rest = rest[2:] if len(rest) > 1 and rest[1].isdigit() else rest[1:]
    return rest


JUMP = ("-j", FIREWALL_CHAIN)


@pytest.fixture(autouse=True)
def _info_lines(caplog: pytest.LogCaptureFixture) -> None:
    """The kubelet's info lines are what an operator reads here: capture them."""
    caplog.set_level(logging.INFO, logger="pykubelet")


@asynccontextmanager
async def running(xtables: FakeXtables, clock: ManualClock) -> AsyncIterator[asyncio.Task[None]]:
    """``IPTablesUtilChains.run`` as the kubelet's task, until the test is done with it."""
    chains = IPTablesUtilChains(xtables, clock=clock, sleep=clock.sleep)
    task = asyncio.create_task(chains.run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def watching(clock: ManualClock, families: int = 2) -> None:
    """Until the first sync is done and every family's canary check is waiting."""
    await until(lambda: clock.sleepers == families, what="the canary checks waiting")


def assert_kubelet_chains(xtables: FakeXtables) -> None:
    """What v1.35 makes: the hint and canaries in both families, the localnet firewall
    in IPv4 only, jumped to first from INPUT and OUTPUT."""
    v4, v6 = xtables[IPFamily.IPV4], xtables[IPFamily.IPV6]
    for family in (v4, v6):
        assert {HINT_CHAIN, CANARY_CHAIN} <= family.chains("mangle")
        assert CANARY_CHAIN in family.chains("nat") and CANARY_CHAIN in family.chains("filter")
        assert family.tables["mangle"][HINT_CHAIN] == []
    assert v4.tables["filter"][FIREWALL_CHAIN] == [LOCALNET_RULE]
    assert v4.tables["filter"]["INPUT"][0] == JUMP and v4.tables["filter"]["OUTPUT"][0] == JUMP
    assert FIREWALL_CHAIN not in v6.chains("filter") and v6.tables["filter"]["INPUT"] == []
    # What 1.20 also made went with IPTablesOwnershipCleanup.
    for family in (v4, v6):
        assert not {"KUBE-MARK-DROP", "KUBE-MARK-MASQ", "KUBE-POSTROUTING"} & family.chains("nat")


async def test_the_kubelet_makes_the_hint_the_canaries_and_the_ipv4_localnet_firewall(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    # A firewall's own rules come first in INPUT already; the kubelet's jump goes before them.
    xtables[IPFamily.IPV4].tables["filter"]["INPUT"].append(("-j", "ACCEPT"))
    async with running(xtables, clock):
        await watching(clock)
        assert_kubelet_chains(xtables)
        assert xtables[IPFamily.IPV4].tables["filter"]["INPUT"] == [JUMP, ("-j", "ACCEPT")]
    assert caplog.text.count('"Initialized iptables rules."') == 2
    assert 'protocol="IPv4"' in caplog.text and 'protocol="IPv6"' in caplog.text


def test_the_localnet_rule_is_upstreams_word_for_word() -> None:
    # kube-proxy makes an identical copy: any other spelling would be a second rule.
    assert " ".join(LOCALNET_RULE) == (
        '-m comment --comment block incoming localnet connections --dst 127.0.0.0/8 '
        '! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP')


async def test_a_kubelet_restarted_on_made_chains_adds_no_second_rule() -> None:
    xtables, clock = FakeXtables(), ManualClock()
    async with running(xtables, clock):
        await watching(clock)
    async with running(xtables, clock):
        await watching(clock)
        assert_kubelet_chains(xtables)
        v4_filter = xtables[IPFamily.IPV4].tables["filter"]
        assert v4_filter["INPUT"] == [JUMP] and v4_filter["OUTPUT"] == [JUMP]


async def test_flushed_tables_are_made_again_at_the_next_canary_check(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    async with running(xtables, clock):
        await watching(clock)
        for family in IPFamily:
            xtables[family].flush()
        await clock.advance(MONITOR_INTERVAL / 2)
        assert HINT_CHAIN not in xtables[IPFamily.IPV4].chains("mangle")  # not looked yet
        await clock.advance(MONITOR_INTERVAL / 2)
        await watching(clock)
        assert_kubelet_chains(xtables)
        # ...and watched again: a second flush is repaired too.
        xtables[IPFamily.IPV4].flush()
        await clock.advance(MONITOR_INTERVAL)
        await watching(clock)
        assert_kubelet_chains(xtables)
    assert "Inconsistent iptables state detected" not in caplog.text


async def test_a_lost_mangle_canary_alone_reloads_after_waiting_for_the_rest_of_a_flush(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    async with running(xtables, clock):
        await watching(clock)
        v4 = xtables[IPFamily.IPV4]
        del v4.tables["mangle"][CANARY_CHAIN]
        v4.tables["filter"][FIREWALL_CHAIN].clear()
        await clock.advance(MONITOR_INTERVAL)
        # The nat and filter canaries stay: the kubelet waits up to 5 s for them to go.
        await clock.advance(FLUSH_TIMEOUT - 2 * FLUSH_POLL, step=FLUSH_POLL)
        assert v4.tables["filter"][FIREWALL_CHAIN] == []
        await clock.advance(3 * FLUSH_POLL, step=FLUSH_POLL)
        await watching(clock)
        assert_kubelet_chains(xtables)
    assert "Inconsistent iptables state detected" in caplog.text


async def test_a_canary_check_that_cannot_take_the_lock_is_not_a_flush(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    async with running(xtables, clock):
        await watching(clock)
        locked = CommandResult(4, "Another app is currently holding the xtables lock.")
        xtables.fail[(IPFamily.IPV4, "-S", "mangle", CANARY_CHAIN)] = locked
        xtables[IPFamily.IPV4].tables["filter"][FIREWALL_CHAIN].clear()
        await clock.advance(MONITOR_INTERVAL)
        await watching(clock)
        assert xtables[IPFamily.IPV4].tables["filter"][FIREWALL_CHAIN] == []  # no reload
    assert '"Could not check for iptables canary"' in caplog.text
    assert 'table="mangle"' in caplog.text


async def test_a_canary_that_cannot_be_made_is_tried_again_every_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    broken = CommandResult(2, "iptables: Invalid argument.")
    xtables.fail[(IPFamily.IPV6, "-N", "nat", CANARY_CHAIN)] = broken
    async with running(xtables, clock):
        await watching(clock)
        assert '"Could not set up iptables canary"' in caplog.text
        assert CANARY_CHAIN not in xtables[IPFamily.IPV6].chains("filter")
        del xtables.fail[(IPFamily.IPV6, "-N", "nat", CANARY_CHAIN)]
        await clock.advance(MONITOR_INTERVAL)
        await watching(clock)
        assert CANARY_CHAIN in xtables[IPFamily.IPV6].chains("filter")


async def test_a_host_without_ip6tables_support_gets_the_ipv4_chains_only(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    xtables[IPFamily.IPV6].supported = False
    async with running(xtables, clock):
        await watching(clock, families=1)
        v4 = xtables[IPFamily.IPV4]
        assert {HINT_CHAIN, CANARY_CHAIN} <= v4.chains("mangle")
        assert v4.tables["filter"][FIREWALL_CHAIN] == [LOCALNET_RULE]
        assert xtables[IPFamily.IPV6].chains("mangle") == set(BUILTIN["mangle"])
    assert caplog.text.count('"Initialized iptables rules."') == 1
    assert "Failed" not in caplog.text  # a missing family is no failure


async def test_a_host_without_iptables_is_told_so_once_and_the_task_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(version=None), ManualClock()
    for family in IPFamily:
        xtables[family].supported = False
    async with running(xtables, clock) as task:
        await until(task.done, what="the task to end")
        assert task.exception() is None
    assert ('"No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain"'
            in caplog.text)


async def test_a_family_whose_first_sync_fails_is_logged_and_not_watched(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables, clock = FakeXtables(), ManualClock()
    no_filter = CommandResult(3, "iptables v1.8.9: can't initialize iptables table `filter'")
    xtables.fail[(IPFamily.IPV4, "-N", "filter", FIREWALL_CHAIN)] = no_filter
    async with running(xtables, clock):
        await watching(clock, families=1)
        assert CANARY_CHAIN not in xtables[IPFamily.IPV4].chains("mangle")
        assert CANARY_CHAIN in xtables[IPFamily.IPV6].chains("mangle")
    assert '"Failed to ensure that filter table KUBE-FIREWALL chain exists"' in caplog.text
    assert ('"Failed to initialize iptables rules; some functionality may be missing." '
            'protocol="IPv4"') in caplog.text


async def test_a_crash_in_one_familys_watch_ends_the_whole_task_for_the_supervisor() -> None:
    xtables, clock = FakeXtables(), ManualClock()
    async with running(xtables, clock) as task:
        await watching(clock)
        xtables.crash = IPFamily.IPV6
        await clock.advance(MONITOR_INTERVAL)
        await until(task.done, what="the task to end")
        assert isinstance(task.exception(), ExceptionGroup)
        # The IPv4 watch ended with it: nothing is left running unsupervised.
        assert clock.sleepers == 0


@pytest.mark.parametrize(("version", "flags"), [
    ("1.8.9", ("-w", "5", "-W", "100000")),
    ("1.6.0", ("-w", "5")),
    ("1.4.21", ("-w",)),
    ("1.4.19", ()),
])
async def test_iptables_waits_for_the_xtables_lock_as_its_version_allows(
        version: str, flags: tuple[str, ...]) -> None:
    xtables = FakeXtables(version=version)
    iptables = await new_iptables(xtables, IPFamily.IPV4)
    await iptables.ensure_chain(Table.MANGLE, HINT_CHAIN)
    assert xtables.commands[-1] == ["iptables", *flags, "-N", HINT_CHAIN, "-t", "mangle"]


async def test_an_unreadable_version_is_taken_for_the_oldest_with_rule_checks(
        caplog: pytest.LogCaptureFixture) -> None:
    xtables = FakeXtables(version=None)
    iptables = await new_iptables(xtables, IPFamily.IPV6)
    assert iptables.wait == wait_flag((1, 4, 11)) == ()
    assert '"Error checking iptables version, assuming version at least"' in caplog.text


async def test_the_kubelet_starts_the_chains_only_when_asked_to(tmp_path: Path) -> None:
    async with new_kubelet(tmp_path / "off",
                           flags=["--make-iptables-util-chains=false"]) as without:
        assert "iptables-util-chains" not in [name for name, _ in without.tasks()]
    async with new_kubelet(tmp_path / "on",
                           flags=["--make-iptables-util-chains=true"]) as with_chains:
        names = [name for name, _ in with_chains.tasks()]
        assert names[:2] == ["runtime-up", "iptables-util-chains"]
