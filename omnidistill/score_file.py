"""Score files of any size: stream the input in chunks, write each chunk's lines as soon as they are
scored, and continue an interrupted output with ``resume``.

Memory stays flat in the input size: records are read one at a time (:class:`RecordStream`), only one
chunk is held, and the per-group means are running sums. An output line is the input item's fields
plus ``scores`` (and ``uncertainty`` for a model with level distributions), in input order; with
``as_labels``, ``labels`` (and ``label_dist``) instead, a training file for another model.
``resume`` keeps every complete line already written, drops a cut last line, checks that the kept
lines are the input's first items (by id: a record without an id is named by its file and line), and
scores only the rest; input ids must then be unique.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from omnidistill import strict_json
from omnidistill.data.own_fields import ALWAYS_GROUPED, check_group_by, check_keep_fields, fields_to_read, group_value
from omnidistill.data.parallel_read import parallel_encoded_chunks
from omnidistill.data.preference_file import Preference
from omnidistill.data.schema import DataError, Record
from omnidistill.data.sources import RecordStream, StreamPass, refuse_duplicate_ids
from omnidistill.data.tokenize import EncodedInputs, RecordEncoder
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.preferences import preference_agreement, preference_ids
from omnidistill.runs.run_dir import atomic_write_text
from omnidistill.storage import existing_files, input_path, output_file

log = logging.getLogger(__name__)

CHUNK = 4096
OUTPUT_FIELDS = tuple(f.name for f in dataclasses.fields(Record) if f.name not in ("labels", "annotations", "label_dist", "extra"))
"""The record's fields an output line repeats (its text fields; the labels are left out). Read one by one:
``dataclasses.asdict`` deep-copies every field and took 30% of scoring a tiny model's file."""


def _item(record: Record) -> dict[str, Any]:
    """The record's fields that are set, without labels, and the user's own (``--keep-fields``) as they were."""
    item = {k: v for k in OUTPUT_FIELDS if (v := getattr(record, k)) not in (None, (), [])}
    if record.extra:
        item.update(record.extra)
    return item


def output_heads(records: Sequence[Record]) -> list[str]:
    """Each record's output line up to its scores: the JSON object of :func:`_item` without its closing
    brace. Made where the chunk is read (a worker process with ``--input-workers``), so that the loop
    that writes the lines only appends the numbers."""
    return [json.dumps(_item(r), ensure_ascii=False)[:-1] for r in records]


def _pair(key: str, values: Sequence[Any]) -> str:
    """``, "key": {dimension: value, ...}``: one field of an output line after its head."""
    return f", {json.dumps(key)}: {json.dumps(dict(zip(DIMENSIONS, values, strict=True)))}"


def _closed(head: str, tail: str) -> str:
    """``head`` (:func:`output_heads`) with ``tail`` (:func:`_pair` fields) and the closing brace: the same
    text as ``json.dumps`` of the item with those fields added last."""
    return (head + tail.removeprefix(", ") if head == "{" else head + tail) + "}\n"


def score_lines(heads: Sequence[str], scores: np.ndarray, uncertainty: np.ndarray | None = None) -> str:
    """The output lines of records with these :func:`output_heads`: each one's fields that are set,
    without labels, plus its row of ``scores`` (and of ``uncertainty``, the standard deviations of a
    level-distribution head), joined."""
    rows = scores.tolist()  # Python floats at once, not each number of each row on its own
    if uncertainty is None:
        return "".join(_closed(h, _pair("scores", s)) for h, s in zip(heads, rows, strict=True))
    stds = uncertainty.tolist()
    return "".join(_closed(h, _pair("scores", s) + _pair("uncertainty", u)) for h, s, u in zip(heads, rows, stds, strict=True))


