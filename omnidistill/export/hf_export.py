"""Export a trained run to a folder that other scorers load: ``hf`` (plain ``transformers``) or ``omniscore``.

``hf``: ``model.safetensors`` with the PyTorch keys of the family's ``*ForSequenceClassification``,
``config.json`` (``num_labels=4``, ``problem_type="multi_label_classification"``, ``id2label`` = the
four dimensions); it fits ``model.pooling: cls`` (the family's pooler) with ``linear_sigmoid``, and with
``classification``: 20 logits, the 4 dimensions x 5 levels row-major (``id2label`` ``"clarity=3"``...),
whose softmax per dimension gives the score (its expected level) and the uncertainty (its std).
``omniscore``: the ``omniscore`` package's ``OmniScoreModel`` (:mod:`omnidistill.export.omniscore_format`);
it fits the paper's head, ``cls_raw``, and ``mean``. Both hold the tokenizer, a model card
(:mod:`omnidistill.export.model_card`) and an ``omnidistill`` block in ``config.json`` with the input
settings (format, layout, truncation, max_length). Scores are ``1 + 4 * sigmoid(logits)``. Export runs
on one host in float32 and never needs the training mesh; with ``verify`` the written folder is
scored by its real consumer (``transformers``, or ``omniscore.OmniScorer``) on the text it builds
itself, and must reproduce the JAX scores within ``tolerance`` and, for inputs within ``max_length``
(all inputs under ``truncation: right``), the token ids exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from omnidistill.data.input_text import clean, given_task, source_text
from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS
from omnidistill.export.card_metadata import CardInfo
from omnidistill.export.errors import ExportError
from omnidistill.export.hub import HubTarget, hub_token, push_folder
from omnidistill.export.model_card import card_settings, model_card
from omnidistill.export.omniscore_format import OMNISCORE_INSTALL, omniscore_config_dict, omniscore_tensors
from omnidistill.models.heads import HEADS
from omnidistill.models.registry import get_family
from omnidistill.models.weights import flax_to_hf
from omnidistill.runs.load import load_trained
from omnidistill.storage import files_at_hand

log = logging.getLogger(__name__)
HF_HEADS = {("cls", "linear_sigmoid"), ("cls", "classification")}
LEVEL_HEADS = {name for name, head in HEADS.items() if hasattr(head, "level_probs")}  # a distribution over levels 1..5
HF_DECODER_HEADS = {("last_token", "linear_sigmoid")}  # with model.head_bias: false (a bias-free score layer)
OMNISCORE_HEADS = {("cls_raw", "linear_sigmoid"), ("mean", "linear_sigmoid"), ("last_token", "linear_sigmoid")}
FORMATS = ("auto", "hf", "omniscore")
# Always part of the export check, so that it runs even when the run's data files are absent.
PROBE_RECORDS = [
    Record(id="probe-1", task="qa", lang="en", question="What is the capital of France?", candidate="Paris is the capital of France."),
    Record(id="probe-2", task="mt", lang="de", source="The Moon orbits the Earth.", candidate="Der Mond umkreist die Erde, die Erde."),
    Record(id="probe-3", task="mt", lang="en", source="  Le chat dort. ", reference="The cat sleeps.", candidate=" The cat is sleeping.  "),
]


def hf_labels(head: str) -> list[str]:
    """The ``id2label`` names of an ``hf`` export: the dimensions, or ``dimension=level`` for the
    classification head's 4 x 5 logits (row-major: dimension, then level)."""
    if head == "classification":
        return [f"{d}={level}" for d in DIMENSIONS for level in range(1, NUM_LEVELS + 1)]
    return list(DIMENSIONS)


