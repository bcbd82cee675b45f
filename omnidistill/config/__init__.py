"""Typed configuration: dataclasses loaded from YAML with dotted command-line overrides.

Unknown keys and values of the wrong type raise :class:`ConfigError` naming the offending key,
e.g. ``optim.lr: expected float, got 'fast'``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from omnidistill.config.limits import limit_error


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key."""


@dataclasses.dataclass
class ModelConfig:
    """Backbone and regression head."""

    family: str = "bert"
    """Backbone family from the model registry: ``bert``, ``deberta_v2``, ``modernbert``, ``xlm_roberta``,
    ``qwen3``, ``qwen2``, ``gemma3``."""
    init_from: str | None = None
    """Hugging Face folder (or hub id) whose PyTorch weights initialise the encoder."""
    arch: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Hugging Face config fields; used for random init, or to override fields of ``init_from``. A field
    the family's port does not read (a typo, or one it has no use for), a value of the wrong type and a
    dropout rate beside ``model.dropout`` are errors naming the field; so are fields that change
    ``init_from``'s tensor shapes (``model.arch={}`` clears what a config file such as ``tiny.yaml`` sets)."""
    tokenizer: str | None = None
    """Tokenizer folder or hub id; defaults to ``init_from``. A name that is not a local folder (a relative
    path is read from the current directory) is looked up on the Hub, and the error of a failed lookup
    names both places. Beside ``init_from``, it must keep the ids of the tokenizer there (tokens added
    after them aside), or the checkpoint's embeddings would be looked up by the wrong ids: another is
    refused (``model.tokenizer=null`` takes ``init_from``'s)."""
    pooling: str = "cls_raw"
    """Pooling: ``cls_raw`` (the final [CLS] state, no pooler: OmniScore §3; exports as ``omniscore``),
    ``cls`` ([CLS] through the family's pooler; exports as ``hf``), ``mean`` (``omniscore``),
    ``last_token`` (the last non-padding token; ``omniscore``), ``layer_mix_cls``, ``layer_mix_mean``."""
    head: str = "linear_sigmoid"
    """Head: ``linear_sigmoid`` (paper; exportable), ``shared_mlp``, ``ordinal``, ``classification``."""
    head_bias: bool = True
    """Bias of the ``linear_sigmoid`` outputs. The decoders' ``transformers`` classes
    (``Qwen3ForSequenceClassification``) have none: ``false`` makes such a head exportable as ``hf``."""
    head_hidden: int = 256
    """Trunk width of the ``shared_mlp`` head."""
    head_dropout: float = 0.1
    """Dropout in the ``shared_mlp`` head."""
    dropout: float | None = None
    """Overrides the backbone's hidden/attention dropout when set."""
    attention: Literal["auto", "xla", "cudnn", "blocked", "splash"] = "auto"
    """Attention kernel: ``cudnn`` (``jax.nn.dot_product_attention``'s fused kernel, NVIDIA GPUs,
    bf16/fp16; right-padded rows go in as sequence lengths, their causality and local windows as
    cuDNN's own masks), ``splash`` (TPU splash attention
    with segment ids, Pallas; no additive bias, so not DeBERTa), ``xla`` (XLA's kernel, any device),
    ``blocked`` (a few heads at a time, so that the scores stay in cache: the fast one on CPU for long
    rows), or ``auto`` (splash on TPU but for a biased attention, cudnn where it applies, blocked on
    one CPU device from 64 tokens in training and at every length when scoring, else xla; several simulated CPU
    devices share the cores, where xla is faster). ``cudnn`` off a GPU or in float32 falls back to xla with a
    warning, and ``splash`` off a TPU runs in Pallas interpret mode (exact, slow), so runs trained on
    accelerators still score and export on CPU."""
    remat: Literal["none", "attention", "dots", "full"] = "none"
    """Trade compute for activation memory in the backward pass: ``attention`` recomputes only the
    attention scores (XLA kernel; cuDNN keeps none anyway), ``dots`` rematerialises each encoder layer
    but keeps its matmul outputs, ``full`` rematerialises each layer from its input."""
    scan_layers: bool = False
    """Run the encoder layers under ``jax.lax.scan`` over stacked parameters: one layer body is
    compiled instead of one per layer (much faster compiles for deep encoders), same numbers.
    Checkpoints then hold ``encoder/layers/blocks/...`` stacks; export, ``init_from`` and eval convert
    between the layouts. Not combinable with ``optim.layer_decay`` or rules that split a stack."""


