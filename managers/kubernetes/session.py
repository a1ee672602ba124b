"""A session with the hosting clusters: the Leases that serialise runs, observing them,
carrying out steps there, and telling which subnets are ready where.

Each step is one request (server-side apply or delete). A step fails alone: an
unreachable cluster, a missing CRD, an RBAC denial or a refused object fails that
step, and the steps that need it (same object, or an object it names) are not tried;
every other step still runs. The failures are in the apply's outcome: the run reports
them and exits 1 after the rest was applied.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import tenacity

from unet.managers.sdk import (
    Action,
    ApplyOutcome,
    BackendLocked,
    BackendObject,
    Change,
    Observation,
    ProgressFactory,
    Session,
    Step,
    each_step,
)

from .client import Cluster, KubernetesError, is_api_error, is_connection_error
from .codec import classify, status_configmap, to_body
from .kinds import KINDS
from .lease import ANNOTATION_APPLIED, Lease, LockTimeout, Renewer
from .observe import KubernetesObservation, observe_cluster
from .render import POLICY_FOR, provider_object_name

if TYPE_CHECKING:
    from .config import KubernetesConfig

VERB = {"create": "patch", "update": "patch", "delete": "delete"}
SHOWN = 10  # names listed per line before "and N more"
CONFIGMAP = KINDS["ConfigMap"]


def apply_steps(session: KubernetesSession, observation: KubernetesObservation,
                waves: Sequence[Sequence[Step]], changes: dict[str, Change],
                progress: ProgressFactory) -> ApplyOutcome:
    outcome = ApplyOutcome()
    for step, obj in each_step(waves, changes, progress):
        cluster = session.clusters.get(obj.key.split("/", 1)[0])
        why = _blocked(session, outcome, cluster, obj, step)
        if why is None:
            assert cluster is not None
            why = _run(session, observation, cluster, step.action, obj)
        if why is None:
            outcome.did(step)
        else:
            outcome.failures[step.uid] = why
    return outcome


def _blocked(session: KubernetesSession, outcome: ApplyOutcome, cluster: Cluster | None,
             obj: BackendObject, step: Step) -> str | None:
    """Why the step cannot be tried, or None."""
    if cluster is None:
        return f"cluster {obj.key.split('/', 1)[0]} is not in the manager's config"
    if cluster.error is not None:
        return cluster.error
    if obj.table in cluster.missing:
        return cluster.missing[obj.table]
    lease = session.leases.get(cluster.name)
    if lease is not None and lease.lost:
        return lease.lost
    if step.uid in outcome.failures:
        return "not tried: deleting the old object first failed"
    if step.action != Action.DELETE:
        for key in obj.depends:
            if f"{session.manager}:{key}" in outcome.failures:
                return f"not tried: it needs {key}, whose step failed"
    return None


def _run(session: KubernetesSession, observation: KubernetesObservation, cluster: Cluster,
         action: str, obj: BackendObject) -> str | None:
    kind = KINDS[obj.table]
    metadata = obj.fields["metadata"]
    name, namespace = metadata["name"], metadata.get("namespace")
    try:
        if action == Action.DELETE:
            cluster.delete(kind, name, namespace, observation.uids.get(obj.key))
            return None
        if action == Action.CREATE:
            _make_room(session, cluster, obj)
        cluster.apply(kind, to_body(obj, session.installation, session.manager))
        return None
    except KubernetesError as exc:
        return str(exc)
    except Exception as exc:
        if is_api_error(exc, 409) and action == Action.DELETE:
            return (f"{kind.kind} {name} on {cluster.label} is no longer the object that "
                    "was observed (its UID changed); not deleted — plan again")
        if is_connection_error(exc):
            cluster.error = cluster.explain(exc, VERB[action], kind, name, namespace)
            return cluster.error
        if is_api_error(exc):
            if is_api_error(exc, 404) and action != Action.DELETE:
                cluster.missing[kind.kind] = cluster.explain(exc, "list", kind)
                return cluster.missing[kind.kind]
            return cluster.explain(exc, VERB[action], kind, name, namespace)
        raise


def _make_room(session: KubernetesSession, cluster: Cluster, obj: BackendObject) -> None:
    """Before creating: nobody else's object has the name; ours being deleted is gone."""
    kind = KINDS[obj.table]
    metadata = obj.fields["metadata"]
    name, namespace = metadata["name"], metadata.get("namespace")
    wait = session.config.delete_timeout_seconds

    def still_deleting() -> dict[str, Any] | None:
        """Ours, still being deleted (its finalizers hold it); None: the name is free."""
        existing = cluster.get(kind, name, namespace)
        if existing is None:
            return None
        whose = classify(existing, session.installation, session.manager)
        if whose is not None:
            raise KubernetesError(f"{kind.kind} {name} on {cluster.label} exists and is "
                                  f"{whose}; unet never overwrites it")
        # ours already (created since the plan) when not being deleted: applying is safe
        return existing if existing["metadata"].get("deletionTimestamp") else None

    try:
        tenacity.Retrying(stop=tenacity.stop_after_delay(wait), wait=tenacity.wait_fixed(0.2),
                          retry=tenacity.retry_if_not_result(lambda left: left is None))(
            still_deleting)
    except tenacity.RetryError as exc:
        existing = exc.last_attempt.result()
        finalizers = ", ".join(existing["metadata"].get("finalizers") or []) or "none"
        raise KubernetesError(
            f"{kind.kind} {name} on {cluster.label} is still being deleted after "
            f"{wait:g} s (finalizers: {finalizers}); for a ClusterUserDefinedNetwork, pods "
            "or VMs in the tenant's namespaces still use it — run unet apply again once "
            "they are gone") from None