def label_lines(heads: Sequence[str], scores: np.ndarray, level_probs: np.ndarray | None = None) -> str:
    """``score --as-labels``: the lines of records with these :func:`output_heads`, each with the
    model's scores as its ``labels`` and, for a level-distribution head, its distributions as
    ``label_dist``, so that the output is a training file for another model (a large student distilled
    into a small one on unlabelled text). The scores are clipped to [1, 5] and each distribution
    renormalised in float64, as the schema checks them; a line reads back with the same numbers (within
    float32 rounding of the distributions)."""
    rows = np.clip(np.asarray(scores, np.float64), 1.0, 5.0).tolist()
    if level_probs is None:
        return "".join(_closed(h, _pair("labels", row)) for h, row in zip(heads, rows, strict=True))
    probs = np.asarray(level_probs, np.float64)
    dists = (probs / probs.sum(axis=-1, keepdims=True)).tolist()
    return "".join(_closed(h, _pair("labels", row) + _pair("label_dist", d)) for h, row, d in zip(heads, rows, dists, strict=True))


@dataclasses.dataclass
class GroupMeans:
    """Running sums of the scores overall and per value of each of ``fields`` (task, language, and the
    fields of ``--group-by``)."""

    fields: tuple[str, ...] = ALWAYS_GROUPED
    sums: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def add(self, record: Record, scores: np.ndarray) -> None:
        scores = np.asarray(scores, np.float64)
        for group in ("all", *(f"{field}={group_value(record, field)}" for field in self.fields)):
            self._add(group, scores, 1)

    def add_chunk(self, records: Sequence[Record], scores: np.ndarray) -> None:
        """:meth:`add` of each record and its row of ``scores`` [N, 4], summed per group in numpy (a
        loop per item cost 4.6 µs an item, a third of writing its line)."""
        if not len(records):
            return
        scores = np.asarray(scores, np.float64)
        if len(scores) != len(records):
            raise ValueError(f"{len(records)} records but {len(scores)} rows of scores")
        self._add("all", scores.sum(axis=0), len(records))
        for field in self.fields:
            names, group = np.unique([group_value(r, field) for r in records], return_inverse=True)
            sums = np.zeros((len(names), scores.shape[1]))
            np.add.at(sums, group, scores)
            for name, total, count in zip(names, sums, np.bincount(group), strict=True):
                self._add(f"{field}={name}", total, int(count))

    def _add(self, group: str, total: np.ndarray, count: int) -> None:
        self.sums[group] = self.sums.get(group, 0.0) + total
        self.counts[group] = self.counts.get(group, 0) + count

    def _order(self) -> list[str]:
        """The groups: all, then each field's values in order."""
        return ["all", *(g for field in self.fields for g in sorted(g for g in self.sums if g.startswith(f"{field}=")))]

    def _means(self, group: str) -> dict[str, float]:
        return dict(zip(DIMENSIONS, (self.sums[group] / self.counts[group]).tolist(), strict=True))

    def table(self) -> str:
        """Markdown: items and mean scores per group (all, then each field's values in order)."""
        lines = ["| group | items | " + " | ".join(DIMENSIONS) + " |", "|---|---:|" + "---:|" * len(DIMENSIONS)]
        for g in self._order():
            lines.append(f"| {g} | {self.counts[g]} | " + " | ".join(f"{v:.3f}" for v in self._means(g).values()) + " |")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """``{"items", "means", "by": {field: {value: {"items", "means"}}}}`` (``OUTPUT.means.json``)."""
        out: dict[str, Any] = {"items": self.counts.get("all", 0), "means": self._means("all") if "all" in self.sums else {}, "by": {}}
        for group in self._order()[1:]:
            field, value = group.split("=", 1)
            out["by"].setdefault(field, {})[value] = {"items": self.counts[group], "means": self._means(group)}
        return out


def drop_cut_line(output: Path) -> None:
    """Remove an interrupted write's last line, if it has no newline (the file is read from its end)."""
    with output.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        pos, end = size, 0
        while pos > 0:
            step = min(1 << 16, pos)
            f.seek(pos - step)
            at = f.read(step).rfind(b"\n")
            if at >= 0:
                end = pos - step + at + 1
                break
            pos -= step
        if end < size:
            f.truncate(end)