@dataclasses.dataclass
class TfdsConfig:
    """Read a prepared TensorFlow Datasets dataset instead of files."""

    name: str
    """TFDS dataset name, e.g. ``omnidistill_schema`` (built by ``omnidistill tfds-build``) or any prepared dataset."""
    data_dir: str | None = None
    """TFDS data directory (default: TFDS's own)."""
    splits: dict[str, str] = dataclasses.field(default_factory=lambda: {"train": "train", "dev": "dev", "test": "test"})
    """omnidistill split -> TFDS split, e.g. {dev: validation}."""
    fields: dict[str, str] = dataclasses.field(default_factory=dict)
    """omnidistill field -> TFDS feature, e.g. {candidate: summary, source: document}."""
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    """dimension -> scalar TFDS feature; default: a 4-vector feature named ``labels``."""


@dataclasses.dataclass
class PromptLayout:
    """Line prefixes of ``data.input_format: omniscore`` (the ``omniscore`` package's ``InputFormat``).

    The input is the present segments joined by ``separator``: an optional task line, then
    ``source_prefix`` + the source-side fields (context, question, title, source, joined by
    ``separator``), ``reference_prefix`` + reference, ``prediction_prefix`` + candidate. Each segment
    is ``f"{prefix} {text.strip()}"``.
    """

    task_prefix: str | None = None
    """Prefix of a task line holding the record's ``task``; null (the paper, §3: no task id) omits the line.
    The released OmniScore DeBERTa-v3 checkpoint uses ``"Task:"``. A record without a task (or with
    ``task: unknown``, what reports call it) gets no task line, as the ``omniscore`` package formats
    an item without one."""
    source_prefix: str | None = "Source:"
    reference_prefix: str | None = "Reference:"
    prediction_prefix: str | None = "Prediction:"
    """The released OmniScore DeBERTa-v3 checkpoint uses ``"Candidate:"``."""
    separator: str = "\n"


