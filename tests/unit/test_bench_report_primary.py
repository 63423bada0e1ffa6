"""bench.report_primary renders what bench.primary returns (its shape, not its figures)."""

from bench.report_primary import fsyncs_line, primary_section
from bench.stats import spread


def test_the_primary_section_shows_capacity_bound_and_latency() -> None:
    capacity = {
        "sustained_payments_per_s": spread([1000.0, 1200.0, 1200.0]),
        "quiet_payments_per_s": spread([300.0]),
        "fsync_bound": {"set_1_clients_per_s": 900.0, "set_50_clients_per_s": 12000.0},
    }
    latency = {
        "payments_per_s": 600.0,
        "summary": {"p50_ms": spread([332.0]), "p99_ms": spread([524.0])},
        "all_fulfilled": True,
    }
    section = primary_section(
        {
            "config": {"rates": (10, 1200)},
            "capacity": {"2xBatchWorker(16)": capacity},
            "latency_100ms_downstream_at_half": {"2xBatchWorker(64)": latency},
        }
    )
    text = "\n".join(section)
    assert "| 2xBatchWorker(16) | 1,200 [1,000–1,200] | 300 [300–300] | 900 | 12,000 |" in text
    assert "| 2xBatchWorker(64) | 600 | 332 [332–332] | 524 [524–524] | yes |" in text
    assert primary_section(None) == []


def test_fsyncs_are_shown_only_when_counted() -> None:
    assert fsyncs_line({"drain": {"fsyncs_counted": {}}}) == []
    line = fsyncs_line({"drain": {"fsyncs_counted": {"ours 2xSimpleWorker": 14.5}}})[0]
    assert "ours 2xSimpleWorker: 14.5" in line
