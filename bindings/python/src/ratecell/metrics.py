"""Prometheus counters for the HTTP middlewares and ``ratecell.routes``:
requests admitted, refused and refused-in-a-dry-run, per policy. Off unless
given (``RateLimitMiddleware(app, limiter, metrics=PrometheusMetrics())``);
needs ``prometheus_client`` (``pip install prometheus-client``), imported
only when a ``PrometheusMetrics`` is made.

One counter, ``ratecell_http_requests_total`` by default, labelled
``policy`` (the RateLimit-Policy name) and ``outcome``:

- ``admitted``: the request was admitted; counted once for every policy.
- ``refused``: this policy refused the request (a request several policies
  refused counts once under each; a policy that would have admitted a
  request another refused counts nothing).
- ``dry_run_refused``: as ``refused``, in a dry run (the request passed).

Store failures (a Redis store that did not answer) decide nothing per
policy: they are counted on a counter of their own,
``ratecell_http_store_errors_total`` by default, labelled ``outcome``:
``unavailable`` (answered 503) or ``failed_open`` (the request passed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._http import LimitDecision

__all__ = ["PrometheusMetrics"]


class PrometheusMetrics:
    """Counts each limited request's outcome per policy on a
    ``prometheus_client`` counter, registered in ``registry`` (default: the
    process's default registry) under ``name``."""

    __slots__ = ("counter", "store_errors", "_children", "_store_children")

    def __init__(
        self,
        registry: Any = None,
        name: str = "ratecell_http_requests",
        store_errors_name: str = "ratecell_http_store_errors",
    ) -> None:
        """``store_errors_name`` names the store failures' counter (give
        another for a second ``PrometheusMetrics`` in one registry)."""
        import prometheus_client

        kw: dict[str, Any] = {} if registry is None else {"registry": registry}
        self.counter = prometheus_client.Counter(
            name,
            "Rate-limited HTTP requests by policy and outcome "
            "(admitted, refused, dry_run_refused).",
            ["policy", "outcome"],
            **kw,
        )
        self.store_errors = prometheus_client.Counter(
            store_errors_name,
            "Failures of the rate-limit store by outcome (unavailable, failed_open).",
            ["outcome"],
            **kw,
        )
        self._store_children = {
            True: self.store_errors.labels("failed_open"),
            False: self.store_errors.labels("unavailable"),
        }
        # (policy, outcome) -> the labelled child: .labels() parses its
        # arguments on every call.
        self._children: dict[tuple[str, str], Any] = {}

    def _inc(self, policy: str, outcome: str) -> None:
        child = self._children.get((policy, outcome))
        if child is None:
            child = self._children[(policy, outcome)] = self.counter.labels(policy, outcome)
        child.inc()

    def __call__(self, items: Sequence[LimitDecision], admitted: bool, dry_run: bool) -> None:
        """Records one request's decisions (the middlewares call this)."""
        if admitted:
            for i in items:
                self._inc(i.name, "admitted")
            return
        outcome = "dry_run_refused" if dry_run else "refused"
        for i in items:
            if not i.decision.allowed:
                self._inc(i.name, outcome)

    def store_error(self, failed_open: bool) -> None:
        """Records one store failure (the middlewares call this):
        ``failed_open`` when the request passed, else it was answered 503."""
        self._store_children[failed_open].inc()