@dataclasses.dataclass
class DataConfig:
    """Input files and batching."""

    train: list[str] = dataclasses.field(default_factory=list)
    """Training files: JSONL, CSV or Parquet, local or ``gs://`` (JSONL and CSV also ``.gz``, ``.bz2``,
    ``.xz``), read in the order given; a glob pattern (``data/train-*.jsonl.gz``) stands for the files
    it matches, in the order of their names, and matching none is an error."""
    dev: list[str] = dataclasses.field(default_factory=list)
    """Dev files, named as ``train``'s; the best checkpoint is chosen by their MAE."""
    test: list[str] = dataclasses.field(default_factory=list)
    """Test files, named as ``train``'s; what ``omnidistill eval`` scores by default."""
    max_length: int = 512
    """Token budget per example (special tokens included); longer inputs are cut by ``truncation``.
    It must fit the model's positions (``max_position_embeddings``), and so must the bucket that pads it
    and ``pack_length``: checked before any data is read."""
    input_format: Literal["sep", "omniscore"] = "sep"
    """How a record becomes one text: ``sep`` joins the fields present with ``f" {sep_token} "``;
    ``omniscore`` writes prefixed lines as the ``omniscore`` package does (``data.layout``)."""
    layout: PromptLayout = dataclasses.field(default_factory=PromptLayout)
    """Prefixes and separator of ``input_format: omniscore``."""
    truncation: Literal["context_first", "right"] = "context_first"
    """Over-long inputs: ``context_first`` cuts source-side fields first (longest first; the candidate
    keeps at least half the budget); ``right`` cuts the end of the text, as plain ``transformers``
    and the ``omniscore`` package do (``tokenizer(text, truncation=True, max_length=...)``)."""
    length_buckets: list[int] = dataclasses.field(default_factory=lambda: [32, 64, 128, 256, 512])
    """Each batch is padded to the smallest bucket that fits its longest example."""
    skip_invalid: bool = False
    """Skip (and count) malformed records instead of raising."""
    keep_fields: list[str] = dataclasses.field(default_factory=list)
    """Fields of your own that the records carry beside the schema's (a system name, a prompt id): read
    as they are and never model input. Training ignores them; ``eval`` writes them into its predictions
    and can report metrics per value (``eval.group_by``). A field outside the schema that is not named
    here is refused, so that a misspelt one is never ignored."""
    tfds: TfdsConfig | None = None
    """Read splits from a TFDS dataset instead of train/dev/test files."""
    read_threads: int = 16
    """grain reader threads that tokenize and batch ahead of the train step (order stays deterministic)."""
    prefetch_buffer: int = 32
    """Batches grain prepares ahead of the train step (each element is a whole batch: grain's own
    default of 500 read far beyond a short run's steps, and competed with its compile for the CPU)."""
    workers: int = 0
    """grain worker processes that tokenize (and pack) ahead of the train step; 0 runs in-process.
    The batch order depends on this value: resume with the same one."""
    token_cache: str = ""
    """Folder of token caches (``omnidistill prepare``): training tokenizes each split once into
    ``<folder>/<split>-<fingerprint>/`` and reads the tokens from there in every epoch and run
    (empty: tokenize on the fly). A change to the data, tokenizer or input settings makes a new cache."""
    pack_length: int = 0
    """Pack several examples into rows of this many tokens (0: one example per row, bucketed padding).
    Attention stays within each example and each is pooled on its own; ``train.batch_size`` then
    counts rows. Must be at least ``max_length``."""
    pack_max_segments: int = 16
    """At most this many examples in one packed row."""
    pack_bins: int = 64
    """Rows filled at once by first-fit packing (more bins: less padding, more examples in flight)."""
    pairs: str = ""
    """The teacher's pairwise choices to train on beside the point labels: a ``label --pairwise``
    output (JSONL lines with ``id_a``, ``id_b`` and ``winner``), trained with a Bradley-Terry loss of
    weight ``loss.pair_weight`` over ``train.pair_batch_size`` pairs a step (empty: none). Ids are
    looked up in ``pair_items``; pairs the judges tied on are left out and counted."""
    pair_items: list[str] = dataclasses.field(default_factory=list)
    """Files holding the paired candidates (named as ``train``'s; labels not needed), found by ``id``
    (empty: the ``train`` files)."""
    dev_pairs: str = ""
    """The judges' pairwise choices between dev items (a ``label --pairwise`` output): every dev
    evaluation then logs ``dev_pair_accuracy``, how often the student orders them as the judges chose,
    and the dev report has the table of ``eval --pairs`` (empty: none)."""


@dataclasses.dataclass
class ParamGroupRule:
    """Per-parameter optimisation rule: the first rule whose regex matches a parameter path wins."""

    pattern: str
    lr: float | None = None
    weight_decay: float | None = None
    frozen: bool = False
    """Matched parameters are never updated."""


