"""rsiframe.api: the slot table declares what every slot may read, and never sealed results."""

from __future__ import annotations

from rsiframe.api import GATE_DETAIL, INFORMATION, READS, SLOTS, may_read


def test_the_table_declares_every_slot_and_never_sealed() -> None:
    assert set(INFORMATION) == set(SLOTS)
    for slot in (*SLOTS, None):
        for what in READS:
            allowed = may_read(slot, what, gate_detail=True)
            if what.endswith(":sealed"):
                assert not allowed, (slot, what)
        assert may_read(slot, "scores:gate") and may_read(slot, "rewards:train")
        assert may_read(slot, "trajectories:train")
        assert not may_read(slot, "rewards:gate")
        assert not may_read(slot, "trajectories:gate", gate_detail=True)
        assert may_read(slot, "rewards:gate", gate_detail=True)
    assert set(GATE_DETAIL) == {"rewards:gate"}
