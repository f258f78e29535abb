"""``ltm bench``: benchmarks that print JSON (the role's code: ``ltm/sim/tools/bench.py``, ``ltm/sim/tools/bench_e2e.py``,
``ltm/sim/tools/bench_noise.py``)."""
from __future__ import annotations

import argparse

from ltm.cli.app import lazy
from ltm.cli.options import JSON_ANYWAY, output, print_json
from ltm.errors import CommandError
from ltm.jobconfig import add_options, parse_counts, positive_int


def configure(p: argparse.ArgumentParser) -> None:
    """``ltm bench`` and its subcommands sketch, paper, noise, source, e2e and flp."""
    bsub = p.add_subparsers(dest="bench", required=True)
    sk = bsub.add_parser("sketch", help="one server's result-share computation and the bytes it receives")
    sk.add_argument("--n", type=positive_int, default=1_000_000, help="clients (default 1000000)")
    sk.add_argument("--d", type=positive_int, default=10, help="entries per client vector (default 10)")
    sk.add_argument("--runs", type=positive_int, default=5, help="timed repetitions (default 5)")
    sk.add_argument("--kind", choices=["sparse", "dense"], default="sparse", help="sketch kind (default sparse)")
    add_options(sk, "sketch", only=("m", "s", "k", "share_mode"), defaults={"m": 100},
                helps={"m": "sketch rows (default {default})"})
    output(sk, JSON_ANYWAY)
    sk.set_defaults(func=run_sketch)
    grid = bsub.add_parser("paper", help="every cell of Burkhardt et al. Tables 3-5 vs MP-SPDZ (JSON)")
    grid.add_argument("--runs", type=positive_int, default=5, help="timed repetitions per cell (default 5)")
    output(grid, JSON_ANYWAY)
    grid.set_defaults(func=run_paper)
    noise = bsub.add_parser("noise", help="ns per draw of the exact noise samplers and of the float ones they replaced")
    noise.add_argument("--draws", type=positive_int, default=1_000_000, help="draws per timing (default 1000000)")
    noise.add_argument("--repeat", type=positive_int, default=3, help="timings per sampler; the best counts (default 3)")
    noise.add_argument("--cpu", action="store_true", help="time this process's CPU, not the wall clock (steadier "
                                                          "on a shared machine)")
    output(noise, JSON_ANYWAY)
    noise.set_defaults(func=run_noise)
    src = bsub.add_parser("source", help="a party's aggregated gram upload from a Parquet file against a bare pyarrow "
                                          "scan + numpy XᵀX: both times and each pass's peak RSS (JSON)")
    src.add_argument("--n", type=float, default=1e7, help="rows (default 1e7)")
    src.add_argument("--d", type=positive_int, default=9, help="features; the file has d + 1 columns (default 9)")
    src.add_argument("--path", help="use this Parquet file (written there first if missing; kept with --keep)")
    src.add_argument("--keep", action="store_true", help="keep the written file")
    output(src, JSON_ANYWAY)
    src.set_defaults(func=run_source)
    _e2e(bsub.add_parser("e2e", help="networked end-to-end run on loopback: wall time, phases, peak RSS, disk"))
    flp = bsub.add_parser("flp", help="validity proofs (FLP): prove / query / decide CPU and bytes per client")
    flp.add_argument("--n", type=positive_int, default=100_000, help="clients (default 100000)")
    flp.add_argument("--width", type=positive_int, default=11, help="entries per client vector (default 11: D = 10 "
                                                                   "features and the label)")
    flp.add_argument("--frac-bits", type=positive_int, default=20, help="grid fraction bits (default 20)")
    flp.add_argument("--k", type=positive_int, default=2, help="servers (default 2)")
    flp.add_argument("--chunk", type=positive_int, default=8192, help="clients per vectorised chunk (default 8192)")
    output(flp, JSON_ANYWAY)
    flp.set_defaults(func=run_flp)


