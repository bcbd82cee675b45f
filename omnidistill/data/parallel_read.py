"""Read, check and tokenize a stream of records in worker processes, in chunks, in input order.

``omnidistill score`` on an accelerator is bound by its host once the device is fast: decoding a JSONL
line, checking it against the schema and tokenizing it take about 70 µs an item in Python, under one
lock (docs/benchmarks.md, "score's host work alone"). Here this process reads only the files' lines
(:attr:`~omnidistill.data.sources.StreamPass.units`: a JSONL line stays undecoded bytes), and worker
processes decode, check and tokenize whole chunks of them (and apply the caller's ``render``, e.g.
``score``'s output line heads); the chunks come back in the order they were read. The result is the
same as reading the :class:`~omnidistill.data.sources.RecordStream` in this process and calling
``encoder.encode_inputs`` on each chunk of it: the same records, token ids, truncation counts, errors
(raised when their chunk is taken, after every chunk before it), skipped counts and warnings.

Workers are started with ``spawn`` (a fork of a process that runs JAX's threads can deadlock), each
with a copy of the encoder, and ignore Ctrl-C, which this process handles. At most ``workers + 1``
chunks are read ahead, so memory stays flat in the input size.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice
from typing import Any

import numpy as np

from omnidistill.data.schema import DataError, Record
from omnidistill.data.sources import StreamPass, checked_record, decode_unit
from omnidistill.data.tokenize import EncodedInputs, RecordEncoder


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What a worker needs besides the lines: the encoder and the stream's reading options."""

    encoder: RecordEncoder
    render: Callable[[list[Record]], Any] | None
    skip_invalid: bool
    require_labels: bool
    keep: frozenset[str]
    threads: int


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """One chunk as a worker returns it: the valid records, their token ids as one flat array with each
    one's length (one buffer to pickle instead of an array per record), what ``render`` made of the
    records, and what was skipped or wrong."""

    records: list[Record]
    rendered: Any
    flat_ids: np.ndarray
    lengths: np.ndarray
    full_lengths: list[int]
    skipped: int
    error: DataError | None

    def ids(self) -> list[np.ndarray]:
        """Each record's token ids (views of the flat array)."""
        return list(np.split(self.flat_ids, np.cumsum(self.lengths)[:-1])) if len(self.lengths) else []


class _Rechunker:
    """The workers' chunks cut again into chunks of ``size`` valid records, where a pass in this process
    cuts them: a chunk of read lines holds fewer records when some were skipped, and a chunk's batches
    (so the padded lengths, so the float rounding of the scores) depend on which records it holds."""

    def __init__(self, max_length: int, rendered: bool):
        self.max_length = max_length
        self.records: list[Record] = []
        self.ids: list[np.ndarray] = []
        self.full_lengths: list[int] = []
        self.rendered: list[Any] | None = [] if rendered else None

    def __len__(self) -> int:
        return len(self.records)

    def add(self, prepared: _Prepared) -> None:
        self.records += prepared.records
        self.ids += prepared.ids()
        self.full_lengths += prepared.full_lengths
        if self.rendered is not None:
            self.rendered += prepared.rendered

    def take(self, n: int) -> tuple[list[Record], EncodedInputs, Any]:
        """The first ``n`` records held, their :class:`EncodedInputs` (truncated: those over
        ``max_length``, as ``encode_inputs`` counts them; a worker's count is of its own chunk) and
        their part of ``render``'s lists."""
        records, self.records = self.records[:n], self.records[n:]
        ids, self.ids = self.ids[:n], self.ids[n:]
        full, self.full_lengths = self.full_lengths[:n], self.full_lengths[n:]
        rendered = None
        if self.rendered is not None:
            rendered, self.rendered = self.rendered[:n], self.rendered[n:]
        return records, EncodedInputs(ids, full, sum(length > self.max_length for length in full)), rendered


_SETTINGS: _Settings | None = None
"""The worker process's settings (set once by :func:`_start_worker`)."""


