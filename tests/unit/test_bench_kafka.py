"""The Kafka-listener benchmark's arithmetic and rendering (bench/kafka_report.py): latency
percentiles, CPU per million records, best-of-rounds, the harness rows and the text and
Markdown tables, all from made-up figures (no Ray, no broker)."""

from __future__ import annotations

import pytest

from bench import kafka_report, kafka_wire


def _phase(rate: float, cpu: dict | None = None, p50: float | None = None) -> dict:
    figures = {"records": 1_000_000, "seconds": 1_000_000 / rate, "records_per_s": rate,
               "mb_per_s": rate * 100 / 1e6, "cpu": cpu or {}}  # fmt: skip
    if p50 is not None:
        figures["latency"] = {"samples": 10, "p50_ms": p50, "p99_ms": p50 * 2}
    return figures


def _rounds() -> list[dict]:
    rafka_cpu = {"client": {"cpu_s": 2.0, "cpu_s_per_m": 2.0, "cores": 0.4},
                 "client Python thread": {"cpu_s": 1.5, "cpu_s_per_m": 1.5, "cores": 0.3},
                 "listener": {"cpu_s": 5.0, "cpu_s_per_m": 5.0, "cores": 1.0},
                 "machine": {"cpu_s": 9.0, "cpu_s_per_m": 9.0, "cores": 1.8}}  # fmt: skip
    return [
        {"rafka": {"produce": _phase(100_000, rafka_cpu, p50=40.0), "consume": _phase(300_000)},
         "tansu": {"produce": _phase(800_000, p50=5.0), "consume": _phase(900_000)}},
        {"rafka": {"produce": _phase(200_000, rafka_cpu, p50=60.0), "consume": _phase(250_000)},
         "tansu": {"produce": _phase(400_000, p50=4.0), "consume": _phase(1_000_000)}},
    ]  # fmt: skip


def _report() -> dict:
    rounds = _rounds()
    return {"records": 1_000_000, "value_size": 100, "linger_ms": 5, "rounds": rounds,
            "summary": kafka_report.summarise(rounds)}  # fmt: skip


def test_latency_figures_interpolate_percentiles_in_ms():
    """p50 and p99 interpolate between the samples (numpy's default) and come out in ms."""
    figures = kafka_report.latency_figures([i / 1000 for i in range(100, 0, -1)])  # 1..100 ms
    assert figures["samples"] == 100
    assert figures["p50_ms"] == pytest.approx(50.5)
    assert figures["p99_ms"] == pytest.approx(99.01)
    assert figures["max_ms"] == pytest.approx(100.0)
    assert kafka_report.latency_figures([]) == {"samples": 0}


def test_cpu_figures_are_per_million_records_and_per_wall_second():
    """CPU seconds between snapshots become CPU-s per million records and cores; a process
    gone by the second snapshot (or new in it) is left out."""
    before = {"client": 10.0, "listener": 1.0, "gone": 3.0}
    after = {"client": 12.0, "listener": 4.0, "new": 1.0}
    figures = kafka_report.cpu_figures(before, after, records=500_000, wall_s=2.0)
    assert set(figures) == {"client", "listener"}
    assert figures["listener"] == {"cpu_s": 3.0, "cpu_s_per_m": 6.0, "cores": 1.5}
    assert figures["client"]["cpu_s_per_m"] == pytest.approx(4.0)


def test_summarise_keeps_the_fastest_round_and_the_lowest_latency():
    """Per side and phase the best round's rate, wall time and CPU; the median of the rates;
    p50/p99 the lowest over the rounds."""
    summary = kafka_report.summarise(_rounds())
    produce = summary["rafka.produce"]
    assert produce["records_per_s"] == 200_000 and produce["seconds"] == pytest.approx(5.0)
    assert produce["median_records_per_s"] == 150_000
    assert produce["p50_ms"] == 40.0 and produce["p99_ms"] == 80.0
    assert produce["cpu"]["listener"]["cpu_s_per_m"] == 5.0
    assert summary["tansu.consume"]["records_per_s"] == 1_000_000
    assert "p50_ms" not in summary["rafka.consume"]
    assert kafka_report.ratio(summary, "produce") == pytest.approx(0.25)
    assert kafka_report.ratio(summary, "consume") == pytest.approx(0.3)


