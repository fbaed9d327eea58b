"""`kubesmith addons apply`: the cluster's add-ons kept applied, by a control-plane host once its API
answers (its unit, kubesmith-addons) and by apply."""

from __future__ import annotations

from pathlib import Path

import click

from kubesmith.cli.common import Duration, fail, progress, shown_path
from kubesmith.exitcodes import ExitCode


@click.group("addons", hidden=True)
def addons_group() -> None:
    """Keep the add-ons of a control-plane host applied (run by the `kubesmith-addons` unit and by apply)."""


@addons_group.command("apply")
@click.option("--kubeconfig", "kubeconfig", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="super-admin.conf (system:masters), which may apply any object.")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="The add-on files (one `List` of objects each).")
@click.option("--wait", is_flag=True, help="Then wait for the Deployments and DaemonSets this run changed to roll out.")
@click.option("--rollout-deadline", type=Duration(minimum=0), default="5m", show_default=True,
              help="How long --wait waits.")
@click.option("--node-wait", type=Duration(minimum=0), default="0s", show_default=True,
              help="How long to wait for the Nodes to label (`*.labels.json`) to be registered.")
@click.option("--label-node", "label_nodes", multiple=True, metavar="NAME",
              help="A node to label as the `*.labels.json` files say, besides the ones they name (repeatable).")
@click.option("--timeout", type=Duration(minimum=0.1), default="20s", show_default=True,
              help="How long each API call may take.")
def addons_apply(kubeconfig: Path, directory: Path, wait: bool, rollout_deadline: float, node_wait: float,
                 label_nodes: tuple[str, ...], timeout: float) -> None:
    """Server-side apply every add-on object (field manager `kubesmith`), prune the ones no add-on has.

    `Reconcile` objects are put back as the files say; `EnsureExists` ones only created when absent.
    """
    import asyncio

    import yaml

    from kubesmith.apiclient import ApiError, Credentials
    from kubesmith.backends.addons import apply_addons

    if not kubeconfig.is_file():
        fail(f"{shown_path(kubeconfig)}: no such file", ExitCode.IO_ERROR)
    try:
        asyncio.run(apply_addons(Credentials.of_kubeconfig(kubeconfig), directory,
                                rollout_deadline if wait else None, progress, timeout, node_wait, label_nodes))
    except ApiError as exc:
        fail(str(exc), ExitCode.FAILED)
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{directory}: {getattr(exc, 'strerror', None) or exc}", ExitCode.IO_ERROR)
    progress(f"add-ons of {directory} applied")
