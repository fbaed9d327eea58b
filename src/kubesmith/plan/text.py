"""The plan as text for people: per host, what runs, in which order, with which files and certificates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kubesmith.vocabulary.model import HostPlan, Plan, Probe


def _probe(probe: Probe) -> str:
    parts = [probe.url]
    if probe.ca:
        parts.append(f"ca={probe.ca}")
    if probe.client_certificate:
        parts.append(f"client={probe.client_certificate}")
    if probe.run_on:
        parts.append(f"from {probe.run_on}")
    return " ".join(parts)


def host_text(host: HostPlan) -> list[str]:
    lines = [f"host {host.name} ({host.address}) roles: {', '.join(host.roles)}"]
    if host.users:
        lines.append("  users: " + ", ".join(user.name for user in host.users))
    for service in host.services:
        lines.append(f"  service {service.name} (user {service.user}, part of {service.wanted_by})")
        lines.append(f"    exec: {service.binary} " + " ".join(service.argv))
        if service.after:
            lines.append("    after: " + ", ".join(service.after))
        for gate in service.gates:
            lines.append(f"    gate: {gate.description}: any of " + "; ".join(_probe(p) for p in gate.any_of))
        if service.readiness:
            lines.append(f"    ready when: {_probe(service.readiness)}")
        lines.append(f"    restart: {service.restart.policy} after {service.restart.delay_seconds:g}s")
    for target in host.targets:
        lines.append(f"  target {target.name}.target: {target.description}")
    for file in host.files:
        origin = f"{file.source.kind} {file.source.name}" if file.source else f"{file.format} content"
        lines.append(f"  file {file.path} {file.mode:04o} {file.owner}:{file.group} ({origin})")
    for cert in host.certificates:
        subject = f"CN={cert.common_name}" + "".join(f", O={o}" for o in cert.organizations)
        sans = ", ".join((*cert.dns_names, *cert.ip_addresses))
        lines.append(f"  certificate {cert.name}: {subject} from {cert.ca}" + (f"; SANs {sans}" if sans else ""))
    return lines


def plan_text(plan: Plan, hosts: Iterable[HostPlan]) -> str:
    return "".join(plan_text_chunks(plan, hosts))


def plan_text_chunks(plan: Plan, hosts: Iterable[HostPlan]) -> Iterator[str]:
    """The text a host at a time: `plan --offline` writes each as it is planned."""
    yield f"cluster {plan.cluster}: Kubernetes {plan.kubernetes_version}, API at https://{plan.api_endpoint}\n"
    for host in hosts:
        yield "\n" + "\n".join(host_text(host)) + "\n"
