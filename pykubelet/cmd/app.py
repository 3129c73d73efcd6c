"""Start-up of the ``pykubelet`` process, as upstream ``NewKubeletCommand`` runs it.

The order matters and follows the Go kubelet: parse the command line and the
``--config`` file (flags win), validate everything and stop with every error
at once before anything on the node is touched; only then set up logging,
take the lock file, and hand the resulting ``KubeletServer`` to the
composition root (``pykubelet.kubelet.builder``), which builds the kubelet and
runs it until SIGTERM or SIGINT. Stopping the process leaves pods running,
as upstream does: the next kubelet adopts them.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Sequence

from pykubelet.api.yamlsafe import render
from pykubelet.cmd.options import (
    ConfigurationError,
    KubeletServer,
    parse_command_line,
)
from pykubelet.config import fields_not_acted_on
from pykubelet.util import klog
from pykubelet.util.flock import LockContentionError, LockFile


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        server = parse_command_line(args)
    except ConfigurationError as err:
        _report_configuration_errors(err.errors)
        return 1
    except Exception as err:  # whatever a config file holds, exit 1 with a message, no traceback
        _report_configuration_errors([f"unexpected failure loading the configuration (a "
                                      f"pykubelet bug): {render(repr(err), 500)}"])
        return 1

    klog.setup(server.flags.v)
    try:
        return asyncio.run(_run(server))
    except KeyboardInterrupt:
        return 0


_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_MESSAGE_MAX = 2000


def _one_line(message: str) -> str:
    """A message as one printable line: values from a config file may hold line breaks and
    control characters, which are escaped; an absurdly long value is cut in the middle,
    keeping the field named at the start and the reason at the end."""
    if len(message) > _MESSAGE_MAX:
        half = _MESSAGE_MAX // 2
        message = f"{message[:half]}...{message[-half:]}"
    if message.isprintable():
        return message
    return _UNPRINTABLE.sub(lambda m: m[0] if m[0].isprintable()
                            else m[0].encode("unicode_escape").decode("ascii"), message)


def _report_configuration_errors(errors: list[str]) -> None:
    for message in errors:
        print(f"pykubelet: {_one_line(message)}", file=sys.stderr)
    print(f"pykubelet: {len(errors)} configuration error(s); nothing was started",
          file=sys.stderr)


async def _run(server: KubeletServer) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    lock: LockFile | None = None
    watchers: list[asyncio.Task[None]] = []
    if server.flags.lock_file:
        lock = LockFile(server.flags.lock_file)
        try:
            if server.flags.exit_on_lock_contention:
                lock_wait = asyncio.ensure_future(lock.acquire_waiting())
                stop_wait = asyncio.ensure_future(stopping.wait())
                await asyncio.wait({lock_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not lock_wait.done():
                    lock_wait.cancel()
                    return 0
                stop_wait.cancel()
                watchers.append(asyncio.create_task(_exit_on_contention(lock, stopping)))
            else:
                lock.try_acquire()
        except LockContentionError as err:
            klog.error("Failed to acquire the lock file", err)
            print(f"pykubelet: {err}", file=sys.stderr)
            return 1

    unimplemented = fields_not_acted_on(server.config_file_keys)
    if unimplemented:
        klog.warning("Configuration fields accepted but not acted on by pykubelet yet",
                     fields=",".join(sorted(unimplemented)))

    # Imported here so that --help, --version and --print-config stay fast and
    # do not load the runtime stack.
    from pykubelet.kubelet.builder import run_kubelet

    try:
        await run_kubelet(server, stopping)
    except Exception as err:  # a start-up failure must reach the operator, not a traceback
        klog.error("Kubelet failed", err)
        return 1
    finally:
        for task in watchers:
            task.cancel()
        if lock is not None:
            lock.release()
    klog.info("Kubelet stopped; pods keep running")
    return 0


async def _exit_on_contention(lock: LockFile, stopping: asyncio.Event) -> None:
    await lock.wait_for_contention()
    stopping.set()


if __name__ == "__main__":
    raise SystemExit(main())
