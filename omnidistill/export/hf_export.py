"""Export a trained run to a Hugging Face folder that plain ``transformers`` loads.

The folder holds ``model.safetensors`` (PyTorch keys of the family's ``*ForSequenceClassification``),
``config.json`` (``num_labels=4``, ``problem_type="multi_label_classification"``, ``id2label`` = the four
dimensions), the tokenizer files and a model card. Scores are ``1 + 4 * sigmoid(logits)``. Export runs
on one host in float32 and never needs the training mesh; with ``verify`` the written folder is
reloaded in PyTorch and must reproduce the JAX scores within ``tolerance``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np

from omnidistill.data.schema import Record
from omnidistill.dimensions import DIMENSIONS
from omnidistill.eval.run_eval import load_trained
from omnidistill.models.registry import get_family
from omnidistill.models.weights import flax_to_hf

log = logging.getLogger(__name__)
EXPORTABLE = {("cls", "linear_sigmoid")}
# Always part of the export check, so that it runs even when the run's data files are absent.
PROBE_RECORDS = [
    Record(id="probe-1", task="qa", lang="en", question="What is the capital of France?", candidate="Paris is the capital of France."),
    Record(id="probe-2", task="mt", lang="de", source="The Moon orbits the Earth.", candidate="Der Mond umkreist die Erde, die Erde."),
]


class ExportError(RuntimeError):
    """The model cannot be exported faithfully, or the exported copy does not reproduce its scores."""


def hf_config_dict(family_name: str, arch: Any, max_length: int = 512) -> dict[str, Any]:
    """The standard ``config.json`` contents for the family's sequence-classification class."""
    from transformers import AutoConfig

    family = get_family(family_name)
    fields = arch.to_hf()
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(
        model_type,
        **fields,
        architectures=[family.hf_class],
        num_labels=len(DIMENSIONS),
        problem_type="multi_label_classification",
        id2label=dict(enumerate(DIMENSIONS)),
        label2id={d: i for i, d in enumerate(DIMENSIONS)},
    )
    out = config.to_dict()
    out["omnidistill"] = {
        "score": "1 + 4 * sigmoid(logits)",
        "dimensions": list(DIMENSIONS),
        "input": "fields joined by ' {sep_token} '",
        "max_length": max_length,
    }
    return out


def export_tensors(family_name: str, arch: Any, params: Any, pooling: str, head: str) -> dict[str, np.ndarray]:
    """PyTorch-keyed float32 tensors of a regressor; refuses heads with no standard HF equivalent."""
    if (pooling, head) not in EXPORTABLE:
        raise ExportError(
            f"model.pooling={pooling!r} with model.head={head!r} has no standard transformers equivalent; "
            f"export supports {sorted(EXPORTABLE)} (nothing is dropped silently)"
        )
    tensors = flax_to_hf(jax.device_get(params), get_family(family_name).weight_table(arch))
    bad = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if bad:
        raise ExportError(f"non-finite values in: {', '.join(bad)}")
    return tensors


def model_card(run_dir: Path, cfg: Any, step: int) -> str:
    """README.md for the exported folder: score formula, usage, training data and eval table."""
    data = ", ".join(cfg.data.train) or "(not recorded)"
    report = run_dir / "eval" / "test.md"
    table = report.read_text(encoding="utf-8") if report.exists() else "_No test report: run `omnidistill eval` before exporting._"
    best = run_dir / "best_metrics.json"
    dev = json.loads(best.read_text())["dev_mae"] if best.exists() else None
    return f"""---
library_name: transformers
pipeline_tag: text-classification
tags: [omnidistill, evaluation, regression, llm-as-a-judge]
---

# omnidistill quality scorer

Scores a generated text (candidate) against its input on four dimensions, each on a 1–5 scale:
{", ".join(DIMENSIONS)}. Trained with [omnidistill](https://github.com/) ({cfg.model.family} backbone,
[CLS] pooling, four linear heads, step {step}{f", dev MAE {dev:.3f}" if dev is not None else ""}).

**Score formula:** `score = 1 + 4 * sigmoid(logits)`, one logit per dimension in `config.id2label` order.

**Input:** the fields present, in the order question, source, reference, candidate, joined with
`f" {{tokenizer.sep_token}} "`; no task id.

```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer
tok = AutoTokenizer.from_pretrained("PATH_OR_REPO")
model = AutoModelForSequenceClassification.from_pretrained("PATH_OR_REPO").eval()
enc = tok(f" {{tok.sep_token}} ".join(["Was ist die Hauptstadt?", "Paris ist die Hauptstadt."]), return_tensors="pt")
scores = 1 + 4 * model(**enc).logits.sigmoid()
print(dict(zip(model.config.id2label.values(), scores[0].tolist())))
```

**Training data:** {data}

## Evaluation

{table}
"""


