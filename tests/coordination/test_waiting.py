"""How `leasehold run` words the units that wait (`WaitingUnits.describe`): per status, the
earliest time, how far off it is, and where to see them."""

from __future__ import annotations

from resources.coordination.items import iso_utc
from resources.coordination.waiting import WAITING_READ, WaitingUnits

NOW = 1_800_000_000_000
MIN = 60_000


def test_one_unit_of_each_status() -> None:
    waiting = WaitingUnits(
        NOW, closed=1, reopens_ms=NOW + 4 * MIN, held=1, held_until_ms=NOW + 40_000, unassigned=1
    )
    assert waiting.count == 3
    assert waiting.describe() == (
        f"1 unit CLOSED after a failed read reopens at {iso_utc(NOW + 4 * MIN)} (in 4 min); "
        f"1 unit held by another owner's lease until {iso_utc(NOW + 40_000)} (in 40 s); "
        "1 unit UNASSIGNED that no run took yet; leasehold status lists them"
    )


def test_many_units_name_the_earliest_and_a_time_gone_by_is_said_passed() -> None:
    waiting = WaitingUnits(
        NOW, closed=3, reopens_ms=NOW + 3 * 60 * MIN, held=2, held_until_ms=NOW - MIN
    )
    assert waiting.describe() == (
        "3 units CLOSED after failed reads, the first reopens at "
        f"{iso_utc(NOW + 3 * 60 * MIN)} (in 3 h); 2 units held by other owners' leases, the "
        f"first until {iso_utc(NOW - MIN)} (passed); leasehold status lists them"
    )


def test_a_capped_read_says_so() -> None:
    waiting = WaitingUnits(NOW, unassigned=WAITING_READ, capped=True)
    assert waiting.describe() == (
        f"{WAITING_READ:,} units UNASSIGNED that no run took yet (the first {WAITING_READ:,} "
        "read); leasehold status lists them"
    )
    assert WaitingUnits(NOW).count == 0
