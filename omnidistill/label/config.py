"""Typed configuration of a labelling run (``configs/label/*.yaml``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from omnidistill.config import ConfigError, apply_override, config_not_found, from_dict, load_yaml
from omnidistill.config.limits import FRACTION, POSITIVE, Limit, at_least, limit_error


@dataclasses.dataclass
class LabelConfig:
    base_url: str = "https://api.openai.com/v1"
    """OpenAI-compatible endpoint (anything serving /chat/completions)."""
    models: list[str] = dataclasses.field(default_factory=lambda: ["gpt-4.1"])
    """One or more judge models; every model labels every item."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (keys are never read from files)."""
    samples: int = 1
    """Judgments per model per item (use temperature > 0 for more than one)."""
    temperature: float = 0.0
    max_tokens: int = 800
    """The answer's token limit. An answer cut there (``finish_reason: length``) that does not parse fails
    its item without being asked again. A reasoning model's ``<think>`` block counts: give it more."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field that carries ``max_tokens``. OpenAI's reasoning and GPT-5 models refuse
    ``max_tokens`` (HTTP 400, ``unsupported_parameter``) and take ``max_completion_tokens``; servers such
    as vLLM take either."""
    aggregation: Literal["mean", "median", "majority"] = "mean"
    """How the judgments of one item become its label (majority: the value most judgments share if they are
    a strict majority, else the scale's neutral midpoint 3, the rule of paper 002)."""
    prompt_set: Literal["flat", "omniscore"] = "flat"
    """``omniscore``: the paper's seven task prompts (appendix G) with the nested answer schema; ``flat``:
    one generic rubric answering four integers."""
    mode: Literal["direct", "checklist", "error_report"] = "direct"
    """``direct``: one judgment per sample; ``checklist``: the CE-Judge pipeline (concepts, two-way
    checklists, then judging with them); ``error_report``: INSTRUCTSCORE-style typed errors, scores
    computed from their severities (see omnidistill/label/error_report.py)."""
    reference_mode: Literal["auto", "based", "free"] = "auto"
    """``auto``: show the reference when an item has one; ``based``: judge against the reference, and an
    item without one fails; ``free``: never show it."""
    logprobs: bool = False
    """Ask the server for token log-probabilities and turn each answer's score tokens into a distribution
    over levels 1..5 (``label_dist``; ``labels`` is then its expected value). See
    :mod:`omnidistill.label.logprobs` for how the score token is found and how missing mass is handled."""
    top_logprobs: int = 5
    """Alternatives per token to ask for (OpenAI allows 0-20)."""
    logprobs_min_mass: float = 0.5
    """The least share of the top-k probability that levels 1-5 must carry for a score's distribution."""
    logprobs_fallback: Literal["error", "answer"] = "error"
    """A score without a usable distribution (no ``top_logprobs``, too little level mass): ``error`` makes
    the answer invalid (an answer without any logprobs stops the run); ``answer`` uses the point mass at
    the answered score and counts it in the stats."""
    concurrency: int = 8
    """Requests in flight at once."""
    max_retries: int = 4
    """HTTP retries (429, 5xx, timeouts) per request, with exponential backoff."""
    invalid_retries: int = 2
    """New requests after an answer that is not valid JSON scores, before the item is marked failed."""
    timeout_s: float = 60.0
    backoff_s: float = 1.0
    cache_dir: str = ".label_cache"
    """Answers are cached here by request hash; rerunning after an interruption costs nothing twice."""
    price_input_per_mtok: float = 0.0
    """USD per million prompt tokens (for the cost report)."""
    price_output_per_mtok: float = 0.0


LABEL_LIMITS: dict[tuple[str, str], Limit] = {
    ("LabelConfig", "samples"): at_least(1),  # 0 sent no request and wrote every item as failed
    ("LabelConfig", "temperature"): at_least(0),
    ("LabelConfig", "max_tokens"): at_least(1),
    ("LabelConfig", "top_logprobs"): (lambda v: 0 <= v <= 20, "from 0 to 20"),
    ("LabelConfig", "logprobs_min_mass"): FRACTION,
    ("LabelConfig", "concurrency"): at_least(1),
    ("LabelConfig", "max_retries"): at_least(0),
    ("LabelConfig", "invalid_retries"): at_least(0),
    ("LabelConfig", "timeout_s"): POSITIVE,
    ("LabelConfig", "backoff_s"): at_least(0),
    ("LabelConfig", "price_input_per_mtok"): at_least(0),
    ("LabelConfig", "price_output_per_mtok"): at_least(0),
}


def load_label_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> LabelConfig:
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: {config_not_found(path)}")
        data = load_yaml(path.read_text(encoding="utf-8"), path) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
    for override in overrides:
        apply_override(data, override)
    try:
        cfg = from_dict(LabelConfig, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}" if path else str(err)) from None
    check_label_config(cfg, str(path))
    return cfg


def check_label_config(cfg: LabelConfig, where: str = "label config") -> None:
    """Refuse, by field, settings that do not work together."""
    path = where
    for field in dataclasses.fields(cfg):
        out_of_range = limit_error("LabelConfig", field.name, getattr(cfg, field.name), LABEL_LIMITS)
        if out_of_range:
            raise ConfigError(f"{path}: {field.name}: {out_of_range}")
    if not cfg.models:
        raise ConfigError(f"{path}: models must name at least one judge model")
    repeated = sorted({m for m in cfg.models if cfg.models.count(m) > 1})
    if repeated:  # the same requests: the second judge would be served the first one's cached answers
        raise ConfigError(
            f"{path}: models lists {', '.join(repeated)} more than once; one model's requests are the same, so a repeat "
            "would get the first one's cached answers and count as a judge that always agrees. For several "
            "judgments of one model, set samples (with temperature > 0)"
        )
    if cfg.logprobs and cfg.aggregation != "mean":
        raise ConfigError(f"{path}: logprobs: true makes labels the expected value of label_dist; aggregation must be mean")
    if cfg.logprobs and cfg.mode == "error_report":
        raise ConfigError(f"{path}: logprobs: true needs answered scores; mode: error_report computes them from severities")
    if cfg.logprobs and not 1 <= cfg.top_logprobs <= 20:
        raise ConfigError(f"{path}: top_logprobs must be from 1 to 20, got {cfg.top_logprobs}")