def _verify(out_dir: Path, params: Any, graphdef: Any, tokenizer: Any, records: list, max_length: int, tolerance: float) -> float:
    """Max |score difference| between the JAX model and the exported folder loaded in PyTorch."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from omnidistill.data.pipeline import collate
    from omnidistill.data.tokenize import RecordEncoder
    from omnidistill.models.regressor import make_predict_fn

    encoder = RecordEncoder(tokenizer, max_length)
    examples = [encoder(r) for r in records]
    batch = collate(examples, pad_id=encoder.pad_id, buckets=(), batch_size=len(examples))
    ours = np.asarray(jax.jit(make_predict_fn(graphdef))(params, batch))
    model = AutoModelForSequenceClassification.from_pretrained(out_dir).eval()
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(batch["input_ids"]).long(), attention_mask=torch.tensor(batch["attention_mask"]).long()
        ).logits
    theirs = (1 + 4 * torch.sigmoid(logits)).numpy()
    diff = float(np.max(np.abs(theirs - ours)))
    if not np.isfinite(theirs).all() or diff > tolerance:
        raise ExportError(f"exported model differs from the JAX model: max |score diff| {diff:.2e} > {tolerance:.0e}")
    return diff


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    checkpoint: str = "best",
    verify: bool | None = None,
    tolerance: float = 1e-3,
    push_to_hub: str | None = None,
) -> dict[str, Any]:
    """Write the HF folder (atomically: a temporary sibling renamed at the end); returns a summary."""
    from safetensors.numpy import save_file

    from omnidistill.data.sources import read_records

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    cfg, graphdef, params, tokenizer, step = load_trained(run_dir, checkpoint)
    from flax import nnx

    arch = nnx.merge(graphdef, params).arch
    tensors = export_tensors(cfg.model.family, arch, params, cfg.model.pooling, cfg.model.head)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(hf_config_dict(cfg.model.family, arch, cfg.data.max_length), indent=2), encoding="utf-8")
    tokenizer.save_pretrained(tmp)
    (tmp / "README.md").write_text(model_card(run_dir, cfg, step), encoding="utf-8")
    summary: dict[str, Any] = {"out_dir": str(out_dir), "step": step, "tensors": len(tensors), "verified": False}
    if verify is None:
        try:
            import torch  # noqa: F401

            verify = True
        except ImportError:
            log.warning("torch is not installed: skipping the PyTorch parity check (pip install torch==2.13.0)")
            verify = False
    if verify:
        files = [f for f in (cfg.data.test or cfg.data.dev or cfg.data.train) if Path(f).is_file()]
        records = PROBE_RECORDS + (read_records(files, skip_invalid=True)[0][:14] if files else [])
        summary["max_abs_diff"] = _verify(tmp, params, graphdef, tokenizer, records, cfg.data.max_length, tolerance)
        summary["verified"] = True
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    if push_to_hub:
        summary["hub_url"] = push_folder(out_dir, push_to_hub)
    return summary


def push_folder(folder: str | Path, repo_id: str) -> str:
    """Upload ``folder`` to the Hub repo ``repo_id``; the token comes from ``HF_TOKEN`` only."""
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise ExportError("--push-to-hub needs the HF_TOKEN environment variable")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, exist_ok=True)
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="Upload omnidistill scorer")
    return str(getattr(info, "commit_url", info))
