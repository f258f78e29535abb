"""Aggregation over repetitions, ``summary.md`` (ours beside the paper's numbers) and PNG plots.

Plots need matplotlib (the ``plot`` extra); it is imported only here, lazily, and a missing
install raises :class:`PlotsUnavailable` with the command that fixes it.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ltm.errors import LtmError
from ltm.experiments.registry import SERIES_STYLES
from ltm.experiments.spec import ExperimentSpec


class PlotsUnavailable(LtmError, RuntimeError):
    """matplotlib is not installed."""

    exit_code = 2  # what `ltm experiment run` exits with (ltm/experiments/runner.py)


# ---------------------------------------------------------------------------------- aggregation
def _matches(row: dict[str, Any], where: dict[str, Any] | None) -> bool:
    for k, v in (where or {}).items():
        allowed = v if isinstance(v, list) else [v]
        if row.get(k) not in allowed and not any(_same(row.get(k), a) for a in allowed):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return str(a) == str(b)


def _value(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


def aggregate(rows: list[dict[str, Any]], keys: list[str], metric: str,
              where: dict[str, Any] | None = None) -> "OrderedDict[tuple, dict[str, Any]]":
    """Group ``rows`` by ``keys`` → {mean, std (sample, ddof=1), count, first (a sample row)}."""
    groups: OrderedDict[tuple, list] = OrderedDict()
    first: dict[tuple, dict] = {}
    for r in rows:
        if not _matches(r, where) or metric not in r:
            continue
        key = tuple(r.get(k) for k in keys)
        groups.setdefault(key, [])
        first.setdefault(key, r)
        v = _value(r.get(metric))
        if v is not None:
            groups[key].append(v)
    out: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
    for key, vals in groups.items():
        if vals and len(set(vals)) == 1 and math.isinf(vals[0]):
            # every repetition says the same infinity (e.g. ε against a coalition that holds the
            # data in the clear): that is the value, not a missing one
            out[key] = {"mean": vals[0], "std": 0.0, "count": len(vals), "nonfinite": 0, "first": first[key]}
            continue
        arr = np.array([v for v in vals if math.isfinite(v)])
        out[key] = {
            "mean": float(arr.mean()) if arr.size else float("nan"),
            "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            "count": int(arr.size),
            "nonfinite": len(vals) - int(arr.size),
            "first": first[key],
        }
    return out


def fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if x == 0:
        return "0"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    a = abs(x)
    if 1e-3 <= a < 1e5:
        return f"{x:.4g}"
    return f"{x:.3e}"


def fmt_pm(mean: float, std: float, count: int) -> str:
    if count == 0:
        return "—"
    return fmt(mean) if count == 1 or math.isinf(mean) else f"{fmt(mean)} ± {fmt(std)}"


def _fmt_paper(x: float) -> str:
    """The paper's own style: three decimals, or three in scientific notation for small values."""
    return f"{x:.3f}" if x == 0 or 1e-3 <= abs(x) < 1e4 else f"{x:.3e}"


def paper_value(spec: ExperimentSpec, row: dict[str, Any], metric: str) -> str:
    for entry in spec.paper:
        if entry["metric"] == metric and _matches(row, entry["where"]):
            std = entry.get("std")
            text = _fmt_paper(entry["mean"]) + (f" ± {_fmt_paper(std)}" if std is not None else "")
            return text + (f" ({entry['source']})" if entry.get("source") else "")
    return ""


# ---------------------------------------------------------------------------------- summary.md
def _order(values: list[Any], preferred: list[Any] | None) -> list[Any]:
    seen = list(dict.fromkeys(values))
    if preferred:
        head = [v for v in preferred if v in seen]
        return head + [v for v in seen if v not in head]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        return sorted(seen)
    return seen