def _e2e(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=parse_counts, default=[1_000_000],
                   help="clients: 1000000, 1e8, or a series 1e6,1e7,1e8 (default 1e6)")
    p.add_argument("--d", type=int, default=10, help="features per client (default 10)")
    add_options(p, "sketch", only=("m", "s", "k"), helps={"k": "server processes (default {default})"})
    p.add_argument("--release", "--kind", dest="kind", choices=["sparse", "dense", "gram", "auto"], default="auto",
                   help="release kind (default auto: the planner's default job; gram: clients upload D(D+1)/2 "
                        "lifted values, the map is the sum; m, s unused)")
    p.add_argument("--upload-mode", choices=["auto", "per-client", "aggregate", "both"], default="auto",
                   help="how parties upload (default auto: the job's default rule, aggregate when every party holds "
                        "several clients); both: run per-client and aggregate side by side")
    add_options(p, "sketch", only=("partition",))
    p.add_argument("--parties", type=int,
                   help="party processes (default: 4 up to 10^7 clients, then n / 6.25e6: 16 at 10^8)")
    add_options(p, "privacy", only=("corrupt_parties", "colluding_servers"), helps={
        "corrupt_parties": "corrupt parties the job tolerates (default: the job default, 1; 0 allows --parties 1, "
                           "e.g. to measure one party holding every client — the bench is a seeded reproduction)"})
    p.add_argument("--verified-clipping", choices=["off", "on", "both"], default=None,
                   help="the replicated release (--partition columns --colluding-servers 1) with every party's "
                        "clipping proven on its shares (issue #30); both (its default there): the unverified and the "
                        "verified job at each n, and the proof's cost (bytes per party, party and server CPU)")
    p.add_argument("--max-batch-bytes", type=int,
                   help="the servers' largest upload (default theirs, 512 MiB; a verified job's witness part is "
                        "8·T_b bytes per client, ~784 MB at 10^6 clients of 3 columns)")
    p.add_argument("--max-running-parties", type=int,
                   help="party processes running at once (default 2 × cores: each imports numpy, grpc and the "
                        "crypto stack, ~100 MB and a second of CPU before it starts work, so 64 at once on 2 cores "
                        "only thrash; the next starts as one exits; 0: all at once)")
    p.add_argument("--batch-clients", type=int, help="clients per upload batch (default: the party's)")
    add_options(p, "run", defaults={"seed": 1}, helps={
        "seed": "seeded mode (benchmarks need no privacy); also the data seed",
        "json": "(the output is always one JSON object)"})
    p.add_argument("--deadline", type=float,
                   help="seconds the analyst waits for the parties (default 600 + 20 µs per client)")
    p.add_argument("--workdir", help="keep certificates, stores and logs here (default: a temp dir, removed)")
    p.add_argument("--plot", help="write a PNG of wall time and peak RSS against n (needs matplotlib)")
    p.add_argument("--from-json", nargs="+", metavar="JSON",
                   help="with --plot: plot these saved outputs (single runs or series) instead of running")
    p.set_defaults(func=lazy("ltm.sim.tools.bench_e2e:run"))


def run_sketch(args: argparse.Namespace) -> int:
    """``ltm bench sketch``: time one server's result-share computation; prints JSON."""
    from ltm.sim.tools.bench import SketchBenchConfig, bench_sketch

    if args.k < 2:
        raise CommandError("--k must be ≥ 2")
    cfg = SketchBenchConfig(n=args.n, d=args.d, m=args.m, s=args.s, k=args.k, runs=args.runs,
                            share_mode=args.share_mode, kind=args.kind)
    print_json(bench_sketch(cfg))
    return 0


def run_paper(args: argparse.Namespace) -> int:
    """``ltm bench paper``: every cell of Burkhardt et al.'s Tables 3–5; prints JSON."""
    from ltm.sim.tools.bench import bench_paper_grid

    print_json(bench_paper_grid(runs=args.runs))
    return 0


def run_noise(args: argparse.Namespace) -> int:
    """``ltm bench noise``: ns per draw of each noise sampler; prints JSON."""
    from ltm.sim.tools.bench_noise import bench

    print_json(bench(args.draws, args.repeat, args.cpu))
    return 0


def run_source(args: argparse.Namespace) -> int:
    """``ltm bench source``: the party's streamed Parquet aggregate against a bare pass; prints JSON."""
    from ltm.sim.tools.bench_source import bench

    print_json(bench(int(args.n), args.d, args.path, args.keep))
    return 0


def run_flp(args: argparse.Namespace) -> int:
    """``ltm bench flp``: the validity proof's CPU and bytes per client; prints JSON."""
    from ltm.sim.tools.bench_flp import FlpBenchConfig, bench_flp

    if args.k < 2:
        raise CommandError("--k must be ≥ 2 (one leader and at least one helper)")
    print_json(bench_flp(FlpBenchConfig(n=args.n, width=args.width, frac_bits=args.frac_bits, k=args.k,
                                        chunk=args.chunk)))
    return 0
