"""Tool process groups in the store: the ledger toolsets record them in, and the start-up
step that kills what a crashed server left running (issue 23).

Records are keyed by *where* the groups run: the host name and the kernel's boot id (a pgid
means nothing on another machine or after a reboot), plus the node id on a cluster (two nodes
on one host must not kill each other's groups).
"""

from __future__ import annotations

import logging
import socket
import time

import attrs

from greenroom.agents.tools import kill_recorded_group
from greenroom.persistence import ProcessLog, ProcessRecord

log = logging.getLogger(__name__)


def host_id(node_id: str = "") -> str:
    """This machine (and boot) as process records name it; ``node_id`` on a cluster."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "unknown-boot"
    host = f"{socket.gethostname()}/{boot}"
    return f"{host}/{node_id}" if node_id else host


@attrs.frozen
class StoreProcessLedger:
    """A :class:`~greenroom.agents.tools.ProcessLedger` over the store's process log."""

    log: ProcessLog
    host: str = attrs.field(factory=host_id)

    async def started(self, pgid: int, start_ticks: int, label: str) -> None:
        await self.log.record_process(
            ProcessRecord(self.host, pgid, start_ticks, time.time(), label)
        )

    async def ended(self, pgid: int) -> None:
        await self.log.forget_process(self.host, pgid)


async def kill_leftover_groups(process_log: ProcessLog, host: str) -> int:
    """SIGKILL every recorded group of ``host`` that still runs, drop every record of
    ``host``; how many groups were killed. Run before anything of this process starts."""
    killed = 0
    for record in await process_log.recorded_processes(host):
        if kill_recorded_group(record.pgid, record.start_ticks):
            killed += 1
            log.warning(
                "killed tool process group %d (%s) left by the last server",
                record.pgid,
                record.label or "tool",
            )
        await process_log.forget_process(host, record.pgid)
    return killed