def table_markdown(spec: ExperimentSpec, rows: list[dict[str, Any]], table: dict[str, Any]) -> str:
    metric = table["metric"]
    where = table.get("where")
    pivot = table.get("columns")
    keys = [k for k in table.get("rows", []) if k != pivot]
    lines = [f"### {table.get('title', metric)}", ""]
    if not aggregate(rows, [], metric, where):
        return "\n".join(lines + ["(no rows of this run match this table)", ""])
    if table.get("note"):
        lines += [table["note"], ""]
    has_paper = any(e["metric"] == metric for e in spec.paper)
    if pivot:
        agg = aggregate(rows, keys + [pivot], metric, where)
        cols = _order([k[-1] for k in agg], table.get("column_order"))
        row_keys = list(dict.fromkeys(k[:-1] for k in agg))
        header = keys + [f"{pivot}={c}" for c in cols] + (["paper"] if has_paper else [])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for rk in row_keys:
            cells = [str(v) for v in rk]
            sample = None
            for c in cols:
                a = agg.get((*rk, c))
                cells.append(fmt_pm(a["mean"], a["std"], a["count"]) if a else "")
                sample = sample or (a["first"] if a else None)
            if has_paper:
                cells.append(paper_value(spec, sample or {}, metric) if sample else "")
            lines.append("| " + " | ".join(cells) + " |")
    else:
        agg = aggregate(rows, keys, metric, where)
        header = keys + [f"{metric} (mean ± std)", "reps"] + (["paper"] if has_paper else [])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for k, a in agg.items():
            cells = [str(v) for v in k] + [fmt_pm(a["mean"], a["std"], a["count"]), str(a["count"])]
            if has_paper:
                cells.append(paper_value(spec, a["first"], metric))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def default_tables(spec: ExperimentSpec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = list(spec.axes) + (["series"] if any("series" in r for r in rows) else [])
    return [{"title": f"{m} by {', '.join(keys)}", "metric": m, "rows": keys} for m in spec.metrics]


def write_summary(spec: ExperimentSpec, rows: list[dict[str, Any]], out_dir: Path, run_info: dict[str, Any]) -> Path:
    tables = spec.summary.get("table") or default_tables(spec, rows)
    if isinstance(tables, dict):
        tables = [tables]
    parts = [f"# {spec.title}", ""]
    if spec.notes:
        parts += [spec.notes.strip(), ""]
    parts += [
        f"- spec: `{spec.name}`{' (reduced grid)' if spec.reduced else ''}, scenario `{spec.scenario}`, "
        f"{spec.repetitions} repetitions, base seed {spec.base_seed}",
        f"- command: `{run_info.get('command', '')}`",
        f"- wall time: {run_info.get('wall_time_s', 0):.1f} s this run; "
        f"{run_info.get('pairs_done', 0)} of {run_info.get('pairs_total', 0)} (cell, repetition) pairs done",
        f"- transport: {run_info.get('transport', 'inprocess')}; randomness: seeded (reproducible, NOT private)",
        "- values are mean ± sample standard deviation over repetitions",
        "",
    ]
    for t in tables:
        parts.append(table_markdown(spec, rows, t))
    plots = run_info.get("plots") or []
    if plots:
        parts += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    path = out_dir / "summary.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def write_aggregate(spec: ExperimentSpec, rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """``aggregate.csv``: mean, std (ddof=1) and count over repetitions of every metric, per grid
    point and series — the small, commit-friendly digest of ``results.csv``."""
    import csv

    keys = list(spec.axes) + (["series"] if any("series" in r for r in rows) else [])
    path = out_dir / "aggregate.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(keys + ["metric", "mean", "std", "count"])
        for metric in spec.metrics:
            for key, a in aggregate(rows, keys, metric).items():
                writer.writerow([*("" if v is None else v for v in key), metric, f"{a['mean']:.6g}",
                                 f"{a['std']:.4g}", a["count"]])
    return path


# ---------------------------------------------------------------------------------- plots
def _import_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PlotsUnavailable("plots need matplotlib, which is not installed: pip install -e '.[plot]' "
                               "(or rerun with --no-plots)") from exc
    return plt


def _style(series: Any, i: int) -> dict[str, Any]:
    style = dict(SERIES_STYLES.get(str(series), {}))
    if "color" not in style:
        style["color"] = f"C{i % 10}"
    style.setdefault("marker", "o")
    style.setdefault("ms", 4)
    return style


def _facet_label(name: str, value: Any) -> str:
    label = {"epsilon": "ε", "lam": "λ", "rank": "k", "mu2": "μ²"}.get(name, name)
    return f"{label} = {value}"


@dataclass
class _PlotLayout:
    """What a plot shows and where: its rows, the facet and series values in order, the panels
    ``(row value, column value, i, j)`` on an ``nr`` × ``nc`` grid, and the sizes the legend needs."""

    x: str
    y: str
    series_key: str | None
    frow: str | None
    fcol: str | None
    data: list[dict[str, Any]]
    series_vals: list[Any]
    categorical: bool  # x is not numeric: categories down the y axis
    x_order: list[Any] | None
    panels: list[tuple[Any, Any, int, int]]
    nr: int
    nc: int
    w: float  # a numeric plot's panel width (inches)
    legend_w: float


def _plot_layout(rows: list[dict[str, Any]], plot: dict[str, Any]) -> _PlotLayout:
    """The rows ``plot`` draws (ValueError if none) and how they are laid out in panels."""
    x, y = plot["x"], plot["y"]
    series_key = plot.get("series")
    frow, fcol = plot.get("facet_row"), plot.get("facet_col")
    data = [r for r in rows if _matches(r, plot.get("where")) and _value(r.get(y)) is not None]
    if not data:
        raise ValueError(f"plot {plot['file']}: no rows match (where={plot.get('where')})")
    row_vals = _order([r.get(frow) for r in data], plot.get("facet_row_order")) if frow else [None]
    col_vals = _order([r.get(fcol) for r in data], plot.get("facet_col_order")) if fcol else [None]
    series_vals = _order([r.get(series_key) for r in data], plot.get("series_order")) if series_key else [None]
    categorical = not all(isinstance(r.get(x), (int, float)) and not isinstance(r.get(x), bool) for r in data)
    x_order = _order([r.get(x) for r in data], plot.get("x_order")) if categorical else None
    wrap = int(plot.get("facet_wrap", 0))
    if wrap and not frow and fcol:  # one facet variable laid out row by row, `wrap` panels wide
        panels = [(None, cv, k // wrap, k % wrap) for k, cv in enumerate(col_vals)]
        nr, nc = -(-len(col_vals) // wrap), min(wrap, len(col_vals))
    else:
        panels = [(rv, cv, i, j) for i, rv in enumerate(row_vals) for j, cv in enumerate(col_vals)]
        nr, nc = len(row_vals), len(col_vals)
    w, h = plot.get("panel_size", [4.6, 3.4])
    legend_w = float(plot.get("legend_width", 2.3)) if series_key and not categorical else 0.0
    return _PlotLayout(x, y, series_key, frow, fcol, data, series_vals, categorical, x_order, panels, nr, nc, w,
                       legend_w)


def _plot_figure(plt: Any, plot: dict[str, Any], lay: _PlotLayout) -> tuple[Any, Any]:
    """The figure and its ``nr`` × ``nc`` axes, sized for the panels, the labels and the legend."""
    nr, nc = lay.nr, lay.nc
    if lay.categorical:
        w, h = plot.get("panel_size", [4.2, 0.32 * len(lay.x_order) + 1.0])
        label_w = 0.065 * max(len(str(v)) for v in lay.x_order)
        return plt.subplots(nr, nc, figsize=(w * nc + label_w, h * nr + 1.0), squeeze=False,
                            sharey=True, sharex=bool(plot.get("sharex", False)))
    w, h = plot.get("panel_size", [4.6, 3.4])
    return plt.subplots(nr, nc, figsize=(w * nc + lay.legend_w + 0.4, h * nr + 0.9), squeeze=False,
                        sharex=True, sharey=bool(plot.get("sharey", False)))


def _draw_series(ax: Any, plot: dict[str, Any], lay: _PlotLayout, panel: list[dict[str, Any]],
                 handles: dict[Any, Any]) -> None:
    """One panel's series: mean ± std over repetitions per x, as error bars (recorded in ``handles``)."""
    x, y, series_key, categorical = lay.x, lay.y, lay.series_key, lay.categorical
    for si, sv in enumerate(lay.series_vals):
        pts = [r for r in panel if series_key is None or r.get(series_key) == sv]
        if not pts:
            continue
        agg = aggregate(pts, [x], y)
        xs = [k[0] for k in agg]
        if categorical:
            xs_pos = [lay.x_order.index(v) for v in xs]
        else:
            xs_pos = xs
        order = np.argsort(xs_pos)
        xp = np.array(xs_pos, dtype=float)[order]
        mean = np.array([a["mean"] for a in agg.values()])[order]
        std = np.array([a["std"] for a in agg.values()])[order]
        if plot.get("logy"):
            ok = mean > 0
            xp, mean, std = xp[ok], mean[ok], std[ok]
            lower = np.minimum(std, mean * 0.9)  # keep the bar inside the log axis
            yerr = np.vstack([lower, std])
        else:
            yerr = std
        st = _style(sv, si)
        if categorical:  # categories down the y axis, values along x (long labels stay readable)
            st = {**st, "ls": "none", "ms": 6}
            yp = xp + (si - (len(lay.series_vals) - 1) / 2) * 0.18 if series_key else xp
            line = ax.errorbar(mean, yp, xerr=yerr if plot.get("errorbars", True) else None,
                               capsize=2, elinewidth=0.9, ecolor=st["color"], label=str(sv), **st)
        else:
            line = ax.errorbar(xp, mean, yerr=yerr if plot.get("errorbars", True) else None,
                               capsize=2, elinewidth=0.8, ecolor="black", label=str(sv), **st)
        handles.setdefault(sv, line)


def _draw_paper_markers(ax: Any, spec: ExperimentSpec, lay: _PlotLayout, panel: list[dict[str, Any]],
                        handles: dict[Any, Any]) -> None:
    """A categorical panel's paper values: a cross at each category the spec's paper numbers name."""
    for pos, cat in enumerate(lay.x_order):
        sample = next((r for r in panel if r.get(lay.x) == cat), None)
        entry = next((e for e in spec.paper if sample is not None and e["metric"] == lay.y
                      and _matches(sample, e["where"])), None)
        if entry is not None:
            mk = ax.plot([entry["mean"]], [pos], marker="x", color="black", ms=8, mew=1.6, ls="none",
                         zorder=6)[0]
            handles.setdefault("__paper__", mk)


def _format_axes(ax: Any, plot: dict[str, Any], lay: _PlotLayout, rv: Any, cv: Any, j: int, last_row: bool) -> None:
    """A panel's scales, category ticks, facet title, grid and axis labels (x labels on the last row only)."""
    x, y, frow, fcol, categorical = lay.x, lay.y, lay.frow, lay.fcol, lay.categorical
    if plot.get("logx") and not categorical:
        ax.set_xscale("log")
    if plot.get("logy"):
        (ax.set_xscale if categorical else ax.set_yscale)("log")
    if categorical:
        ax.set_yticks(range(len(lay.x_order)))
        ax.set_yticklabels([str(v) for v in lay.x_order], fontsize=8)
        ax.set_ylim(len(lay.x_order) - 0.5, -0.5)
    title = ", ".join(t for t in (_facet_label(frow, rv) if frow else "", _facet_label(fcol, cv) if fcol else "") if t)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if categorical:
        if last_row:
            ax.set_xlabel(plot.get("ylabel", y))
        ax.grid(True, which="major", axis="x", alpha=0.3)
    else:
        if last_row:
            ax.set_xlabel(plot.get("xlabel", x))
            ax.xaxis.set_tick_params(labelbottom=True)
        if j == 0:
            ax.set_ylabel(plot.get("ylabel", y))


def _finish_figure(fig: Any, plot: dict[str, Any], lay: _PlotLayout, handles: dict[Any, Any]) -> None:
    """The figure's title, its legend (below a categorical plot, right of a numeric one) and layout."""
    series_key, series_vals, nc, w, legend_w = lay.series_key, lay.series_vals, lay.nc, lay.w, lay.legend_w
    if plot.get("title"):
        fig.suptitle(plot["title"], fontsize=12)
    if series_key and handles and lay.categorical:
        keys = [k for k in series_vals if k in handles] + (["__paper__"] if "__paper__" in handles else [])
        labels = [f"{series_key} = {k}" for k in keys if k != "__paper__"]
        if "__paper__" in handles:
            labels.append(plot.get("paper_label", "the paper (its full dataset)"))
        fig.legend([handles[k] for k in keys], labels, loc="lower center", ncol=len(keys), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.06, 1, 0.95 if plot.get("title") else 1))
    elif series_key and handles:
        fig.legend([handles[k] for k in series_vals if k in handles], [str(k) for k in series_vals if k in handles],
                   loc="center right", fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0, 1 - legend_w / (w * nc + legend_w + 0.4), 0.96 if plot.get("title") else 1))
    else:
        fig.tight_layout(rect=(0, 0, 1, 0.96 if plot.get("title") else 1))


