"""The prepare service's own Prometheus metrics (docs/OBSERVABILITY.md): its jobs, read from the
live registry at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from craftai_prepare.jobs import JobRegistry


class JobsCollector(Collector):
    """Preparation jobs, read at each scrape (docs/OBSERVABILITY.md)."""

    def __init__(self, jobs: JobRegistry) -> None:
        self.jobs = jobs

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "craftai_prepare_jobs_running", "Preparation jobs running", value=len(self.jobs.running())
        )
        yield GaugeMetricFamily(
            "craftai_prepare_job_listeners", "Callers waiting on a job's progress", value=self.jobs.listeners()
        )
        finished = CounterMetricFamily("craftai_prepare_jobs", "Preparation jobs finished", labels=["outcome"])
        for outcome, count in sorted(self.jobs.finished.items()):
            finished.add_metric([outcome], count)
        yield finished
        yield CounterMetricFamily(
            "craftai_prepare_jobs_joined", "Callers that joined a job already running", value=self.jobs.joined_total
        )
