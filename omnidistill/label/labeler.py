"""Label a dataset with one or more LLM judges: prompts -> cached, retried requests -> strict parsing ->
aggregation. An item whose judges never give a valid answer is written to ``<output>.failed.jsonl``
with its errors and gets no label: scores are never invented.

``label_dist`` (the teacher's distribution over levels 1..5 per dimension) is written when there is more
than one judgment or ``logprobs`` is on. Each judgment gives a distribution per dimension: from its
token log-probabilities (:mod:`omnidistill.label.logprobs`), or else the point mass at its answer. The
judgments of one judge model are averaged (``samples: k`` gives the empirical distribution of its k
answers, or the mean of their log-probability distributions), then the judge models' distributions are
averaged with equal weights (their mixture). With ``logprobs``, ``labels`` is the expected value of
``label_dist``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from omnidistill import strict_json
from omnidistill.data.level_dist import expected_level, level_split
from omnidistill.data.own_fields import check_keep_fields
from omnidistill.data.schema import DataError, Record
from omnidistill.data.sources import read_records
from omnidistill.dimensions import DIMENSIONS
from omnidistill.label import checklist as ce
from omnidistill.label.aggregate import aggregate
from omnidistill.label.cache import DiskCache, request_key
from omnidistill.label.client import ChatClient, ClientError, EndpointError, RefusedSetting
from omnidistill.label.config import LabelConfig, check_label_config
from omnidistill.label.error_report import error_report_messages, parse_error_report
from omnidistill.label.logprobs import LogprobsError, judgment_distributions
from omnidistill.label.omniscore_prompts import PROMPTS, has_prompt, omniscore_messages, prompt_key, tasks_without_prompt
from omnidistill.label.parse import (
    JudgeOutputError,
    answer_start,
    parse_judgment,
    parse_list,
    parse_nested_judgment,
    parse_pairwise_choice,
)
from omnidistill.label.prompts import judge_messages
from omnidistill.runs.run_dir import atomic_write_text
from omnidistill.storage import expand_patterns, output_file

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Usage:
    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    invalid_answers: int = 0
    cut_answers: int = 0
    logprobs_fallbacks: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)


class Labeler:
    def __init__(self, cfg: LabelConfig, client: ChatClient | None = None):
        self.cfg = cfg
        self.client = client or ChatClient(
            cfg.base_url,
            os.environ.get(cfg.api_key_env),
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.backoff_s,
            max_tokens_field=cfg.max_tokens_field,
        )
        check_label_config(cfg)
        if cfg.samples > 1 and cfg.temperature == 0:
            log.warning(
                "samples=%d at temperature=0: each item's samples are the same request but for the seed, so nearly the same "
                "answer at %d times the cost; set temperature > 0 to sample the judge", cfg.samples, cfg.samples,
            )  # fmt: skip
        self.cache = DiskCache(cfg.cache_dir)
        self.usage = Usage()
        self.stopped: EndpointError | None = None
        """The first error that every request would meet: no request is sent after it."""

    def _ask(self, messages: list[dict[str, str]], model: str, sample: int, attempt: int, logprobs: bool = False) -> dict[str, Any]:
        """The answer (``text``, and ``logprobs`` when asked for), from the cache or the server."""
        payload = {
            "model": model,
            "messages": messages,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "sample": sample,
            "attempt": attempt,
        }
        top = self.cfg.top_logprobs if logprobs else None
        if top is not None:
            payload["top_logprobs"] = top
        key = request_key(payload)
        hit = self.cache.get(key)
        if hit is not None:
            self.usage.add(cached=1)
            return hit
        if self.stopped is not None:  # another item met an error that every request would meet
            raise type(self.stopped)(str(self.stopped))
        try:
            answer = self.client.complete(
                messages, model=model, temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, seed=sample, top_logprobs=top
            )
        except EndpointError as err:
            self.stopped = err
            raise
        self.usage.add(requests=answer.attempts, prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens)
        value = {"text": answer.text, "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens}
        if answer.finish_reason is not None:
            value["finish_reason"] = answer.finish_reason
        if top is not None:
            value["logprobs"] = answer.logprobs
        self.cache.put(key, value)
        return value

    def _valid(self, messages, model, sample, parser, *, distributions: bool = False):
        """Ask until the parser accepts the answer (1 + invalid_retries requests); raises the last error.
        ``distributions``: the result also gets ``dist`` ({dimension: [p1..p5]})."""
        error: Exception | None = None
        for attempt in range(self.cfg.invalid_retries + 1):
            answer = self._ask(messages, model, sample, attempt, logprobs=distributions and self.cfg.logprobs)
            try:
                result = parser(answer["text"])
                if distributions:
                    result["dist"] = self._distributions(answer, result["scores"], model)
                return result
            except JudgeOutputError as err:
                self.usage.add(invalid_answers=1)
                error = err
                if answer.get("finish_reason") == "length":  # asked again, it would be cut at the same length
                    self.usage.add(cut_answers=1)
                    raise JudgeOutputError(
                        f"{model}: the answer was cut at max_tokens={self.cfg.max_tokens} (finish_reason: length) and is "
                        f"incomplete ({err}); raise max_tokens in the label config"
                    ) from None
        raise JudgeOutputError(f"{model}: {error}")

    def _distributions(self, answer: dict[str, Any], scores: dict[str, float], model: str) -> dict[str, list[float]]:
        """One judgment's distribution per dimension: from its log-probabilities, else its answer."""
        if not self.cfg.logprobs:
            return answered(scores)
        if not answer.get("logprobs") and self.cfg.logprobs_fallback == "error":
            raise LogprobsUnavailable(
                f"{self.cfg.base_url} ({model}) answered without logprobs although logprobs: true asked for them; "
                "use a server that returns logprobs/top_logprobs, or set logprobs_fallback: answer (the answered score as a point mass)"
            )
        try:
            nested = self.cfg.prompt_set == "omniscore"
            return judgment_distributions(answer["text"], answer.get("logprobs"), nested=nested, min_mass=self.cfg.logprobs_min_mass)
        except LogprobsError as err:
            if self.cfg.logprobs_fallback == "error":
                raise JudgeOutputError(f"logprobs: {err}") from None
            self.usage.add(logprobs_fallbacks=1)
            return answered(scores)

    def request(self, record: Record, checklist: list[str] | None = None) -> tuple[list[dict[str, str]], Callable[[str], dict]]:
        """The judge messages for ``record`` under the configured prompt set and mode, and the parser of
        the answer (returning at least ``{"scores": {dimension: score}}``). ValueError: the item cannot
        be judged this way (a required field or the reference is missing)."""
        if self.cfg.mode == "error_report":
            return error_report_messages(record), parse_error_report
        if self.cfg.prompt_set == "omniscore":
            messages = omniscore_messages(record, reference_mode=self.cfg.reference_mode, checklist=checklist)
            confidence = PROMPTS[prompt_key(record)].confidence
            return messages, functools.partial(parse_nested_judgment, confidence=confidence, candidate=record.candidate)
        return judge_messages(record, reference_mode=self.cfg.reference_mode, checklist=checklist), lambda text: {
            "scores": parse_judgment(text)
        }

    def checklist(self, record: Record, model: str) -> list[str]:
        """CE-Judge steps 1-2 (see :mod:`omnidistill.label.checklist`): concepts of both sides, then the
        response-to-instruction items followed by the instruction-to-response items."""

        def ask(messages, key, bounds):
            return self._valid(messages, model, 0, functools.partial(parse_list, key=key, low=bounds[0], high=bounds[1]))

        instruction_concepts = ask(ce.concepts_messages(record, "instruction"), "concepts", ce.CONCEPTS)
        response_concepts = ask(ce.concepts_messages(record, "response"), "concepts", ce.CONCEPTS)
        from_response = ask(ce.checklist_messages(record, "response", instruction_concepts), "checklist", ce.FROM_RESPONSE)
        from_instruction = ask(ce.checklist_messages(record, "instruction", response_concepts), "checklist", ce.FROM_INSTRUCTION)
        return from_response + from_instruction

    def label(self, record: Record) -> dict[str, Any]:
        """{'judgments': [...], 'errors': [...], 'labels': {...} or None, 'teacher': {...}} for one record."""
        judgments, errors, checklists = [], [], {}
        for model in self.cfg.models:
            try:
                if self.cfg.mode == "checklist":  # the judge's prompt needs fields the item may lack: fail before paying for the checklist
                    self.request(record, [])
                items = self.checklist(record, model) if self.cfg.mode == "checklist" else None
                messages, parser = self.request(record, items)
            except (JudgeOutputError, ClientError, ValueError) as err:
                errors.append(f"{model}: {err}")
                continue
            if items:
                checklists[model] = items
            for sample in range(self.cfg.samples):
                try:
                    judgments.append({"model": model, "sample": sample, **self._valid(messages, model, sample, parser, distributions=True)})
                except (JudgeOutputError, ClientError) as err:
                    errors.append(str(err))
        scores = [j["scores"] for j in judgments]
        teacher: dict[str, Any] = {"prompt_set": self.cfg.prompt_set, "mode": self.cfg.mode}
        if self.cfg.prompt_set == "omniscore" and self.cfg.mode != "error_report":
            teacher["prompt"] = prompt_key(record) if has_prompt(record.task) else None
        teacher["judgments"] = [{k: v for k, v in j.items() if k not in ("scores", "dist")} for j in judgments]
        if checklists:
            teacher["checklists"] = checklists
        labels = aggregate(scores, self.cfg.aggregation) if scores else None
        label_dist = mixture(judgments) if judgments and (self.cfg.logprobs or len(judgments) > 1) else None
        if label_dist is not None and self.cfg.logprobs:
            labels = {d: float(expected_level(np.asarray(p))) for d, p in label_dist.items()}
        return {"judgments": judgments, "errors": errors, "labels": labels, "label_dist": label_dist, "teacher": teacher}

    def _run_all(self, fn: Callable[[Any], dict[str, Any]], items: list[Any], *, desc: str, unit: str) -> list[dict[str, Any]]:
        """``fn`` of every item, ``cfg.concurrency`` at a time. An :class:`EndpointError` stops the run:
        items not started are cancelled, and the error says that the answers so far are cached."""
        pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency))
        try:
            return list(tqdm(pool.map(fn, items), total=len(items), desc=desc, unit=unit, dynamic_ncols=True))
        except EndpointError as err:
            key_set = "" if os.environ.get(self.cfg.api_key_env) else ", which is not set"
            check = "" if isinstance(err, RefusedSetting) else f" (check base_url, models and the key in ${self.cfg.api_key_env}{key_set})"
            raise EndpointError(
                f"{err}; stopped: every request would fail the same way{check}. "
                f"The answers received so far are cached in {self.cfg.cache_dir}: a rerun does not ask for them again"
            ) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def label_file(self, inputs: list[str], output: str | Path, keep_fields: Sequence[str] = ()) -> dict[str, Any]:
        """Label every record of ``inputs``; writes ``output``, ``output.failed.jsonl`` and ``output.stats.json``.
        ``keep_fields``: fields of the user's own, written back into each line as they were (training
        reads them with ``data.keep_fields``)."""
        keep = check_keep_fields(keep_fields, "--keep-fields")
        inputs = expand_patterns(inputs, DataError)  # before the output check: a pattern may match an earlier output
        output = output_file(output, inputs, "labels")  # checked before the first request
        records, skipped = read_records(inputs, require_labels=False, keep=keep)
        if self.cfg.prompt_set == "omniscore" and self.cfg.mode != "error_report":
            unknown = tasks_without_prompt(records)
            if unknown:  # before any request: checklist mode would pay four requests an item before failing it
                raise ValueError(
                    f"prompt_set: omniscore has no prompt for the task {unknown}; its prompts judge the tasks qa, mt, "
                    "summarization, headline, paraphrase and chat: rename the items' task, or use prompt_set: flat"
                )
        results = self._run_all(self.label, records, desc="label", unit="item")
        labelled, failed = [], []
        for record, result in zip(records, results, strict=True):
            item = {
                k: v
                for k, v in dataclasses.asdict(record).items()
                if v not in (None, (), []) and k not in ("labels", "annotations", "label_dist", "extra")
            }
            item.update(record.extra or {})
            if result["labels"] is None:
                failed.append({**item, "label_errors": result["errors"]})
                continue
            item["labels"] = result["labels"]
            if result["label_dist"] is not None:
                item["label_dist"] = result["label_dist"]
            if len(result["judgments"]) > 1:
                item["annotations"] = [j["scores"] for j in result["judgments"]]
            if self.cfg.prompt_set != "flat" or self.cfg.mode != "direct":
                item["teacher"] = result["teacher"]  # confidence, rationales, issues, errors, checklists
            labelled.append(item)
        write_jsonl(output, labelled)
        write_jsonl(output.with_name(output.name + ".failed.jsonl"), failed)
        n_ok, n_failed = len(labelled), len(failed)
        u = self.usage
        cost = (u.prompt_tokens * self.cfg.price_input_per_mtok + u.completion_tokens * self.cfg.price_output_per_mtok) / 1e6
        stats = {
            "items": len(records),
            "labelled": n_ok,
            "failed": n_failed,
            "skipped_input": skipped,
            "requests": u.requests,
            "cached_answers": u.cached,
            "invalid_answers": u.invalid_answers,
            "cut_answers": u.cut_answers,
            "logprobs_fallbacks": u.logprobs_fallbacks,
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cost_usd": round(cost, 6),
        }
        agreement = judge_agreement([r["judgments"] for r in results])
        if agreement is not None:
            stats["agreement"] = agreement
        atomic_write_text(output.with_name(output.name + ".stats.json"), strict_json.dumps(stats, indent=2))
        return stats

    def compare(self, a: Record, b: Record) -> dict[str, Any]:
        """Pairwise verdicts of every judge model on two candidates for the same input (CE-Judge §3.3):
        a checklist per candidate, then 'Therefore, I choose A/B as the better response.'"""
        verdicts, errors = [], []
        for model in self.cfg.models:
            try:
                messages = ce.pairwise_messages(a, b, self.checklist(a, model), self.checklist(b, model))
                answer = self._valid(messages, model, 0, pairwise_verdict)
            except (JudgeOutputError, ClientError) as err:
                errors.append(f"{model}: {err}")
                continue
            verdicts.append({"model": model, "winner": a.id if answer["choice"] == "A" else b.id, **answer})
        wins = Counter(v["winner"] for v in verdicts)
        top = wins.most_common(2)
        winner = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None
        return {"id_a": a.id, "id_b": b.id, "winner": winner, "verdicts": verdicts, "errors": errors}

    def label_pairs(self, inputs: list[str], output: str | Path, keep_fields: Sequence[str] = ()) -> dict[str, Any]:
        """Pairwise preferences for every pair of candidates that share one input (all input fields equal).

        Writes ``output`` (one line per pair with a verdict: ids, ``winner`` by majority of the judge
        models or null on a tie, each model's verdict and feedback), ``output.failed.jsonl`` and
        ``output.stats.json``. Each field of ``keep_fields`` (the user's own, e.g. ``system``) is
        written as ``<name>_a`` and ``<name>_b``, the two candidates' values.
        """
        keep = check_keep_fields(keep_fields, "--keep-fields")
        inputs = expand_patterns(inputs, DataError)  # before the output check: a pattern may match an earlier output
        output = output_file(output, inputs, "labels")  # checked before the first request
        records, skipped = read_records(inputs, require_labels=False, keep=keep)
        groups: dict[str, list[Record]] = {}
        for r in records:
            groups.setdefault(ce.input_key(r), []).append(r)
        pairs = [(g[i], g[j]) for g in groups.values() for i in range(len(g)) for j in range(i + 1, len(g))]
        results = self._run_all(lambda p: self.compare(*p), pairs, desc="pairs", unit="pair")
        for (a, b), result in zip(pairs, results, strict=True):
            for name in sorted(keep):
                result[f"{name}_a"], result[f"{name}_b"] = (a.extra or {}).get(name), (b.extra or {}).get(name)
        done = [r for r in results if r["verdicts"]]
        failed = [r for r in results if not r["verdicts"]]
        write_jsonl(output, done)
        write_jsonl(output.with_name(output.name + ".failed.jsonl"), failed)
        stats = {
            "items": len(records),
            "pairs": len(pairs),
            "judged": len(done),
            "failed": len(failed),
            "skipped_input": skipped,
            "requests": self.usage.requests,
            "cached_answers": self.usage.cached,
            "invalid_answers": self.usage.invalid_answers,
            "cut_answers": self.usage.cut_answers,
        }
        atomic_write_text(output.with_name(output.name + ".stats.json"), strict_json.dumps(stats, indent=2))
        return stats


