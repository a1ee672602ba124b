"""Prometheus metrics of the runs, with /healthz and /readyz, on a thread of their own."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import UnetError
from . import webhook
from .history import APPLIED, DRIFT, ERROR, LOCKED, OK, RESULTS, STANDBY, Run, write_atomic

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
        self.webhooks = Counter(p + "webhooks", "Git webhooks received, by result "
                                "(triggered, refused, ping)", ["result"], registry=registry)
        self.wake = threading.Event()  # a verified webhook: run now
        self.webhook_secret: bytes | None = None  # None: no webhook endpoint
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

    def readiness(self) -> dict[str, Any]:
        return {"ready": self.ready, "role": self.role, "last_result": self.last,
                "last_good_revision": self.good}


def serve_metrics(metrics: Metrics, address: str, port: int) -> Any:
    """/metrics, /healthz (the process is alive) and /readyz on a thread; returns the server."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                body = json.dumps(metrics.readiness()).encode() + b"\n"
                self._send(200 if metrics.ready else 503, body, "application/json")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != webhook.PATH or metrics.webhook_secret is None:
                self._send(404, b"not found\n", "text/plain")
                return
            text = self.headers.get("Content-Length") or "0"
            length = int(text) if text.isdigit() else -1
            if not 0 <= length <= webhook.MAX_BODY:
                self._send(413 if length > 0 else 400, b"a body of up to 1 MiB, with its "
                           b"Content-Length\n", "text/plain")
                return
            body = self.rfile.read(length)
            if not webhook.verified(metrics.webhook_secret, body,
                                    self.headers.get(webhook.SIGNATURE_HEADER)):
                metrics.webhooks.labels("refused").inc()
                self._send(401, b"signature missing or wrong\n", "text/plain")
            elif self.headers.get("X-GitHub-Event") == "ping":
                metrics.webhooks.labels("ping").inc()
                self._send(200, b"pong\n", "text/plain")
            else:
                metrics.webhooks.labels("triggered").inc()
                metrics.wake.set()
                self._send(202, b"fetching\n", "text/plain")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests are not worth a log line each

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="unet-metrics", daemon=True).start()
    return server


def listen(metrics: Metrics, address: str, port: int, state_dir: Path) -> Any:
    """Serve on `port` (0: any free one, written to PORT_FILE in the state dir)."""
    try:
        server = serve_metrics(metrics, address, port)
    except OSError as exc:
        raise UnetError(f"cannot listen on {address}:{port}: {exc.strerror}") from exc
    write_atomic(state_dir / PORT_FILE, f"{server.server_address[1]}\n")
    return server
