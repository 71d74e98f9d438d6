"""The summary of one weights version's evaluation episodes: mean return with a 95 %
confidence interval (Student's t, two-sided), mean length. Pure: no numpy, no scipy.

>>> s = summarize(7, [(10.0, 10), (20.0, 20), (30.0, 30)])
>>> s.return_mean, round(s.return_half_width, 3), s.length_mean
(20.0, 24.841, 20.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

# Two-sided 95 % critical values of Student's t by degrees of freedom (t_{0.975, df}).
_T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
_Z_975 = 1.959964


def t_critical(df: int) -> float:
    """t_{0.975} for ``df`` degrees of freedom: tabled up to 30, then interpolated in 1/df
    towards the normal's 1.96 (within 0.001 of the exact value)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in _T_975:
        return _T_975[df]
    known = sorted(_T_975)
    upper = next((k for k in known if k > df), None)
    lower = max(k for k in known if k < df)
    hi_df, hi_t = (upper, _T_975[upper]) if upper is not None else (math.inf, _Z_975)
    weight = (1 / lower - 1 / df) / (1 / lower - (0 if hi_df == math.inf else 1 / hi_df))
    return _T_975[lower] + weight * (hi_t - _T_975[lower])


@dataclass(frozen=True)
class VersionSummary:
    """What one version's evaluation says; ``return_half_width`` is NaN for a single episode."""

    version: int
    episodes: int
    return_mean: float
    return_half_width: float
    length_mean: float

    @property
    def return_low(self) -> float:
        return self.return_mean - self.return_half_width

    @property
    def return_high(self) -> float:
        return self.return_mean + self.return_half_width

    def to_json(self) -> dict[str, Any]:
        """JSON-ready; a NaN half-width (one episode) is null."""
        data = asdict(self)
        if math.isnan(self.return_half_width):
            data["return_half_width"] = None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VersionSummary:
        width = data.get("return_half_width")
        return cls(int(data["version"]), int(data["episodes"]), float(data["return_mean"]),
                   math.nan if width is None else float(width), float(data["length_mean"]))  # fmt: skip

    def describe(self) -> str:
        """``version 7: return 181.2 ± 12.5 (95 % CI, 20 episodes), length 181.2``."""
        spread = "" if math.isnan(self.return_half_width) else f" ± {self.return_half_width:.4g}"
        unit = "episode" if self.episodes == 1 else "episodes"
        return (f"version {self.version}: return {self.return_mean:.4g}{spread} (95 % CI, {self.episodes} {unit}), "
                f"length {self.length_mean:.4g}")  # fmt: skip


def summarize(version: int, episodes: Iterable[tuple[float, int]]) -> VersionSummary:
    """``episodes``: (return, length) of each episode of ``version``; at least one."""
    played = list(episodes)
    if not played:
        raise ValueError("no episodes to summarize")
    n = len(played)
    returns = [float(r) for r, _ in played]
    mean = math.fsum(returns) / n
    if n == 1:
        half = math.nan
    else:
        variance = math.fsum((r - mean) ** 2 for r in returns) / (n - 1)
        half = t_critical(n - 1) * math.sqrt(variance / n)
    return VersionSummary(version, n, mean, half, math.fsum(length for _, length in played) / n)
