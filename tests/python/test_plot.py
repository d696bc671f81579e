"""Unit tests of ftrt-plot's MTTR-phase row (bindings/python/ftrt/analysis/plot.py): the phases
of each recovered failure are laid end to end from its detection, in the report's order."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from ftrt.analysis import plot  # noqa: E402


def test_phases_end_to_end_from_detection():
    rep = {"failures": [
        {"detected_at": 1000.5, "phases_ms": {"reach": 20.0, "plan": 0.5, "rebuild": 10.0,
                                              "transfer": 100.0, "resume": 2.0}},
        {"detected_at": 1001.0, "phases_ms": None},  # not recovered: nothing drawn
    ]}
    spans = plot.recovery_phases(rep, 1000.0)
    assert [n for n, _, _ in spans] == ["reach", "plan", "rebuild", "transfer", "resume"]
    assert abs(spans[0][1] - 0.5) < 1e-9 and abs(spans[0][2] - 0.020) < 1e-9
    for (_, t, d), (_, t_next, _) in zip(spans, spans[1:]):
        assert abs(t + d - t_next) < 1e-9  # each phase starts where the one before ended
    end = spans[-1][1] + spans[-1][2]
    assert abs(end - (0.5 + 0.1325)) < 1e-9  # detection + the phases' sum


def test_reports_without_phases_draw_nothing():
    assert plot.recovery_phases({"failures": [{"detected_at": 3.0}]}, 0.0) == []
    assert plot.recovery_phases({}, 0.0) == []
