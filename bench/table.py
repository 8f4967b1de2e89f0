"""The table of one `make bench` run: each throughput timed between two samples of the raw
Ed25519 verify rate and shown as a ratio to their mean, with its CPU per event; and the
ceiling a target puts on that CPU on this machine's cores."""

from __future__ import annotations

import os
from collections.abc import Callable

from verify_rate import raw_verify_rate, timed

from pithlog.parallel import usable_cores


class Table:
    """The figures of one run. Each throughput is timed between two short measurements of
    the raw verify rate and divided by their mean: the machines are shared and their speed
    drifts within a run (seen: the verify rate moving by 2x between two minutes), so a
    ratio to a rate measured minutes earlier would mostly measure the drift."""

    def __init__(self, repeat: int = 1) -> None:
        self.rows: list[tuple[str, str, str]] = []
        self.verify_samples: list[float] = []
        self.repeat = repeat

    def verify_rate(self) -> float:
        rate = raw_verify_rate(VERIFY_SAMPLE)
        self.verify_samples.append(rate)
        return rate

    def rate(
        self,
        name: str,
        events: int,
        func: Callable[[], object],
        setup: Callable[[], object] | None = None,
    ) -> float:
        """Time ``func`` (``events`` events) ``repeat`` times, ``setup`` before each; record
        the timing whose ratio to its local verify rate is the median (the upper one of the
        two middle ones for an even count), with all the ratios when there are several;
        return that ratio."""
        timings: list[tuple[float, float, float, float]] = []  # (ratio, rate, verifies, cores)
        for _ in range(self.repeat):
            if setup is not None:
                setup()
            before = self.verify_rate()
            cpu_before = cpu_seconds()
            seconds = timed(func)
            cpu = cpu_seconds() - cpu_before
            local = (before + self.verify_rate()) / 2
            timings.append((events / seconds / local, events / seconds,
                            cpu / events * local, cpu / seconds))  # fmt: skip
            print(f"  {name}: {events / seconds:,.0f} events/s ({timings[-1][0]:.2f}x verify, "
                  f"verify {local:,.0f}/s; CPU {timings[-1][2]:.2f} verifies per event, "
                  f"{timings[-1][3]:.2f} cores busy)", flush=True)  # fmt: skip
        ratio, rate, verifies, cores = sorted(timings)[len(timings) // 2]
        shown = f"{rate:,.0f} events/s"
        if len(timings) > 1:
            shown += f" (median of {len(timings)}: {', '.join(f'{t[0]:.2f}' for t in timings)})"
        self.rows.append((name, shown, f"{ratio:.2f}"))
        self.rows.append(("  its CPU per event, in raw verifies (cores busy)",
                          f"{verifies:.2f} ({cores:.2f} of {CORES})", ""))  # fmt: skip
        return ratio

    def figure(self, name: str, value: str, ratio: str = "") -> None:
        self.rows.append((name, value, ratio))
        print(f"  {name}: {value} {ratio}", flush=True)

    def markdown(self) -> str:
        samples = sorted(self.verify_samples)
        median = samples[len(samples) // 2]
        head = ("raw Ed25519 verify (cryptography, 1 core), median of the run",
                f"{median:,.0f} /s (from {samples[0]:,.0f} to {samples[-1]:,.0f} in "
                f"{len(samples)} samples)", "1.00")  # fmt: skip
        lines = ["| figure | value | ratio to raw verify |", "|---|---|---|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in [head, *self.rows]]
        return "\n".join(lines)


VERIFY_SAMPLE = 2000
"""Verifications per sample of the raw rate (about a quarter of a second)."""


CORES = usable_cores()  # the cores the commands size their pools by (docs/cli.md)


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (every helper of a
    command has ended when the command returns): what a command costs on all cores."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def ceiling(table: Table, target: str, ratio: float) -> None:
    """The CPU per event that a throughput of ``ratio`` x verify allows on this machine's
    cores, kept busy all the time: a target is out of reach while the CPU per event
    measured for it is above this."""
    table.figure(f"  {target} needs at most, on {CORES} cores",
                 f"{CORES / ratio:.2f} raw verifies of CPU per event")  # fmt: skip
