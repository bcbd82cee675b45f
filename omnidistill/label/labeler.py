"""Label a dataset with one or more LLM judges: prompts -> cached, retried requests -> strict parsing ->
aggregation. An item whose judges never give a valid answer is written to ``<output>.failed.jsonl``
with its errors and gets no label: scores are never invented.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from omnidistill.data.schema import Record
from omnidistill.data.sources import read_records
from omnidistill.label import checklist as ce
from omnidistill.label.aggregate import aggregate
from omnidistill.label.cache import DiskCache, request_key
from omnidistill.label.client import ChatClient, ClientError
from omnidistill.label.config import LabelConfig
from omnidistill.label.error_report import error_report_messages, parse_error_report
from omnidistill.label.omniscore_prompts import PROMPTS, omniscore_messages, prompt_key
from omnidistill.label.parse import JudgeOutputError, parse_judgment, parse_list, parse_nested_judgment, parse_pairwise_choice
from omnidistill.label.prompts import judge_messages

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Usage:
    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    invalid_answers: int = 0

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
            cfg.base_url, os.environ.get(cfg.api_key_env), timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, backoff_s=cfg.backoff_s
        )
        self.cache = DiskCache(cfg.cache_dir)
        self.usage = Usage()

    def _ask(self, messages: list[dict[str, str]], model: str, sample: int, attempt: int) -> str:
        payload = {
            "model": model,
            "messages": messages,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "sample": sample,
            "attempt": attempt,
        }
        key = request_key(payload)
        hit = self.cache.get(key)
        if hit is not None:
            self.usage.add(cached=1)
            return hit["text"]
        answer = self.client.complete(messages, model=model, temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, seed=sample)
        self.usage.add(requests=answer.attempts, prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens)
        self.cache.put(key, {"text": answer.text, "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens})
        return answer.text

    def _valid(self, messages, model, sample, parser):
        """Ask until the parser accepts the answer (1 + invalid_retries requests); raises the last error."""
        error: Exception | None = None
        for attempt in range(self.cfg.invalid_retries + 1):
            text = self._ask(messages, model, sample, attempt)
            try:
                return parser(text)
            except JudgeOutputError as err:
                self.usage.add(invalid_answers=1)
                error = err
        raise JudgeOutputError(f"{model}: {error}")

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
                items = self.checklist(record, model) if self.cfg.mode == "checklist" else None
                messages, parser = self.request(record, items)
            except (JudgeOutputError, ClientError, ValueError) as err:
                errors.append(f"{model}: {err}")
                continue
            if items:
                checklists[model] = items
            for sample in range(self.cfg.samples):
                try:
                    judgments.append({"model": model, "sample": sample, **self._valid(messages, model, sample, parser)})
                except (JudgeOutputError, ClientError) as err:
                    errors.append(str(err))
        scores = [j["scores"] for j in judgments]
        teacher: dict[str, Any] = {"prompt_set": self.cfg.prompt_set, "mode": self.cfg.mode}
        if self.cfg.prompt_set == "omniscore" and self.cfg.mode != "error_report":
            teacher["prompt"] = prompt_key(record) if record.task in ("qa", "chat", *PROMPTS) else None
        teacher["judgments"] = [{k: v for k, v in j.items() if k != "scores"} for j in judgments]
        if checklists:
            teacher["checklists"] = checklists
        return {
            "judgments": judgments,
            "errors": errors,
            "labels": aggregate(scores, self.cfg.aggregation) if scores else None,
            "teacher": teacher,
        }

    def label_file(self, inputs: list[str], output: str | Path) -> dict[str, Any]:
        """Label every record of ``inputs``; writes ``output``, ``output.failed.jsonl`` and ``output.stats.json``."""
        records, skipped = read_records(inputs, require_labels=False)
        output = Path(output)
        failed_path = output.with_name(output.name + ".failed.jsonl")
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            results = list(tqdm(pool.map(self.label, records), total=len(records), desc="label", unit="item", dynamic_ncols=True))
        n_ok = n_failed = 0
        with output.open("w", encoding="utf-8") as out, failed_path.open("w", encoding="utf-8") as failed:
            for record, result in zip(records, results, strict=True):
                item = {
                    k: v for k, v in dataclasses.asdict(record).items() if v not in (None, (), []) and k not in ("labels", "annotations")
                }
                if result["labels"] is None:
                    failed.write(json.dumps({**item, "label_errors": result["errors"]}, ensure_ascii=False) + "\n")
                    n_failed += 1
                    continue
                item["labels"] = result["labels"]
                if len(result["judgments"]) > 1:
                    item["annotations"] = [j["scores"] for j in result["judgments"]]
                if self.cfg.prompt_set != "flat" or self.cfg.mode != "direct":
                    item["teacher"] = result["teacher"]  # confidence, rationales, issues, errors, checklists
                out.write(json.dumps(item, ensure_ascii=False) + "\n")
                n_ok += 1
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
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cost_usd": round(cost, 6),
        }
        agreement = judge_agreement([r["judgments"] for r in results])
        if agreement is not None:
            stats["agreement"] = agreement
        output.with_name(output.name + ".stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
        return stats

    def compare(self, a: Record, b: Record) -> dict[str, Any]:
        """Pairwise verdicts of every judge model on two candidates for the same input (CE-Judge §3.3):
        a checklist per candidate, then 'Therefore, I choose A/B as the better response.'"""
        verdicts, errors = [], []
        for model in self.cfg.models:
            try:
                messages = ce.pairwise_messages(a, b, self.checklist(a, model), self.checklist(b, model))
                answer = self._valid(messages, model, 0, lambda text: {"choice": parse_pairwise_choice(text), "feedback": text.strip()})
            except (JudgeOutputError, ClientError) as err:
                errors.append(f"{model}: {err}")
                continue
            verdicts.append({"model": model, "winner": a.id if answer["choice"] == "A" else b.id, **answer})
        wins = Counter(v["winner"] for v in verdicts)
        top = wins.most_common(2)
        winner = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None
        return {"id_a": a.id, "id_b": b.id, "winner": winner, "verdicts": verdicts, "errors": errors}

    def label_pairs(self, inputs: list[str], output: str | Path) -> dict[str, Any]:
        """Pairwise preferences for every pair of candidates that share one input (all input fields equal).

        Writes ``output`` (one line per pair with a verdict: ids, ``winner`` by majority of the judge
        models or null on a tie, each model's verdict and feedback), ``output.failed.jsonl`` and
        ``output.stats.json``.
        """
        records, skipped = read_records(inputs, require_labels=False)
        groups: dict[str, list[Record]] = {}
        for r in records:
            groups.setdefault(ce.input_key(r), []).append(r)
        pairs = [(g[i], g[j]) for g in groups.values() for i in range(len(g)) for j in range(i + 1, len(g))]
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            results = list(tqdm(pool.map(lambda p: self.compare(*p), pairs), total=len(pairs), desc="pairs", unit="pair"))
        output = Path(output)
        done = [r for r in results if r["verdicts"]]
        failed = [r for r in results if not r["verdicts"]]
        output.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done), encoding="utf-8")
        output.with_name(output.name + ".failed.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in failed), encoding="utf-8"
        )
        stats = {
            "items": len(records),
            "pairs": len(pairs),
            "judged": len(done),
            "failed": len(failed),
            "skipped_input": skipped,
            "requests": self.usage.requests,
            "cached_answers": self.usage.cached,
            "invalid_answers": self.usage.invalid_answers,
        }
        output.with_name(output.name + ".stats.json").write_text(json.dumps(stats, indent=2), encoding="utf-8")
        return stats


def judge_agreement(judgments_per_item: list[list[dict]]) -> dict | None:
    """r*_wg(j) (uniform and maximum-disagreement nulls), and per dimension Fleiss' kappa and r_wg, among
    the judgments of each item (several judges or samples), over items with at least two."""
    import numpy as np

    from omnidistill.dimensions import DIMENSIONS
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
