"""ltm/dp/sensitivity.py: every bound against a brute-force maximum over neighbouring clipped
vectors run through the real maps (sketch, gram lift, histograms), the reproduction formulas
against an independent evaluation (mpmath), the argument checks, and the source tree against a
sensitivity formula written outside ``ltm/dp/``."""
from __future__ import annotations

import ast
import enum
import itertools
import math
import re
from pathlib import Path

import mpmath
import numpy as np
import pytest

from ltm import histograms as h
from ltm.dp import defaults
from ltm.dp import sensitivity as sens
from ltm.lifts import get_lift
from ltm.sketch import Sketch

REPO = Path(__file__).resolve().parents[4]
SEED = bytes(range(32))


# ------------------------------------------------------------------------------------ grids
def l2_ball_grid(d: int, radius: float, directions: int = 16) -> np.ndarray:
    """Points of the ℓ2 ball in R^d: the axes ±r·e_i, and for d = 2 a polar grid whose angles
    are multiples of 2π/directions (so antipodal and orthogonal boundary pairs are present)."""
    pts = [np.zeros(d)]
    for r in (radius, radius / 2.0, radius / 3.0):
        for i in range(d):
            for sign in (1.0, -1.0):
                e = np.zeros(d)
                e[i] = sign * r
                pts.append(e)
        if d == 2:
            for k in range(directions):
                t = 2.0 * math.pi * k / directions
                pts.append(r * np.array([math.cos(t), math.sin(t)]))
        else:
            rng = np.random.default_rng(7)
            g = rng.standard_normal((24, d))
            pts.extend(r * g / np.linalg.norm(g, axis=1, keepdims=True))
    return np.array(pts)


def l1_ball_grid(d: int, radius: float, steps: int = 8) -> np.ndarray:
    """Points of the ℓ1 ball in R^d: on every edge between two signed axis points of the
    boundary, ``steps + 1`` evenly spaced points, and their halves."""
    axes = []
    for i in range(d):
        for sign in (1.0, -1.0):
            e = np.zeros(d)
            e[i] = sign * radius
            axes.append(e)
    pts = [np.zeros(d)]
    for a, b in itertools.combinations(axes, 2):
        for k in range(steps + 1):
            p = a + (b - a) * k / steps
            pts.extend([p, p / 2.0])
    return np.array(pts)


def max_pair_distance(outputs: np.ndarray, order: int) -> float:
    """max over pairs of the ℓ_order norm of the difference of two flattened outputs."""
    flat = outputs.reshape(len(outputs), -1)
    diff = flat[:, None, :] - flat[None, :, :]
    return float(np.linalg.norm(diff, ord=order, axis=2).max())


def sketch_outputs(kind: str, m: int, s: int, grid: np.ndarray) -> np.ndarray:
    """S·Z for every dataset Z that differs from a fixed one in client 2's row (= a grid point),
    with S the real seeded sketch (unscaled, as released)."""
    n, d = 5, grid.shape[1]
    S = Sketch(kind, m, n, s, SEED).to_dense().astype(np.float64)
    base = np.random.default_rng(3).standard_normal((n, d)) * 0.1
    out = []
    for g in grid:
        Z = base.copy()
        Z[2] = g
        out.append(S @ Z)
    return np.array(out)


# ------------------------------------------------------------------------------------ brute force
@pytest.mark.parametrize("kind,m,s", [("sparse", 6, 1), ("sparse", 6, 2), ("sparse", 7, 3), ("dense", 4, 4),
                                      ("sum", 1, 1)])
@pytest.mark.parametrize("clip", [1.0, 0.37])
def test_sketch_bounds_are_the_brute_force_maximum(kind, m, s, clip):
    pieces = Sketch(kind, m, 5, s, SEED).pieces
    got_l2 = max_pair_distance(sketch_outputs(kind, m, s, l2_ball_grid(2, clip)), 2)
    assert sens.sketch_l2(clip, pieces) == pytest.approx(got_l2, rel=1e-12)
    assert sens.sketch_sensitivity("gaussian", clip, pieces) == sens.sketch_l2(clip, pieces)
    got_l1 = max_pair_distance(sketch_outputs(kind, m, s, l1_ball_grid(2, clip)), 1)
    assert sens.sketch_l1(clip, pieces) == pytest.approx(got_l1, rel=1e-12)
    assert sens.sketch_sensitivity("laplace", clip, pieces) == sens.sketch_l1(clip, pieces)


