"""What the Hub reads from a model card: YAML front matter (``base_model``, ``license``, ``language``,
``datasets``, ``library_name``, ``pipeline_tag``, tags, and a ``model-index`` of the test metrics),
and the card's results table and training summary.

The front matter is written by ``huggingface_hub``'s own ``ModelCardData``, so the Hub parses it as
it parses any card; the metrics are those of the run's ``omnidistill eval`` report
(``RUN/eval/test.json``): MAE, RMSE, Pearson r and Acc@±1 per dimension, their mean MAE, and L-MAE.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from omnidistill.config import Config
from omnidistill.data.sources import iter_objects
from omnidistill.dimensions import DIMENSIONS
from omnidistill.export.hub_licenses import check_license
from omnidistill.storage import files_at_hand

TAGS = ["omnidistill", "omniscore", "text-evaluation", "regression", "llm-as-a-judge"]
METRICS = (("mae", "MAE"), ("rmse", "RMSE"), ("pearson", "Pearson r"), ("acc1", "Acc@±1"))
METRIC_TYPES = {"mae": "mae", "rmse": "rmse", "pearson": "pearsonr", "acc1": "accuracy"}


@dataclasses.dataclass(frozen=True)
class CardInfo:
    """What the export is told about the model beyond the run directory."""

    license: str = "apache-2.0"
    """A Hub license id (:data:`~omnidistill.export.hub_licenses.HUB_LICENSES`); it should agree with
    the base model's license."""
    license_name: str | None = None
    """The license's name, with ``license="other"`` (one the Hub does not list)."""
    license_link: str | None = None
    """A link to that license's text, with ``license="other"``."""
    datasets: tuple[str, ...] = ()
    """Hub dataset ids the model was trained or evaluated on."""
    teacher: str | None = None
    """The judge that labelled the training data; default: the models named in the data's ``teacher`` fields."""
    model_name: str | None = None
    """The model-index name (default: the export folder's or Hub repo's name)."""

    def __post_init__(self) -> None:
        check_license(self.license, self.license_name, self.license_link)


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """One pass over the run's training files: their size, languages and judges."""

    train_items: int | None
    dev_items: int | None
    languages: tuple[str, ...]
    teachers: tuple[str, ...]


def summarize_data(cfg: Config) -> DataSummary:
    """Counts and languages of the training split, dev size, and the judge models that ``omnidistill
    label`` recorded (``teacher.judgments[].model``); None where the files are not at hand."""
    train, dev = files_at_hand(cfg.data.train), files_at_hand(cfg.data.dev)
    languages: set[str] = set()
    teachers: set[str] = set()
    count = 0
    for path in train:
        for _, obj in iter_objects(path):
            count += 1
            if isinstance(obj, dict):
                if isinstance(obj.get("lang"), str):
                    languages.add(obj["lang"])
                teacher = obj.get("teacher")
                if isinstance(teacher, dict):
                    teachers.update(
                        j["model"] for j in teacher.get("judgments", ()) if isinstance(j, dict) and isinstance(j.get("model"), str)
                    )
    dev_items = sum(1 for path in dev for _ in iter_objects(path)) if dev else None
    return DataSummary(count if train else None, dev_items, tuple(sorted(languages)), tuple(sorted(teachers)))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def eval_results(report: dict, dataset_type: str, dataset_name: str) -> list[Any]:
    """``huggingface_hub.EvalResult`` entries of a test report (non-finite values are left out)."""
    from huggingface_hub import EvalResult

    common = dict(
        task_type="text-classification",
        task_name="Quality scoring (four 1-5 dimensions)",
        dataset_type=dataset_type,
        dataset_name=dataset_name,
        dataset_split="test",
    )
    dims = report["overall"]["dimensions"]
    entries = [(METRIC_TYPES[key], f"{label} ({dim})", dims[dim].get(key)) for dim in DIMENSIONS for key, label in METRICS]
    entries += [("mae", "MAE (mean over dimensions)", report["overall"].get("mae_dims")), ("mae", "L-MAE", report.get("lang_mae_weighted"))]
    return [
        EvalResult(metric_type=kind, metric_name=name, metric_value=round(float(value), 4), **common)
        for kind, name, value in entries
        if _finite(value)
    ]


