"""`kubesmith upgrade plan FILE`: what an apply of FILE's kubernetesVersion would do to the running release."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from kubesmith.backends import upgrade
from kubesmith.backends.ssh_settings import ssh_options
from kubesmith.cli.common import (emit_json, fail, load_plan_or_fail, output_option, require_ssh_files, spec_argument,
                                  ssh_flags)
from kubesmith.exitcodes import ExitCode
from kubesmith.health.remote import ssh_view
from kubesmith.health.status import cluster_status
from kubesmith.vocabulary.model import Plan
from kubesmith.skew import Release, Verdict
from kubesmith.transport.ssh import SshTransport, TransportError
from kubesmith.versions.registry import load_registry


@click.group("upgrade")
def upgrade_group() -> None:
    """Upgrades: an upgrade is `kubesmith apply` of the cluster file with a new kubernetesVersion."""


@upgrade_group.command("plan")
@spec_argument()
@output_option()
@ssh_flags()
def plan_command(spec_file: str, output: str, ssh_config: str | None, known_hosts: str | None,
                 identity: str | None) -> None:
    """What each host and component runs now (asked of the hosts), the target, the skew verdict, the
    flags and configuration APIs that change between the two releases, etcd's version and the order
    the hosts go in. Changes nothing. Exit 6 when an apply would be refused, 0 otherwise.
    """
    loaded, plan = load_plan_or_fail(spec_file)
    options, source = ssh_options(loaded.cluster, ssh_config, known_hosts, identity)
    require_ssh_files(options.problem())
    click.echo(f"reaching hosts with {source}", err=True)
    addresses = {host.name: host.address for host in plan.hosts}

    async def gather() -> dict[str, Any]:
        async with SshTransport(options) as transport:
            versions = await upgrade.host_versions(transport, addresses)
            verdict = upgrade.verdict_of(versions, plan.kubernetes_version, list(addresses))
            sick: list[str] = []
            if verdict.allowed and verdict.changes_release:
                sick = upgrade.unhealthy(await cluster_status(plan, lambda h: ssh_view(transport, h, 3.0)))
            return describe(plan, versions, verdict, sick, loaded.cluster.spec.rollout.max_unavailable)

    try:
        report = asyncio.run(gather())
    except TransportError as exc:
        fail(str(exc), ExitCode.FAILED)
    if output == "json":
        emit_json(report)
    else:
        for line in text_lines(report):
            click.echo(line)
    if report["refusals"]:
        fail(f"an apply of {spec_file} would be refused ({len(report['refusals'])} reasons above)",
             ExitCode.PREFLIGHT)


def describe(plan: Plan, versions: dict[str, dict[str, upgrade.Installed]], verdict: Verdict, sick: list[str],
             max_unavailable: int) -> dict[str, Any]:
    """The upgrade plan as data (the JSON form; the text is made from it)."""
    registry = load_registry()
    old = verdict.oldest.minor_name if verdict.oldest else None
    new = Release.parse(plan.kubernetes_version).minor_name
    flags = upgrade.registry_differences(registry, old, new) if old else []
    return {
        "target": plan.kubernetes_version,
        "kind": verdict.kind,
        "hosts": {host: {component: {"release": found.release, "running": found.running}
                         for component, found in sorted(components.items())}
                  for host, components in sorted(versions.items())},
        "etcd": sorted({found.release for components in versions.values()
                        if (found := components.get("etcd")) and found.release}),
        "refusals": upgrade.refusal_lines(verdict, sick),
        "notes": list(verdict.notes),
        "flags": [{"binary": d.binary, "flag": d.flag, "change": d.change, "note": d.note} for d in flags],
        "configApis": upgrade.config_api_differences(registry, old, new) if old else [],
        "order": upgrade.host_order(plan, max_unavailable),
    }


def text_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"target: Kubernetes {report['target']} ({report['kind']})"]
    for host, components in report["hosts"].items():
        said = ", ".join(f"{name} {entry['release'] or '?'}{'' if entry['running'] else ' (stopped)'}"
                         for name, entry in components.items()) or "nothing installed"
        lines.append(f"{host}: {said}")
    lines.append(f"etcd: {', '.join(report['etcd']) or 'not running'} (kept: etcd is versioned on its own)")
    removed = [d for d in report["flags"] if d["change"] == "removed"]
    added = [d for d in report["flags"] if d["change"] == "added"]
    for entry in removed:
        lines.append(f"removed: {entry['note'] or entry['binary'] + ' --' + entry['flag']}")
    if added:
        lines.append(f"added: {len(added)} flags ({', '.join(d['binary'] + ' --' + d['flag'] for d in added[:6])}"
                     f"{', ...' if len(added) > 6 else ''})")
    lines += [f"config API: {change}" for change in report["configApis"]]
    order = " -> ".join("+".join(wave) for wave in report["order"])
    lines.append(f"order: etcd snapshot, then {order} (control-plane hosts one at a time)")
    lines += [f"note: {note}" for note in report["notes"]]
    lines += [f"refused: {line}" for line in report["refusals"]]
    if not report["refusals"]:
        lines.append("verdict: allowed" + ("" if report["kind"] != "unchanged" else " (nothing to upgrade)"))
    return lines