def gram_spec(d: int, clip: float, frac_bits: int = 0, mechanism: str = "gaussian"):
    """The fields of a job spec the gram lift reads (f = 0: a continuous job, no rounding)."""
    from types import SimpleNamespace
    return SimpleNamespace(frac_bits=frac_bits, clip_bound=clip, width=d, privacy=SimpleNamespace(mechanism=mechanism))


def weighted(lifted: np.ndarray) -> np.ndarray:
    """The gram lift's entries in the norm its Gaussian noise weighs: off-diagonals × √2
    (variance factor ½, ltm.lifts.gram_noise_factors), i.e. the Frobenius norm of ẑẑᵀ."""
    d = int(round((math.sqrt(8 * lifted.shape[1] + 1) - 1) / 2))
    i, j = np.triu_indices(d)
    return lifted * np.where(i == j, 1.0, math.sqrt(2.0))


@pytest.mark.parametrize("clip", [1.0, 0.6, 2.5])
def test_gram_bounds_are_the_brute_force_maximum_of_the_lift(clip):
    apply = get_lift("gram").apply
    got_l2 = max_pair_distance(weighted(apply(gram_spec(2, clip), l2_ball_grid(2, clip))), 2)
    assert sens.gram_l2(clip) == pytest.approx(got_l2, rel=1e-12)
    assert sens.gram_sensitivity("gaussian", clip) == sens.gram_l2(clip)
    got_l1 = max_pair_distance(apply(gram_spec(3, clip), l1_ball_grid(3, clip)), 1)  # unweighted triangle
    assert sens.gram_l1(clip) == pytest.approx(got_l1, rel=1e-12)
    assert sens.gram_sensitivity("laplace", clip) == sens.gram_l1(clip)
    # in three dimensions random points stay below the bound, and orthogonal boundary points reach it
    pts = weighted(apply(gram_spec(3, clip), l2_ball_grid(3, clip)))
    assert max_pair_distance(pts, 2) <= sens.gram_l2(clip) * (1 + 1e-12)


@pytest.mark.parametrize("clip", [1.0, 0.6, 2.5])
@pytest.mark.parametrize("frac_bits", [8, 10])
def test_rounded_gram_bounds_hold_for_the_rounded_lift(clip, frac_bits):
    """Round to 2^-g, then lift: the widened bounds √2·(C + √D·2^-g/2)² (Frobenius) and
    2·(C + D·2^-g/2)² (ℓ1 of the unweighted triangle) hold over clipped points on and off the grid,
    checked against an mpmath evaluation of the formulas."""
    from ltm.dp.grid import gram_input_frac_bits
    apply = get_lift("gram").apply
    for d in (2, 3):
        g = gram_input_frac_bits(frac_bits, clip, d)
        assert g == frac_bits // 2
        half = mpmath.mpf(2) ** (-g) / 2
        l2 = float(mpmath.sqrt(2) * (mpmath.mpf(clip) + mpmath.sqrt(d) * half) ** 2)
        l1 = float(2 * (mpmath.mpf(clip) + d * half) ** 2)
        assert sens.rounded_gram_l2(clip, d, g) == pytest.approx(l2, rel=1e-15)
        assert sens.rounded_gram_l1(clip, d, g) == pytest.approx(l1, rel=1e-15)
        assert sens.rounded_gram_sensitivity("gaussian", clip, d, g) == sens.rounded_gram_l2(clip, d, g)
        assert sens.rounded_gram_sensitivity("laplace", clip, d, g) == sens.rounded_gram_l1(clip, d, g)
        # off-grid points: the grids scaled by an irrational factor, clipped to the ball
        pts2 = l2_ball_grid(d, clip) * (1 - 1 / math.pi**8)
        pts1 = l1_ball_grid(d, clip) * (1 - 1 / math.pi**8)
        spec = gram_spec(d, clip, frac_bits)
        assert max_pair_distance(weighted(apply(spec, pts2)), 2) <= l2
        assert max_pair_distance(apply(gram_spec(d, clip, frac_bits, "laplace"), pts1), 1) <= l1
        assert max_pair_distance(weighted(apply(spec, pts2)), 2) > sens.gram_l2(clip) * 0.99  # not vacuous


