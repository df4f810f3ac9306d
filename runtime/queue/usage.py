"""Usage per klass as a day's statistics hold it (lua/lib/stats.lua, Stats.usage):
for each klass, histograms of its attempts' CPU seconds and peak RSS, and their
sums. Read by the metrics (runtime_job_cpu_seconds, runtime_job_max_rss_bytes)
and by `runtime stats` (the top klasses). Pure: fields in, values out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CPU_BOUNDS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 600.0, 3600.0)
RSS_BOUNDS_MB = (32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
MB = 1024 * 1024  # a "MB" of max_rss_mb is a MiB (the kernel counts KiB)


@dataclass
class KlassUsage:
    """One klass's attempts of a day: counts per bucket (upper bounds as above,
    then one for above the last), and the sums (CPU s, peak MB)."""

    klass: str
    cpu: list[int] = field(default_factory=lambda: [0] * (len(CPU_BOUNDS_S) + 1))
    rss: list[int] = field(default_factory=lambda: [0] * (len(RSS_BOUNDS_MB) + 1))
    cpu_s: float = 0.0
    rss_mb: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.cpu)

    @property
    def mean_cpu_s(self) -> float:
        return self.cpu_s / self.count if self.count else 0.0

    @property
    def mean_rss_mb(self) -> float:
        return self.rss_mb / self.count if self.count else 0.0

    @property
    def top_rss_mb(self) -> float | None:
        """The upper bound of the highest bucket hit (None: above the last bound)."""
        hit = max((i for i, n in enumerate(self.rss) if n), default=0)
        return RSS_BOUNDS_MB[hit] if hit < len(RSS_BOUNDS_MB) else None


def _index(bounds: tuple[float, ...], label: str) -> int | None:
    if label == "inf":
        return len(bounds)
    try:
        value = float(label)
    except ValueError:
        return None
    return next((i for i, b in enumerate(bounds) if abs(b - value) < 1e-9), None)


def by_klass(fields: Mapping[str, object]) -> dict[str, KlassUsage]:
    """The usage of each klass in a stats hash's fields (others are ignored)."""
    out: dict[str, KlassUsage] = {}
    for name, value in fields.items():
        if not name.startswith("u:"):
            continue
        what, _, rest = name[2:].partition(":")
        label, _, klass = rest.partition(":")
        if not klass or what not in ("cpu", "rss"):
            continue
        usage = out.get(klass) or out.setdefault(klass, KlassUsage(klass))
        n = float(str(value))
        if label in ("ms", "mb"):
            if what == "cpu":
                usage.cpu_s += n / 1000
            else:
                usage.rss_mb += n
            continue
        index = _index(CPU_BOUNDS_S if what == "cpu" else RSS_BOUNDS_MB, label)
        if index is not None:
            (usage.cpu if what == "cpu" else usage.rss)[index] += int(n)
    return out


Series = list[tuple[tuple[str, ...], tuple[list[tuple[str, float]], float]]]


def histograms(queues: list[tuple[str, Mapping[str, object]]]) -> tuple[Series, Series]:
    """Prometheus histogram series of CPU seconds and of peak RSS bytes, each by
    (queue, klass): ((queue, klass), (cumulative buckets (le, count), sum)), from
    each queue's stats fields."""
    cpu_le = [repr(b) for b in CPU_BOUNDS_S] + ["+Inf"]
    rss_le = [repr(float(b * MB)) for b in RSS_BOUNDS_MB] + ["+Inf"]
    cpu: Series = []
    rss: Series = []
    for queue, fields in queues:
        for klass, usage in sorted(by_klass(fields).items()):
            if usage.count:
                cpu.append(((queue, klass), (_cumulative(cpu_le, usage.cpu), usage.cpu_s)))
                rss.append(((queue, klass), (_cumulative(rss_le, usage.rss), usage.rss_mb * MB)))
    return cpu, rss


def _cumulative(le: list[str], counts: list[int]) -> list[tuple[str, float]]:
    total, out = 0, []
    for bound, n in zip(le, counts, strict=True):
        total += n
        out.append((bound, float(total)))
    return out
