"""Score (input, candidate) pairs with a trained omnidistill model: the library call users make most.

    from omnidistill import Scorer
    scorer = Scorer.load("runs/tiny")            # a run directory (orbax) or an exported HF folder
    scorer.score(candidates=["Paris is the capital."], questions=["What is the capital of France?"])
    # -> [{"informativeness": 4.1, "clarity": 4.6, "plausibility": 4.4, "faithfulness": 4.3}]

Items are sorted by token count and batched, up to ``eval.batch_tokens`` real tokens per device (1024 on one CPU device) for an
encoder that runs unpadded (BERT, XLM-R, DeBERTa, ModernBERT: its layers' per-token work skips the padding),
``batch_size`` items otherwise; each batch is padded to the next multiple of ``eval.length_step``
tokens (one compiled function per padded length, reused across calls). Results come back in input
order and are deterministic: the same inputs give the same scores, bit for bit, on the same device.

A model whose head gives a distribution over levels 1..5 (``classification``, ``ordinal``) also reports
an ``uncertainty`` per item and dimension: the standard deviation of that distribution, in score points
(0 when the model is sure of one level; at most 2, all mass split between 1 and 5).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from omnidistill.config import DataConfig
from omnidistill.data.level_dist import level_std
from omnidistill.data.schema import UNKNOWN, Record, surrogate_error, validate_record
from omnidistill.data.tokenize import EncodedInputs, RecordEncoder
from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS
from omnidistill.eval.predict import checked_compiler_options
from omnidistill.eval.program import ScoringProgram
from omnidistill.models.scan import unstack_layers
from omnidistill.runs.run_dir import is_run_directory

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """Scores in the ``omniscore`` package's result shape (its ``OmniScoreResult``), for code written for it."""

    score_names: tuple[str, ...]
    scores: np.ndarray
    """[N, len(score_names)], in input order."""
    uncertainty: np.ndarray | None = None
    """[N, len(score_names)] standard deviations of the predicted level distributions (None: the model's
    head gives no distribution)."""

    @property
    def overall(self) -> np.ndarray:
        """The mean of the dimensions, per item."""
        return self.scores.mean(axis=1)

    def mean(self) -> dict[str, float]:
        """Each dimension's mean over the items, and ``overall``."""
        out = {name: float(v) for name, v in zip(self.score_names, self.scores.mean(axis=0), strict=True)}
        out["overall"] = float(self.overall.mean())
        return out

    def to_list(self) -> list[dict[str, Any]]:
        """One dict per item: its scores and their mean (``overall``), and ``uncertainty`` when there is one."""
        out: list[dict[str, Any]] = [
            {**dict(zip(self.score_names, map(float, row), strict=True)), "overall": float(row.mean())} for row in self.scores
        ]
        if self.uncertainty is not None:
            for item, row in zip(out, self.uncertainty, strict=True):
                item["uncertainty"] = dict(zip(self.score_names, map(float, row), strict=True))
        return out


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What a model predicts for N items: scores, and the level distributions when its head has them."""

    scores: np.ndarray
    """[N, 4] on the 1-5 scale."""
    level_probs: np.ndarray | None = None
    """[N, 4, 5] probabilities of levels 1..5 (``classification`` and ``ordinal`` heads)."""
    truncated: int = 0
    """How many of the N inputs were over ``max_length`` tokens and cut (``data.truncation``)."""

    @property
    def uncertainty(self) -> np.ndarray | None:
        """[N, 4] standard deviation of each level distribution (None without one)."""
        return None if self.level_probs is None else level_std(self.level_probs).astype(np.float32)


def missing_as_none(value: Any) -> Any:
    """``None`` for a float NaN, which is how pandas marks a missing value (an empty CSV cell read by
    ``read_csv``, ``df.column.tolist()``), and for pandas' ``NA`` and ``NaT`` (nullable dtypes:
    ``convert_dtypes()``, ``dtype_backend=``), else ``value``: a missing text field is left out of the
    input, as ``None`` is, and a missing candidate gets no score. pandas is not imported: a value can
    be its ``NA`` only if the caller has imported it."""
    if isinstance(value, float) and math.isnan(value):
        return None
    pandas = sys.modules.get("pandas")
    if pandas is not None and (value is getattr(pandas, "NA", None) or value is getattr(pandas, "NaT", None)):
        return None
    return value


@dataclasses.dataclass
class Scorer:
    """A loaded model: parameters, graph, tokenizer, the run's input settings and the batch size."""

    graphdef: Any
    params: Any
    tokenizer: Any
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    """Input format, layout, truncation, max_length and length buckets the model was trained with."""
    batch_size: int = 64
    source: str = ""
    length_step: int = 32
    """Batches (sorted by token count) pad to the next multiple of this many tokens (``eval.length_step``)."""
    pack_length: int = 0
    """> 0: several items per row of this many tokens (``eval.pack_length``); 0: one item per padded row."""
    batch_tokens: int | None = None
    """Batches of up to this many real tokens per batch shard, the encoder's layers unpadded
    (``eval.batch_tokens``; an encoder that can, and no packing); 0: batches of ``batch_size`` items;
    None: 1024 on one CPU batch shard, else 0."""
    compiler_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """XLA options for the scoring program (``eval.compiler_options``), checked when the Scorer is made."""
    compute_dtype: str = "float32"
    """The dtype ``graphdef`` computes in (``eval.compute_dtype``; :meth:`load` builds it so)."""

    def __post_init__(self) -> None:
        self.compiler_options = checked_compiler_options(self.compiler_options, "eval.compiler_options")
        self.program = ScoringProgram.build(
            self.graphdef,
            self.params,
            max_length=self.max_length,
            batch_size=self.batch_size,
            length_step=self.length_step,
            pack_length=self.pack_length,
            batch_tokens=self.batch_tokens,
            compiler_options=self.compiler_options,
        )
        self.params = self.program.params
        self.encoder = RecordEncoder.from_config(self.tokenizer, self.data)

    @property
    def max_length(self) -> int:
        return self.data.max_length

    @property
    def has_uncertainty(self) -> bool:
        """The model's head gives level distributions, and so an ``uncertainty`` per score."""
        return self.program.levels

    def fingerprint(self) -> str:
        """A sha256 of what decides the scores: the input settings that make the token ids, and every
        parameter (the unrolled layout, in path order). The same model gives the same fingerprint
        however it was loaded; a retrained or other model does not."""
        digest = hashlib.sha256()
        settings = {k: getattr(self.data, k) for k in ("input_format", "truncation", "max_length")}
        if self.compute_dtype != "float32":  # bfloat16 scores differ from float32's (float32 fingerprints as before)
            settings["compute_dtype"] = self.compute_dtype
        digest.update(json.dumps({**settings, "layout": dataclasses.asdict(self.data.layout)}, sort_keys=True).encode())
        flat = nnx.traversals.flatten_mapping(unstack_layers(jax.device_get(self.params)))
        for path in sorted(flat, key=lambda p: tuple(map(str, p))):
            digest.update("/".join(map(str, path)).encode())
            digest.update(np.ascontiguousarray(flat[path], np.float32).tobytes())
        return digest.hexdigest()

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        batch_size: int = 64,
        checkpoint: str = "best",
        pack_length: int | None = None,
        batch_tokens: int | None = None,
        compiler_options: Mapping[str, Any] | None = None,
        compute_dtype: str | None = None,
    ) -> Scorer:
        """From a run directory (``config.yaml`` + orbax checkpoints), or an exported ``hf`` or
        ``omniscore`` folder (``config.json``), local or a Hugging Face Hub id (``org/name``, downloaded
        once into the Hub cache, as ``omniscore.OmniScorer`` takes one). ``pack_length``: packed rows of that many tokens (0: padded
        rows; default: the run's ``eval.pack_length``, 0 for an exported folder). ``batch_tokens``:
        real tokens per batch shard for an encoder that runs unpadded (0: ``batch_size`` items; default:
        the run's ``eval.batch_tokens``; unset: 1024 on one CPU batch shard, else 0). ``compiler_options``:
        XLA options for the scoring program, over the run's ``eval.compiler_options``. ``compute_dtype``:
        ``float32`` or ``bfloat16`` (default: the run's ``eval.compute_dtype``; ``float32`` for an exported
        folder)."""
        if not Path(path).exists():  # a Hub id, or a clear error naming both readings
            from omnidistill.models.hf_io import resolve_hf_dir

            path = resolve_hf_dir(str(path))
        path = Path(path)
        if is_run_directory(path):
            from omnidistill.runs.load import load_trained, scoring_dtype

            cfg, graphdef, params, tokenizer, _ = load_trained(path, checkpoint, compute_dtype)
            dtype = scoring_dtype(cfg, compute_dtype)
            pack = cfg.eval.pack_length if pack_length is None else pack_length
            tokens = cfg.eval.batch_tokens if batch_tokens is None else batch_tokens
            options = {**cfg.eval.compiler_options, **(compiler_options or {})}
            return cls(graphdef, params, tokenizer, cfg.data, batch_size, str(path), cfg.eval.length_step, pack, tokens, options, dtype)
        if (path / "config.json").exists():
            from omnidistill.models.loader import dtype_named, load_tokenizer
            from omnidistill.models.published import load_published

            dtype = compute_dtype or "float32"
            published = load_published(path, dtype_named(dtype))
            graphdef, state = nnx.split(published.model, nnx.Param)
            tokenizer = load_tokenizer(str(path))
            return cls(
                graphdef,
                nnx.to_pure_dict(state),
                tokenizer,
                published.data,
                batch_size,
                str(path),
                pack_length=pack_length or 0,
                batch_tokens=batch_tokens,
                compiler_options=dict(compiler_options or {}),
                compute_dtype=dtype,
            )
        raise FileNotFoundError(f"{path}: neither an omnidistill run directory nor a Hugging Face model folder")

    def warm_up(self, records: Sequence[Record] | None = None) -> None:
        """Compile the prediction function for the padded lengths ``records`` need (all of them when None),
        so that timings exclude compilation."""
        self.program.warm_up(None if records is None else self.encoder.full_lengths(list(records)))

    def score_records(
        self, records: Sequence[Record], *, progress: bool = False, encoder: RecordEncoder | None = None, batch_size: int | None = None
    ) -> np.ndarray:
        """Scores [N, 4] in record order (``encoder``: another input text than the model's own;
        ``batch_size``: batches of that many items, whatever :attr:`batch_tokens`)."""
        return self.predict(records, progress=progress, encoder=encoder, batch_size=batch_size).scores

    def predict(
        self,
        records: Sequence[Record],
        *,
        progress: bool = False,
        encoder: RecordEncoder | None = None,
        batch_size: int | None = None,
        encoded: EncodedInputs | None = None,
    ) -> Prediction:
        """:meth:`score_records` with the level distributions of a head that has them. ``encoded``: the
        records' token ids from ``encoder.encode_inputs(records)``, made ahead (not made again here)."""
        if not records:
            empty = np.zeros((0, len(DIMENSIONS)), np.float32)
            return Prediction(empty, np.zeros((0, len(DIMENSIONS), NUM_LEVELS), np.float32) if self.has_uncertainty else None)
        encoder = encoder or self.encoder
        if encoded is None:
            encoded = encoder.encode_inputs(records)  # one tokenizer pass gives the ids and the truncation count
        scores, level_probs = self.program.predict(encoded.ids, pad_id=encoder.pad_id, batch_size=batch_size, progress=progress)
        return Prediction(scores, level_probs, truncated=encoded.truncated)

    def warn_truncated(self, count: int) -> None:
        """Warn that ``count`` scored inputs were over the model's ``max_length`` and cut (none: silent)."""
        if count:
            truncation = self.encoder.truncation
            log.warning("%d input(s) exceed %d tokens and are truncated (data.truncation=%s)", count, self.max_length, truncation)

    def score(
        self,
        predictions: Sequence[str] | str | None = None,
        *,
        candidates: Sequence[str | None] | str | None = None,
        sources: Sequence[str | None] | str | None = None,
        references: Sequence[str | None] | str | None = None,
        questions: Sequence[str | None] | str | None = None,
        tasks: Sequence[str] | str | None = None,
        langs: Sequence[str] | str | None = None,
        contexts: Sequence[str | None] | str | None = None,
        titles: Sequence[str | None] | str | None = None,
        ids: Sequence[str] | None = None,
        datasets: Sequence[str | None] | str | None = None,
        src_langs: Sequence[str | None] | str | None = None,
        tgt_langs: Sequence[str | None] | str | None = None,
        group_ids: Sequence[str | None] | str | None = None,
        batch_size: int | None = None,
        max_length: int | None = None,
    ) -> list[dict[str, Any] | None] | ScoreResult:
        """Four scores per candidate (``None`` for an empty or missing candidate, with a warning), and under
        ``"uncertainty"`` their standard deviations when the model's head gives level distributions.
        ``candidates`` is a list of texts, or one string (one item). Each item is checked as a file's
        record is (:func:`validate_record`): a value of the wrong type, or a lone surrogate, is a
        ``ValueError`` naming the item and the field.

        Every field of the record schema can be given as a column (one value per candidate, or one
        value for all): the text fields (``questions``, ``sources``, ``references``, ``contexts``,
        ``titles``, and ``tasks`` where the input format has a task line) build the input text exactly
        as in training; the others only label the items.

        The ``omniscore`` package's call also works unchanged: ``score(predictions, sources=...,
        references=..., tasks=...)`` (the texts positional or as ``predictions=``, a list or one
        string) returns a :class:`ScoreResult` like its ``OmniScoreResult``
        (``score_names``, ``scores`` [N, 4], ``to_list()``, ``mean()``). ``batch_size`` is honoured;
        ``max_length`` must be the model's own (the length it was trained and exported with). Like the
        package, that call puts a given task into the text even when the model was trained without a
        task line (with a warning: such text is not what the model learnt from).
        """
        if (candidates is None) == (predictions is None):
            raise ValueError("pass candidates= (omnidistill) or predictions= (the omniscore package's call), exactly one")
        if max_length is not None and max_length != self.max_length:
            raise ValueError(f"max_length={max_length}: this model scores with its own max_length={self.max_length}")
        omniscore_call = predictions is not None
        given = predictions if omniscore_call else candidates
        # one string is one item, not its characters; a NaN is pandas' missing value (a column read by read_csv)
        texts = [given] if isinstance(given, str) else [missing_as_none(v) for v in given]
        n = len(texts)

        def column(values, name):
            if values is None or isinstance(values, str):
                return [values] * n
            values = [missing_as_none(v) for v in values]
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} items but {'predictions' if omniscore_call else 'candidates'} has {n}")
            return values

        fields = {
            "question": column(questions, "questions"),
            "source": column(sources, "sources"),
            "reference": column(references, "references"),
            "context": column(contexts, "contexts"),
            "title": column(titles, "titles"),
            "dataset": column(datasets, "datasets"),
            "src_lang": column(src_langs, "src_langs"),
            "tgt_lang": column(tgt_langs, "tgt_langs"),
            "group_id": column(group_ids, "group_ids"),
        }
        tsk, lng = column(tasks or UNKNOWN, "tasks"), column(langs or UNKNOWN, "langs")
        names = [None if i is None else str(i) for i in column(ids, "ids")]
        records, keep = [], []
        for i in range(n):
            if texts[i] is None or (isinstance(texts[i], str) and not texts[i].strip()):
                if omniscore_call:
                    raise ValueError(f"prediction {i} is empty or missing")
                log.warning("candidate %d is empty or missing: no score", i)
                continue
            # checked as a file's record is: a number, or a half emoji, is an error naming its item and field
            where = f"{'prediction' if omniscore_call else 'candidate'} {i}"
            item = {"id": names[i] or str(i), "task": tsk[i], "lang": lng[i], "candidate": texts[i]}
            item.update((name, values[i]) for name, values in fields.items() if values[i] is not None)
            if (error := surrogate_error(item, where)) is not None:
                raise error
            records.append(validate_record(item, where, require_labels=False))
            keep.append(i)
        encoder = self.encoder
        if omniscore_call and tasks is not None and not encoder.layout.task_line:
            log.warning("tasks= puts the task into the input text, as the omniscore package does; this model was trained without it")
            encoder = RecordEncoder(
                self.tokenizer, self.max_length, dataclasses.replace(encoder.layout, task_line=True), encoder.truncation
            )
        predicted = self.predict(records, encoder=encoder, batch_size=batch_size)
        self.warn_truncated(predicted.truncated)
        if omniscore_call:
            return ScoreResult(score_names=DIMENSIONS, scores=predicted.scores, uncertainty=predicted.uncertainty)
        out: list[dict[str, Any] | None] = [None] * n
        std = predicted.uncertainty
        for j, (i, row) in enumerate(zip(keep, predicted.scores, strict=True)):
            out[i] = dict(zip(DIMENSIONS, map(float, row), strict=True))
            if std is not None:
                out[i]["uncertainty"] = dict(zip(DIMENSIONS, map(float, std[j]), strict=True))
        return out
