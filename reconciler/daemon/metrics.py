"""Prometheus metrics of the runs and the daemon's readiness, which the endpoints' process
(endpoints.py) serves."""

from __future__ import annotations

import time
from typing import Any

from ..usage import Usage
from .history import APPLIED, DRIFT, ERROR, LOCKED, OK, RESULTS, STANDBY, Run

DEFAULT_METRICS_PORT = 9610
PORT_FILE = "metrics.port"

class Metrics:
    """Prometheus metrics on their own registry (not the process-global one)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info

        self.registry = registry = CollectorRegistry()
        p = "unet_reconcile_"
        self.runs = Counter(p + "runs", "Reconcile runs, by result", ["result"],
                            registry=registry)
        for result in RESULTS:
            self.runs.labels(result)
        self.last_run = Gauge(p + "last_run_timestamp_seconds",
                              "When the last run finished (Unix time)", registry=registry)
        self.last_success = Gauge(p + "last_success_timestamp_seconds",
                                  "When a run last ended without error (Unix time)",
                                  registry=registry)
        self.last_result = Enum(p + "last_result", "Result of the last run", states=list(RESULTS),
                                registry=registry)
        self.drift = Gauge(p + "drift_objects",
                           "Backend objects changed outside unet, found by the last run",
                           registry=registry)
        self.repaired = Counter(p + "repaired_objects", "Drifted backend objects repaired",
                                registry=registry)
        self.plan = Gauge(p + "plan_resources", "Resources by action in the last run's plan",
                          ["action"], registry=registry)
        self.rows = Gauge(p + "plan_backend_objects",
                          "Backend objects by action in the last run's plan", ["action"],
                          registry=registry)
        self.applied = Counter(p + "applied_objects", "Backend objects changed by applies",
                               ["action"], registry=registry)
        self.apply_duration = Histogram(p + "apply_duration_seconds", "Duration of applies",
                                        buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
                                        registry=registry)
        self.last_apply = Gauge(p + "last_apply_duration_seconds",
                                "Duration of the last apply", registry=registry)
        self.run_duration = Gauge(p + "last_run_duration_seconds",
                                  "Duration of the last run", registry=registry)
        self.resources = Gauge(p + "resources", "Manifests of the reconciled revision by kind",
                               ["kind"], registry=registry)
        self.revision = Info(p + "revision", "The revision of the branch and the one applied",
                             registry=registry)
        self.active = Gauge(p + "active", "1: this replica is active (applies); 0: it stands "
                            "by (another replica is active)", registry=registry)
        self.active.set(1)
        labels = ["kind", "tenant", "name", "family"]
        self.space_size = Gauge("unet_pool_size", "Values a pool, subnet address family or "
                                "segment range can hand out (unet show usage)", labels,
                                registry=registry)
        self.space_used = Gauge("unet_pool_used", "Of those, held in the backends after the "
                                "last run", labels, registry=registry)
        self.space_free = Gauge("unet_pool_free", "Of those, free after the last run", labels,
                                registry=registry)
        self.ready = False
        self.role = "active"  # one replica alone is active; with --replicas, elected
        self.last = "none"
        self.good: str | None = None

    def observe(self, run: Run, election: Any = None) -> None:
        now = time.time()
        if election is not None:
            self.role = election.role
            self.active.set(1 if self.role == "active" else 0)
        self.runs.labels(run.result).inc()
        self.last_run.set(now)
        self.last_result.state(run.result)
        self.run_duration.set(run.duration)
        if run.result not in (ERROR, LOCKED):
            self.last_success.set(now)
        if run.result == STANDBY:  # a standby replica is ready to take over
            self.last, self.ready = run.result, True
            return
        if run.result == LOCKED:  # nothing was observed: keep the last figures
            self.last = run.result
            return
        self.drift.set(run.drift)
        if run.repaired:
            self.repaired.inc(run.repaired)
        for action in ("delete", "replace", "create", "update", "no-op"):
            self.plan.labels(action).set(run.counts.get(action, 0))
            self.rows.labels(action).set(run.row_counts.get(action, 0))
        for action, count in run.applied.items():
            self.applied.labels(action).inc(count)
        if run.apply_seconds is not None:
            self.apply_duration.observe(run.apply_seconds)
            self.last_apply.set(run.apply_seconds)
        if run.resources:
            self.resources.clear()
            for kind, count in run.resources.items():
                self.resources.labels(kind).set(count)
        if run.reconciled or run.result in (OK, APPLIED, DRIFT):
            self.good = run.reconciled or run.revision or "files"
        self.revision.info({"branch": run.branch or "", "revision": run.revision or "",
                            "reconciled": run.reconciled or "", "last_good": self.good or ""})
        self.last = run.result
        self.ready = self.good is not None and run.result != ERROR

    def usage(self, usages: list[Usage] | None) -> None:
        """The figures of `unet show usage` after the last run that planned (None: a run
        that did not plan keeps the last ones)."""
        if usages is None:
            return
        gauges = (self.space_size, self.space_used, self.space_free)
        for gauge in gauges:
            gauge.clear()  # a pool or subnet removed from the repo leaves no series behind
        for usage in usages:
            kind, tenant, name, family = usage.space.id
            labels = (kind, tenant or "", name, str(family or ""))
            self.space_size.labels(*labels).set(usage.space.size)
            self.space_used.labels(*labels).set(usage.used)
            self.space_free.labels(*labels).set(usage.free)

    def readiness(self) -> dict[str, Any]:
        return {"ready": self.ready, "role": self.role, "last_result": self.last,
                "last_good_revision": self.good}
