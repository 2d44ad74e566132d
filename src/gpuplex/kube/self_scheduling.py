"""Where gpuplex's own server and gateway pods may run (`kube render --self`), and whether any node
of the fleet could take them.

gpuplex taints every pooled node `gpuplex.dev/pool=<pool>:NoSchedule` (nodes.py) so that only the
pool's workloads land there. Its own pods tolerate nothing by default: where every fleet node is in
a pool, they run only on nodes outside the fleet, and stay Pending in a cluster that has none. Two
--self options place them: `node_selector` (labels a node must have) and `tolerations` (taints
they may ignore, written as `kubectl taint` writes them: `KEY[=VALUE][:EFFECT]`).

What render knows of a fleet node is what gpuplex gives it: its pool taint and pool labels, and
its name, which the kubelet also sets as `kubernetes.io/hostname`. A selector on any other label
may match; only these are checked.
"""

from __future__ import annotations

import re
from typing import Any

from gpuplex.core.spec import GpuplexSpec, NodeSpec
from gpuplex.kube.naming import POOL_LABEL_PREFIX, POOL_TAINT_KEY
from gpuplex.kube.nodes import node_pools

HOSTNAME_LABEL = "kubernetes.io/hostname"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: The toleration of one pool's taint, as the `tolerations` option writes it.
POOL_TOLERATION = POOL_TAINT_KEY + "={pool}:NoSchedule"

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_QUALIFIED_NAME = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")


def toleration(text: str) -> dict[str, str]:
    """`KEY[=VALUE][:EFFECT]` as a pod toleration: Equal with a value, Exists without; no effect
    tolerates every effect. Raises ValueError saying what is wrong."""
    rest, colon, effect = text.strip().rpartition(":")
    if not colon:
        rest, effect = text.strip(), ""
    key, equals, value = rest.partition("=")
    if not _QUALIFIED_NAME.match(key):
        raise ValueError(f"{key!r} is not a taint key like {POOL_TAINT_KEY}")
    if equals and not (value and _LABEL_VALUE.match(value)):
        raise ValueError(f"{value!r} is not a taint value")
    if colon and effect not in TAINT_EFFECTS:
        raise ValueError(f"effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    out = {"key": key, "operator": "Equal" if equals else "Exists"}
    if equals:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def scheduling_problems(node_selector: dict[str, str], tolerations: tuple[str, ...]) -> list[str]:
    """What is wrong with the two options, each problem a sentence for KubeRenderError."""
    problems = []
    for key, value in node_selector.items():
        if not _QUALIFIED_NAME.match(key):
            problems.append(f"node selector key {key!r} is not a label key")
        elif not _LABEL_VALUE.match(value):
            problems.append(f"node selector value {value!r} of {key} is not a label value")
    for text in tolerations:
        try:
            toleration(text)
        except ValueError as error:
            problems.append(f"toleration {text!r}: {error} (write KEY[=VALUE][:EFFECT])")
    return problems


def pod_scheduling(node_selector: dict[str, str], tolerations: tuple[str, ...]) -> dict[str, Any]:
    """The pod spec fields for both pods: `nodeSelector` and `tolerations`, where given."""
    fields: dict[str, Any] = {}
    if node_selector:
        fields["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        fields["tolerations"] = [toleration(text) for text in tolerations]
    return fields


def placement_notes(
    spec: GpuplexSpec, node_selector: dict[str, str], tolerations: tuple[str, ...]
) -> list[str]:
    """One note when no fleet node could take gpuplex's pods, naming why for each node and the
    options that would let them on; none when one could, or the fleet lists no node."""
    parsed = [toleration(text) for text in tolerations]
    reasons: dict[str, list[str]] = {}
    for node in spec.fleet.nodes:
        why = _why_not(spec, node, node_selector, parsed)
        if not why:
            return []
        reasons.setdefault("; ".join(why), []).append(node.name)
    if not reasons:
        return []
    pools = sorted({node.pool for node in spec.fleet.nodes if node.pool is not None})
    fixes = []
    if pools:
        fixes.append(
            f"let them onto a pool's nodes with --set tolerations={POOL_TOLERATION.format(pool='POOL')}"
            f" (pools: {', '.join(pools)})"
        )
    fixes.append("choose nodes with --set node_selector=KEY=VALUE")
    why_text = "; ".join(f"{', '.join(names)}: {why}" for why, names in reasons.items())
    return [
        f"gpuplex's server and gateway pods fit on no fleet node ({why_text}); they run only on "
        "nodes outside the fleet and stay Pending where the cluster has none: "
        + ", or ".join(fixes)
    ]


def _why_not(
    spec: GpuplexSpec,
    node: NodeSpec,
    node_selector: dict[str, str],
    tolerations: list[dict[str, str]],
) -> list[str]:
    why = []
    if node.pool is not None:
        taint = {"key": POOL_TAINT_KEY, "value": node.pool, "effect": "NoSchedule"}
        if not any(_tolerates(t, taint) for t in tolerations):
            why.append(f"tainted {POOL_TAINT_KEY}={node.pool}:NoSchedule")
    labels = {
        HOSTNAME_LABEL: node.name,
        **{POOL_LABEL_PREFIX + pool: "true" for pool in node_pools(spec, node)},
    }
    for key, value in sorted(node_selector.items()):
        # gpuplex owns every pool label: a pool label it does not render is not there
        known = key in labels or key.startswith(POOL_LABEL_PREFIX)
        if known and labels.get(key) != value:
            why.append(f"not labelled {key}={value}")
    return why


def _tolerates(toleration: dict[str, str], taint: dict[str, str]) -> bool:
    """Kubernetes' rule: the same key (and value, for Equal), and the same effect or none."""
    if toleration.get("effect", taint["effect"]) != taint["effect"]:
        return False
    if toleration["key"] != taint["key"]:
        return False
    return toleration["operator"] == "Exists" or toleration.get("value") == taint["value"]
