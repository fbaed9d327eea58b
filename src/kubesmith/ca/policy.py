"""What the CA service may sign: parsing cfssl sign requests and deciding from a token's scope.

A node join token for node N may obtain exactly these certificates (profiles = certlist names):

* `kubelet-client`  CN `system:node:N`, O `system:nodes`, client auth, no SANs;
* `kubelet-serving` CN `system:node:N`, O `system:nodes`, server auth, SANs within {N} and the
  addresses the token was created with (`token create --address`); the DNS name N is required;
* `agent-client`    CN `kubesmith:agent:N`, O `kubesmith:agents`, client auth (renewal over mTLS);
* `kube-proxy-client` CN `system:kube-proxy`, no O. Decision: included. Every node runs
  kube-proxy and needs this identity; it is the shared identity the "hard way" gives every node,
  and its RBAC role (system:node-proxier: read services, endpoints, nodes; write events) is about
  what the Node authorizer already lets a kubelet read. Nothing else is shared this way.

Never: `system:masters` (or any other organization), another node's name, any other component
identity (`system:kube-controller-manager`, `kube-apiserver`, ...), CA certificates, extra
subject attributes, or a subject override. A request must name its profile or carry a subject
that identifies one (cfssl's default profile "" is mapped by subject).

Node names are DNS labels, as the cluster file's host names are, and never a name or address
that the API server's certificate carries for the cluster (`kubernetes`, `localhost`, the
service IP, the API endpoint: `check_service_sans`). kubernetes-ca signs the API server's
certificate too, so a kubelet serving certificate for `kubernetes.default.svc`, a wildcard or
the endpoint's name would let a token holder impersonate the API server.

A join asks for all of its certificates to be checked first (`check_join`), so a request outside
the token's scope is refused before any certificate of that join is signed.

Renewal (mTLS with the host's agent certificate) is a different grant: see `renewal_grant`.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kubesmith.pki import keys
from kubesmith.pki.certlist import NODE_SCOPED, apiserver_name_problem, certificate, is_ip
from kubesmith.pki.issue import BACKDATE, Identity, issued_by, new_leaf, signature_problem
from kubesmith.pki.keys import PrivateKey
from kubesmith.vocabulary.model import CertificateRequest
from kubesmith.vocabulary.types import is_dns_label

NODE_PREFIX, AGENT_PREFIX = "system:node:", "kubesmith:agent:"
FORBIDDEN_ORGANIZATIONS = frozenset({"system:masters"})


class PolicyError(Exception):
    """A request that the caller's scope does not allow (HTTP 403) or cannot be parsed (HTTP 400)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class SignRequest:
    """A cfssl sign request: the CSR, the profile, and SANs (None: take the CSR's own)."""

    csr: x509.CertificateSigningRequest
    profile: str
    hosts: tuple[str, ...] | None
    label: str
    subject: tuple[str, tuple[str, ...]]  # (CN, organizations), parsed once
    public_key: object

    def sans(self) -> tuple[frozenset[str], frozenset[str]]:
        """(DNS names, IP addresses) the certificate would carry."""
        names = self.hosts if self.hosts is not None else _csr_sans(self.csr)
        dns = frozenset(name for name in names if not is_ip(name))
        ips = frozenset(str(ipaddress.ip_address(name)) for name in names if is_ip(name))
        return dns, ips


@dataclass(frozen=True, slots=True)
class Grant:
    """What will be signed: a plan-style request (subject, usages, SANs) for the CSR's public key."""

    profile: str
    node: str | None
    request: CertificateRequest

    @property
    def names(self) -> tuple[str, ...]:
        return claimed_names(self.node, (*self.request.dns_names, *self.request.ip_addresses))


def claimed_names(node: str | None, sans: tuple[str, ...]) -> tuple[str, ...]:
    """A node's name and its SANs: what must not collide with the API server's (`check_service_sans`)."""
    return (*((node,) if node else ()), *sans)


