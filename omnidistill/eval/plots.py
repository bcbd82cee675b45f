"""PNG plots of an evaluation: predicted vs gold per dimension, error by task and language, histograms,
and the calibration of a level-distribution head's uncertainty."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS


def _figure(rows: int, cols: int, figsize: tuple[float, float], **share: bool) -> tuple[Any, Any]:
    """A figure and its axes, without pyplot: pyplot's global state (and ``matplotlib.use``, which this
    module called) would switch the backend of a notebook or an application that evaluates in-process,
    whose own plots then stop showing. Saved as PNG by matplotlib's Agg renderer all the same."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(rows, cols, **share)


def write_plots(records: Sequence[Record], pred: np.ndarray, report: dict, out_dir: str | Path, prefix: str = "test") -> list[Path]:
    """Write ``<prefix>_pred_vs_gold.png``, ``<prefix>_error_by_group.png``, ``<prefix>_histograms.png``."""
    from omnidistill.eval.report import gold_arrays

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gold, mask = gold_arrays(records)
    rng = np.random.default_rng(0)
    paths = []

    fig, axes = _figure(2, 2, (9, 8), sharex=True, sharey=True)
    for d, (ax, dim) in enumerate(zip(axes.flat, DIMENSIONS, strict=True)):
        g, p = gold[mask[:, d], d], pred[mask[:, d], d]
        ax.scatter(g + rng.uniform(-0.12, 0.12, g.shape), p, s=8, alpha=0.5)
        ax.plot([1, 5], [1, 5], "k--", lw=1)
        m = report["overall"]["dimensions"][dim]
        ax.set_title(f"{dim}: MAE {m['mae']:.2f}, r {m['pearson']:.2f}")
        ax.set_xlim(0.7, 5.3)
        ax.set_ylim(0.7, 5.3)
    for ax in axes[-1]:
        ax.set_xlabel("gold (jittered)")
    for ax in axes[:, 0]:
        ax.set_ylabel("predicted")
    fig.tight_layout()
    paths.append(out_dir / f"{prefix}_pred_vs_gold.png")
    fig.savefig(paths[-1], dpi=110)

    fig, axes = _figure(1, 2, (11, 4))
    for ax, section, label in ((axes[0], "by_task", "task"), (axes[1], "by_lang", "language")):
        names = list(report[section])
        ax.bar(names, [report[section][n]["mae"] for n in names], color="tab:blue")
        ax.axhline(report["overall"]["mae"], color="k", ls="--", lw=1, label="overall")
        ax.set_title(f"MAE by {label}")
        ax.set_ylabel("MAE")
        ax.legend(loc="upper right")  # a fixed place: matplotlib's "best" search is timed, and warns when slow
    fig.tight_layout()
    paths.append(out_dir / f"{prefix}_error_by_group.png")
    fig.savefig(paths[-1], dpi=110)

    fig, axes = _figure(1, 4, (14, 3.4), sharey=True)
    bins = np.linspace(1, 5, 17)
    for d, (ax, dim) in enumerate(zip(axes, DIMENSIONS, strict=True)):
        ax.hist(gold[mask[:, d], d], bins=bins, alpha=0.6, label="gold")
        ax.hist(pred[mask[:, d], d], bins=bins, alpha=0.6, label="predicted")
        ax.set_title(dim)
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    paths.append(out_dir / f"{prefix}_histograms.png")
    fig.savefig(paths[-1], dpi=110)
    return paths


def write_calibration_plot(report: dict, path: str | Path) -> Path:
    """``path``: expected vs observed absolute error, and Acc@±1, by confidence bin."""
    bins = report["calibration"]
    x = np.arange(1, len(bins) + 1)
    fig, axes = _figure(1, 2, (11, 4))
    expected, observed = [b["expected_abs_error"] for b in bins], [b["abs_error"] for b in bins]
    axes[0].plot(expected, observed, "o-", label="bins (most confident first)")
    top = max([*expected, *observed, 0.1])
    axes[0].plot([0, top], [0, top], "k--", lw=1, label="calibrated")
    axes[0].set_xlabel("expected abs error (from the predicted distribution)")
    axes[0].set_ylabel("observed abs error")
    axes[0].set_title(f"Calibration (Spearman std vs error {report['spearman']:.2f})")
    axes[0].legend()
    axes[1].bar(x, [b["acc1"] for b in bins], color="tab:blue")
    axes[1].set_xlabel("confidence decile (1 = lowest std)")
    axes[1].set_ylabel("Acc@±1")
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("Acc@±1 by confidence decile")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path
