"""The exported folder's ``README.md``: score formula, the exact input text, and runnable usage.

Every Python block of the card runs as written once ``PATH_OR_REPO`` names the folder (the export
tests execute them), and each one prints the same four scores: plain ``transformers``, the
``omniscore`` package (``omniscore`` folders) and omnidistill.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omnidistill.config import Config
from omnidistill.data.input_text import TextLayout
from omnidistill.dimensions import DIMENSIONS
from omnidistill.export.card_metadata import CardInfo, front_matter, results_table, summarize_data, training_summary
from omnidistill.export.omniscore_format import OMNISCORE_INSTALL

EXAMPLE = {"source": "What is the capital of France?", "candidate": "Paris is the capital of France."}
PLACEHOLDER = "PATH_OR_REPO"


def input_text_code(layout: TextLayout) -> str:
    """Python that builds the model's input text from the record's fields, as training did."""
    if layout.task_prefix is None and layout.source_prefix is None and layout.reference_prefix is None and layout.prediction_prefix is None:
        head = f'SEP = f" {{tok.sep_token}} "  # {layout.separator!r} for this tokenizer\n'
    else:
        head = f"SEP = {layout.separator!r}\n"
    return (
        head + f"PREFIXES = {{'task': {layout.task_prefix if layout.task_line else None!r}, 'source': {layout.source_prefix!r}, "
        f"'reference': {layout.reference_prefix!r}, 'prediction': {layout.prediction_prefix!r}}}\n"
        "\n"
        "def input_text(candidate, source=None, reference=None, task=None):\n"
        "    # source: context, question, title and source of the item (those present), stripped, joined by SEP\n"
        "    segments = []\n"
        "    for name, text in (('task', task), ('source', source), ('reference', reference), ('prediction', candidate)):\n"
        "        if name != 'prediction' and (not text or not text.strip() or (name == 'task' and PREFIXES['task'] is None)):\n"
        "            continue\n"
        "        prefix, body = PREFIXES[name], (text or '').strip()\n"
        "        segments.append(f'{prefix} {body}'.strip() if prefix else body)\n"
        "    return SEP.join(segments)\n\n"
    )


def truncation_note(cfg: Config) -> str:
    n = cfg.data.max_length
    if cfg.data.truncation == "right":
        return (
            f"Inputs longer than {n} tokens are cut at the end (`truncation=True, max_length={n}`), "
            "as in training: every scorer below gives the same numbers for them too."
        )
    return (
        f"Inputs longer than {n} tokens were cut *context first* in training (source-side fields lose "
        "tokens first, longest first; the candidate keeps at least half). Plain `transformers` and the "
        "`omniscore` package cut the end instead, so for such inputs their scores differ from "
        "omnidistill's; inputs within the limit score identically everywhere."
    )


def model_card(run_dir: Path, cfg: Config, step: int, folder_format: str, layout: TextLayout, info: CardInfo | None = None) -> str:
    """README.md for an exported ``hf`` or ``omniscore`` folder: Hub front matter, results, usage, training."""
    info = info or CardInfo()
    files = ", ".join(cfg.data.train) or "(not recorded)"
    report_md, report_json = run_dir / "eval" / "test.md", run_dir / "eval" / "test.json"
    table = report_md.read_text(encoding="utf-8") if report_md.exists() else "_No test report: run `omnidistill eval` before exporting._"
    report = json.loads(report_json.read_text(encoding="utf-8")) if report_json.exists() else None
    data = summarize_data(cfg)
    best = run_dir / "best_metrics.json"
    dev = json.loads(best.read_text())["dev_mae"] if best.exists() else None
    n = cfg.data.max_length
    pooling = {
        "cls": "[CLS] through the family's pooler",
        "cls_raw": "the final [CLS] state (no pooler)",
        "mean": "the mean of the final states",
        "last_token": "the final state of the last non-padding token",
    }
    text_code = input_text_code(layout)
    task = ", task='qa'" if layout.task_line else ""
    example = f"text = input_text({EXAMPLE['candidate']!r}, source={EXAMPLE['source']!r}{task})\n"
    blocks: list[tuple[str, str]] = []
    if folder_format == "hf":
        blocks.append(
            (
                "Plain `transformers`",
                "import torch\nfrom transformers import AutoModelForSequenceClassification, AutoTokenizer\n\n"
                f'path = "{PLACEHOLDER}"\ntok = AutoTokenizer.from_pretrained(path)\n'
                "model = AutoModelForSequenceClassification.from_pretrained(path).eval()\n"
                + text_code
                + example
                + f"enc = tok(text, truncation=True, max_length={n}, return_tensors='pt')\n"
                + (
                    "with torch.no_grad():\n"
                    "    probs = model(**enc).logits.view(-1, 4, 5).softmax(-1)[0]  # [dimension, level 1..5]\n"
                    "levels = torch.arange(1, 6, dtype=probs.dtype)\n"
                    "expected = (probs * levels).sum(-1)  # the score: the expected level\n"
                    "std = (probs * (levels - expected[:, None]) ** 2).sum(-1).sqrt()  # the uncertainty\n"
                    f"names = {list(DIMENSIONS)!r}\n"
                    "scores, uncertainty = dict(zip(names, expected.tolist())), dict(zip(names, std.tolist()))\n"
                    "print(scores, uncertainty)\n"
                    if cfg.model.head == "classification"
                    else "with torch.no_grad():\n"
                    "    scores = (1 + 4 * model(**enc).logits.sigmoid())[0].tolist()\n"
                    "print(dict(zip(model.config.id2label.values(), scores)))\n"
                ),
            )
        )
        if cfg.model.head != "classification":
            blocks.append(("The `transformers` pipeline", pipeline_code(text_code, example, n)))
    else:
        blocks.append(
            (
                f"The `omniscore` package (`{OMNISCORE_INSTALL}`: its own pins are stale)",
                f'from omniscore import OmniScorer\n\npath = "{PLACEHOLDER}"\n'
                f"scorer = OmniScorer(path, device='cpu', max_length={n})\n"
                f"result = scorer.score({EXAMPLE['candidate']!r}, sources={EXAMPLE['source']!r}"
                + (", tasks='qa'" if layout.task_line else "")
                + ")\n"
                "scores = result.scores[0].tolist()\n"
                "print(dict(zip(result.score_names, scores)))\n",
            )
        )
        reduce = {
            "cls_raw": "pooled = hidden[:, 0]",
            "mean": "mask = enc['attention_mask'].unsqueeze(-1).float()\n    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)",
            "last_token": "pooled = hidden[torch.arange(hidden.shape[0]), enc['attention_mask'].sum(1) - 1]",
        }[cfg.model.pooling]
        blocks.append(
            (
                "Plain `transformers` (no `omniscore` package)",
                "import json, torch\nfrom safetensors.torch import load_file\n"
                "from transformers import AutoConfig, AutoModel, AutoTokenizer\n\n"
                f'path = "{PLACEHOLDER}"  # a local folder (for a Hub repo: huggingface_hub.snapshot_download(repo_id))\n'
                "config = json.load(open(f'{path}/config.json'))\n"
                "backbone_config = dict(config['backbone_config'])\n"
                "backbone = AutoModel.from_config(AutoConfig.for_model(backbone_config.pop('model_type'), **backbone_config))\n"
                "weights = load_file(f'{path}/model.safetensors')\n"
                "backbone.load_state_dict({k[len('backbone.'):]: v for k, v in weights.items() if k.startswith('backbone.')})\n"
                "backbone.eval()\ntok = AutoTokenizer.from_pretrained(path)\n"
                + text_code
                + example
                + f"enc = tok(text, truncation=True, max_length={n}, return_tensors='pt')\n"
                "with torch.no_grad():\n"
                "    hidden = backbone(**enc).last_hidden_state\n"
                f"    {reduce}\n"
                "    logits = pooled @ weights['score_head.weight'].T + weights['score_head.bias']\n"
                "    scores = (1 + 4 * torch.sigmoid(logits))[0].tolist()\n"
                "print(dict(zip(config['score_names'], scores)))\n",
            )
        )
    blocks.append(
        (
            "omnidistill (JAX)",
            "from omnidistill import Scorer\n\n"
            f'path = "{PLACEHOLDER}"\n'
            f"item = Scorer.load(path).score(candidates=[{EXAMPLE['candidate']!r}], sources=[{EXAMPLE['source']!r}]"
            + (", tasks=['qa']" if layout.task_line else "")
            + ")[0]\n"
            + (
                "scores, uncertainty = {d: item[d] for d in item if d != 'uncertainty'}, item['uncertainty']\nprint(scores, uncertainty)\n"
                if cfg.model.head == "classification"
                else "scores = list(item.values())\nprint(scores)\n"
            ),
        )
    )
    head_words = "a 5-level softmax per dimension" if cfg.model.head == "classification" else "four linear heads"
    usage = "\n".join(f"### {title}\n\n```python\n{code}```\n" for title, code in blocks)
    head = front_matter(cfg, folder_format, info, data, report, info.model_name or run_dir.name)
    return f"""{head}