def parse_sign_request(raw: bytes) -> SignRequest:
    """Parse cfssl's sign request JSON; verify the CSR's self-signature and key type."""
    try:
        document = json.loads(raw)
        csr = x509.load_pem_x509_csr(str(document["certificate_request"]).encode())
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise PolicyError(f"malformed sign request ({exc.__class__.__name__}: {exc})"[:300], 400) from None
    if not isinstance(document, dict):
        raise PolicyError("malformed sign request (not an object)", 400)
    if document.get("subject"):
        raise PolicyError("subject overrides are not accepted; put the subject in the CSR", 400)
    if not csr.is_signature_valid:
        raise PolicyError("the CSR's signature does not verify", 400)
    public_key = csr.public_key()
    check_public_key(public_key)
    try:
        subject = subject_of(csr.subject)
    except ValueError:
        raise PolicyError("the CSR's subject does not parse", 400) from None
    hosts = document.get("hosts")
    if hosts is None and document.get("hostname"):
        hosts = [name.strip() for name in str(document["hostname"]).split(",") if name.strip()]
    if hosts is not None and not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
        raise PolicyError("hosts must be a list of strings", 400)
    return SignRequest(csr, str(document.get("profile") or ""), None if hosts is None else tuple(hosts),
                       str(document.get("label") or ""), subject, public_key)


def check_public_key(public: object) -> None:
    if isinstance(public, ec.EllipticCurvePublicKey) and public.curve.key_size >= 256:
        return
    if isinstance(public, rsa.RSAPublicKey) and public.key_size >= 2048:
        return
    raise PolicyError("key type not accepted: use ECDSA P-256/P-384 or RSA >= 2048 bits", 400)


def subject_of(name: x509.Name) -> tuple[str, tuple[str, ...]]:
    """(CN, organizations); any other attribute or several CNs are refused."""
    common_names: list[str] = []
    organizations: list[str] = []
    for attribute in name:
        if attribute.oid == NameOID.COMMON_NAME:
            common_names.append(str(attribute.value))
        elif attribute.oid == NameOID.ORGANIZATION_NAME:
            organizations.append(str(attribute.value))
        else:
            raise PolicyError(f"subject attribute {attribute.oid._name} is not accepted (only CN and O)")
    if len(common_names) != 1:
        raise PolicyError("the subject must have exactly one CN")
    return common_names[0], tuple(organizations)


def profile_for(request: SignRequest) -> str:
    """The profile named in the request, or the one its subject identifies (cfssl's default "")."""
    if request.profile and request.profile != "default":
        return request.profile
    common_name, _ = request.subject
    if common_name.startswith(AGENT_PREFIX):
        return "agent-client"
    if common_name == "system:kube-proxy":
        return "kube-proxy-client"
    if common_name.startswith(NODE_PREFIX):
        dns, ips = request.sans()
        return "kubelet-serving" if dns or ips else "kubelet-client"
    raise PolicyError(f"no profile given and {common_name!r} is not a node identity")


def node_named(common_name: str) -> str | None:
    """N for `system:node:N` and `kubesmith:agent:N`, else None."""
    for prefix in (NODE_PREFIX, AGENT_PREFIX):
        if common_name.startswith(prefix) and len(common_name) > len(prefix):
            return common_name[len(prefix):]
    return None


def requested_node(request: SignRequest) -> str | None:
    return node_named(request.subject[0])


def node_grant(node: str | None, addresses: tuple[str, ...], request: SignRequest, *,
               service_sans: frozenset[str]) -> Grant:
    """What a join token scoped to `node` (None: not bound yet) may have signed for `request`; never a
    name of the API server (`service_sans`, see `check_service_sans`)."""
    profile = profile_for(request)
    if profile not in NODE_SCOPED:
        raise PolicyError(f"profile {profile!r} is not allowed for a node token "
                          f"(allowed: {', '.join(NODE_SCOPED)})")
    spec = certificate(profile)
    wanted_node = requested_node(request)
    if "{host}" in spec.common_name:
        if wanted_node is None:
            raise PolicyError(f"profile {profile} needs CN {spec.common_name.format(host='<node>')}")
        if node is not None and wanted_node != node:
            raise PolicyError(f"this token is for node {node!r}, not {wanted_node!r}")
        check_node_name(wanted_node)
        node = wanted_node
    expected_cn = spec.common_name.format(host=node or "")
    common_name, organizations = request.subject
    if common_name != expected_cn:
        raise PolicyError(f"profile {profile} issues CN {expected_cn!r}, not {common_name!r}")
    _check_organizations(organizations, spec.organizations, profile)
    dns, ips = request.sans()
    if profile == "kubelet-serving":
        _check_serving_sans(node or "", addresses, dns, ips)
    elif dns or ips:
        raise PolicyError(f"profile {profile} carries no subject alternative names")
    return _checked(Grant(profile, node if "{host}" in spec.common_name else None,
                          _plan_request(profile, expected_cn, spec.organizations, spec.usages, dns, ips)), service_sans)