@pytest.mark.parametrize("clip", [1.0, 0.6])
def test_the_triangle_bound_is_the_sum_of_two_squared_norms(clip):
    grid = l2_ball_grid(2, clip)
    norms = np.linalg.norm(grid, axis=1) ** 2
    assert sens.gram_l2_triangle(clip) == pytest.approx(float(np.add.outer(norms, norms).max()), rel=1e-12)
    assert sens.gram_l2_triangle(clip) > sens.gram_l2(clip)


@pytest.mark.parametrize("kind", h.HISTOGRAM_KINDS)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_histogram_bounds_are_the_brute_force_maximum(kind, d):
    edges = h.edges_of(kind)
    values = np.concatenate([[edges[0] - 1.0], (edges[:-1] + edges[1:]) / 2.0, [edges[-1] + 1.0]])
    rows = np.array(list(itertools.product(values[:: 2 * d - 1], repeat=d)))  # every bin once for d = 1
    out = h.one_hot(kind, rows)
    assert sens.histogram_l2(d) == pytest.approx(max_pair_distance(out, 2), rel=1e-12)
    assert sens.histogram_l1(d) == pytest.approx(max_pair_distance(out, 1), rel=1e-12)
    assert sens.histogram_sensitivity("gaussian", d) == sens.histogram_l2(d)
    assert sens.histogram_sensitivity("laplace", d) == sens.histogram_l1(d)


@pytest.mark.parametrize("radius", [1.0, 0.4, 3.0])
def test_vector_sensitivity_is_the_diameter_of_the_ball(radius):
    assert sens.vector_sensitivity(radius) == pytest.approx(max_pair_distance(l2_ball_grid(2, radius), 2), rel=1e-12)
    assert sens.vector_sensitivity(radius) == pytest.approx(max_pair_distance(l1_ball_grid(2, radius), 1), rel=1e-12)


@pytest.mark.parametrize("rx,ry", [(1.0, 1.0), (2.0, 0.5), (0.3, 1.7)])
def test_cross_moment_bound_is_the_brute_force_maximum(rx, ry):
    feats = l2_ball_grid(2, rx)
    labels = np.linspace(-ry, ry, 9)
    prods = np.array([a * y for a in feats for y in labels])  # a·y, one client's term of Aᵀy
    assert sens.cross_moment_l2(rx, ry) == pytest.approx(max_pair_distance(prods, 2), rel=1e-12)


@pytest.mark.parametrize("clip", [1.0, 0.5, 2.0])
def test_joint_cross_moment_bound_is_the_brute_force_maximum(clip):
    rows = l2_ball_grid(3, clip)  # (a₁, a₂, b) with ‖(a, b)‖ ≤ C
    r = clip / math.sqrt(2.0)  # the maximiser ‖a‖ = |b| = C/√2 ...
    rows = np.vstack([rows, [[r, 0.0, r], [r, 0.0, -r], [0.0, r, r]]])
    prods = rows[:, :2] * rows[:, 2:3]  # a·b
    assert sens.joint_cross_moment_l2(clip) == pytest.approx(max_pair_distance(prods, 2), rel=1e-12)


@pytest.mark.parametrize("clip", [1.0, 0.5, 2.0])
def test_min_eigenvalue_moves_by_at_most_c_squared(clip):
    rng = np.random.default_rng(11)
    base = rng.standard_normal((4, 2)) * clip / 3.0
    shifts = []
    for g in l2_ball_grid(2, clip):
        for i in range(base.shape[0]):
            A = base.copy()
            A[i] = g
            shifts.append(np.linalg.eigvalsh(A.T @ A)[0])
    spread = max(shifts) - min(shifts)  # ≥ any replace-one change among these datasets
    changes = [abs(a - b) for a, b in itertools.combinations(shifts, 2)]
    assert max(changes) == pytest.approx(spread)
    single = [np.linalg.eigvalsh(np.outer(g, g))[0] for g in (np.zeros(1), np.array([clip]))]  # d = 1: 0 → C²
    assert sens.min_eigenvalue_sensitivity(clip) == pytest.approx(single[1] - single[0], rel=1e-12)
    # the bound also holds when one row of a larger dataset is replaced
    for i in range(base.shape[0]):
        for g, g2 in itertools.product(l2_ball_grid(2, clip)[::3], repeat=2):
            A, B = base.copy(), base.copy()
            A[i], B[i] = g, g2
            assert abs(np.linalg.eigvalsh(A.T @ A)[0] - np.linalg.eigvalsh(B.T @ B)[0]) <= (
                sens.min_eigenvalue_sensitivity(clip) * (1 + 1e-12))


