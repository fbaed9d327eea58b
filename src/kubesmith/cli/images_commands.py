"""`kubesmith images load|import`: container images without a registry.

`images load` runs on nodes (their unit, kubesmith-images); `images import` runs where kubesmith runs and
puts archives onto the nodes over SSH.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from kubesmith.cli.common import (DURATION_OR_ZERO, check_host_names, fail, hosts_option, load_plan_or_fail,
                                  report_problems, require_ssh_files, say, spec_argument, ssh_flags)
from kubesmith.exitcodes import ExitCode


@click.group("images")
def images_group() -> None:
    """Container images without a registry: load archives into a node's containerd, or import them onto nodes."""


@images_group.command("load")
@click.option("--containerd", "endpoint", default="unix:///run/containerd/containerd.sock", show_default=True,
              help="containerd's socket.")
@click.option("--dir", "directory", default="/var/lib/kubesmith/images", show_default=True, metavar="DIR",
              help="Where the archives are (every *.tar).")
@click.option("--deadline", type=DURATION_OR_ZERO, default="5m", show_default=True,
              help="How long to wait for containerd to answer.")
def images_load(endpoint: str, directory: str, deadline: float) -> None:
    """Import every image archive in DIR into containerd (namespace k8s.io); archives whose images
    containerd has already are skipped. This node's kubesmith-images unit runs it."""
    from kubesmith.node.images import LoadError, load_all

    try:
        count = load_all(Path(directory), endpoint, deadline, say)
    except LoadError as exc:
        fail(str(exc), ExitCode.FAILED)
    say(f"{count} archive{'s' if count != 1 else ''} imported")


@images_group.command("import")
@spec_argument()
@click.argument("archives", nargs=-1, required=True, metavar="ARCHIVE...",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@hosts_option("only_hosts", "Only these nodes")
@ssh_flags()
def images_import(spec_file: str, archives: tuple[Path, ...], only_hosts: tuple[str, ...], ssh_config: str | None,
                  known_hosts: str | None, identity: str | None) -> None:
    """Put image archives (OCI layout or `docker save` tarballs) on every node of FILE (or --host ones)
    and import them into containerd there: what an air-gapped cluster uses instead of a registry.
    To have apply bring them every time, list them in spec.components.containerRuntime.images."""
    from kubesmith.backends.node_images import ImageImportError, import_to
    from kubesmith.backends.ssh_settings import ssh_options
    from kubesmith.images import ImageError, check_archive
    from kubesmith.transport.ssh import SshTransport

    loaded, plan = load_plan_or_fail(spec_file)
    report_problems(loaded.warnings)
    check_host_names(plan, only_hosts, spec_file)
    nodes = [h for h in plan.hosts if "node" in h.roles and (not only_hosts or h.name in only_hosts)]
    if not nodes:
        fail(f"no node host{' among ' + ', '.join(only_hosts) if only_hosts else ''} in {spec_file}", ExitCode.USAGE)
    contents: dict[str, Path] = {}
    for archive in archives:
        try:
            names = check_archive(archive)  # streamed: an archive is never read whole
        except ImageError as exc:
            fail(f"{archive}: {exc}", ExitCode.USAGE)
        except OSError as exc:
            fail(f"{archive}: {exc.strerror or exc}", ExitCode.USAGE)
        if archive.name in contents:
            fail(f"{archive}: another archive has the file name {archive.name}; both would land at one path on "
                 "the nodes", ExitCode.USAGE)
        say(f"{archive}: {', '.join(names)}")
        contents[archive.name] = archive
    options, _ = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    require_ssh_files(options.problem())

    async def run() -> None:
        async with SshTransport(options) as transport:
            await import_to(transport, nodes, contents, say)

    try:
        asyncio.run(run())
    except ImageImportError as exc:
        fail(str(exc), ExitCode.FAILED)
