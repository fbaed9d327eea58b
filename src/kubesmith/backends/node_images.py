"""`kubesmith images import CLUSTER FILE...`: image archives from this machine onto nodes over SSH,
then imported into each node's containerd (k3s's air-gap tarballs, without the k3s). What apply
lays down from `spec.components.containerRuntime.images` arrives the same way, at every apply."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from kubesmith.hostfile import StreamedFile
from kubesmith.images import MAX_ARCHIVE_BYTES
from kubesmith.modules.container_runtime import ARCHIVE_MODE, IMAGES_DIR
from kubesmith.vocabulary.model import HostPlan
from kubesmith.transport.ssh import SshTransport, TransportError

REMOTE_KUBESMITH = "/usr/local/bin/kubesmith"


class ImageImportError(Exception):
    """An archive could not be placed or imported on a host; the message names the host."""


def loader_argv(host: HostPlan) -> list[str]:
    """The host's own `kubesmith images load` command, as its kubesmith-images unit runs it."""
    service = next((s for s in host.services if s.name == "kubesmith-images"), None)
    if service is None:
        raise ImageImportError(f"{host.name}: no kubesmith-images unit (is it a node with kubesmith's containerd?)")
    return [REMOTE_KUBESMITH, *service.argv]


async def import_to(transport: SshTransport, hosts: Sequence[HostPlan], archives: dict[str, Path],
                    say: Callable[[str], None]) -> None:
    """Place every archive in the hosts' image directories (atomically, streamed from the files here,
    root-only there), then import them, hosts at once."""
    files = [StreamedFile(str(PurePosixPath(IMAGES_DIR) / name), ARCHIVE_MODE, "root", "root", source,
                          MAX_ARCHIVE_BYTES) for name, source in sorted(archives.items())]

    async def one(host: HostPlan) -> None:
        argv = loader_argv(host)
        try:
            await transport.upload(host.address, files)
            result = await transport.run(host.address, shlex.join(argv), timeout=600)
        except TransportError as exc:
            raise ImageImportError(str(exc)) from None
        if not result.ok:
            raise ImageImportError(f"{host.name}: kubesmith images load failed: {result.stderr.strip()[-400:]}")
        say(f"{host.name}: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'done'}")

    await asyncio.gather(*(one(host) for host in hosts))
