"""The aggregated bench's upload progress line states its byte counts in units that fit them, never
"0.00 GB of ≈ 0.00 GB" for a small run (ltm/sim/tools/bench_e2e.py: upload_progress)."""
from __future__ import annotations

import pytest

from ltm.sim.tools.bench_e2e import upload_progress


@pytest.mark.parametrize("received, expected, shown", [
    (0, 4_480, "0 B of ≈ 4.5 kB (0%)"),
    (2_240, 4_480, "2.2 kB of ≈ 4.5 kB (50%)"),
    (8_960_000, 17_920_000, "8.96 MB of ≈ 17.92 MB (50%)"),
    (1_250_000_000, 2_500_000_000, "1.25 GB of ≈ 2.50 GB (50%)"),
])
def test_the_progress_line_uses_a_unit_that_fits(received, expected, shown):
    line = upload_progress(2, 4, 4, received, expected)
    assert line == f"upload: 2 parties running, 4/4 started; servers received {shown}"
    assert "0.00 GB" not in line
