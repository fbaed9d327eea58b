"""`-v/--verbose` on every command: what kubesmith asks of each host, as it asks.

One option, added to every command as the CLI hands it out (`LazyGroup.get_command`), so no command
can miss it. `-v` logs each SSH connection, command (its first line) and upload with its host, exit
status and time; `-vv` also the whole command text and asyncssh's own messages. The log goes to
stderr, beside progress, so `-o json` on stdout stays clean.
"""

from __future__ import annotations

import sys

import click

LOGGER = "kubesmith"
OPTION = "verbose"


def _configure(ctx: click.Context, param: click.Parameter, count: int) -> None:
    if not count or ctx.resilient_parsing:
        return
    import logging  # only when asked: `kubesmith --help` and the hosts' `kubesmith wait` start without it

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger(LOGGER)
    root.handlers = [handler]  # one handler, however many commands of a group took -v
    root.setLevel(logging.INFO if count == 1 else logging.DEBUG)
    root.propagate = False
    if count > 1:
        asyncssh = logging.getLogger("asyncssh")
        asyncssh.handlers = [handler]
        asyncssh.setLevel(logging.INFO)
        asyncssh.propagate = False


def verbose_option() -> click.Option:
    return click.Option(["-v", "--verbose", OPTION], count=True, expose_value=False, is_eager=True,
                        callback=_configure,
                        help="Log each SSH connection, command and upload with its host, status and time "
                             "(-vv: whole commands, and the SSH library's messages).")


def with_verbose(command: click.Command) -> click.Command:
    """`command` (and every command under it) with `-v/--verbose`; idempotent."""
    if not any(param.name == OPTION for param in command.params):
        command.params.append(verbose_option())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            with_verbose(sub)
    return command