def encoded_chunks(
    records: Iterator[Record], size: int, encoder: RecordEncoder, render: Callable[[list[Record]], Any]
) -> Iterator[tuple[list[Record], EncodedInputs, Any]]:
    """Chunks of ``size`` records with their token ids (``encoder.encode_inputs``) and ``render(records)``,
    in order. While the caller scores one chunk, the next is read and
    tokenized in a worker thread: the tokenizer's Rust code runs without the GIL, so on an accelerator
    the host's input work overlaps the device's scoring instead of leaving it idle between chunks. Two
    chunks are held at most. An input error is raised when its chunk is taken, after the chunks before it."""

    def read() -> tuple[list[Record], EncodedInputs | None, Any]:
        chunk = list(islice(records, size))
        if not chunk:
            return chunk, None, None
        return chunk, encoder.encode_inputs(chunk), render(chunk)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="score-input") as worker:
        ahead = worker.submit(read)
        while True:
            chunk, encoded, rendered = ahead.result()
            if encoded is None:
                return
            ahead = worker.submit(read)
            yield chunk, encoded, rendered


def input_chunks(
    stream_pass: StreamPass, records: Iterator[Record], size: int, encoder: RecordEncoder, workers: int
) -> Iterator[tuple[list[Record], EncodedInputs, list[str]]]:
    """The rest of the input in chunks with their token ids and :func:`output_heads`: read and tokenized
    in a worker thread (:func:`encoded_chunks` over ``records``, the pass's records here) with
    ``workers`` 0, else in that many worker processes
    (:func:`~omnidistill.data.parallel_read.parallel_encoded_chunks`), the same chunks' records, ids and
    heads either way."""
    if workers:
        return parallel_encoded_chunks(stream_pass, encoder, size, workers, render=output_heads)
    return encoded_chunks(records, size, encoder, output_heads)


AUTO_WORKERS_MIN_BYTES = 32 << 20
"""Inputs smaller than this (about 50,000 lines of the sample's kind, a few seconds of host work) are
read in a thread by default: worker processes take 2-4 s to start."""


def input_bytes(inputs: Sequence[str | Path]) -> int | None:
    """The inputs' size on disk (compressed as they are), or None when a size cannot be had."""
    try:
        return sum(input_path(p).stat().length for p in inputs)
    except (OSError, AttributeError, NotImplementedError):
        return None