def check_join(node: str | None, addresses: tuple[str, ...], raws: Sequence[bytes], *,
               service_sans: frozenset[str]) -> list[Grant]:
    """Every request of one join against its token's scope, before any is signed: each must be
    grantable, and all must be for one node (an unbound token binds to the first it signs for)."""
    grants = []
    for index, raw in enumerate(raws, 1):
        try:
            grants.append(node_grant(node, addresses, parse_sign_request(raw), service_sans=service_sans))
        except PolicyError as exc:
            raise PolicyError(f"request {index} of {len(raws)}: {exc}", exc.status) from None
    nodes = sorted({grant.node for grant in grants if grant.node is not None})
    if len(nodes) > 1:
        raise PolicyError(f"one join is for one node, not for {', '.join(map(repr, nodes))}")
    return grants


def check_node_name(name: str) -> None:
    """A DNS label, as host names are, and none every API server certificate carries (`localhost`,
    `kubernetes`), which no token's settings need to name."""
    if not is_dns_label(name):
        raise PolicyError(f"node name {name!r} is not a DNS label (lower-case letters, digits and '-', "
                          "at most 63 characters), as cluster host names are")
    if (problem := apiserver_name_problem(name)) is not None:
        raise PolicyError(problem)


def check_service_sans(names: tuple[str, ...], service_sans: frozenset[str]) -> None:
    """Refuse a node name or SAN that is one of `service_sans` (`normalized_sans` of what the API
    server's certificate carries besides the hosts' own names and addresses)."""
    taken = sorted(service_sans & normalized_sans(names))
    if taken:
        raise PolicyError(f"{taken[0]!r} names the cluster's API server (it is in the API server's certificate); "
                          "a node may not take it")


def normalized_sans(values: tuple[str, ...]) -> frozenset[str]:
    """DNS names as given, IP addresses in the canonical form the grants use."""
    return frozenset(str(ipaddress.ip_address(v)) if is_ip(v) else v for v in values)


def renewal_grant(host: str, current: x509.Certificate, request: SignRequest, ca_cert: x509.Certificate,
                  now: dt.datetime, *, service_sans: frozenset[str]) -> Grant:
    """Renewal by host `host`'s agent: the same identity, the same key, for a certificate of `host`.

    The CSR must carry the public key of `current` (the agent reuses keys on renewal), so its
    signature proves possession of the current certificate's key: nobody renews a certificate
    whose key they do not hold. `current` must be valid now and issued by this CA. Only the
    identities a node holds are renewed, for `host` itself (`node_identities`): control-plane
    certificates live on the hosts that hold the CA key, whose agents renew them locally, so a
    left-over key of one of them elsewhere never becomes a certificate without end.
    """
    if not issued_by(current, ca_cert):
        raise PolicyError("the current certificate was not issued by this CA")
    problem = signature_problem(current, ca_cert)
    if problem:
        raise PolicyError(f"the current certificate does not verify against this CA ({problem})")
    if not current.not_valid_before_utc <= now < current.not_valid_after_utc:
        raise PolicyError("the current certificate is not valid now; expired certificates cannot be renewed, "
                          "join again")
    if not keys.same_public_key(current.public_key(), request.public_key):  # type: ignore[arg-type]
        raise PolicyError("the CSR's key differs from the current certificate's key (renewal keeps the key)")
    have = Identity.of_certificate(current)
    common_name, organizations = request.subject
    dns, ips = request.sans()
    if (common_name, frozenset(organizations), dns, ips) != \
            (have.common_name, frozenset(have.organizations), have.dns_names, have.ip_addresses):
        raise PolicyError("renewal must keep the subject and SANs of the current certificate")
    named = node_named(common_name)
    if named is not None and named != host:
        raise PolicyError(f"host {host!r} may not renew a certificate of {named!r}")
    if (common_name, frozenset(organizations)) not in node_identities(host):
        raise PolicyError(f"{common_name!r} is not a node identity of host {host!r}: only those are renewed by "
                          "the CA service (control-plane certificates are renewed where the CA key is)")
    return _checked(Grant("renewal", named, _plan_request("renewal", common_name, have.organizations,
                                                          tuple(sorted(have.usages)), dns, ips)), service_sans)