def pairwise_verdict(text: str) -> dict[str, str]:
    """A pairwise answer's choice and feedback: the answer after any reasoning block (``parse.answer_start``)."""
    return {"choice": parse_pairwise_choice(text), "feedback": text[answer_start(text) :].strip()}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """One JSON object per line, written atomically."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def answered(scores: dict[str, float]) -> dict[str, list[float]]:
    """The point mass at each answered (integer) score: a judgment's distribution without logprobs."""
    return {d: level_split(v).tolist() for d, v in scores.items()}


class LogprobsUnavailable(RuntimeError):
    """``logprobs: true`` but the server answers without log-probabilities: stops the run."""


def mixture(judgments: list[dict[str, Any]]) -> dict[str, list[float]]:
    """{dimension: [p1..p5]}: each judge model's judgments averaged, then the models averaged equally."""
    by_model: dict[str, list[dict[str, list[float]]]] = {}
    for j in judgments:
        by_model.setdefault(j["model"], []).append(j["dist"])
    out = {}
    for dim in DIMENSIONS:
        per_model = [np.mean([d[dim] for d in dists], axis=0) for dists in by_model.values() if all(dim in d for d in dists)]
        if per_model:
            out[dim] = [float(p) for p in np.mean(per_model, axis=0)]
    return out