# omnidistill quality scorer

Scores a generated text (the candidate) against its input on four dimensions, each on a 1–5 scale:
{", ".join(DIMENSIONS)}. Trained with omnidistill: {cfg.model.family} backbone, {pooling.get(cfg.model.pooling, cfg.model.pooling)},
{head_words}, step {step}{f", dev MAE {dev:.3f}" if dev is not None else ""}. Folder format: `{folder_format}`.

{score_formula(cfg.model.head, folder_format)}

**Input text** (`data.input_format: {cfg.data.input_format}`): the item's fields, stripped, in one text
built by `input_text` below; the source-side fields (context, question, title, source: those present)
form the source. {"A task line holds the task name." if layout.task_line else "There is no task id."}
{truncation_note(cfg)}

## Results

{results_table(report)}
## Usage

{usage}
## Training

{training_summary(cfg, step, data, info, report)}
- **Training files:** {files}

## Evaluation report

{table}
"""


def pipeline_code(text_code: str, example: str, max_length: int) -> str:
    """The ``text-classification`` pipeline's snippet for an ``hf`` folder with one sigmoid logit per
    dimension: the pipeline (and the Hub's widget) gives ``sigmoid(logit)`` per dimension, sorted by
    value, which the snippet puts back in dimension order on the 1-5 scale."""
    return (
        "from transformers import pipeline\n\n"
        f'path = "{PLACEHOLDER}"\n'
        'scorer = pipeline("text-classification", model=path, top_k=None, function_to_apply="sigmoid")\n'
        "tok = scorer.tokenizer\n"
        + text_code
        + example
        + f"out = scorer([text], truncation=True, max_length={max_length})[0]  # sigmoid(logit) per dimension, sorted by value\n"
        "by_name = {d['label']: d['score'] for d in out}\n"
        "scores = {name: 1 + 4 * by_name[name] for name in scorer.model.config.id2label.values()}\n"
        "print(scores)\n"
    )


def score_formula(head: str, folder_format: str) -> str:
    """The card's sentence on how logits become scores (and, for the classification head, uncertainties);
    for an ``hf`` folder, also what the Hub's widget and the ``text-classification`` pipeline show."""
    order = ", ".join(DIMENSIONS)
    hf = folder_format == "hf"
    if head == "classification":
        return (
            f"**Score formula:** 20 logits, 5 per dimension (levels 1–5) in the order {order}. Per dimension, "
            "`p = softmax(logits.view(4, 5))` is a distribution over the levels; the score is its expected level "
            "`sum_c c * p_c` and the **uncertainty** its standard deviation `sqrt(sum_c p_c (c - score)^2)`, "
            "in score points (0: sure of one level; the larger, the less sure)."
            + (
                " The `text-classification` pipeline and the Hub's widget take one softmax over all 20 logits, "
                "which gives neither: use the code below."
                if hf
                else ""
            )
        )
    return f"**Score formula:** `score = 1 + 4 * sigmoid(logit)`, one logit per dimension, in the order {order}." + (
        " The Hub's widget and the `text-classification` pipeline show `sigmoid(logit)` (0 to 1) per dimension: "
        "the score is `1 + 4 *` that, for a text built by `input_text` below (the widget scores the text as typed)."
        if hf
        else ""
    )


def card_settings(cfg: Config, layout: TextLayout) -> dict[str, Any]:
    """The ``omnidistill`` block of the exported ``config.json``: what reproducing the inputs needs."""
    levels = cfg.model.head == "classification"
    return {
        "score": "sum_c c * softmax(logits.view(4, 5))[d, c-1]" if levels else "1 + 4 * sigmoid(logits)",
        "head": cfg.model.head,
        "dimensions": list(DIMENSIONS),
        "pooling": cfg.model.pooling,
        "input_format": cfg.data.input_format,
        "layout": {
            "task_prefix": cfg.data.layout.task_prefix,
            "source_prefix": cfg.data.layout.source_prefix,
            "reference_prefix": cfg.data.layout.reference_prefix,
            "prediction_prefix": cfg.data.layout.prediction_prefix,
            "separator": cfg.data.layout.separator,
        },
        "separator": layout.separator,
        "truncation": cfg.data.truncation,
        "max_length": cfg.data.max_length,
    }