# --- readiness --------------------------------------------------------------------------------


def _subnet_of(obj: BackendObject) -> str | None:
    """The Subnet or ProviderNetwork an object serves (a policy: the network it filters);
    None: neither's."""
    if obj.table == "MultiNetworkPolicy":
        network = obj.fields["metadata"]["annotations"][POLICY_FOR].split("/", 1)[1]
        if network.startswith(provider_object_name("")):
            return f"ProviderNetwork/{network.removeprefix(provider_object_name(''))}"
        _, tenant, subnet = network.split(".", 2)
        return f"Subnet/{tenant}/{subnet}"
    return obj.owner if obj.owner.startswith(("Subnet/", "ProviderNetwork/")) else None


def readiness_report(session: KubernetesSession, changes: Sequence[Change],
                     outcome: ApplyOutcome | None) -> list[str]:
    """Per hosting cluster: usable or not (and why), and which subnets are ready there.

    A subnet is ready on a cluster when all of its objects there are as desired: up to
    date before an apply, or applied without failure after it.
    """
    done = outcome.done if outcome is not None else set()
    ready: dict[str, dict[str, bool]] = defaultdict(dict)  # subnet -> cluster -> ready
    for change in changes:
        obj = change.obj
        subnet = _subnet_of(change.after) if change.after is not None else None
        if obj.manager != session.manager or subnet is None:
            continue
        cluster_name = obj.key.split("/", 1)[0]
        cluster = session.clusters.get(cluster_name)
        ok = cluster is not None and cluster.error is None \
            and obj.table not in cluster.missing and (
                not change.action.changes or change.uid in done)
        ready[subnet][cluster_name] = ready[subnet].get(cluster_name, True) and ok
    names = sorted(session.clusters)
    providers = {o: r for o, r in ready.items() if o.startswith("ProviderNetwork/")}
    ready = {o: r for o, r in ready.items() if o not in providers}  # the subnets'
    lines = [f"Kubernetes manager {session.manager}: {len(names)} hosting clusters"]
    for name in names:
        cluster = session.clusters[name]
        owners = [o for o in sorted(ready) if name in ready[o]]
        count = sum(1 for o in owners if ready[o][name])
        line = f"  {name}: {count} of {len(owners)} subnets ready"
        shared = [o for o in sorted(providers) if name in providers[o]]
        if shared:
            line += f", {sum(1 for o in shared if providers[o][name])} of {len(shared)} " \
                    "provider networks"
        not_ready = [o for o in owners + shared if not {**ready, **providers}[o][name]]
        if not_ready and cluster.error is None:
            line += f" (not yet: {_some(not_ready)})"
        lines.append(line)
        if cluster.error is not None and outcome is None:
            lines.append(f"    cannot be read: {cluster.error}")
        elif cluster.error is not None:
            lines.append(f"    warning: {cluster.error}; the steps on this cluster failed, "
                         "the other clusters were applied")
        for why in sorted(set(cluster.missing.values())):
            lines.append(f"    warning: {why}")
    everywhere = [o for o in sorted(ready) if all(ready[o].get(n, False) for n in names)]
    missing = [o for o in sorted(ready) if o not in everywhere]
    line = f"  Subnets ready on every hosting cluster: {len(everywhere)} of {len(ready)}"
    if missing:
        line += "; not ready: " + _some([
            f"{o} (on {', '.join(n for n in names if not ready[o].get(n, False))})"
            for o in missing])
    lines.append(line)
    if providers:
        everywhere = [o for o in sorted(providers)
                      if all(providers[o].get(n, False) for n in names)]
        lines.append(f"  Provider networks ready on every hosting cluster: {len(everywhere)} "
                     f"of {len(providers)}")
    return lines


