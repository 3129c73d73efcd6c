"""The kubelet's iptables utility chains (upstream ``pkg/kubelet/kubelet_network_linux.go``).

With ``makeIPTablesUtilChains`` (true by default) the kubelet keeps, in each IP
family whose iptables works here (``util/iptables.py``: IPv4, and IPv6 where
ip6tables can list its nat table):

- ``KUBE-IPTABLES-HINT`` in mangle, empty. Its presence tells components that
  bring their own iptables binaries (kube-proxy's image, CNI plugins) whether the
  host uses the nf_tables or the legacy back-end: they look for it with each.
- IPv4 only: ``KUBE-FIREWALL`` in filter, jumped to from the head of INPUT and of
  OUTPUT, holding one rule that drops packets to 127.0.0.0/8 from any other
  source unless conntrack knows them as related, established or DNATed. That is
  the kubelet's half of the CVE-2020-8558 fix: kube-proxy turns on
  ``route_localnet`` for NodePorts on localhost, which otherwise lets a neighbour
  reach services bound to 127.0.0.1. IPv6 has no ``route_localnet``, so no rule.
- ``KUBE-KUBELET-CANARY`` in mangle, nat and filter, looked for every minute:
  once the mangle one is gone, someone flushed the tables (a firewall reload) and
  all of the above is made again.

What 1.20 also made is gone since the IPTablesOwnershipCleanup feature (GA in
1.28): ``KUBE-MARK-DROP``, ``KUBE-MARK-MASQ`` and ``KUBE-POSTROUTING`` in nat and
KUBE-FIREWALL's rule dropping marked packets; kube-proxy makes its own. So
``iptablesMasqueradeBit`` and ``iptablesDropBit`` no longer do anything.

A family whose first sync fails is logged and left alone (no canary, no retry),
as upstream. ``IPTablesUtilChains.run`` is one supervised task (``Kubelet.tasks``):
it does its own error handling, so a crash is a bug; the supervisor then logs it
and starts the task again after its back-off, which syncs every family afresh.
Stopping the kubelet cancels it and leaves every chain in place, as upstream's
never-closed stop channel does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pykubelet.util import klog
from pykubelet.util.iptables import (
    CommandRunner,
    IPTables,
    IPTablesError,
    Position,
    SubprocessRunner,
    Table,
    new_best_effort,
)

HINT_CHAIN = "KUBE-IPTABLES-HINT"
FIREWALL_CHAIN = "KUBE-FIREWALL"
CANARY_CHAIN = "KUBE-KUBELET-CANARY"
# The canary's tables; the first is the one looked for every interval.
CANARY_TABLES = (Table.MANGLE, Table.NAT, Table.FILTER)
MONITOR_INTERVAL = 60.0

# kube-proxy (iptables mode) makes the same rule: it must stay word for word.
LOCALNET_RULE = ("-m", "comment", "--comment", "block incoming localnet connections",
                 "--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8",
                 "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")


@dataclass(frozen=True)
class Ensure:
    """One step of a sync: a chain (``rule`` None) or a rule at ``position`` in it, and
    the line logged when it fails (upstream's wording)."""

    table: Table
    chain: str
    failure: str
    rule: tuple[str, ...] | None = None
    position: Position = Position.APPEND


HINT_STEPS = (
    Ensure(Table.MANGLE, HINT_CHAIN, "Failed to ensure that iptables hint chain exists"),
)
FIREWALL_STEPS = (
    Ensure(Table.FILTER, FIREWALL_CHAIN,
           "Failed to ensure that filter table KUBE-FIREWALL chain exists"),
    Ensure(Table.FILTER, "OUTPUT", "Failed to ensure that OUTPUT chain jumps to KUBE-FIREWALL",
           rule=("-j", FIREWALL_CHAIN), position=Position.PREPEND),
    Ensure(Table.FILTER, "INPUT", "Failed to ensure that INPUT chain jumps to KUBE-FIREWALL",
           rule=("-j", FIREWALL_CHAIN), position=Position.PREPEND),
    Ensure(Table.FILTER, FIREWALL_CHAIN,
           "Failed to ensure rule to drop invalid localhost packets in filter table "
           "KUBE-FIREWALL chain", rule=LOCALNET_RULE),
)


def sync_steps(iptables: IPTables) -> tuple[Ensure, ...]:
    """What this family gets: the hint everywhere, the localnet firewall on IPv4."""
    return HINT_STEPS if iptables.is_ipv6() else HINT_STEPS + FIREWALL_STEPS


async def sync_iptables_rules(iptables: IPTables) -> bool:
    """Upstream ``syncIPTablesRules``: make what is missing, in order; False (logged) at
    the first step that fails."""
    for step in sync_steps(iptables):
        try:
            if step.rule is None:
                await iptables.ensure_chain(step.table, step.chain)
            else:
                await iptables.ensure_rule(step.position, step.table, step.chain, *step.rule)
        except IPTablesError as err:
            klog.error(step.failure, err)
            return False
    return True


class IPTablesUtilChains:
    """Upstream ``initNetworkUtil`` and the monitors it starts, as one task (``run``).

    ``runner``, ``monitor_interval``, ``clock`` and ``sleep`` are test seams; production
    keeps the defaults (the binaries on PATH, a minute, the real clock).
    """

    def __init__(self, runner: CommandRunner | None = None, *,
                 monitor_interval: float = MONITOR_INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.runner: CommandRunner = runner or SubprocessRunner()
        self.monitor_interval = monitor_interval
        self.clock = clock
        self.sleep = sleep

    async def run(self) -> None:
        """Sync each family that works here, then watch the canaries of those that
        synced; returns only when there is nothing to watch."""
        families = await new_best_effort(self.runner)
        if not families:
            # Not an error: the kubelet needs none of this itself, and a host with
            # nftables only has no iptables user to give a hint to.
            klog.info("No iptables support on this system; not creating the "
                      "KUBE-IPTABLES-HINT chain")
            return
        synced = []
        for iptables in families:
            if await sync_iptables_rules(iptables):
                klog.info("Initialized iptables rules.", protocol=iptables.family)
                synced.append(iptables)
            else:
                klog.info("Failed to initialize iptables rules; some functionality may be "
                          "missing.", protocol=iptables.family)
        if not synced:
            return
        # One family's crash ends the others too: the supervisor restarts them together.
        async with asyncio.TaskGroup() as group:
            for iptables in synced:
                group.create_task(self._monitor(iptables),
                                  name=f"iptables-canary-{iptables.family}")

    async def _monitor(self, iptables: IPTables) -> None:
        async def reload() -> None:
            await sync_iptables_rules(iptables)

        await iptables.monitor(CANARY_CHAIN, CANARY_TABLES, reload,
                               interval=self.monitor_interval, clock=self.clock,
                               sleep=self.sleep)


__all__ = ["CANARY_CHAIN", "CANARY_TABLES", "FIREWALL_CHAIN", "HINT_CHAIN", "LOCALNET_RULE",
           "MONITOR_INTERVAL", "IPTablesUtilChains", "sync_iptables_rules"]