def _start_worker(settings: _Settings) -> None:
    global _SETTINGS
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and shuts the workers down
    os.environ["RAYON_NUM_THREADS"] = str(settings.threads)  # the tokenizer's thread pool, before its first use
    _SETTINGS = settings


def _prepare(units: list[tuple[str, Any]]) -> _Prepared:
    """Decode, check and tokenize one chunk of :func:`~omnidistill.data.sources.iter_units`' items (in a worker). The first invalid
    record ends the chunk with its error unless invalid ones are skipped (and counted)."""
    settings = _SETTINGS
    assert settings is not None, "a worker of parallel_read runs _start_worker first"
    records, skipped = [], 0
    for where, unit in units:
        try:
            record = checked_record(
                where,
                decode_unit(where, unit),
                skip_invalid=settings.skip_invalid,
                require_labels=settings.require_labels,
                keep=settings.keep,
            )
        except DataError as err:
            return _Prepared([], None, np.zeros(0, np.int32), np.zeros(0, np.int64), [], skipped, err)
        if record is None:
            skipped += 1
        else:
            records.append(record)
    encoded = settings.encoder.encode_inputs(records)
    lengths = np.array([len(x) for x in encoded.ids], np.int64)
    flat = np.concatenate(encoded.ids) if encoded.ids else np.zeros(0, np.int32)
    rendered = settings.render(records) if settings.render else None
    return _Prepared(records, rendered, flat, lengths, encoded.full_lengths, skipped, None)


def _chunks_of(units: Iterator[tuple[str, Any]], size: int) -> Iterator[list[tuple[str, Any]]]:
    """``units`` in lists of ``size`` (the last one shorter)."""
    while chunk := list(islice(units, size)):
        yield chunk


def parallel_encoded_chunks(
    stream_pass: StreamPass,
    encoder: RecordEncoder,
    size: int,
    workers: int,
    *,
    render: Callable[[list[Record]], Any] | None = None,
    threads: int | None = None,
) -> Iterator[tuple[list[Record], EncodedInputs, Any]]:
    """(records, their :class:`EncodedInputs`, ``render(records)``) of the rest of ``stream_pass`` in
    chunks of ``size`` records (the last one shorter), the chunks a pass in this process makes, read in
    order, decoded, checked, tokenized and rendered by ``workers`` processes (module docstring;
    ``render``: a module-level function giving a list with an entry per record, or None). ``threads``: the
    tokenizer's threads in each worker (default: the cores shared out among the workers and this
    process). After the last chunk the pass is finished (:meth:`StreamPass.finish`): the stream's
    ``skipped`` and ``duplicate_ids`` are set as a pass in this process sets them."""
    if workers < 1:
        raise ValueError(f"parallel_encoded_chunks needs at least one worker, got {workers}")
    threads = threads or max(1, (os.cpu_count() or 1) // (workers + 1))
    stream = stream_pass.stream
    settings = _Settings(encoder, render, stream.skip_invalid, stream.require_labels, stream.keep, threads)
    chunks = _chunks_of(stream_pass.units, size)
    pending: deque[Future[_Prepared]] = deque()
    read_error: DataError | None = None
    held = _Rechunker(encoder.max_length, rendered=render is not None)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker, initargs=(settings,))
    try:

        def read_ahead() -> None:
            nonlocal read_error
            while read_error is None and len(pending) <= workers:
                try:
                    units = next(chunks, None)
                except DataError as err:  # the file's own error: raised after every chunk read before it
                    read_error = err
                    return
                if units is None:
                    return
                pending.append(pool.submit(_prepare, units))

        read_ahead()
        while pending:
            prepared = pending.popleft().result()
            read_ahead()
            stream_pass.tally(prepared.records, prepared.skipped)
            if prepared.error is not None:  # the records held, less than a chunk, are lost with it, as in one process
                raise prepared.error
            held.add(prepared)
            while len(held) >= size:
                yield held.take(size)
        if read_error is not None:
            raise read_error
        if held:
            yield held.take(len(held))
        stream_pass.finish()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
