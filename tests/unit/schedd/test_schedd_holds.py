"""Daemon holds: marked, self-expiring, restore the user's begin time, never touch other holds."""

from __future__ import annotations

from schedd_fake import job

from easlurm.priority import holds
from easlurm.priority.holds import HoldMark
from easlurm.slurm.times import format_timestamp

NOW = 1_800_000_000.0


def test_mark_round_trip_and_charset() -> None:
    mark = HoldMark(until_s=1_800_000_600, begin_s=1_800_000_300)
    text = mark.encode()
    assert HoldMark.decode(text) == mark
    assert text == text.lower() and text.isascii() and "|" not in text and '"' not in text
    assert HoldMark.decode(HoldMark(5).encode()) == HoldMark(5, None)
    assert HoldMark.decode("easlurm1:abcdef") is None and HoldMark.decode("") is None


def test_hold_then_release_restores_user_begin() -> None:
    """A job the user deferred to NOW+300 is released back to that time, not to now."""
    j = job("1", eligible_s=NOW + 300)
    fields = holds.hold_fields(j, NOW, ttl_s=600)
    mark = HoldMark.decode(fields["AdminComment"])
    assert mark == HoldMark(int(NOW + 600), int(NOW + 300), int(NOW), holds.WHY_POLICY)
    held = job("1", eligible_s=NOW + 600, reason="BeginTime", admin_comment=fields["AdminComment"])
    assert holds.held_by_us(held, NOW) and not holds.foreign_hold(held)
    rel = holds.release_fields(held, NOW)
    assert rel["AdminComment"] == "" and rel["StartTime"] == format_timestamp(NOW + 300)
    assert holds.release_fields(held, NOW + 400)["StartTime"] == "now"


def test_refresh_keeps_original_begin() -> None:
    first = holds.hold_fields(job("1", eligible_s=NOW + 300), NOW, 600)
    held = job("1", eligible_s=NOW + 600, reason="BeginTime", admin_comment=first["AdminComment"])
    assert not holds.needs_refresh(held, NOW + 100, 600)
    assert holds.needs_refresh(held, NOW + 400, 600)
    again = holds.hold_fields(held, NOW + 400, 600)
    # extended: same begin, same first-hold time (the TTL on an idle cluster counts from it)
    assert HoldMark.decode(again["AdminComment"]) == HoldMark(
        int(NOW + 1000), int(NOW + 300), int(NOW), holds.WHY_POLICY
    )
    assert not holds.held_a_full_ttl(held, NOW + 599, 600) and holds.held_a_full_ttl(held, NOW + 600, 600)


def test_mark_says_why_and_reads_older_marks() -> None:
    """The mark carries a readable reason; marks written before `since`/`why` existed still decode."""
    text = holds.hold_fields(job("1"), NOW, 600, holds.WHY_GATE)["AdminComment"]
    assert text == f"easlurm-hold:until={int(NOW + 600)},begin=0,since={int(NOW)},why=budget-gate"
    old = HoldMark.decode(f"easlurm-hold:until={int(NOW)},begin=0")
    assert old == HoldMark(int(NOW)) and not holds.held_a_full_ttl(
        job("1", admin_comment=old.encode()), NOW, 1
    )
    assert HoldMark.decode("easlurm-hold:until=1,begin=0,why=Budget Gate") is None


def test_foreign_holds_are_never_ours() -> None:
    user_held = job("1", priority=0, reason="JobHeldUser")
    admin_held = job("2", priority=0, reason="JobHeldAdmin")
    user_begin = job("3", reason="BeginTime", eligible_s=NOW + 60)
    dependent = job("4", reason="Dependency")
    other_comment = job("5", admin_comment="easlurm1:00ff")
    for j in (user_held, admin_held, user_begin, dependent):
        assert holds.foreign_hold(j) and not holds.can_hold(j) and not holds.held_by_us(j, NOW)
    assert not holds.can_hold(other_comment)  # its AdminComment belongs to someone else
    assert holds.can_hold(job("6"))


def test_expired_hold_is_not_live() -> None:
    j = job("1", reason="BeginTime", admin_comment=HoldMark(int(NOW - 1)).encode())
    assert not holds.held_by_us(j, NOW) and holds.mark_of(j) is not None


def test_gate_adopts_jobs_deferred_by_their_own_begin_time() -> None:
    """A begin time inside the TTL may be gated, keeping it; a far one, or a user hold, may not."""
    soon = job("1", reason="BeginTime", eligible_s=NOW + 10)
    far = job("2", reason="BeginTime", eligible_s=NOW + 3600)
    held = job("3", reason="BeginTime", eligible_s=NOW + 10, priority=0)
    assert holds.user_deferred(soon, NOW, 600) and holds.can_hold(soon, NOW, 600)
    assert not holds.can_hold(soon)  # without the gate it stays the user's
    assert not holds.user_deferred(far, NOW, 600) and not holds.can_hold(far, NOW, 600)
    assert not holds.can_hold(held, NOW, 600)
    mark = HoldMark.decode(holds.hold_fields(soon, NOW, 600)["AdminComment"])
    assert mark == HoldMark(int(NOW + 600), int(NOW + 10), int(NOW), holds.WHY_POLICY)
    late = job("4", reason="BeginTime", eligible_s=NOW + 500)
    assert HoldMark.decode(holds.hold_fields(late, NOW, 300)["AdminComment"]).until_s >= NOW + 500  # type: ignore[union-attr]