def write_plot(spec: ExperimentSpec, rows: list[dict[str, Any]], plot: dict[str, Any], out_dir: Path) -> Path:
    """Draw one ``[[plot]]`` of ``spec`` from ``rows`` into ``out_dir / plot["file"]``; returns the path."""
    plt = _import_matplotlib()
    lay = _plot_layout(rows, plot)
    fig, axes = _plot_figure(plt, plot, lay)
    handles: dict[Any, Any] = {}
    used = set()
    for rv, cv, i, j in lay.panels:
        ax = axes[i][j]
        used.add((i, j))
        last_row = i == lay.nr - 1 or (i + 1, j) not in {(a, b) for _, _, a, b in lay.panels}
        panel = [r for r in lay.data if (lay.frow is None or _same(r.get(lay.frow), rv))
                 and (lay.fcol is None or _same(r.get(lay.fcol), cv))]
        _draw_series(ax, plot, lay, panel, handles)
        if lay.categorical and plot.get("paper_markers") and spec.paper:
            _draw_paper_markers(ax, spec, lay, panel, handles)
        _format_axes(ax, plot, lay, rv, cv, j, last_row)
    for i in range(lay.nr):
        for j in range(lay.nc):
            if (i, j) not in used:
                axes[i][j].set_visible(False)
    _finish_figure(fig, plot, lay, handles)
    path = out_dir / plot["file"]
    fig.savefig(path, dpi=int(plot.get("dpi", 110)))
    plt.close(fig)
    return path


def write_plots(spec: ExperimentSpec, rows: list[dict[str, Any]], out_dir: Path) -> list[str]:
    if not spec.plots:
        return []
    _import_matplotlib()
    written = []
    for p in spec.plots:
        if not any(_matches(r, p.get("where")) and _value(r.get(p["y"])) is not None for r in rows):
            continue  # e.g. a reduced grid without that slice
        written.append(write_plot(spec, rows, p, out_dir).name)
    return written