# ------------------------------------------------------------------------------------ reproduction formulas
@pytest.mark.parametrize("m,T,lr,delta", [(1000, 1000, 1e-3, 1e-5), (50, 10_000, 0.01, 1e-3),
                                         (10, 3, 0.5, 0.2), (7, 2000, 2e-4, 1e-6)])
def test_sgd_sensitivity_matches_mpmath(m, T, lr, delta):
    mpmath.mp.dps = 40
    x = mpmath.mpf(3) * m * mpmath.log(mpmath.mpf(2) * m / mpmath.mpf(delta)) / T
    c_t = mpmath.sqrt(x) if x < 1 else x
    eta = mpmath.mpf(lr)
    expect = 4 * mpmath.e * eta**2 * (1 + mpmath.sqrt(eta * T)) ** 2 * T * (1 + c_t) * (1 + T * (1 + c_t) / m) / m
    assert sens.sgd_sensitivity(m, T, lr, delta) == pytest.approx(float(expect), rel=1e-12)


@pytest.mark.parametrize("c,N", [(4.0, 100), (1.0, 1), (2.5, 4096)])
def test_reference_code_sensitivity_matches_mpmath(c, N):
    assert sens.reference_code_rf_sensitivity(c, N) == pytest.approx(float(mpmath.mpf(c) / mpmath.sqrt(N)), rel=1e-15)


# ------------------------------------------------------------------------------------ arguments
class Mech(enum.Enum):
    GAUSSIAN = "gaussian"
    LAPLACE = "laplace"


def test_enum_members_select_the_same_norm_as_their_names():
    assert sens.sketch_sensitivity(Mech.GAUSSIAN, 1.5, 4) == sens.sketch_l2(1.5, 4) == 6.0
    assert sens.sketch_sensitivity(Mech.LAPLACE, 1.5, 4) == sens.sketch_l1(1.5, 4) == 12.0
    assert sens.gram_sensitivity(Mech.LAPLACE, 3.0) == 18.0
    assert sens.histogram_sensitivity(Mech.LAPLACE, 5) == 10.0


@pytest.mark.parametrize("mechanism", ["Gaussian", "l2", "", None, 2])
def test_unknown_mechanism_is_refused_by_name(mechanism):
    for call in (lambda: sens.sketch_sensitivity(mechanism, 1.0, 1), lambda: sens.gram_sensitivity(mechanism, 1.0),
                 lambda: sens.histogram_sensitivity(mechanism, 1)):
        with pytest.raises(ValueError, match=r"^unknown mechanism .*; choose 'gaussian' \(l2\) or 'laplace' \(l1\)$"):
            call()


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, True])
def test_non_positive_or_non_finite_radii_are_refused(bad):
    for name, call in [("clip_norm", lambda: sens.vector_sensitivity(bad)), ("clip_norm", lambda: sens.gram_l2(bad)),
                       ("clip_norm", lambda: sens.gram_l2_triangle(bad)), ("clip_norm", lambda: sens.gram_l1(bad)),
                       ("clip_norm", lambda: sens.joint_cross_moment_l2(bad)),
                       ("clip_norm", lambda: sens.min_eigenvalue_sensitivity(bad)),
                       ("feature_radius", lambda: sens.cross_moment_l2(bad, 1.0)),
                       ("label_radius", lambda: sens.cross_moment_l2(1.0, bad)),
                       ("lr", lambda: sens.sgd_sensitivity(10, 10, bad, 0.1)),
                       ("ref_delta_c", lambda: sens.reference_code_rf_sensitivity(bad, 4)),
                       ("clip_norm", lambda: sens.rounded_gram_l1(bad, 4, 5))]:
        with pytest.raises(ValueError, match=rf"^{name} must be finite and > 0, got {re.escape(repr(bad))}$"):
            call()


@pytest.mark.parametrize("bad", ["1.0", None, [1.0]])
def test_non_numbers_are_refused(bad):
    with pytest.raises(ValueError, match=rf"^clip_norm must be a real number, got {re.escape(repr(bad))}$"):
        sens.gram_l2(bad)


