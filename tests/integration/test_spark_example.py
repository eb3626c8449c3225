"""The clickstream example (examples/clickstream.py) runs end to end on the test cluster and
its per-page, per-minute totals equal the events produced."""

from __future__ import annotations

import importlib.util
import os
import uuid

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "clickstream.py")


def load_example():
    spec = importlib.util.spec_from_file_location("clickstream_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clickstream_pipeline_counts_every_view_once(cluster, spark):
    example = load_example()
    prefix = f"ex-{uuid.uuid4().hex[:8]}-"
    try:
        report = example.run(spark, cluster, events=6000, prefix=prefix,
                             max_records_per_batch=2500, trigger_interval_s=0.2)  # fmt: skip
        assert report["first_run"] and report["batches"] >= 3
        assert sum(report["truth"].values()) == 6000
        assert report["computed"] == report["truth"]
    finally:
        admin = cluster.admin()
        for topic in (f"{prefix}clicks", f"{prefix}page-views"):
            admin.delete_topic(topic)
