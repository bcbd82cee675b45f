"""Generate the shipped sample dataset (data/sample/{train,dev,test}.jsonl) from tools/sample_bank.json.

The data are synthetic: each candidate is a reference text or a controlled corruption of one
(truncated, shuffled, a changed fact, a repetition loop, off-topic, untranslated, a refusal, garbled
characters), and its four labels come from a per-corruption profile plus noise. Refusals and garbled
output are the two failure modes that leave token-level marks, so the tiny default (a 2-layer encoder
trained from scratch for a few CPU minutes) can learn them; the others need a pretrained encoder.
Train/dev labels are integers like an LLM judge's, each drawn from the distribution stored beside it as
``label_dist`` (what a judge's log-probabilities would give); test items
carry two simulated annotators (``annotations``) and their mean as ``labels``. Every split also gets
a pairwise judge's choices between candidates for one input (``pairs/{split}.jsonl``, as ``label
--pairwise`` writes them; ``data.pairs`` trains on them, ``data.dev_pairs`` and ``eval --pairs`` check
them). Deterministic:

    python tools/make_sample_data.py            # rewrites data/sample/
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIMS = ("informativeness", "clarity", "plausibility", "faithfulness")
# Mean label per corruption: informativeness, clarity, plausibility, faithfulness.
PROFILES = {
    "good": (4.7, 4.8, 4.8, 4.8),
    "truncated": (2.3, 3.0, 3.8, 3.9),
    "shuffled": (2.8, 1.4, 2.2, 2.9),
    "changed_fact": (3.3, 4.6, 2.8, 1.4),
    "repeated": (3.6, 2.2, 3.6, 4.1),
    "off_topic": (1.3, 4.2, 2.6, 1.2),
    "untranslated": (1.8, 3.2, 2.5, 1.7),
    "refusal": (1.1, 4.4, 3.0, 1.3),
    "garbled": (1.2, 1.1, 1.4, 1.3),
}
DRAWS = {"truncated": 3, "shuffled": 3, "changed_fact": 3, "repeated": 3, "garbled": 2}
"""Candidates drawn per (fact, task) for the random corruptions (duplicates dropped); the others once."""
REFUSALS = {
    "en": "I'm sorry, but I can't help with that request.",
    "de": "Es tut mir leid, aber dabei kann ich nicht helfen.",
    "es": "Lo siento, pero no puedo ayudar con esa solicitud.",
    "hi": "मुझे खेद है, लेकिन मैं इस अनुरोध में मदद नहीं कर सकता।",
    "bn": "দুঃখিত, আমি এই অনুরোধে সাহায্য করতে পারব না।",
    "ar": "عذرًا، لا أستطيع المساعدة في هذا الطلب.",
}
JUNK = "#@%&*~^|<>{}[]$"


def shift_digits(text: str) -> str | None:
    """Change every digit (any script) so that numbers become wrong; None if there is none."""
    if not any(c.isdigit() for c in text):
        return None
    out = []
    for c in text:
        if c.isdigit():
            base = ord(c) - int(c)
            c = chr(base + (int(c) + 3) % 10)
        out.append(c)
    return "".join(out)


def corrupt(kind: str, text: str, other: str, source: str, rng: random.Random, lang: str = "en") -> str | None:
    words = text.split()
    if kind == "good":
        return text
    if kind == "refusal":
        return REFUSALS[lang]
    if kind == "garbled":  # broken decoding: characters replaced by junk
        return "".join(rng.choice(JUNK) if c != " " and rng.random() < 0.45 else c for c in text)
    if kind == "truncated":
        return " ".join(words[: max(1, int(len(words) * rng.uniform(0.25, 0.6)))]) if len(words) > 3 else None
    if kind == "shuffled":
        if len(words) < 4:
            return None
        shuffled = words[:]
        while shuffled == words:
            rng.shuffle(shuffled)
        return " ".join(shuffled)
    if kind == "changed_fact":
        changed = shift_digits(text)
        if changed is None:
            swap = other.split()
            i, j = rng.randrange(len(words)), rng.randrange(len(swap))
            words[i] = swap[j]
            changed = " ".join(words)
        return changed
    if kind == "repeated":  # a repetition loop: a chunk of the text said again 2-4 times
        start = rng.randrange(max(1, len(words) - 2))
        chunk = words[start : start + rng.randint(2, max(2, len(words) // 2))]
        return " ".join(words + chunk * rng.randint(2, 4))
    if kind == "off_topic":
        return other
    if kind == "untranslated":
        return source
    raise ValueError(kind)


def build_pool(bank: dict, rng: random.Random) -> list[dict]:
    langs = [lang for lang in bank if not lang.startswith("_")]
    pool = []
    for lang in langs:
        facts = bank[lang]
        for i, fact in enumerate(facts):
            other = facts[(i + 1 + rng.randrange(len(facts) - 1)) % len(facts)]
            mt_source = bank["de" if lang == "en" else "en"][i]["s"]
            tasks = {
                "qa": dict(question=fact["q"], reference=fact["a"], target=fact["a"], other=other["a"]),
                "mt": dict(source=mt_source, reference=fact["s"], target=fact["s"], other=other["s"]),
                "summarization": dict(source=f"{fact['s']} {fact['p']}", target=fact["a"], other=other["a"]),
                "headline": dict(source=fact["s"], target=fact["h"], other=other["h"]),
                "paraphrase": dict(source=fact["s"], target=fact["p"], other=other["p"]),
                "chat": dict(question=fact["q"], target=fact["s"], other=other["s"]),
            }
            for task, spec in tasks.items():
                kinds = [k for k in PROFILES if k != "untranslated" or task == "mt"]
                seen = set()
                for kind in kinds:
                    for _ in range(DRAWS.get(kind, 1)):
                        cand = corrupt(kind, spec["target"], spec["other"], spec.get("source", ""), rng, lang)
                        if cand is None or cand in seen:
                            continue
                        seen.add(cand)
                        item = {"task": task, "lang": lang}
                        for field in ("question", "source", "reference"):
                            if field in spec:
                                item[field] = spec[field]
                        item["candidate"] = cand
                        item["_kind"] = kind
                        if kind == "good":  # reference texts are parallel across languages
                            item["group_id"] = f"{task}-{i}"
                        pool.append(item)
    return pool


def judge_labels(kind: str, rng: random.Random, integer: bool) -> dict:
    out = {}
    for dim, mean in zip(DIMS, PROFILES[kind], strict=True):
        value = min(5.0, max(1.0, rng.gauss(mean, 0.45)))
        out[dim] = float(round(value)) if integer else round(value, 2)
    return out


def judge_distribution(kind: str) -> dict:
    """The distribution each train/dev label is drawn from, per dimension: P(level c) that
    round(clip(N(mean, 0.45), 1, 5)) = c, as a judge's log-probabilities over the score token would
    give it (4 decimals; the largest entry takes the rounding remainder so that each sums to 1)."""

    def below(x: float, mean: float) -> float:
        return 0.5 * (1.0 + math.erf((x - mean) / (0.45 * math.sqrt(2.0))))

    out = {}
    for dim, mean in zip(DIMS, PROFILES[kind], strict=True):
        cdf = [0.0, *(below(edge, mean) for edge in (1.5, 2.5, 3.5, 4.5)), 1.0]
        probs = [round(hi - lo, 4) for lo, hi in itertools.pairwise(cdf)]
        top = probs.index(max(probs))
        probs[top] = round(1.0 - sum(p for i, p in enumerate(probs) if i != top), 4)
        out[dim] = probs
    return out


PAIRS_PER_INPUT = 6
"""Judged pairs drawn per input (task and source or question) of each split."""
PAIR_SHARPNESS = 3.0
"""The simulated pairwise judge picks ``a`` with probability sigmoid(3 * (mean(a) - mean(b))), the means
being the candidates' profiles over the four dimensions (what the noisy point labels are drawn around)."""


