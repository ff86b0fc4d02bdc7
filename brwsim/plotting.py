"""The rules every brwsim figure follows, so that a reader can read it at README size.

- At most :data:`MAX_SERIES` labelled series in a panel; what is compared gets the colours
  (:data:`COLORS`, eight that stay distinct), a second dimension the line style
  (:data:`STYLES`), the rest separate panels (:func:`chunks`, :func:`grid_shape`).
- The legend sits outside the axes or below them (:func:`legend`), never over the curves,
  at :data:`LEGEND_SIZE` points or more; every marker that means something (a P* star, a
  prediction's dotted line) has an entry.
- Each panel's title names what is compared and on what.
- A paired comparison draws its paired interval (:func:`paired_band`), never two marginal
  error bars that overlap although the difference is clear.

Only matplotlib's object API (no pyplot state); :func:`series_count` and
:func:`legend_labels` let tests check a figure against these rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["MAX_SERIES", "COLORS", "STYLES", "LEGEND_SIZE", "TITLE_SIZE", "chunks", "grid_shape",
           "legend", "paired_band", "series_count", "legend_labels", "new_figure"]

#: Most labelled series in one panel.
MAX_SERIES = 8
#: Eight colours that stay apart in print and for the common colour-vision deficiencies
#: (after Okabe & Ito; their yellow, too faint on white, replaced by wine).
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#3A4A5A")
#: Line styles of a second dimension inside a panel.
STYLES = ("-", "--", ":", "-.")
#: Font sizes (points) of legends and titles.
LEGEND_SIZE = 8
TITLE_SIZE = 10

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = MAX_SERIES) -> list[list[T]]:
    """``items`` cut into runs of at most ``size`` (the series of one panel each)."""
    return [list(items[i:i + size]) for i in range(0, len(items), size)] or [[]]


def grid_shape(panels: int, columns: int = 3) -> tuple[int, int]:
    """(rows, columns) of a grid holding ``panels`` panels, at most ``columns`` wide."""
    cols = max(1, min(columns, panels))
    return -(-panels // cols), cols


def new_figure(rows: int, cols: int, width: float = 4.6, height: float = 3.6) -> tuple[Any, Any]:
    """A constrained-layout figure of ``rows`` x ``cols`` panels (a 2-d array of axes)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols + 1.5, height * rows + 0.6), layout="constrained")
    return fig, fig.subplots(rows, cols, squeeze=False)


def legend(ax: Any, where: str = "right", title: str | None = None, ncol: int = 1) -> Any:
    """The panel's legend outside its axes (``right`` or ``below``), :data:`LEGEND_SIZE` points."""
    if where == "below":
        return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=LEGEND_SIZE,
                         title=title, title_fontsize=LEGEND_SIZE, ncol=ncol, frameon=False)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=LEGEND_SIZE,
                     title=title, title_fontsize=LEGEND_SIZE, ncol=ncol, frameon=False)


def paired_band(ax: Any, x: Any, y: Any, se: Any, color: str, label: str | None = None,
                ls: str = "-") -> None:
    """A paired comparison: the line and its ±2 paired-SE band (not marginal error bars)."""
    import numpy as np

    y, se = np.asarray(y, float), np.asarray(se, float)
    ax.plot(x, y, ls, color=color, marker="o", ms=3, lw=1.3, label=label)
    ok = np.isfinite(se)
    if ok.any():
        ax.fill_between(np.asarray(x)[ok], (y - 2 * se)[ok], (y + 2 * se)[ok], color=color,
                        alpha=0.2, lw=0)


def _labelled(ax: Any) -> list[Any]:
    return [h for h in ax.get_lines() + list(ax.containers) if not str(h.get_label()).startswith("_")]


def series_count(ax: Any) -> int:
    """Labelled series (lines and error-bar containers) drawn in ``ax``."""
    return len({str(h.get_label()) for h in _labelled(ax)})


def legend_labels(ax: Any) -> list[str]:
    """The entries of ``ax``'s legend (empty without one)."""
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg is not None else []