def _some(items: list[Any]) -> str:
    shown = ", ".join(str(i) for i in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


class KubernetesSession(Session):
    """API clients of every hosting cluster, and the Leases while they are held."""

    def __init__(self, manager: str, installation: str, config: KubernetesConfig,
                 clusters: dict[str, Cluster]) -> None:
        self.manager = manager
        self.installation = installation
        self.config = config
        self.clusters = clusters
        self.leases: dict[str, Lease] = {}

    @contextlib.contextmanager
    def lock(self, timeout: float, waiting: Callable[[str], None]) -> Iterator[None]:
        """The Lease unet-<installation> in leaseNamespace, on every usable cluster."""

        duration = self.config.lease_duration_seconds
        try:
            for name, cluster in sorted(self.clusters.items()):
                if cluster.error is not None:
                    continue
                lease = Lease(cluster, self.config.lease_namespace,
                              f"unet-{self.installation}", duration)
                try:
                    lease.acquire(timeout, waiting=waiting)
                except BackendLocked:
                    raise
                except KubernetesError as exc:
                    cluster.error = str(exc)
                    continue
                self.leases[name] = lease
            with Renewer(list(self.leases.values()), max(0.5, duration / 3)).running():
                yield
        finally:
            for lease in self.leases.values():
                lease.release()
            self.leases = {}

    @contextlib.contextmanager
    def hold(self, name: str) -> Iterator[Callable[[], bool]]:
        """The Lease unet-<installation>-<name> on the first usable cluster, renewed while
        held; when the holder stops renewing, it expires and the next waiter takes it."""

        usable = [c for _n, c in sorted(self.clusters.items()) if c.error is None]
        if not usable:
            raise BackendLocked("no hosting cluster is reachable to hold the Lease "
                                f"unet-{self.installation}-{name} on")
        duration = self.config.lease_duration_seconds
        lease = Lease(usable[0], self.config.lease_namespace,
                      f"unet-{self.installation}-{name}", duration)
        while True:
            try:
                lease.acquire(5.0)
                break
            except LockTimeout:
                continue  # still held by another replica: ask again
        try:
            with Renewer([lease], max(0.5, duration / 3)).running():
                yield lambda: lease.lost is None
        finally:
            lease.release()

    def observe(self) -> KubernetesObservation:

        observation = KubernetesObservation([], self._applied_digest(), self.manager)
        for _, cluster in sorted(self.clusters.items()):
            observe_cluster(cluster, self.installation, self.manager, observation)
            if cluster.error is not None:
                observation.unobserved.append(cluster.error)
        return observation

    def apply(self, observation: Observation, waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], progress: ProgressFactory) -> ApplyOutcome:

        assert isinstance(observation, KubernetesObservation)
        return apply_steps(self, observation, waves, changes, progress)

    publishes_status = True

    def publish_status(self, statuses: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Each tenant's status in the ConfigMap `unet-status.<manager>` of its namespace,
        on every usable cluster (key `status.json`), beside its bindings."""
        problems = []
        bodies = {tenant: status_configmap(self.manager, self.installation,
                                           self.config.namespace_of(tenant), document)
                  for tenant, document in sorted(statuses.items())}
        name = f"unet-status.{self.manager}"
        for cluster_name, cluster in sorted(self.clusters.items()):
            if cluster.error is not None or not bodies:
                continue
            try:  # a ConfigMap of that name that is not ours (another installation's)
                others = {item["metadata"].get("namespace"): whose
                          for item in cluster.list(CONFIGMAP,
                                                   field_selector=f"metadata.name={name}")
                          if (whose := classify(item, self.installation, self.manager))}
            except Exception as exc:  # the apply is done: said, never raised
                why = cluster.explain(exc, "list", CONFIGMAP, name)
                problems.append(f"no status is published on cluster {cluster_name}: {why}")
                continue
            for tenant, body in bodies.items():
                meta = body["metadata"]
                if meta["namespace"] in others:
                    problems.append(
                        f"the status of tenant {tenant} is not published on cluster "
                        f"{cluster_name}: the ConfigMap {meta['namespace']}/{name} there is "
                        f"{others[meta['namespace']]}; unet never overwrites it")
                    continue
                try:
                    cluster.apply(CONFIGMAP, body)
                except Exception as exc:  # the apply is done: said, never raised
                    why = cluster.explain(exc, "patch", CONFIGMAP, meta["name"],
                                          meta["namespace"])
                    problems.append(f"the status of tenant {tenant} is not published: {why}")
        return problems

    def report(self, changes: Sequence[Change], outcome: ApplyOutcome | None) -> list[str]:

        return readiness_report(self, changes, outcome)

    def _applied_digest(self) -> str | None:

        if not self.leases or any(c.error for c in self.clusters.values()):
            return None
        values = set()
        for lease in self.leases.values():
            recorded = _json_map(lease.annotation(ANNOTATION_APPLIED))
            values.add(recorded.get(self.manager))
        return values.pop() if len(values) == 1 else None

    def record_applied(self, digest: str) -> None:


        for name, lease in self.leases.items():
            if self.clusters[name].error is not None:
                continue
            recorded = _json_map(lease.annotation(ANNOTATION_APPLIED))
            recorded[self.manager] = digest
            with contextlib.suppress(Exception):  # only tells drift from repo changes later
                lease.annotate(ANNOTATION_APPLIED, json.dumps(recorded, sort_keys=True,
                                                              separators=(",", ":")))


def _json_map(text: str | None) -> dict[str, str]:

    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
