"""The ``pykubelet`` command (upstream ``NewKubeletCommand``).

The order follows the Go kubelet: parse the command line and the ``--config``
file (flags win), validate everything and stop with every error at once
before anything on the node is touched; only then set up logging, build the
``UnsecuredDependencies`` and hand both to ``run`` (``pykubelet.cmd.server``),
which runs the kubelet until SIGTERM or SIGINT. Stopping the process leaves
pods running, as upstream does: the next kubelet adopts them.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pykubelet.api.yamlsafe import render
from pykubelet.cmd.options import ConfigurationError, parse_command_line
from pykubelet.config.server import KubeletServer
from pykubelet.util import klog

if TYPE_CHECKING:
    from pykubelet.kubelet.dependencies import Dependencies


class KubeletCommand:
    """What ``NewKubeletCommand`` returns: a command that runs the kubelet for an argv."""

    def execute(self, argv: Sequence[str]) -> int:
        """Parse, validate, build the dependencies, run; the process exit status."""
        try:
            server = parse_command_line(list(argv))
        except ConfigurationError as err:
            _report_configuration_errors(err.errors)
            return 1
        except Exception as err:  # whatever a config file holds: exit 1, a message, no traceback
            _report_configuration_errors([f"unexpected failure loading the configuration (a "
                                          f"pykubelet bug): {render(repr(err), 500)}"])
            return 1

        klog.setup(server.flags.v)
        # Imported here so that --help, --version and --print-config stay fast and
        # do not load the runtime stack.
        from pykubelet.cmd.server import StartupError, unsecured_dependencies

        try:
            deps = unsecured_dependencies(server)
        except StartupError as err:
            return _failed(err)
        try:
            return asyncio.run(self._run_until_signalled(server, deps))
        except KeyboardInterrupt:
            return 0

    @staticmethod
    async def _run_until_signalled(server: KubeletServer, deps: Dependencies) -> int:
        from pykubelet.cmd.server import run

        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        try:
            await run(server, deps, stopping)
        except Exception as err:  # a start-up failure must reach the operator, not a traceback
            return _failed(err)
        klog.info("Kubelet stopped; pods keep running")
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


def _failed(err: BaseException) -> int:
    klog.error("Failed to run Kubelet", err)
    print(f"pykubelet: failed to run Kubelet: {err}", file=sys.stderr)
    return 1


def new_kubelet_command() -> KubeletCommand:
    """Upstream ``NewKubeletCommand``."""
    return KubeletCommand()


def main(argv: Sequence[str] | None = None) -> int:
    return new_kubelet_command().execute(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