def test_summary_rows_put_tansu_as_the_peer_and_latency_lower_is_better():
    """Rates and MB/s per phase, then p50/p99 latency where the ratio is Tansu's / rafka's."""
    from bench.harness import row

    rows = kafka_report.summary_rows(kafka_report.summarise(_rounds()), row)
    assert [(r["metric"], r["unit"]) for r in rows] == [
        ("produce acks=all idempotent", "records/s"), ("produce acks=all idempotent", "MB/s"),
        ("consume from offset 0", "records/s"), ("consume from offset 0", "MB/s"),
        ("produce p50 latency", "ms"), ("produce p99 latency", "ms"),
    ]  # fmt: skip
    assert rows[0]["ratio"] == pytest.approx(0.25) and rows[0]["peer"] == 800_000
    assert rows[4]["rafka"] == 40.0 and rows[4]["peer"] == 4.0
    assert rows[4]["ratio"] == pytest.approx(0.1) and not rows[4]["higher_is_better"]


def test_summary_rows_without_tansu_have_no_ratio():
    """With the peer off, rafka's figures stand alone."""
    from bench.harness import row

    rounds = [{"rafka": r["rafka"]} for r in _rounds()]
    rows = kafka_report.summary_rows(kafka_report.summarise(rounds), row)
    assert rows[0]["rafka"] == 200_000 and rows[0]["peer"] is None and rows[0]["ratio"] is None


def test_the_cpu_table_lists_processes_the_rest_of_the_machine_and_wall_time():
    """Each process's CPU-s per million and cores per side and phase; ``rest of machine`` is
    the machine's busy time less the listed processes (the client's main thread, a part of
    the client, counted once); processes with no figure anywhere (Tansu's broker here) are
    left out."""
    table = kafka_report.cpu_table(_report())
    header, *rows = table
    assert header[:3] == ["process", "rafka produce CPU-s/M", "cores"]
    by_label = {r[0]: r for r in rows}
    assert by_label["listener"][1:3] == ["5.00", "1.00"]
    assert by_label["rest of machine"][1:3] == ["2.00", "0.40"]
    assert "tansu broker" not in by_label
    assert by_label["wall s"][1] == "5.00"
    assert by_label["client Python thread"][1:3] == ["1.50", "0.30"]
    assert rows.index(by_label["client"]) < rows.index(by_label["listener"])


def test_render_and_markdown_show_the_same_figures():
    """The printed text and the README's Markdown carry the title, both brokers' rates and
    the rafka/Tansu ratio; the Markdown tables are well formed (one separator row, equal
    column counts)."""
    report = _report()
    text = kafka_report.render(report)
    assert "1,000,000 records of 100 bytes" in text and "best of 2 rounds" in text
    assert "200,000" in text and "800,000" in text and "0.250x" in text
    md = kafka_report.markdown(report)
    for table in md.split("\n\n"):
        lines = [line for line in table.splitlines() if line.startswith("|")]
        if not lines:
            continue
        assert lines[1].startswith("|---|")
        assert len({line.count("|") for line in lines}) == 1
    assert "| produce | rafka | 200,000 | 20.00 | 5.00 | 40.00 | 80.00 | 0.250x |" in md


def test_the_harness_registers_it_before_the_shared_instance_with_tiny_sizes():
    """``python -m bench kafka`` runs it with the peer, ahead of the workloads sharing the
    embedded instance (it needs a Ray connection of its own); --tiny shrinks it."""
    from bench import harness

    workload = harness.WORKLOADS["kafka"]
    assert workload.peer and workload.cluster == "none"
    order = list(harness.WORKLOADS)
    assert order.index("kafka") < order.index("produce")
    args = harness.parse(["kafka", "--tiny"])
    assert args.workloads == ["kafka"]
    assert args.kafka_records == kafka_wire.TINY["kafka_records"]
    assert args.kafka_rounds == 1
    assert harness.parse(["kafka"]).kafka_records == 1_000_000
