"""The lead-in: a device's energy between the start of the measured work and the profiler's first sample.

The SPANK agent starts after its step (Python's import, sensor discovery: 0.3-1 s, more on a loaded
node), so a window that begins at the agent's first sample under-bills the step. The lead-in is covered
from measured data where the device kept any: NVML's driver power buffer (nvmlDeviceGetSamples) holds
the samples of the last seconds, taken before the agent opened NVML. Where the buffer does not reach
back, and for sensors without history (RAPL counters, the DRAM model), the first measured interval's
power is extrapolated over the rest. A lead-in longer than LEAD_IN_MAX_S is not covered: the agent
really started late, and the record's coverage below 1 keeps saying so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from easlurm.energy.result import DeviceEnergy

#: Longest lead-in (s) covered; beyond it nothing is (the measurement started late, and says so).
LEAD_IN_MAX_S = 30.0
#: A buffered sample's power holds this long (s) after it, at least (a driver samples every 10-100 ms;
#: the buffer is read when the sensor opens, a few ms before its first sample).
HOLD_MIN_S = 0.5


@dataclass(frozen=True)
class LeadIn:
    """A device's lead-in: energy (J), the seconds covered by buffered samples and those extrapolated,
    and the highest buffered power (W; None when nothing was buffered)."""

    energy_j: float
    buffered_s: float
    extrapolated_s: float
    peak_power_w: float | None = None

    @property
    def duration_s(self) -> float:
        return self.buffered_s + self.extrapolated_s


def lead_in_s(since: float | None, until: float) -> float | None:
    """The lead-in to cover (s) from `since` to `until` (unix s); None when there is none to cover (no
    start known, the start not before the first sample) or it exceeds LEAD_IN_MAX_S."""
    if since is None:
        return None
    gap = until - since
    return gap if 0.0 < gap <= LEAD_IN_MAX_S else None


def cover_lead_in(
    history: Sequence[tuple[float, float]],
    since: float,
    until: float,
    first_power_w: float | None,
    hold_s: float = HOLD_MIN_S,
) -> LeadIn | None:
    """The energy over [since, until] (unix s) from `history`, power samples (unix s, W) the device
    kept before it was opened, and `first_power_w`, the power over the first measured interval.

    Buffered samples are integrated by the trapezoid rule, from the power interpolated at `since`
    where the buffer reaches back; the last one's power holds to `until` for at most `hold_s` (a later
    part is extrapolated). Before the oldest sample after `since` (a buffer that does not reach back),
    that sample's power is extrapolated; with no usable sample, `first_power_w`. None when nothing is
    known (no sample and no first power) or the window is empty."""
    if until <= since:
        return None
    pts = sorted((t, w) for t, w in history if t <= until)
    before = [p for p in pts if p[0] <= since]
    inside = [p for p in pts if p[0] > since]
    if before and inside:
        (t0, w0), (t1, w1) = before[-1], inside[0]
        inside.insert(0, (since, w0 + (w1 - w0) * (since - t0) / (t1 - t0)))
    elif before:
        inside = [(since, before[-1][1])]
    if not inside:
        if first_power_w is None:
            return None
        return LeadIn(first_power_w * (until - since), 0.0, until - since)
    energy = sum(0.5 * (wa + wb) * (tb - ta) for (ta, wa), (tb, wb) in itertools.pairwise(inside))
    t_last, w_last = inside[-1]
    held_until = min(until, t_last + hold_s)
    energy += w_last * (held_until - t_last)
    head = inside[0][0] - since  # the buffer does not reach back this far
    tail = until - held_until  # nor forward (an empty buffer lately)
    energy += inside[0][1] * head + (first_power_w if first_power_w is not None else w_last) * tail
    return LeadIn(energy, held_until - inside[0][0], head + tail, max(w for _, w in inside))


def extend(dev: DeviceEnergy, lead: LeadIn) -> None:
    """Add the lead-in to a device's energy and window: energy, duration, mean (and peak) power."""
    if dev.energy_j is None:
        return
    dev.energy_j += lead.energy_j
    dev.duration_s = (dev.duration_s or 0.0) + lead.duration_s
    dev.mean_power_w = dev.energy_j / dev.duration_s if dev.duration_s > 0 else dev.mean_power_w
    if lead.peak_power_w is not None and (dev.peak_power_w is None or lead.peak_power_w > dev.peak_power_w):
        dev.peak_power_w = lead.peak_power_w
    dev.lead_in_buffered_s = round(lead.buffered_s, 3)
    dev.lead_in_extrapolated_s = round(lead.extrapolated_s, 3)
