"""What a namespace's NetworkPolicies allow, computed from the YAML as the API defines it,
so a test can compare the result with the trust table instead of reading the policies.

The rules followed (networking.k8s.io/v1): policies add up; a pod that no policy of a
direction selects is open in that direction; a rule's missing `to`/`from` is every peer and
its missing `ports` every port. A connection inside the namespace needs both ends: the
client's egress and the listener's ingress. Peers outside the namespace (a namespaceSelector,
an ipBlock) are named, not followed. What this model does not read (matchExpressions, named
ports, endPort) fails loudly rather than being guessed.
"""

from __future__ import annotations

from typing import Any

ANYWHERE = "anywhere"  # any peer at all: every pod, every namespace, every address
ANY_PORT = 0  # a rule without ports
ANY_PROTOCOL = "any"
Edge = tuple[str, str, int, str]  # (from, to, port, protocol)


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector {selector}: only matchLabels is modelled here")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peers(rule: dict[str, Any], field: str, pods: dict[str, dict[str, str]]) -> set[str]:
    if not rule.get(field):
        return {ANYWHERE}
    found: set[str] = set()
    for peer in rule[field]:
        if "ipBlock" in peer:
            found.add(f"ipBlock {peer['ipBlock']['cidr']}")
        elif "namespaceSelector" in peer:  # another namespace: named by both selectors
            namespaces = peer["namespaceSelector"].get("matchLabels") or {}
            selected = (peer.get("podSelector") or {}).get("matchLabels") or {}
            found.add(f"namespaces {namespaces} pods {selected}" if namespaces or selected else ANYWHERE)
        else:
            found |= {role for role, labels in pods.items() if selects(peer["podSelector"], labels)}
    return found


def _ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    if not rule.get("ports"):
        return {(ANY_PORT, ANY_PROTOCOL)}
    found = set()
    for port in rule["ports"]:
        if not isinstance(port.get("port"), int) or "endPort" in port:
            raise ValueError(f"port {port}: only a single numbered port is modelled here")
        found.add((port["port"], port.get("protocol", "TCP")))
    return found


def _types(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _direction(policies: list[dict], pods: dict[str, dict[str, str]], kind: str) -> set[Edge]:
    """Each pod's open (pod, peer, port, protocol) in one direction ("Ingress" or "Egress")."""
    field, peer_field = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    found: set[Edge] = set()
    for role, labels in pods.items():
        chosen = [p for p in policies if kind in _types(p) and selects(p["spec"]["podSelector"], labels)]
        if not chosen:
            found.add((role, ANYWHERE, ANY_PORT, ANY_PROTOCOL))
        for policy in chosen:
            for rule in policy["spec"].get(field) or []:
                found |= {(role, peer, port, protocol)
                          for peer in _peers(rule, peer_field, pods) for port, protocol in _ports(rule)}
    return found


def _meet(a: tuple[int, str], b: tuple[int, str]) -> tuple[int, str] | None:
    """The port and protocol two rules both allow, or None."""
    port = a[0] if b[0] == ANY_PORT else b[0] if a[0] == ANY_PORT else a[0] if a[0] == b[0] else None
    protocol = (a[1] if b[1] == ANY_PROTOCOL else b[1] if a[1] == ANY_PROTOCOL
                else a[1] if a[1] == b[1] else None)
    return None if port is None or protocol is None else (port, protocol)


def allowed(policies: list[dict], pods: dict[str, dict[str, str]]) -> set[Edge]:
    """Every (from, to, port, protocol) the policies let through, pods named by role; a
    peer outside the namespace by its selectors; port 0 / protocol "any" for every one."""
    egress, ingress = _direction(policies, pods, "Egress"), _direction(policies, pods, "Ingress")
    edges: set[Edge] = set()
    for client, target, out_port, out_protocol in egress:
        if target not in pods:  # leaves the namespace: the other end is not ours
            edges.add((client, target, out_port, out_protocol))
        for listener, source, in_port, in_protocol in ingress:
            if target in (listener, ANYWHERE) and source in (client, ANYWHERE):
                met = _meet((out_port, out_protocol), (in_port, in_protocol))
                if met:
                    edges.add((client, listener, *met))
    edges |= {(source, listener, port, protocol)
              for listener, source, port, protocol in ingress if source not in pods}
    return edges
