"""NetworkPolicies of a tenant namespace: nothing in or out but traffic inside the namespace, the
gpuplex gateway reaching the tenant's model servers on their serve ports, and DNS. Tenants' pods run
side by side on shared nodes; without these, any tenant could call (or scrape) another's servers
directly and skip the gateway's keys, rate limits and metering.

Policies only add allowances, so each one below opens exactly one path through the default deny.
"""

from __future__ import annotations

from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.kube.naming import GATEWAY_APP_NAME, NAME_LABEL, SERVES_LABEL, Manifest, metadata

DEFAULT_DENY = "gpuplex-default-deny"
ALLOW_GATEWAY = "gpuplex-allow-gateway"
ALLOW_DNS = "gpuplex-allow-dns"

#: Set by Kubernetes on every namespace: selects a namespace by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}  # CoreDNS keeps kube-dns's label
DNS_PORT = 53


def serve_ports(tenant: TenantSpec) -> list[int]:
    """Ports the tenant's own model servers listen on. A LoRA adapter has no server of its own: the
    gateway reaches it through its base workload, in whichever namespace that runs."""
    return sorted(
        {
            workload.serve.port
            for workload in tenant.workloads
            if workload.serve is not None and not workload.serve.lora_of
        }
    )


def network_policies(spec: GpuplexSpec, namespace: str, tenant: TenantSpec) -> list[Manifest]:
    """Default deny, DNS, and the gateway's way in where the tenant serves a model (a policy with
    no ports would open every port, so a tenant that serves nothing gets none)."""
    policies = [default_deny(namespace, tenant.name), allow_dns(namespace, tenant.name)]
    ports = serve_ports(tenant)
    if ports:
        policies.append(
            allow_gateway(spec.kubernetes.system_namespace, namespace, tenant.name, ports)
        )
    return policies


def _policy(name: str, namespace: str, tenant: str, spec: dict[str, object]) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, namespace=namespace, tenant=tenant),
        "spec": spec,
    }


def default_deny(namespace: str, tenant: str) -> Manifest:
    """Every pod of the namespace: ingress and egress only to and from pods of the same namespace
    (a multi-pod training job still talks to itself)."""
    same_namespace: list[dict[str, object]] = [{"podSelector": {}}]
    return _policy(
        DEFAULT_DENY,
        namespace,
        tenant,
        {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": same_namespace}],
            "egress": [{"to": same_namespace}],
        },
    )


def allow_dns(namespace: str, tenant: str) -> Manifest:
    """Egress to the cluster DNS, so Service names resolve under the default deny."""
    return _policy(
        ALLOW_DNS,
        namespace,
        tenant,
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}
                            },
                            "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                        }
                    ],
                    "ports": [
                        {"protocol": "UDP", "port": DNS_PORT},
                        {"protocol": "TCP", "port": DNS_PORT},
                    ],
                }
            ],
        },
    )


def allow_gateway(system_namespace: str, namespace: str, tenant: str, ports: list[int]) -> Manifest:
    """Ingress from the gateway's pods (in gpuplex's namespace; both selectors in one peer, so both
    must match) to the tenant's serving pods, on their serve ports only."""
    return _policy(
        ALLOW_GATEWAY,
        namespace,
        tenant,
        {
            "podSelector": {"matchLabels": {SERVES_LABEL: "true"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {NAMESPACE_NAME_LABEL: system_namespace}
                            },
                            "podSelector": {"matchLabels": {NAME_LABEL: GATEWAY_APP_NAME}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": port} for port in ports],
                }
            ],
        },
    )
