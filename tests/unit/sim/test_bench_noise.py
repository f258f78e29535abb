"""``ltm bench noise``: one JSON object, ns per draw for every sampler (numbers, not timing asserts)."""
from __future__ import annotations

import json
import math

from ltm.cli.app import main


def test_bench_noise_prints_ns_per_draw_for_every_sampler(capsys):
    assert main(["bench", "noise", "--draws", "2000", "--repeat", "1", "--cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sum(name.startswith("before:") for name in result) == 2
    assert sum(name.startswith("after:") for name in result) == 5
    assert all(math.isfinite(ns) and ns > 0 for ns in result.values())


def test_bench_noise_refuses_zero_draws(capsys):
    try:
        main(["bench", "noise", "--draws", "0"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--draws 0 was accepted")
    assert "--draws" in capsys.readouterr().err
