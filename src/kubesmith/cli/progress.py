"""What apply and upgrade say while they work: a live per-host view on a terminal, timestamped lines
otherwise (a CI log, a pipe, `--progress lines`).

The backends report progress as plain lines, `HOST: what` for one host and anything else for the
cluster as a whole, so this one place decides how they look; nothing below the CLI knows of terminals.
The live view is rich's `Live` (refreshed four times a second, on stderr, so stdout keeps the report):
one row per host with its latest step and how long it has been at it, one row for the cluster.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import click

from kubesmith.cli.common import unfiltered

Mode = Literal["auto", "live", "lines", "quiet"]
Say = Callable[[str], None]
CLUSTER = "cluster"
HOST_LINE = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,62}): (?P<what>.+)$", re.DOTALL)
HOSTS_AT_END = re.compile(r"^(?P<what>.+) on (?P<hosts>[A-Za-z0-9][A-Za-z0-9.-]*(?:, [A-Za-z0-9][A-Za-z0-9.-]*)*)$")


@dataclass(slots=True)
class Row:
    """A host's (or the cluster's) latest step and when it began; done once the host says so."""

    step: str
    since: float
    lines: int = 1


@dataclass(slots=True)
class Board:
    """The rows of the live view, fed line by line; `started` is when the command began."""

    started: float
    rows: dict[str, Row] = field(default_factory=dict)

    def feed(self, line: str, now: float) -> None:
        """A host's line goes to its row; a cluster line to the cluster's, and to the rows of the hosts
        it ends with (`starting etcd-online.target on h1, h2`), so no row shows a step long done."""
        matched = HOST_LINE.match(line)
        if matched:
            self._set(matched["host"], matched["what"], now)
            return
        self._set(CLUSTER, line, now)
        named = HOSTS_AT_END.match(line)
        for name in named["hosts"].split(", ") if named else ():
            self._set(name, named["what"], now)  # type: ignore[index]

    def _set(self, name: str, what: str, now: float) -> None:
        row = self.rows.get(name)
        if row is None:
            self.rows[name] = Row(what, now)
        else:
            row.step, row.since, row.lines = what, now, row.lines + 1

    def table(self, now: float):  # type: ignore[no-untyped-def]  # rich's Table, imported only when live
        from rich.table import Table

        grid = Table(title=f"kubesmith: {now - self.started:.0f}s", title_justify="left", expand=False,
                     show_edge=False, pad_edge=False)
        grid.add_column("host", style="bold", no_wrap=True)
        grid.add_column("for", justify="right", no_wrap=True)
        grid.add_column("step", overflow="ellipsis", no_wrap=True)
        names = sorted(self.rows, key=lambda n: (n == CLUSTER, len(n), n))
        for name in names:
            row = self.rows[name]
            grid.add_row(name, f"{now - row.since:.0f}s", row.step.splitlines()[0])
        return grid


def timestamped(line: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {line}", err=True)


def chosen_mode(mode: Mode) -> Mode:
    """`auto`: live on a terminal, lines elsewhere (a log keeps every line)."""
    if mode != "auto":
        return mode
    return "live" if sys.stderr.isatty() else "lines"


@contextmanager
def reporter(mode: Mode) -> Iterator[Say]:
    """The `say` a long command reports through, in the chosen mode; the live view ends (leaving its
    last frame on the screen) when the block does, also on an error."""
    chosen = chosen_mode(mode)
    if chosen == "quiet":
        yield lambda _line: None
        return
    if chosen == "lines":
        yield timestamped
        return
    from rich.console import Console
    from rich.live import Live

    board = Board(time.monotonic())
    # the terminal itself, not run_guarded's escaping filter: the view is drawn with escape sequences,
    # and rich strips control characters from the text it is given
    console = Console(file=unfiltered(sys.stderr))
    with Live(console=console, refresh_per_second=4, transient=False,
              get_renderable=lambda: board.table(time.monotonic())) as live:

        def say(line: str) -> None:
            board.feed(line, time.monotonic())
            if line.startswith(("error:", "warning:")):
                live.console.print(line, markup=False, highlight=False)  # above the view, kept

        yield say


def progress_option(function: Callable[..., object]) -> Callable[..., object]:
    """`--progress auto|live|lines|quiet` and `-q/--quiet` for commands that work for minutes."""
    function = click.option("--progress", "progress", type=click.Choice(["auto", "live", "lines", "quiet"]),
                            default="auto", show_default=True,
                            help="How to show progress on stderr: live per-host view on a terminal (auto), "
                                 "timestamped lines, or nothing.")(function)
    return click.option("-q", "--quiet", "quiet", is_flag=True,
                        help="No progress on stderr (the same as --progress quiet); errors still show.")(function)


def mode_of(progress: str, quiet: bool) -> Mode:
    return "quiet" if quiet else progress  # type: ignore[return-value]
