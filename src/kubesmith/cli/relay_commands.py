"""`kubesmith relay receive`: a host takes release files relayed by another host, checked one by one.

It runs on the receiving host as the forced command of the relay's key (docs/fleet.md), reading a
tar stream on standard input and the operator's list of expected files from --expect.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kubesmith.cli.common import emit_json, fail
from kubesmith.exitcodes import ExitCode


@click.group("relay")
def relay_group() -> None:
    """Release files passed from host to host, so they leave the operator's machine once."""


@relay_group.command("receive")
@click.option("--expect", "expect_file", required=True, metavar="FILE",
              help="The files to take: path, sha256, size, mode and owner of each (JSON, written by apply).")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True,
              help="Where the expected paths are placed (tests).")
def receive_command(expect_file: str, root: Path) -> None:
    """Read a tar stream on standard input and place each member that is expected and whose size and
    sha256 match; print what was placed, refused and missing (JSON). Exit 0 when every expected file
    was placed, 5 naming each one refused or missing."""
    from kubesmith.node.receive import ReceiveError, load_expected, receive

    try:
        received = receive(sys.stdin.buffer, load_expected(Path(expect_file)), root)
    except ReceiveError as exc:
        fail(str(exc), ExitCode.FAILED)
    emit_json(received.to_document())
    if not received.complete:
        lines = [f"{member}: {why}" for member, why in received.refused]
        lines += [f"{path}: not in the stream" for path in received.missing]
        fail(f"{len(lines)} relayed file(s) not placed:\n  " + "\n  ".join(lines), ExitCode.FAILED)
