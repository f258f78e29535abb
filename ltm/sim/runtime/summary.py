"""Plain-language summaries of a run (``ltm demo``, ``ltm operate``, ``ltm simulate``).

Every figure is labelled, the private model is judged against the central one in a sentence, and
the summary says which numbers change from run to run and why.  The functions take the report
dictionaries the commands print with ``--json`` and tolerate keys they do not know (new baselines,
a release planner's note): unknown baselines are listed without a description, missing metrics
print as "—".
"""
from __future__ import annotations

from typing import Any

#: One line per comparison row: what it is.
BASELINE_MEANINGS = {
    "nonprivate": "OLS fitted on the exact training rows, no noise: the reference for R² and MSE",
    "central": "a trusted curator adds DP noise once to the exact statistics (same ε, δ): "
               "the best a DP method can hope for",
    "local": "each client adds enough noise to be DP on its own, no secure aggregation (same ε, δ)",
}
METRIC_MEANINGS = {
    "r2": "R² on the held-out rows (1 = perfect, 0 = predicting the mean)",
    "mse": "mean squared error on the held-out rows (raw units)",
    "phi": "φ = the ridge objective ‖Ax − b‖² + λ‖x‖² of the coefficients on the training rows ÷ its minimum "
           "(1 = optimal)",
    "psi": "ψ = the low-rank excess risk per row (0 = optimal)",
}