@dataclasses.dataclass
class OptimConfig:
    """AdamW with per-group learning rates."""

    lr: float = 2e-5
    """Learning rate of parameters matched by no rule (the encoder)."""
    head_lr: float = 1e-4
    """Learning rate of the heads and of a new pooler (rule ``^(pooler|head)/``); a family pooler whose
    weights come pretrained from ``model.init_from`` (BERT's) trains at ``lr`` with the encoder."""
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    schedule: Literal["linear", "cosine", "constant", "wsd"] = "linear"
    """After warmup: linear or cosine decay to 0, constant, or ``wsd`` (warmup-stable-decay:
    constant, then linear decay over the last ``decay_ratio``)."""
    warmup_ratio: float = 0.0
    """Fraction of total steps spent in linear warmup."""
    decay_ratio: float = 0.1
    """Final fraction of steps that the ``wsd`` schedule decays over."""
    layer_decay: float | None = None
    """Layer-wise LR decay (COMET: 0.95): encoder layer i of L gets ``lr * decay**(L - i)``,
    embeddings ``lr * decay**(L + 1)``."""
    freeze_encoder_steps: int = 0
    """Keep the encoder frozen (learning rate 0) for this many steps, then train it."""
    freeze_encoder_fraction: float = 0.0
    """Same, as a fraction of the total steps (the larger of the two applies)."""
    grad_clip: float | None = 1.0
    """Global-norm gradient clipping; null disables it."""
    param_groups: list[ParamGroupRule] = dataclasses.field(default_factory=list)
    """Extra rules, tried before the built-in head rule."""
    ema_decay: float | None = None
    """An exponential moving average of the weights (Polyak averaging), kept beside them: after update
    t (0, 1, ...), ``average = d * average + (1 - d) * weights`` with ``d = min(ema_decay, (1 + t) / (10 + t))``,
    from the initial weights. Dev evaluations, the best checkpoint (and so ``eval``, ``export`` and
    ``score``) and ``--checkpoint latest`` use the average; the weights train as without it (to float32 rounding).
    It costs one more copy of the parameters. null: off; e.g. 0.999."""


@dataclasses.dataclass
class MeshConfig:
    """Device mesh axis sizes; -1 on one axis takes the remaining devices.

    ``data``/``fsdp``/``tensor`` are the sizes within a slice (ICI); ``dcn_data``/``dcn_fsdp`` split
    those axes further across slices (multi-slice TPU over DCN) or hosts (multi-node GPU)."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1
    dcn_data: int = 1
    """Number of slices (or hosts off TPU) along the data axis; the total data size is data x dcn_data."""
    dcn_fsdp: int = 1
    """Number of slices (or hosts) along the fsdp axis."""


@dataclasses.dataclass
class CheckpointConfig:
    every_steps: int = 0
    """Save every N steps (0: after each evaluation)."""
    keep: int = 2
    """Number of recent checkpoints kept (the best one is always kept)."""


@dataclasses.dataclass
class TrainConfig:
    """Training loop."""

    output_dir: str = "runs/default"
    seed: int = 0
    batch_size: int = 16
    """Global batch size (all devices and processes, before accumulation split)."""
    grad_accum: int = 1
    """Micro-batches per update; batch_size must be divisible by it."""
    epochs: float = 5.0
    max_steps: int | None = None
    """Stop after this many updates (overrides epochs)."""
    eval_every_steps: int = 0
    """Evaluate on dev every N steps (0: once per epoch)."""
    log_every_steps: int = 10
    compute_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    nonfinite: Literal["stop", "skip"] = "stop"
    """A NaN/Inf loss or gradient never updates the parameters; ``stop`` then ends the run with an
    error, ``skip`` counts and goes on."""
    preemption_check_every: int = 10
    """Multi-process runs share a SIGTERM seen by one process through an all-gather every this many steps."""
    profile: list[int] = dataclasses.field(default_factory=list)
    """``[first, last]``: trace training steps first..last (inclusive) with ``jax.profiler`` into RUN/profile/."""
    early_stopping_patience: int = 0
    """Stop after this many dev evaluations in a row without improving ``early_stopping_metric`` (0: never)."""
    early_stopping_metric: Literal["dev_mae", "dev_rmse", "dev_pearson", "dev_acc1", "dev_pair_accuracy"] = "dev_mae"
    """The dev metric early stopping watches (MAE/RMSE: lower is better; Pearson/Acc@±1 and the
    agreement with ``data.dev_pairs``: higher). The best checkpoint is chosen by dev MAE whichever it is."""
    pair_batch_size: int = 8
    """Teacher preference pairs per update with ``data.pairs`` (global, two candidates each, beside the
    ``batch_size`` items); divisible by ``grad_accum`` x data x fsdp, as the batch's rows are."""
    compiler_options: dict[str, bool | int | float | str] = dataclasses.field(default_factory=dict)
    """XLA options for the train step (``jax.jit``'s ``compiler_options``), over the defaults of
    ``train/step.py: TRAIN_STEP_COMPILER_OPTIONS`` (on CPU, copy insertion's region analysis, which
    keeps the donated optimizer state from being copied at every step; set
    ``{xla_cpu_copy_insertion_use_region_analysis: false}`` to undo it). Checked by XLA when training
    starts: an unknown name or a value of the wrong type is an error naming this field."""