def front_matter(cfg: Config, folder_format: str, info: CardInfo, data: DataSummary, report: dict | None, model_name: str) -> str:
    """The card's YAML front matter, ``---`` lines included."""
    from huggingface_hub import ModelCardData

    results = None
    if report is not None:
        files = report.get("meta", {}).get("files", [])
        dataset_name = "test split: " + (", ".join(Path(f).name for f in files) or "(files not recorded)")
        results = eval_results(report, info.datasets[0] if info.datasets else "json", dataset_name) or None
    card = ModelCardData(
        base_model=cfg.model.init_from if cfg.model.init_from and not Path(cfg.model.init_from).exists() else None,
        license=info.license,
        license_name=info.license_name,
        license_link=info.license_link,
        language=list(data.languages) or None,
        datasets=list(info.datasets) or None,
        library_name="transformers" if folder_format == "hf" else "omniscore",
        pipeline_tag="text-classification",
        tags=TAGS + (["multilingual"] if len(data.languages) > 1 else []),
        model_name=model_name,
        eval_results=results,
    )
    return f"---\n{card.to_yaml()}\n---\n"


def results_table(report: dict | None) -> str:
    """Per-dimension MAE, RMSE, Pearson r and Acc@±1 on the test split, then the mean MAE and L-MAE."""
    if report is None:
        return "_No test report: run `omnidistill eval` before exporting to include the results._\n"

    def cell(value: Any) -> str:
        return f"{value:.3f}" if _finite(value) else "–"

    overall = report["overall"]
    lines = ["| dimension | " + " | ".join(label for _, label in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for dim in DIMENSIONS:
        lines.append(f"| {dim} | " + " | ".join(cell(overall["dimensions"][dim].get(key)) for key, _ in METRICS) + " |")
    items = report.get("meta", {}).get("items", overall.get("items"))
    lines += [
        "",
        f"{items} test items. MAE averaged over the dimensions: {cell(overall.get('mae_dims'))}; "
        f"L-MAE (language MAEs weighted by test items, OmniScore Table 9): {cell(report.get('lang_mae_weighted'))}.",
    ]
    return "\n".join(lines) + "\n"


def training_summary(cfg: Config, step: int, data: DataSummary, info: CardInfo, report: dict | None) -> str:
    """Recipe, steps, data sizes and teacher, as Markdown bullets."""
    backbone = f"`{cfg.model.init_from}`" if cfg.model.init_from else f"randomly initialised ({json.dumps(cfg.model.arch)})"
    teacher = info.teacher or (", ".join(data.teachers) if data.teachers else None)

    def count(n: int | None) -> str:
        return f"{n:,}" if n is not None else "not recorded"

    test_items = report.get("meta", {}).get("items") if report else None
    return "\n".join(
        [
            f"- **Backbone:** {cfg.model.family}, {backbone}.",
            f"- **Head:** pooling `{cfg.model.pooling}`, head `{cfg.model.head}`, loss `{cfg.loss.name}`"
            + (f", plus a Bradley-Terry loss (weight {cfg.loss.pair_weight:g}) on the teacher's pairwise choices" if cfg.data.pairs else "")
            + ".",
            f"- **Optimiser:** AdamW, weight decay {cfg.optim.weight_decay}, encoder LR {cfg.optim.lr:g}, head LR {cfg.optim.head_lr:g}, "
            f"{cfg.optim.schedule} schedule, warmup {cfg.optim.warmup_ratio:g}"
            + (f"; the weights released are their moving average (EMA, decay {cfg.optim.ema_decay:g})" if cfg.optim.ema_decay else "")
            + ".",
            f"- **Schedule:** batch {cfg.train.batch_size}, {cfg.train.epochs:g} epochs"
            + (f" (max {cfg.train.max_steps} steps)" if cfg.train.max_steps else "")
            + f"; best dev checkpoint at step {step}, by dev MAE"
            + (f" (early stopping on {cfg.train.early_stopping_metric})" if cfg.train.early_stopping_patience else "")
            + ".",
            f"- **Data:** {count(data.train_items)} training items, {count(data.dev_items)} dev items, {count(test_items)} test items"
            + (f"; languages: {', '.join(data.languages)}" if data.languages else "")
            + ".",
            f"- **Teacher:** {teacher if teacher else 'not recorded'}.",
        ]
    )
