"""`kubesmith binaries`: Kubernetes release binaries, fetched and checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from kubesmith.binaries import DEFAULT_BASE_URL, KUBERNETES_BINARIES, FetchError, fetch_release
from kubesmith.cli.common import fail, out_dir_option, progress
from kubesmith.exitcodes import ExitCode


@click.group()
def binaries() -> None:
    """Kubernetes release binaries."""


@binaries.command("fetch")
@click.option("--version", "version", required=True, help="Release, for example 1.33.2.")
@out_dir_option("Directory to fill.", "--dest", required=True)
@click.option("--base-url", default=DEFAULT_BASE_URL, show_default=True, help="Release mirror.")
@click.option("--arch", default="amd64", show_default=True)
@click.option("--only", "only", multiple=True, type=click.Choice(KUBERNETES_BINARIES), help="Fetch only these.")
def fetch(version: str, out_dir: str, base_url: str, arch: str, only: tuple[str, ...]) -> None:
    """Download a release's binaries into DIR (--out-dir), verifying each against its published sha512.

    A binary whose digest does not match is not written; the command then exits 5.
    Use the result with `kubesmith apply --binaries DIR`.
    """
    names = only or KUBERNETES_BINARIES
    dest = Path(out_dir)
    try:
        fetched = asyncio.run(fetch_release(version, dest, base_url, arch, names,
                                            progress=progress))
    except FetchError as exc:
        fail(str(exc), ExitCode.FAILED)
    except OSError as exc:
        fail(f"{dest}: {exc.strerror}", ExitCode.IO_ERROR)
    click.echo(f"{len(fetched)} binaries of Kubernetes {version} verified in {dest}")