def auto_input_workers(backend: str, cores: int | None = None, size: int | None = None) -> int:
    """``score --input-workers``' default: none on a CPU backend (reading and tokenizing would take the
    cores the model runs on; a worker thread reads ahead instead) or for inputs of under
    :data:`AUTO_WORKERS_MIN_BYTES` (``size``; None: unknown, taken as large), else one process per 4
    of the host's cores, at most 4: on an accelerator the host's reading, checking and tokenizing bound
    ``score`` (docs/scoring.md)."""
    cores = (os.cpu_count() or 1) if cores is None else cores
    if backend == "cpu" or (size is not None and size < AUTO_WORKERS_MIN_BYTES):
        return 0
    return min(4, cores // 4)


def means_file(output: Path) -> Path:
    """``OUTPUT.means.json``: the mean scores of every output line, overall and per group (:meth:`GroupMeans.as_dict`)."""
    return output.with_name(output.name + ".means.json")


def pairs_file(output: Path) -> Path:
    """``OUTPUT.pairs.json``: the scores' agreement with ``--pairs`` (:func:`~omnidistill.eval.preferences.preference_agreement`)."""
    return output.with_name(output.name + ".pairs.json")


class PairedScores:
    """The scores and tasks of the items ``--pairs`` names, by id, gathered while scoring: only those,
    so that memory grows with the pairs, not with the file."""

    def __init__(self, ids: set[str]):
        self.ids = ids
        self.scores: dict[str, np.ndarray] = {}
        self.tasks: dict[str, str] = {}

    def add(self, records: Sequence[Record], scores: np.ndarray) -> None:
        if not self.ids:
            return
        for record, row in zip(records, scores, strict=True):
            if record.id in self.ids:
                self.scores[record.id] = np.asarray(row, np.float64)
                self.tasks[record.id] = record.task


def scorer_file(output: Path) -> Path:
    """``OUTPUT.scorer.json``: which model wrote ``output`` (its source and :meth:`Scorer.fingerprint`)."""
    return output.with_name(output.name + ".scorer.json")


def scorer_record(scorer: Any, as_labels: bool) -> dict[str, Any]:
    """What ``OUTPUT.scorer.json`` holds: the model's source and fingerprint, and ``as_labels`` when the
    lines hold ``labels`` (``score --as-labels``)."""
    return {"model": scorer.source, "fingerprint": scorer.fingerprint(), **({"as_labels": True} if as_labels else {})}


def check_same_scorer(output: Path, scorer: Any, as_labels: bool = False) -> None:
    """Refuse to continue ``output`` with another model than the one that wrote it (its lines would mix
    two models' scores), or with and without ``--as-labels`` (its lines would mix two formats). An
    output without ``OUTPUT.scorer.json`` (written before it existed) is continued with a warning."""
    path = scorer_file(output)
    if not path.is_file():
        log.warning("%s has no %s: cannot check that %s wrote it", output, path.name, scorer.source)
        return
    saved = json.loads(path.read_text(encoding="utf-8"))
    if saved.get("fingerprint") != scorer.fingerprint():
        raise ValueError(
            f"{output} was scored by {saved.get('model')} ({path.name}), and {scorer.source} is another model "
            "(other parameters or input settings): resume with that model, or score into a new file"
        )
    if saved.get("as_labels", False) != as_labels:
        written, asked = ("with", "without") if saved.get("as_labels", False) else ("without", "with")
        raise ValueError(f"{output} was written {written} --as-labels ({path.name}): resume it {written} --as-labels, not {asked}")


def check_paths(
    inputs: Sequence[str | Path], output: str | Path, resume: bool, keep_fields: Sequence[str] = (), group_by: Sequence[str] = ()
) -> tuple[list[str | Path], Path]:
    """What ``score`` can check before loading a model: ``keep_fields`` names no field the schema or the
    output line has and ``group_by`` fields to group by (:mod:`omnidistill.data.own_fields`), every
    input exists (a glob pattern is replaced by the files it matches, before the output exists, so that
    it never matches the output), the output is not one of them and holds nothing unless resuming.
    Makes the output's folder; returns the input files and the output path."""
    check_keep_fields(keep_fields, "--keep-fields")
    check_group_by(group_by, "--group-by")
    inputs = existing_files(inputs, DataError)
    output = output_file(output, inputs, "scores")
    if not resume and output.exists() and output.stat().st_size:
        raise FileExistsError(f"{output} exists: pass --resume to continue it, or remove it")
    return inputs, output


def score_file(
    scorer: Any,
    inputs: Sequence[str | Path],
    output: str | Path,
    *,
    resume: bool = False,
    skip_invalid: bool = False,
    chunk: int = CHUNK,
    progress: bool = False,
    keep_fields: Sequence[str] = (),
    group_by: Sequence[str] = (),
    pairs: Sequence[Preference] | None = None,
    as_labels: bool = False,
    input_workers: int = 0,
) -> dict[str, Any]:
    """Score ``inputs`` into ``output`` chunk by chunk (``keep_fields``: fields of the user's own, written
    back beside the scores; ``as_labels``: lines of :func:`label_lines`, a training file;
    ``input_workers``: processes that read, check and tokenize the input, :func:`input_chunks`; the
    output is the same with any number).

    Returns ``{"items", "resumed", "scored", "skipped", "truncated", "means"}`` (``means``: a
    :class:`GroupMeans` over every output line, by task, language and each ``group_by`` field, which is
    read as a kept field when it is not the schema's; also written to ``OUTPUT.means.json``). With
    ``pairs`` (a teacher's pairwise preferences, :func:`~omnidistill.data.preference_file.read_preferences`)
    also ``"pairs"``: the scores' agreement with them over every output line
    (:func:`~omnidistill.eval.preferences.preference_agreement`), written to ``OUTPUT.pairs.json``;
    only the paired items' scores are kept for it."""
    inputs, output = check_paths(inputs, output, resume, keep_fields, group_by)
    group_by = check_group_by(group_by, "--group-by")
    paired = PairedScores(preference_ids(list(pairs or ())))
    resuming = resume and output.exists()
    joins = [
        *(["score --resume matches the output to the input by id"] if resuming else []),
        *(["score --pairs joins the pairs to the items by id"] if pairs is not None else []),
    ]
    if joins:  # one read of the input for both
        refuse_duplicate_ids(inputs, "; ".join(joins))
    if resuming:
        check_same_scorer(output, scorer, as_labels)
        drop_cut_line(output)
    else:
        atomic_write_text(scorer_file(output), json.dumps(scorer_record(scorer, as_labels), indent=2))
    field = "labels" if as_labels else "scores"
    stream = RecordStream(list(inputs), skip_invalid=skip_invalid, require_labels=False, keep=fields_to_read(keep_fields, group_by))
    stream_pass = stream.start_pass()
    records = stream_pass.records()
    means = GroupMeans(ALWAYS_GROUPED + group_by)
    kept = 0
    if resuming:  # the kept lines must be the input's first items, in order; their scores feed the means
        with output.open(encoding="utf-8") as f:
            for kept, line in enumerate(f, start=1):
                try:
                    item = json.loads(line)
                    want, scores = str(item["id"]), np.array([item[field][d] for d in DIMENSIONS], np.float64)
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise DataError(f"{output}:{kept}: not an output line of omnidistill score (JSON with id and {field})") from None
                record = next(records, None)
                if record is None:
                    raise DataError(f"{output}:{kept}: the output has more lines than the input has items")
                if record.id != want:
                    raise DataError(f"{output}:{kept}: id {want!r}, but input item {kept} is {record.id!r}: not this input's output")
                means.add(record, scores)
                paired.add([record], scores[None])
    scored = truncated = 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="score", unit="item", initial=kept, dynamic_ncols=True)
    try:
        # closed at an error too: the worker thread's or processes' reads end first
        chunks = closing(input_chunks(stream_pass, records, chunk, scorer.encoder, input_workers))
        with output.open("a" if resuming else "w", encoding="utf-8") as f, chunks as encoded_input:
            for batch, encoded, heads in encoded_input:
                predicted = scorer.predict(batch, encoded=encoded)
                truncated += predicted.truncated
                scores = predicted.scores
                if as_labels:
                    f.write(label_lines(heads, scores, predicted.level_probs))
                else:
                    f.write(score_lines(heads, scores, predicted.uncertainty))
                f.flush()
                os.fsync(f.fileno())
                means.add_chunk(batch, scores)
                paired.add(batch, scores)
                scored += len(batch)
                if bar is not None:
                    bar.update(len(batch))
    except BaseException:
        if not resuming and not scored:  # an error before the first line: no empty output left behind
            output.unlink(missing_ok=True)
            scorer_file(output).unlink(missing_ok=True)
        raise
    finally:  # an input error then starts its own line, not the bar's
        if bar is not None:
            bar.close()
    scorer.warn_truncated(truncated)
    atomic_write_text(means_file(output), strict_json.dumps(means.as_dict(), indent=2))
    done = {"items": kept + scored, "resumed": kept, "scored": scored, "skipped": stream.skipped, "truncated": truncated, "means": means}
    if pairs is not None:
        done["pairs"] = preference_agreement(list(pairs), paired.scores, paired.tasks)
        atomic_write_text(pairs_file(output), strict_json.dumps(done["pairs"], indent=2))
    return done