def judge_agreement(judgments_per_item: list[list[dict]]) -> dict | None:
    """r*_wg(j) (uniform and maximum-disagreement nulls), and per dimension Fleiss' kappa and r_wg, among
    the judgments of each item (several judges or samples), over items with at least two."""
    from omnidistill.eval.agreement import category_counts, fleiss_kappa, mean_rwg, rwg_table

    rated = [[[j["scores"].get(d, np.nan) for d in DIMENSIONS] for j in js] for js in judgments_per_item if len(js) >= 2]
    if not rated:
        return None
    k = min(len(r) for r in rated)
    ratings = np.array([r[:k] for r in rated], np.float64)  # [items, judges, 4]
    return {
        "items": len(rated),
        "judgments_per_item": k,
        "rwg_star_uniform": mean_rwg(list(ratings), "uniform")["rwg_star"],
        "rwg_star_max_disagreement": mean_rwg(list(ratings), "max_disagreement")["rwg_star"],
        "fleiss_kappa": {d: fleiss_kappa(category_counts(ratings[:, :, i])) for i, d in enumerate(DIMENSIONS)},
        "rwg_by_dimension_uniform": rwg_table(ratings, None, "uniform")["all"],
        "rwg_by_dimension_max_disagreement": rwg_table(ratings, None, "max_disagreement")["all"],
    }
