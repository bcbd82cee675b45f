"""Label a dataset with one or more LLM judges: prompts -> cached, retried requests -> strict parsing ->
aggregation. An item whose judges never give a valid answer is written to ``<output>.failed.jsonl``
with its errors and gets no label: scores are never invented.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from omnidistill.data.schema import Record
from omnidistill.data.sources import read_records
from omnidistill.label.aggregate import aggregate
from omnidistill.label.cache import DiskCache, request_key
from omnidistill.label.client import ChatClient, ClientError
from omnidistill.label.config import LabelConfig
from omnidistill.label.parse import JudgeOutputError, parse_checklist, parse_judgment
from omnidistill.label.prompts import checklist_messages, judge_messages

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

    def label(self, record: Record) -> dict[str, Any]:
        """{'judgments': [...], 'errors': [...], 'labels': {...} or None} for one record."""
        judgments, errors = [], []
        for model in self.cfg.models:
            checklist = None
            if self.cfg.checklist:
                try:
                    checklist = self._valid(checklist_messages(record, reference_mode=self.cfg.reference_mode), model, 0, parse_checklist)
                except (JudgeOutputError, ClientError) as err:
                    errors.append(f"checklist: {err}")
                    continue
            messages = judge_messages(record, reference_mode=self.cfg.reference_mode, checklist=checklist)
            for sample in range(self.cfg.samples):
                try:
                    judgments.append({"model": model, "sample": sample, **self._valid(messages, model, sample, parse_judgment)})
                except (JudgeOutputError, ClientError) as err:
                    errors.append(str(err))
        scores = [{k: v for k, v in j.items() if k not in ("model", "sample")} for j in judgments]
        return {"judgments": judgments, "errors": errors, "labels": aggregate(scores, self.cfg.aggregation) if scores else None}

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
                    item["annotations"] = [{k: v for k, v in j.items() if k not in ("model", "sample")} for j in result["judgments"]]
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


def judge_agreement(judgments_per_item: list[list[dict]]) -> dict | None:
    """r*_wg(j) (uniform and maximum-disagreement nulls) and Fleiss' kappa per dimension among the
    judgments of each item, over items with at least two (the evaluation suite's statistics)."""
    import numpy as np

    from omnidistill.dimensions import DIMENSIONS
    from omnidistill.eval.agreement import category_counts, fleiss_kappa, mean_rwg

    rated = [[[j[d] for d in DIMENSIONS] for j in js] for js in judgments_per_item if len(js) >= 2]
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
    }