@dataclasses.dataclass
class LossConfig:
    """Training objective."""

    name: str = "auto"
    """``auto`` (the head's own loss), ``mse``, ``huber``, ``ordinal``, ``cross_entropy``, ``distribution``
    (the classification head against each record's level distribution, ``label_dist`` or its annotations)."""
    huber_delta: float = 1.0
    distribution_mse_weight: float = 0.0
    """With ``name: distribution``: weight of an added squared error of the expected score (0 disables it)."""
    ranking_weight: float = 0.0
    """Weight of an added in-batch pairwise ranking loss (0 disables it)."""
    pair_weight: float = 1.0
    """With ``data.pairs``: weight of the Bradley-Terry loss on the teacher's pairwise choices, added to
    the point loss (each a mean: over the batch's cells, and over the step's pairs)."""
    dimension_weights: list[float] = dataclasses.field(default_factory=lambda: [1.0, 1.0, 1.0, 1.0])
    """Loss weight per dimension (informativeness, clarity, plausibility, faithfulness)."""


@dataclasses.dataclass
class LoggingConfig:
    tensorboard: bool = True
    """Write TensorBoard event files (tensorboardX; no TensorFlow) with every logged scalar to RUN/tensorboard/."""
    wandb: str | None = None
    """Also log to Weights & Biases under this project (needs the wandb package)."""
    wandb_mode: Literal["online", "offline", "disabled"] = "online"
    """W&B mode; ``offline`` writes the run under RUN/wandb/ for a later ``wandb sync``."""