def test_numpy_and_integer_radii_are_accepted():
    assert sens.gram_l2(np.float64(2.0)) == sens.gram_l2(2) == 4.0 * math.sqrt(2.0)
    assert sens.sketch_l2(1.0, np.int64(4)) == 4.0


@pytest.mark.parametrize("bad", [0, -3, 1.5, 2.0, True, "2", None])
def test_counts_must_be_integers_at_least_one(bad):
    for name, call in [("pieces", lambda: sens.sketch_l2(1.0, bad)), ("pieces", lambda: sens.sketch_l1(1.0, bad)),
                       ("columns", lambda: sens.histogram_l2(bad)), ("columns", lambda: sens.histogram_l1(bad)),
                       ("m", lambda: sens.sgd_sensitivity(bad, 10, 0.1, 0.1)),
                       ("iterations", lambda: sens.sgd_sensitivity(10, bad, 0.1, 0.1)),
                       ("n_features", lambda: sens.reference_code_rf_sensitivity(4.0, bad)),
                       ("width", lambda: sens.rounded_gram_l1(1.0, bad, 5))]:
        with pytest.raises(ValueError, match=rf"^{name} must be an integer >= 1, got {re.escape(repr(bad))}$"):
            call()


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5])
def test_sgd_delta_must_be_a_probability(delta):
    with pytest.raises(ValueError, match=rf"^delta must be in \(0, 1\), got {re.escape(repr(delta))}$"):
        sens.sgd_sensitivity(10, 10, 0.1, delta)


def test_defaults_are_the_documented_values_and_a_fraction():
    assert 0.0 < defaults.DEFAULT_LOAD_FRACTION < 1.0
    assert defaults.DEFAULT_CLIP_BOUND > 0.0 and 0.0 < defaults.DEFAULT_DELTA < 1e-5
    from ltm.jobspec import PartySpec, PrivacySpec, resolve_defaults
    from ltm.planner import PlanInputs
    from ltm.sim.runtime.jobs import build_job
    assert PartySpec("p", 0, 1).clip_bound == defaults.DEFAULT_CLIP_BOUND
    assert PlanInputs(n=1, width=2, epsilon=1.0, delta=1e-6).clip_bound == defaults.DEFAULT_CLIP_BOUND
    assert PrivacySpec().delta == defaults.DEFAULT_DELTA
    import inspect
    assert inspect.signature(resolve_defaults).parameters["load_fraction"].default == defaults.DEFAULT_LOAD_FRACTION
    assert inspect.signature(build_job).parameters["clip_bound"].default == defaults.DEFAULT_CLIP_BOUND


# ------------------------------------------------------------------------------------ one home
#: A privacy default written as a literal instead of imported from ltm/dp/defaults.py.
DEFAULT_LITERALS = re.compile(r"clip(_bound|_norm)?: float = 1\.0\b|\bdelta: float = 1e-6\b|"
                              r"--delta.*default=1e-6\b|FRACTION\s*=\s*0\.9")


def test_the_privacy_defaults_are_written_once():
    problems = [f"{path.relative_to(REPO)}:{i}: {line.strip()}"
                for package in ("ltm", "party", "server", "analyst")
                for path in sorted((REPO / package).rglob("*.py"))
                if not path.relative_to(REPO).as_posix().startswith(("ltm/dp/", "ltm/experiments/", "ltm/cli/"))
                for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if DEFAULT_LITERALS.search(line)]
    assert not problems, "import these from ltm/dp/defaults.py:\n" + "\n".join(problems)
    assert DEFAULT_LITERALS.search('    p.add_argument("--delta", type=float, default=1e-6)')
    assert DEFAULT_LITERALS.search("    clip_bound: float = 1.0") and DEFAULT_LITERALS.search("LOAD_FRACTION = 0.95")