def judge_pairs(items: list[tuple[str, dict, str]], rng: random.Random) -> list[dict]:
    """Pairs of candidates for one input, as ``label --pairwise`` writes them: at most
    :data:`PAIRS_PER_INPUT` per input, the winner drawn from a Bradley-Terry judge on the profiles' means;
    two candidates of one corruption tie (winner null), as judges split evenly would."""
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for ident, item, kind in items:
        key = (item["task"], item["lang"], item.get("question"), item.get("source"))
        groups.setdefault(key, []).append((ident, kind))
    out = []
    for members in groups.values():
        candidates = list(itertools.combinations(members, 2))
        for (a, kind_a), (b, kind_b) in rng.sample(candidates, min(PAIRS_PER_INPUT, len(candidates))):
            if kind_a == kind_b:
                winner = None
            else:
                gap = sum(PROFILES[kind_a]) / len(DIMS) - sum(PROFILES[kind_b]) / len(DIMS)
                winner = a if rng.random() < 1.0 / (1.0 + math.exp(-PAIR_SHARPNESS * gap)) else b
            out.append({"id_a": a, "id_b": b, "winner": winner})
    return out


def main() -> None:
    rng = random.Random(20261122)
    bank = json.loads((ROOT / "tools" / "sample_bank.json").read_text(encoding="utf-8"))
    pool = build_pool(bank, rng)
    rng.shuffle(pool)
    sizes = {"train": 2100, "dev": 240, "test": 300}
    assert sum(sizes.values()) <= len(pool), len(pool)
    out_dir = ROOT / "data" / "sample"
    out_dir.mkdir(parents=True, exist_ok=True)
    start = 0
    judged: dict[str, list[tuple[str, dict, str]]] = {"train": [], "test": [], "dev": []}  # drawn in this order
    for split, size in sizes.items():
        lines = []
        for n, item in enumerate(pool[start : start + size]):
            kind = item.pop("_kind")
            record = {"id": f"{split}-{n:04d}", **item}
            if split in judged:
                judged[split].append((record["id"], item, kind))
            if split == "test":
                annotators = [judge_labels(kind, rng, integer=True) for _ in range(2)]
                record["labels"] = {d: sum(a[d] for a in annotators) / 2 for d in DIMS}
                record["annotations"] = annotators
            else:
                record["labels"] = judge_labels(kind, rng, integer=True)
                if split == "train" and rng.random() < 0.05:
                    record["labels"][rng.choice(DIMS)] = None  # a dimension the judge failed to give
                dist = judge_distribution(kind)
                record["label_dist"] = {d: dist[d] if record["labels"][d] is not None else None for d in DIMS}
            lines.append(json.dumps(record, ensure_ascii=False))
        (out_dir / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        start += size
        print(f"{split}: {size} items")
    pair_rng = random.Random(20261129)  # its own stream: the splits above stay as they were
    for split, items in judged.items():
        pairs = judge_pairs(items, pair_rng)
        text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs)
        (out_dir / "pairs").mkdir(exist_ok=True)
        (out_dir / "pairs" / f"{split}.jsonl").write_text(text, encoding="utf-8")
        print(f"pairs/{split}: {len(pairs)} pairs")


if __name__ == "__main__":
    main()