def _fmt(value: Any, spec: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return "—"


def release_words(sketch: dict[str, Any]) -> str:
    """What was released, named for its kind: "sparse sketch m=61 s=1", "dense sketch m=40", or
    "gram release (noisy ZᵀZ)" — a Gram release is the noisy sufficient statistics, not a sketch,
    and has no m or s to speak of."""
    kind = str(sketch.get("kind", ""))
    if kind == "gram":
        return "gram release (noisy sufficient statistics ZᵀZ, no sketch)"
    if kind == "dense":
        return f"dense sketch m={sketch.get('m')}"
    return f"{kind} sketch m={sketch.get('m')} s={sketch.get('s')}"


def model_table(model_name: str, metrics: dict[str, Any], baselines: dict[str, Any],
                private_lam: float | None = None) -> list[str]:
    """The comparison table, then one line per row and per metric saying what it means.

    ``private_lam``: the private model's ridge λ, at which φ is scored for every row (``ltm/sim/runtime/simulate.py``):
    φ measures closeness to the minimiser of THAT objective, so a row fitted with another λ — OLS,
    λ = 0 — has φ > 1 however good its fit; the φ line says so whenever such a row scores above the
    private model."""
    names = [k for k in ("r2", "mse", "phi", "psi") if k in metrics]
    headers = {"r2": "R²", "mse": "MSE", "phi": "φ", "psi": "ψ"}
    lines = [f"  {'':14s}" + "".join(f"{headers[k]:>12s}" for k in names)]
    rows = [(model_name, metrics)] + [(name, vals) for name, vals in baselines.items() if isinstance(vals, dict)]
    for name, vals in rows:
        lines.append(f"  {name:14s}" + "".join(f"{_fmt(vals.get(k), '>12.4g')}" for k in names))
    lines.append("  what the rows are:")
    lines.append(f"    {model_name:14s} this run's private model, fitted by the analyst on the DP release")
    for name, vals in baselines.items():
        meaning = BASELINE_MEANINGS.get(name, "")
        method = vals.get("method") if isinstance(vals, dict) else None
        extra = f" [{method}]" if method else ""
        lam = vals.get("lambda") if isinstance(vals, dict) else None
        extra += f" [λ = {lam:.3g}]" if isinstance(lam, (int, float)) else ""
        lines.append(f"    {name:14s} {meaning}{extra}".rstrip())
    lines.append("  what the columns are:")
    for k in names:
        line = f"    {METRIC_MEANINGS[k]}"
        if k == "phi":
            line += (f", every row scored at the private model's λ = {private_lam:.3g}"
                     if isinstance(private_lam, (int, float)) else ", every row scored at the private model's λ")
            private = metrics.get("phi")
            over = [name for name, vals in baselines.items() if name.startswith("nonprivate")
                    and isinstance(vals, dict) and isinstance(vals.get("phi"), (int, float))
                    and isinstance(private, (int, float)) and vals["phi"] > private]
            if over:
                one = len(over) == 1
                line += (f"; {' and '.join(over)} score{'s' if one else ''} above the private model because "
                         f"{'it is' if one else 'they are'} fitted with another λ (OLS: λ = 0) and "
                         f"minimise{'s' if one else ''} another objective: that λ's penalty, not a worse fit "
                         f"(compare by R² and MSE); a DP row's φ mixes its own λ with its noise")
        lines.append(line)
    return lines


def verdict(metrics: dict[str, Any], baselines: dict[str, Any], *, n: int, epsilon: float,
            release_kind: str, planned: bool = False) -> str:
    """One plain sentence: the private R² as a fraction of the central one, and what would raise it.

    ``planned``: the planner chose ``release_kind`` as the one with the smallest predicted loss, so
    another kind is not suggested; a kind given by hand is, as "let the planner choose"."""
    r2 = metrics.get("r2")
    central = (baselines.get("central") or {}).get("r2")
    helps = [f"more clients (the noise stays the same while the signal grows with n; this run had n = {n})",
             f"a larger ε (now {epsilon:g})"]
    if not planned:
        helps.append(f"letting the planner choose the release kind (--release auto; this run used "
                     f"'{release_kind}', given by hand)")
    raise_it = ", ".join(helps[:-1]) + " or " + helps[-1]
    if not isinstance(r2, (int, float)) or not isinstance(central, (int, float)):
        return f"verdict: no R² to compare; what would help: {raise_it}"
    if central <= 0:
        return (f"verdict: even the central model has R² {central:.3g} ≤ 0 here, so no fraction is meaningful; "
                f"the private model has R² {r2:.3g}")
    share = r2 / central
    if share >= 0.95:
        judged = "as good as the central model, to within 5%"
    elif share >= 0.75:
        judged = "somewhat worse than the central model"
    elif share > 0:
        judged = "clearly worse than the central model"
    else:
        judged = "no better than predicting the mean"
    return (f"verdict: the private model reaches {100 * share:.0f}% of the central model's R² "
            f"({r2:.3g} vs {central:.3g}): {judged}. What would raise it: {raise_it}")


def variation_note(randomness: str, seeded: bool) -> str:
    """Which numbers change from run to run, and why."""
    if seeded:
        return ("run to run: seeded mode — every number repeats exactly with the same --seed (and is NOT private)")
    return ("run to run: the private, central and local numbers use fresh noise each run, so they vary; the "
            "non-private row does not (the held-out rows are a fixed public split)")


def privacy_lines(pr: dict[str, Any], release_kind: str = "") -> list[str]:
    """The guarantee, then requested vs achieved δ with the loads behind it (``release_kind``
    "gram": the loads are of the released statistics' entries, there are no sketch rows)."""
    lines = [f"  privacy: {pr.get('guarantee', '')}"]
    eps, delta, achieved = pr.get("epsilon"), pr.get("delta"), pr.get("achieved_delta")
    if str(pr.get("release", "")).startswith("replicated"):
        lines.append(f"    δ requested {_fmt(delta, '.3g')}, achieved {_fmt(achieved, '.3g')} at ε = {_fmt(eps, 'g')}: every "
                     f"released entry carries the noise of {pr.get('honest_noise_draws')} honest parties (σ = "
                     f"{_fmt(pr.get('sigma_party'), '.4g')} each); trust: at most {pr.get('colluding_servers')} of "
                     f"{pr.get('servers')} servers corrupt")
        return lines
    if isinstance(achieved, (int, float)) and pr.get("mechanism", "gaussian") == "gaussian":
        lines.append(f"    δ requested {_fmt(delta, '.3g')}, achieved {achieved:.3g} at ε = {_fmt(eps, 'g')}: the weakest "
                     f"{'released entry' if release_kind == 'gram' else 'sketch row'} carries the noise of {pr.get('min_honest_load')} honest clients (promised "
                     f"L = {pr.get('promised_min_honest_load')}); more honest noise than promised buys a smaller δ")
    sig_c, sig_y = pr.get("sigma_client"), pr.get("sigma_release")
    if isinstance(sig_c, (int, float)) and isinstance(sig_y, (int, float)) and sig_y:
        lines.append(f"    noise: each client adds σ_client = {sig_c:.4g} per entry; together they give the release "
                     f"σ_release = {sig_y:.4g}, what a central curator would add")
    return lines


def byte_lines(b: dict[str, Any], server_ids: list[str] | None = None) -> list[str]:
    """Per-server byte counts, labelled."""
    up = list(b.get("party_to_server") or [])
    down = list(b.get("server_to_analyst") or [])
    from ltm.transport.metering import human_bytes as human

    ids = server_ids or [f"server-{i}" for i in range(max(len(up), len(down)))]
    lines = ["  bytes moved (payload):"]
    lines.append("    parties → servers: " + ", ".join(f"{sid} {human(x)}" for sid, x in zip(ids, up))
                 + (f" (total {human(b.get('party_to_server_total'))})" if "party_to_server_total" in b else ""))
    if len(set(up)) > 1:
        lines.append("      (a batch's primary server receives its explicit share, the others 32-byte seeds; "
                     "the primary rotates over batches)")
    if down:
        lines.append("    servers → analyst: " + ", ".join(f"{sid} {human(x)}" for sid, x in zip(ids, down))
                     + " (one result share each: m × D ring elements)")
    if b.get("retries"):
        lines.append(f"    upload retries: {b['retries']}")
    return lines