def hf_config_dict(family_name: str, arch: Any, settings: dict[str, Any], head: str = "linear_sigmoid") -> dict[str, Any]:
    """The standard ``config.json`` contents for the family's sequence-classification class."""
    from transformers import AutoConfig

    family = get_family(family_name)
    fields = arch.to_hf()
    model_type = fields.pop("model_type")
    labels = hf_labels(head)
    config = AutoConfig.for_model(
        model_type,
        **fields,
        architectures=[family.hf_class],
        num_labels=len(labels),
        problem_type="multi_label_classification" if head != "classification" else None,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    out = config.to_dict()
    out["omnidistill"] = settings
    return out


def choose_format(pooling: str, head: str, requested: str = "auto", *, decoder: bool = False, head_bias: bool = True) -> str:
    """The folder format for a head: ``hf`` or ``omniscore``; refuses one that cannot hold it exactly.

    ``hf`` holds an encoder's ``cls`` head, or a decoder's bias-free ``last_token`` head (the
    ``*ForSequenceClassification`` of Qwen2/Qwen3/Gemma 3); ``omniscore`` holds ``cls_raw``, ``mean`` and
    ``last_token`` (a missing head bias is written as zeros)."""
    if requested not in FORMATS:
        raise ExportError(f"unknown export format {requested!r} (choose from {', '.join(FORMATS)})")
    if requested == "omniscore" and head in LEVEL_HEADS:
        raise ExportError(
            f"--format omniscore holds one sigmoid score per dimension, not model.head={head!r}'s distribution over levels 1..5 "
            "(its uncertainty); export it with --format hf (model.pooling=cls, model.head=classification: the 4 x 5 level logits)"
        )
    hf_heads = HF_DECODER_HEADS if decoder else HF_HEADS
    hf_fits = (pooling, head) in hf_heads and head_bias != decoder
    fits = [name for name, ok in (("hf", hf_fits), ("omniscore", (pooling, head) in OMNISCORE_HEADS)) if ok]
    if requested == "auto" and fits:
        return fits[0]
    if requested in fits:
        return requested
    other = {"hf": "omniscore", "omniscore": "hf"}.get(requested)
    if requested != "auto" and other in fits:
        raise ExportError(
            f"model.pooling={pooling!r} with model.head={head!r} fits no {requested} class exactly; export it with --format {other}"
        )
    bias_note = " and model.head_bias=false" if decoder else ""
    raise ExportError(
        f"model.pooling={pooling!r} with model.head={head!r} (head_bias={head_bias}) has no published equivalent: --format hf "
        f"holds {sorted(hf_heads)}{bias_note}, --format omniscore holds {sorted(OMNISCORE_HEADS)} (nothing is dropped silently)"
    )


def head_table(family_name: str, arch: Any, head_bias: bool) -> list:
    """The family's weight table, without the head bias entry when the head has none."""
    table = get_family(family_name).weight_table(arch)
    return [e for e in table if head_bias or e.path != ("head", "linear", "bias")]


def export_tensors(family_name: str, arch: Any, params: Any, pooling: str, head: str, head_bias: bool = True) -> dict[str, np.ndarray]:
    """PyTorch-keyed float32 tensors of a regressor for ``hf`` folders; refuses other heads."""
    choose_format(pooling, head, "hf", decoder=get_family(family_name).decoder, head_bias=head_bias)
    tensors = flax_to_hf(jax.device_get(params), head_table(family_name, arch, head_bias))
    check_finite(tensors)
    return tensors


def check_finite(tensors: dict[str, np.ndarray]) -> None:
    bad = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if bad:
        raise ExportError(f"non-finite values in: {', '.join(bad)}")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """``transformers``' warnings and progress bars off while the check loads the folder as its consumer
    does: an export printed "Loading weights" bars and a deprecation warning about the ``omniscore``
    package's own code (``config.use_return_dict``), things its user neither called nor can change.
    Errors still show; the settings are restored after."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def consumer_scores(folder: Path, folder_format: str, encoder: Any, records: list[Record]) -> tuple[np.ndarray, list[list[int]]]:
    """Scores and token ids of ``records`` as the folder's consumer computes them from the text alone:
    ``transformers`` + the card's text (``hf``) or ``omniscore.OmniScorer`` (``omniscore``)."""
    import torch

    texts = [encoder.text(r) for r in records]
    if folder_format == "hf":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        enc = tok(texts, truncation=True, max_length=encoder.max_length, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits
        if logits.shape[-1] == len(DIMENSIONS):
            scores = (1 + 4 * torch.sigmoid(logits)).numpy()
        else:  # the classification head, as the model card reads it: [score, p(1..5)] per dimension
            probs = logits.view(-1, len(DIMENSIONS), NUM_LEVELS).softmax(-1)
            score = (probs * torch.arange(1, NUM_LEVELS + 1, dtype=probs.dtype)).sum(-1)
            scores = torch.cat([score[..., None], probs], dim=-1).numpy()
        return scores, [tok(t, truncation=True, max_length=encoder.max_length)["input_ids"] for t in texts]
    from omniscore import OmniScorer
    from omniscore.formatting import format_example

    layout = encoder.layout
    scorer = OmniScorer(str(folder), device="cpu", max_length=encoder.max_length, batch_size=len(records))
    kwargs = dict(
        references=[clean(r.reference) or None for r in records],
        sources=[source_text(r, layout.separator) or None for r in records],
        tasks=[given_task(r) for r in records] if layout.task_line else None,
    )
    scores = scorer.score([r.candidate for r in records], **kwargs).scores
    formatted = [
        format_example(r.candidate, reference=ref, source=src, task=task, input_format=scorer.input_format)
        for r, ref, src, task in zip(
            records, kwargs["references"], kwargs["sources"], kwargs["tasks"] or [None] * len(records), strict=True
        )
    ]
    return scores, [scorer.tokenizer(t, truncation=True, max_length=encoder.max_length)["input_ids"] for t in formatted]


def verify_folder(folder: Path, folder_format: str, params: Any, graphdef: Any, encoder: Any, records: list, tolerance: float) -> float:
    """Max |score difference| between the JAX model and the folder's consumer (and of every level
    probability, for the classification head); ids must match exactly wherever the training truncation
    and the consumer's agree (all inputs within ``max_length``)."""
    from flax import nnx

    from omnidistill.data.pipeline import collate
    from omnidistill.models.regressor import make_predict_fn

    examples = [encoder(r) for r in records]
    batch = collate(examples, pad_id=encoder.pad_id, buckets=(), batch_size=len(examples))
    levels = folder_format == "hf" and nnx.merge(graphdef, params).head_name == "classification"
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    ours = np.asarray(jax.jit(make_predict_fn(graphdef, levels=levels))(params, inputs))
    with quiet_transformers():
        theirs, their_ids = consumer_scores(folder, folder_format, encoder, records)
    exact = np.array([encoder.truncation == "right" or n <= encoder.max_length for n in encoder.full_lengths(records)])
    for record, example, ids, comparable in zip(records, examples, their_ids, exact, strict=True):
        if comparable and list(ids) != example["input_ids"].tolist():
            raise ExportError(f"record {record.id!r}: the {folder_format} consumer tokenizes the input differently from training")
    diff = float(np.max(np.abs(theirs - ours)[exact])) if exact.any() else 0.0
    if not np.isfinite(theirs).all() or diff > tolerance:
        raise ExportError(f"exported model differs from the JAX model: max |score diff| {diff:.2e} > {tolerance:.0e}")
    return diff


def consumer_available(folder_format: str) -> bool:
    """Whether the folder's consumer (torch + transformers, plus the omniscore package) is installed."""
    import importlib.util

    needed = ["torch", "transformers"] + (["omniscore"] if folder_format == "omniscore" else [])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        hint = OMNISCORE_INSTALL if "omniscore" in missing else "pip install torch==2.13.0"
        log.warning("%s not installed: skipping the check against the %s consumer (%s)", ", ".join(missing), folder_format, hint)
    return not missing


def written_by_export(folder: Path) -> bool:
    """Whether ``folder`` is an earlier export: its ``config.json`` has the ``omnidistill`` block."""
    try:
        return "omnidistill" in json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def check_out_dir(run_dir: Path, out_dir: Path) -> None:
    """Refuse an ``out_dir`` whose replacement would lose what export did not write: the run itself,
    a folder holding it, or an existing non-empty folder that is not an earlier export (a pretrained
    model, a home directory). Checked before any work."""
    run, out = run_dir.resolve(), out_dir.resolve()
    if out == run or out in run.parents:
        raise ExportError(f"{out_dir} holds the run {run_dir}, and export replaces its folder as a whole: export to another folder")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out_dir} is a file: export writes a folder")
    if out.is_dir() and any(out.iterdir()) and not written_by_export(out):
        raise ExportError(
            f"{out_dir} holds files that export did not write (no config.json with an 'omnidistill' block), and export "
            "replaces its folder as a whole: choose a new folder, or remove it"
        )


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    checkpoint: str = "best",
    verify: bool | None = None,
    tolerance: float = 1e-3,
    hub: HubTarget | None = None,
    dry_run: bool = False,
    folder_format: str = "auto",
    card: CardInfo | None = None,
) -> dict[str, Any]:
    """Write the ``hf`` or ``omniscore`` folder (atomically: a temporary sibling renamed at the end);
    returns a summary. ``verify=None`` checks whenever the consumer is installed. With ``hub``, the
    folder is then uploaded (``dry_run``: only listed, see :mod:`omnidistill.export.hub`); ``card``
    adds the Hub metadata of the model card (license, datasets, teacher)."""
    from flax import nnx
    from safetensors.numpy import save_file

    from omnidistill.data.sources import read_records
    from omnidistill.data.tokenize import RecordEncoder

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_out_dir(run_dir, out_dir)
    if hub and not dry_run:
        hub_token()  # no token: stop before the export's work, not after it
    cfg, graphdef, params, tokenizer, step = load_trained(run_dir, checkpoint)
    decoder = get_family(cfg.model.family).decoder
    folder_format = choose_format(cfg.model.pooling, cfg.model.head, folder_format, decoder=decoder, head_bias=cfg.model.head_bias)
    arch = nnx.merge(graphdef, params).arch
    encoder = RecordEncoder.from_config(tokenizer, cfg.data)
    settings = card_settings(cfg, encoder.layout)
    if folder_format == "hf":
        tensors = export_tensors(cfg.model.family, arch, params, cfg.model.pooling, cfg.model.head, cfg.model.head_bias)
        config = hf_config_dict(cfg.model.family, arch, settings, cfg.model.head)
        if decoder and config.get("pad_token_id") is None:  # the class finds the last token by pad_token_id
            config["pad_token_id"] = tokenizer.pad_token_id
    else:
        tensors = omniscore_tensors(cfg.model.family, arch, jax.device_get(params))
        check_finite(tensors)
        config = {**omniscore_config_dict(cfg, arch, encoder.layout), "omnidistill": settings}
    given, out_dir = out_dir, out_dir.resolve()  # "." and "x/.." have no name for the temporary sibling
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tokenizer.model_max_length = cfg.data.max_length
    tokenizer.save_pretrained(tmp)
    card = card or CardInfo()
    if card.model_name is None:
        card = dataclasses.replace(card, model_name=hub.repo_id.split("/")[-1] if hub else out_dir.name)
    (tmp / "README.md").write_text(model_card(run_dir, cfg, step, folder_format, encoder.layout, card), encoding="utf-8")
    summary: dict[str, Any] = {"out_dir": str(given), "step": step, "format": folder_format, "tensors": len(tensors), "verified": False}
    if verify is None:
        verify = consumer_available(folder_format)
    if verify:
        files = files_at_hand(cfg.data.test or cfg.data.dev or cfg.data.train)
        records = PROBE_RECORDS + (read_records(files, skip_invalid=True, keep=frozenset(cfg.data.keep_fields))[0][:14] if files else [])
        summary["max_abs_diff"] = verify_folder(tmp, folder_format, params, graphdef, encoder, records, tolerance)
        summary["verified"] = True
        summary["verified_with"] = "transformers" if folder_format == "hf" else "omniscore.OmniScorer"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    if hub:
        summary["hub"] = push_folder(out_dir, hub, dry_run=dry_run)
    return summary