@dataclasses.dataclass
class EvalConfig:
    batch_size: int = 64
    length_step: int = 32
    """``eval`` and ``score`` batches (sorted by token count) pad to the next multiple of this many tokens;
    each padded length compiles once. Dev evaluation during training pads to ``data.length_buckets``."""
    pack_length: int = 0
    """``eval`` and ``score``: > 0 packs several items into each row of this many tokens (each item attends
    only to itself, keeps its own positions and is pooled on its own; scores equal the padded path's
    within float rounding) instead of one item per padded row; items longer than a row are padded as
    usual. 0: padded rows only."""
    batch_tokens: int | None = None
    """``eval`` and ``score`` with an encoder that runs unpadded (BERT, XLM-R, DeBERTa, ModernBERT) and
    no ``pack_length``: batches of up to this many real tokens per batch shard (device; items sorted by
    token count) instead of ``batch_size`` items, and the layers' per-token work on those tokens only
    (attention still per padded item). Scores equal the padded path's within float rounding. 0:
    batches of ``batch_size`` padded items. Unset: 1024 on one CPU batch shard, else 0 (on several
    shards batches close at each padded length with most shards idle; on GPU and TPU no budget is
    measured yet). The decoders always batch by items."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """``eval`` and ``score`` compute in this dtype (parameters stay float32). ``float32``: the scores the
    exported model gives in ``transformers`` and the ``omniscore`` package. ``bfloat16``: matmuls and
    attention in bf16 as training computes them (cuDNN's fused attention on a GPU), faster on GPUs,
    TPUs and CPUs with native bf16 (AMX, AVX-512 BF16; models/cpu_matmul.py), with scores a little off
    float32's (at most 0.002 on the 1-5 scale on the tiny default run; docs/scoring.md)."""
    compiler_options: dict[str, bool | int | float | str] = dataclasses.field(default_factory=dict)
    """``eval`` and ``score``: XLA options for the program that scores (``jax.jit``'s ``compiler_options``),
    e.g. ``{xla_gpu_enable_command_buffer: ""}`` to launch its GPU kernels one by one rather than as
    CUDA graphs. Checked by XLA when scoring starts: an unknown name or a value of the wrong type is an
    error naming this field. Training's dev evaluation does not take them."""
    group_by: list[str] = dataclasses.field(default_factory=list)
    """``eval`` (unless ``--group-by`` is given): metrics per value of each of these fields, as per task and
    language: fields of your own (read as ``data.keep_fields`` are, without naming them there too) or the
    schema's ``dataset``, ``src_lang``, ``tgt_lang``."""
    lang_weights: str | None = None
    """L-MAE weights: a JSON/YAML file mapping language -> weight (e.g. OmniScore Table 14's test counts);
    default: the evaluated items of each language. Training reads and checks it when it starts."""


@dataclasses.dataclass
class Config:
    """The whole run."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)


# --------------------------------------------------------------------------- conversion


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and minimally convert) ``value`` against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: expected one of {list(choices)}, got {value!r}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and item_tp is not Any:
            value = [value] if not isinstance(value, str) or item_tp is str else value
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        _, val_tp = typing.get_args(tp)
        return {str(k): _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{key}: expected bool, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected int, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected float, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected str, got {value!r}")
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")


def nearest_name(wrong: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` closest to a mistyped ``wrong`` (difflib's ratio of at least 0.6), or None:
    the "did you mean" of every unknown-name error (config keys, ``model.arch``, ``data.tfds``)."""
    close = difflib.get_close_matches(wrong, sorted(names), n=1)
    return close[0] if close else None


def check_value(value: Any, tp: Any, key: str) -> None:
    """Refuse ``value`` where a config file's ``key`` of annotation ``tp`` would be refused (a
    ConfigError naming the key, e.g. ``model.arch.num_hidden_layers: expected int, got 'abc'``)."""
    _coerce(value, tp, key)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys and wrong types."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = nearest_name(str(key), names)
            hint = f"did you mean {close}? " if close else ""
            raise ConfigError(f"{full}: unknown key ({hint}valid keys: {', '.join(sorted(names))})")
        kwargs[key] = _coerce(value, hints[key], full)
        out_of_range = limit_error(cls.__name__, key, kwargs[key])
        if out_of_range:
            raise ConfigError(f"{full}: {out_of_range}")
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field is missing
        raise ConfigError(f"{prefix or cls.__name__}: {err}") from None


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (YAML/JSON-serialisable)."""
    return dataclasses.asdict(cfg)


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one ``a.b.c=value`` override (value parsed as YAML) to a nested dict in place."""
    if "=" not in override:
        raise ConfigError(f"override {override!r}: expected key=value")
    key, raw = override.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {override!r}: malformed key")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {part} is not a section")
    node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""


class _RepeatedKey(Exception):
    """``LINE: message`` of a key given twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last one
    silently, so a second ``optim:`` block would drop every setting of the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key != "<<" and key in first:
                raise _RepeatedKey(f"{line}: key {key!r} appears twice in one mapping (first at line {first[key]}); merge the two")
            first.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, where: str | Path) -> Any:
    """Parse a config file's ``text`` (errors start with ``where``): invalid YAML and repeated keys are
    :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except _RepeatedKey as err:
        raise ConfigError(f"{where}:{err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: invalid YAML: {err}") from None


def config_not_found(path: str | Path, what: str = "config file") -> str:
    """Why a config (or sweep) file ``path`` was not found: for a relative path, the directory it was
    looked for in, and for one under ``configs/`` where the shipped configs are (a clone's root, not an
    installed wheel)."""
    from omnidistill.storage import relative_path_note

    text = f"{what} not found"
    where = relative_path_note(path)
    if where is None:
        return text
    shipped = "; the configs the docs name are in the omnidistill repository's configs/ folder: run from its root"
    return f"{text} ({where}{shipped if Path(path).parts[:1] == ('configs',) else ''})"


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Load ``path`` (YAML) and apply dotted overrides; validates every key and type."""
    data: dict[str, Any] = {}
    if path is not None:
        from omnidistill.storage import existing_file

        path = existing_file(path, ConfigError, config_not_found(path))
        loaded = load_yaml(path.read_bytes().decode("utf-8"), path)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        data = loaded or {}
    for override in overrides:
        apply_override(data, override)
    try:
        return from_dict(Config, data)
    except ConfigError as err:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{err}") from None


def dump_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