#: Source code that computes a sensitivity (after strings and comments are removed and the code is
#: normalised by ast.unparse): a clip bound times 2, √2 times a squared clip bound, the √2-or-2
#: factor choice, the histogram's √(2D).
FORMULAS = [
    re.compile(r"\b2(\.0)? \* [\w.]*clip"),
    re.compile(r"clip[\w.]*(\(\))? \* 2(\.0)?\b"),
    re.compile(r"sqrt\(2(\.0)?\) \* [\w.]*(clip|\bc\b|\bC\b|\bc2\b|\bC2\b|\bR\b|radius)"),
    re.compile(r"\b_?SQRT2 \* [\w.]*(clip|\bc\b|\bC\b)"),
    re.compile(r"sqrt\(2(\.0)?\) if "),
    re.compile(r"sqrt\(2(\.0)? \* (d|D|width|[\w.]+\.width)\)"),
    re.compile(r"\b2(\.0)? \* (R|radius|rx|ra|label_bound)\b"),
]
#: Names a sensitivity is stored under; such a value must come from ltm.dp.sensitivity.
SENS_NAME = re.compile(r"^(sens|sensitivity|\w+_sens|sens_\w+|sensitivity_\w+|delta_gram|delta_moment)$")
PACKAGES = ("ltm", "party", "server", "analyst", "sim", "ltm.datasets", "experiments", "transport", "scripts")


class _StripStrings(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.Constant("")


def _dp_names(tree: ast.Module) -> set[str]:
    """Names this module imports from ltm.dp.sensitivity, plus delegating wrappers (functions
    whose name says sensitivity and whose body calls one of those names)."""
    names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
             and n.module == "ltm.dp.sensitivity" for a in n.names}
    return names


def _calls(node: ast.AST, names: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in names or "sensitivity" in name or name == "_gram_bound":
                return True
    return False


def _has_arithmetic(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.BinOp) for sub in ast.walk(node))


def sensitivity_violations(source: str, path: str = "<string>") -> list[str]:
    """Where ``source`` computes a sensitivity itself instead of calling ltm.dp.sensitivity."""
    tree = ast.parse(source)
    dp = _dp_names(tree)
    found = []
    code = ast.unparse(_StripStrings().visit(ast.parse(source)))
    for lineno, line in enumerate(code.splitlines(), 1):
        for pat in FORMULAS:
            if pat.search(line):
                found.append(f"{path}: formula {pat.pattern!r} in: {line.strip()}")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "sensitivity" in node.name:
            if not _calls(ast.Module(body=node.body, type_ignores=[]), dp):
                found.append(f"{path}:{node.lineno}: def {node.name} computes a sensitivity outside ltm/dp")
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v) for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        for name, value in pairs:
            if SENS_NAME.match(name) and _has_arithmetic(value) and not _calls(value, dp):
                found.append(f"{path}:{getattr(value, 'lineno', '?')}: {name} = {ast.unparse(value)}")
    return found


def test_no_sensitivity_is_computed_outside_ltm_dp():
    problems = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            # ltm/flp/ is the validity proof's field arithmetic: its R is the number of query points
            # (`2 * R` seeds), not a radius, and it computes no sensitivity
            if rel.startswith(("ltm/dp/", "ltm/flp/")):
                continue
            problems += sensitivity_violations(path.read_text(encoding="utf-8"), rel)
    assert not problems, "compute these in ltm/dp/sensitivity.py:\n" + "\n".join(problems)


@pytest.mark.parametrize("snippet", [
    "sens = 2.0 * clip * math.sqrt(s)",
    "sens = 2.0 * s * clip",
    "x = math.sqrt(2.0) * c * c",
    "x = _SQRT2 * c * c",
    "f = (math.sqrt(2.0) if tight else 2.0) * clip_norm ** 2",
    "def sensitivity(spec):\n    return math.sqrt(2.0 * spec.width)",
    "def my_sensitivity(c):\n    return 3 * c",
    "sigma = analytic_gaussian_sigma(e, d, 2.0 * clip_bound)",
    "sens = ref / math.sqrt(n)",
    "plan_noise(sensitivity=c * c * 2)",
    "r = {'sensitivity': 2.0 * float(clip_norm)}",
    "sens = 2.0 * R",
    "d1 = 2.0 * rx * ry / n",
])
def test_the_grep_finds_a_sensitivity_written_by_hand(snippet):
    assert sensitivity_violations(snippet)


@pytest.mark.parametrize("snippet", [
    "from ltm.dp.sensitivity import sketch_l2\nsens = sketch_l2(clip, s) if given is None else given",
    "from ltm.dp.sensitivity import gram_l2\nsens = gram_l2(r) / n",
    "scale = math.sqrt(2.0 / N) * out",
    "total = sum(p.clip_bound ** 2 for p in parties)",
    "sigma_release = b * math.sqrt(2.0)",
])
def test_the_grep_leaves_other_arithmetic_alone(snippet):
    assert sensitivity_violations(snippet) == []