def _checked(grant: Grant, service_sans: frozenset[str]) -> Grant:
    check_service_sans(grant.names, service_sans)
    return grant


def node_identities(host: str) -> frozenset[tuple[str, frozenset[str]]]:
    """(CN, organizations) of every certificate a node token may obtain for `host`."""
    return frozenset((certificate(profile).common_name.format(host=host), frozenset(certificate(profile).organizations))
                     for profile in NODE_SCOPED)


def sign(grant: Grant, public_key: object, ca_cert: x509.Certificate, ca_key: PrivateKey,
         validity_seconds: float, now: dt.datetime) -> x509.Certificate:
    """Issue the granted certificate with the shared leaf builder (`pki.issue.new_leaf`)."""
    return new_leaf(grant.request, public_key, ca_cert, ca_key, validity_seconds / 86400.0, now,  # type: ignore[arg-type]
                    backdate_for(validity_seconds))


def backdate_for(validity_seconds: float) -> dt.timedelta:
    """kubeadm's 5 minutes of clock-skew allowance, but at most a tenth of a short validity."""
    return min(BACKDATE, dt.timedelta(seconds=validity_seconds / 10))


def decode_b64(value: object, what: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (ValueError, TypeError):
        raise PolicyError(f"{what} is not valid base64", 400) from None


def _check_organizations(have: tuple[str, ...], allowed: tuple[str, ...], profile: str) -> None:
    forbidden = sorted(FORBIDDEN_ORGANIZATIONS & set(have))
    if forbidden:
        raise PolicyError(f"organization {forbidden[0]!r} is never issued to a node token")
    if sorted(have) != sorted(allowed):
        raise PolicyError(f"profile {profile} issues O {list(allowed)}, not {list(have)}")


def _check_serving_sans(node: str, addresses: tuple[str, ...], dns: frozenset[str], ips: frozenset[str]) -> None:
    extra_dns = sorted(dns - {node})
    if extra_dns:
        raise PolicyError(f"DNS name {extra_dns[0]!r} is not this node's name ({node!r})")
    allowed_ips = {str(ipaddress.ip_address(a)) for a in addresses}
    extra_ips = sorted(ips - allowed_ips)
    if extra_ips:
        raise PolicyError(f"IP address {extra_ips[0]} is not bound to this token "
                          f"(bound: {', '.join(sorted(allowed_ips)) or 'none'}; token create --address)")
    if node not in dns:
        raise PolicyError(f"a kubelet serving certificate must name the node ({node!r})")


def _plan_request(name: str, common_name: str, organizations: tuple[str, ...], usages: tuple[str, ...],
                  dns: frozenset[str], ips: frozenset[str]) -> CertificateRequest:
    return CertificateRequest(name=name, ca="kubernetes-ca", common_name=common_name,
                              organizations=tuple(organizations), usages=tuple(usages),
                              dns_names=tuple(sorted(dns)), ip_addresses=tuple(sorted(ips)),
                              cert_path="", key_path="", owner="root", group="root")


def _csr_sans(csr: x509.CertificateSigningRequest) -> tuple[str, ...]:
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    except ValueError:  # an extension that does not parse
        raise PolicyError("the CSR's extensions do not parse", 400) from None
    return (*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress)))


