"""Everything a training run needs before its first step, built from a :class:`Config`: mesh, model,
data iterator, optimizer, sharded state, the compiled step, checkpoints (restored on ``--resume``)."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.config import Config
from omnidistill.config.unused import idle_settings
from omnidistill.data.own_fields import check_group_by, check_keep_fields
from omnidistill.data.pipeline import PackSpec, bucket_length, packed_train_dataset, train_dataset, with_workers
from omnidistill.data.preference_batches import PreferenceBatches, load_training_pairs
from omnidistill.data.preference_file import Preference, read_preferences
from omnidistill.data.schema import Record
from omnidistill.data.splits import check_split_files, files_shared_with_train, load_split, stream_split
from omnidistill.data.token_cache import TokenCache, cached_examples
from omnidistill.data.tokenize import TRUNCATION_SAMPLE, EncodedInputs, RecordEncoder, count_truncated
from omnidistill.dimensions import DIMENSIONS, NUM_LEVELS
from omnidistill.eval.metrics import load_group_weights
from omnidistill.eval.predict import checked_compiler_options, jitted_predict_fn
from omnidistill.models.hf_io import set_params, unrolled_shapes
from omnidistill.models.loader import LoadedModel, StartingPoint, load_model
from omnidistill.models.registry import get_family
from omnidistill.models.scan import unstack_layers
from omnidistill.parallel.mesh import (
    batch_sharding,
    build_mesh,
    global_batch_array,
    param_shardings,
    replicated,
    shardings_following_params,
    under_mesh,
)
from omnidistill.runs.checkpoint import RunCheckpoints, StateStructureError, restore_params, saved_steps
from omnidistill.runs.load import trained_model_shapes
from omnidistill.runs.run_dir import (
    INPUT_SETTINGS,
    changed_optimizer,
    check_same_batches,
    check_same_model,
    is_run_directory,
    load_run_metadata,
    save_run_metadata,
    write_train_data,
)
from omnidistill.train.optimizer import build_optimizer
from omnidistill.train.state import TrainState
from omnidistill.train.step import PAIR_KEYS, make_loss_fn, make_train_step, train_step_compiler_options

log = logging.getLogger(__name__)
BATCH_KEYS = ("input_ids", "attention_mask", "labels", "label_mask", "label_dist", "example_mask")
PACKED_BATCH_KEYS = (*BATCH_KEYS, "segment_ids")


class TrainError(ValueError):
    """The run cannot start as configured."""


def check_batching(cfg: Config, n_batch_shards: int, process_count: int) -> None:
    b, a = cfg.train.batch_size, cfg.train.grad_accum
    if a < 1 or b % a:
        raise TrainError(f"train.batch_size={b} must be divisible by train.grad_accum={a}")
    if (b // a) % n_batch_shards:
        raise TrainError(f"train.batch_size/grad_accum={b // a} must be divisible by mesh data x fsdp = {n_batch_shards}")
    if b % process_count:
        raise TrainError(f"train.batch_size={b} must be divisible by the number of processes ({process_count})")
    p = cfg.train.pair_batch_size
    if cfg.data.pairs and (p % a or (p // a) % n_batch_shards or p % process_count):
        raise TrainError(
            f"train.pair_batch_size={p} must be divisible by train.grad_accum={a}, then by mesh data x fsdp = {n_batch_shards}, "
            f"and by the number of processes ({process_count}), as the batch's rows are"
        )


def mean_example_tokens(records: Sequence[Record] | TokenCache, encoder: RecordEncoder, seed: int, sample: int = 2048) -> float:
    """Mean token count of the training inputs, from a seeded sample of at most ``sample`` records
    (the same sample's cached lengths when ``records`` is the token cache)."""
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(records), size=min(sample, len(records)), replace=False)
    if isinstance(records, TokenCache):
        return float(np.mean(records.lengths[picks]))
    return float(np.mean([len(encoder.token_ids(records[int(i)])) for i in picks]))


def steps_per_epoch(cfg: Config, records: Sequence[Record] | TokenCache, encoder: RecordEncoder) -> int:
    """Optimizer steps per pass over the training records.

    Packed rows: the rows that a perfect packing of the epoch's tokens would fill (at least
    records / ``pack_max_segments``), so a packed "epoch" covers slightly fewer examples than a pass.
    """
    batch = cfg.train.batch_size
    if cfg.data.pack_length <= 0:
        return max(1, len(records) // batch)
    tokens = len(records) * mean_example_tokens(records, encoder, cfg.train.seed)
    rows = max(tokens / cfg.data.pack_length, len(records) / cfg.data.pack_max_segments)
    return max(1, math.ceil(rows / batch))


def training_records(cfg: Config, encoder: RecordEncoder) -> tuple[Sequence[Record] | TokenCache, int]:
    """The training split and how many of its records were skipped as invalid. With
    ``data.token_cache`` it is the split's token cache (built on first use): the records are streamed
    through to fingerprint (and build) it and never held, so the process holds no object per record."""
    if not cfg.data.token_cache:
        return load_split(cfg.data, "train")
    stream = stream_split(cfg.data, "train")
    cache, built = cached_examples(stream, encoder, cfg.data.token_cache, split="train", progress=jax.process_index() == 0)
    log.info("train tokens %s %s", "cached in" if built else "read from", cache.directory)
    return cache, getattr(stream, "skipped", 0)


def training_batches(cfg: Config, records: Sequence[Record] | TokenCache, encoder: RecordEncoder) -> Any:
    """The endless, resumable iterator of this process's training batches (plain or packed)."""
    read = grain.ReadOptions(num_threads=cfg.data.read_threads, prefetch_buffer_size=cfg.data.prefetch_buffer)
    where = dict(process_index=jax.process_index(), process_count=jax.process_count())
    if cfg.data.pack_length > 0:
        pack = PackSpec(cfg.data.pack_length, cfg.data.pack_max_segments, cfg.data.pack_bins)
        try:
            ds = packed_train_dataset(
                records, encoder, global_batch=cfg.train.batch_size, seed=cfg.train.seed, pack=pack, read_options=read, **where
            )
        except ValueError as err:
            raise TrainError(str(err)) from None
    else:
        ds = train_dataset(
            records, encoder, global_batch=cfg.train.batch_size, seed=cfg.train.seed, buckets=cfg.data.length_buckets, **where
        ).to_iter_dataset(read)
    return iter(with_workers(ds, cfg.data.workers))


def preference_batches(cfg: Config, encoder: RecordEncoder) -> PreferenceBatches | None:
    """This process's teacher preference pairs for each step (``data.pairs``), or None without them."""
    if not cfg.data.pairs:
        return None
    pairs = load_training_pairs(cfg.data, encoder)
    log.info("training on %d judged pairs from %s (%d tied and left out, %d with an unknown id skipped)",
             len(pairs), cfg.data.pairs, pairs.ties, pairs.unknown)  # fmt: skip
    try:
        return PreferenceBatches(
            pairs,
            pad_id=encoder.pad_id,
            buckets=cfg.data.length_buckets,
            global_pairs=cfg.train.pair_batch_size,
            seed=cfg.train.seed,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )
    except ValueError as err:
        raise TrainError(f"data.pairs={cfg.data.pairs}: {err}") from None


def dev_preferences(cfg: Config, dev_records: Sequence[Record]) -> list[Preference] | None:
    """``data.dev_pairs``, read and matched to the dev items: pairs naming an id the dev split lacks
    are counted in a warning (a dev evaluation leaves them out, as ``eval --pairs`` does); a file
    whose judged pairs all name such ids is refused."""
    if not cfg.data.dev_pairs:
        return None
    pairs = read_preferences(cfg.data.dev_pairs, origin="data.dev_pairs")
    ids = {r.id for r in dev_records}
    judged = [p for p in pairs if p.winner is not None]
    usable = [p for p in judged if p.id_a in ids and p.id_b in ids]
    if not usable:
        raise TrainError(f"data.dev_pairs={cfg.data.dev_pairs}: none of its {len(judged)} judged pairs names two dev items")
    if len(usable) < len(judged):
        log.warning("data.dev_pairs: %d of %d judged pairs name an id that the dev split lacks; dev evaluations leave them out",
                    len(judged) - len(usable), len(judged))  # fmt: skip
    return pairs


def input_counts(
    encoder: RecordEncoder, train: Sequence[Record] | TokenCache, dev: EncodedInputs, skipped: dict[str, int], seed: int
) -> dict[str, dict]:
    """Skipped records and truncated inputs per split, with a warning for either (training counts
    truncation on a seeded sample of at most 20,000 records, a token cache counted it when built; the
    dev set's count comes with its token ids)."""
    if isinstance(train, TokenCache):
        train_truncation = train.truncation
    else:
        train_truncation = count_truncated(encoder, train, sample=TRUNCATION_SAMPLE, seed=seed)
    truncation = {"train": train_truncation, "dev": {"truncated": dev.truncated, "of": len(dev.ids), "sampled": False}}
    for split, t in truncation.items():
        if t["truncated"]:
            estimate = " (estimated from a sample)" if t["sampled"] else ""
            log.warning("%s: %d of %d inputs exceed data.max_length=%d and are truncated (data.truncation=%s)%s",
                        split, t["truncated"], t["of"], encoder.max_length, encoder.truncation, estimate)  # fmt: skip
    for split, n in skipped.items():
        if n:
            log.warning("%s: %d invalid record(s) skipped (data.skip_invalid=true)", split, n)
    return {"skipped": dict(skipped), "truncated": {split: t["truncated"] for split, t in truncation.items()}}


def _with_sharding(x: Any, sharding: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)


def state_target(params: Any, tx: Any, mesh: Any, rules: Any) -> TrainState:
    """The train state's shapes and shardings (``jax.ShapeDtypeStruct`` leaves) without any value:
    parameters by rule, each optimizer moment like the parameter it tracks, step and RNG replicated.
    :func:`init_state` fills it; ``--resume`` restores a checkpoint into it."""
    params = jax.tree.map(_with_sharding, params, param_shardings(params, mesh, rules))
    rep = replicated(mesh)
    opt_shapes = jax.eval_shape(tx.init, params)
    opt_shardings = shardings_following_params(opt_shapes, params, rep)
    return TrainState(
        step=jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
        params=params,
        opt_state=jax.tree.map(_with_sharding, opt_shapes, opt_shardings),
        rng=_with_sharding(jax.eval_shape(jax.random.PRNGKey, 0), rep),
    )


def init_state(params: Any, tx: Any, seed: int, mesh: Any, rules: Any) -> TrainState:
    """Sharded train state (:func:`state_target`'s shardings): the parameters, zero optimizer state.
    Every leaf sits on a ``NamedSharding`` of ``mesh``: the state the train step returns is typed by
    the mesh, and an initial state that is not would make the second step compile the whole train
    step again."""
    shardings = jax.tree.map(lambda x: x.sharding, state_target(params, tx, mesh, rules))
    params = jax.device_put(params, shardings.params)
    return TrainState(
        step=jax.device_put(jnp.int32(0), shardings.step),
        params=params,
        opt_state=jax.jit(tx.init, out_shardings=shardings.opt_state)(params),
        rng=jax.device_put(jax.random.PRNGKey(seed), shardings.rng),
    )


@dataclasses.dataclass
class TrainRun:
    """A run ready for its first (or resumed) step."""

    cfg: Config
    run_dir: Path
    mesh: Any
    encoder: RecordEncoder
    train_records: Sequence[Record] | TokenCache
    """The training split's records, or its token cache (``data.token_cache``)."""
    dev_records: Sequence[Record]
    dev_ids: list[np.ndarray]
    """The dev records' token ids, encoded once for every dev evaluation."""
    skipped_records: int
    data_counts: dict[str, dict]
    """Per split: records skipped as invalid, and inputs truncated to data.max_length."""
    epoch_steps: int
    total_steps: int
    state: TrainState
    start_step: int
    step_fn: Callable
    predict_fn: Callable
    batches: Iterator
    pair_batches: PreferenceBatches | None
    """Each step's teacher preference pairs (``data.pairs``): element ``step`` joins the batch of step ``step + 1``."""
    batch_keys: tuple[str, ...]
    batch_sharding: Any
    learning_rates: dict[str, Callable]
    checkpoints: RunCheckpoints
    lang_weights: dict[str, float] | None = None
    """``eval.lang_weights`` (the dev reports' L-MAE weights), read and checked before training starts."""
    dev_pairs: list[Preference] | None = None
    """``data.dev_pairs``: the judges' choices between dev items, which every dev evaluation checks."""

    def next_batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of the batch after ``step`` updates (with its preference pairs)."""
        local = next(self.batches)
        return local if self.pair_batches is None else {**local, **self.pair_batches[step]}

    def global_batch(self, local: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """This process's rows -> the global batch arrays the step consumes."""
        return {k: global_batch_array(local[k], self.batch_sharding) for k in self.batch_keys}

    def data_scalars(self) -> dict[str, float]:
        """The input counts as log scalars (``skipped_train``, ``truncated_dev``, ...)."""
        return {f"{kind}_{split}": count for kind, per in self.data_counts.items() for split, count in per.items()}

    def lr_scalars(self, step: int) -> dict[str, float]:
        return {f"lr_{name}": float(schedule(step)) for name, schedule in self.learning_rates.items()}


def load_initial_model(cfg: Config, *, shapes_only: bool = False) -> LoadedModel:
    """The model a run starts from: ``model.init_from`` names a Hugging Face folder / hub id (encoder
    weights), or an omnidistill run directory (one ``train`` or ``import`` wrote): then every
    parameter of its best checkpoint that the configured model also has (same path and shape:
    encoder, and pooler and heads when ``model.pooling``/``model.head`` match) starts from it.

    ``shapes_only`` (a resumed run, whose checkpoint holds every value): the model is built from
    shapes, and nothing is read, initialised or copied only to be overwritten. Which parameters an
    ``init_from`` run would give (they decide the LR groups) follows from its metadata alone."""
    if not is_run_directory(cfg.model.init_from):
        return load_model(cfg.model, compute_dtype=cfg.train.compute_dtype, seed=cfg.train.seed, shapes_only=shapes_only)
    source = Path(str(cfg.model.init_from))
    run_cfg, hf_config, tok_dir = load_run_metadata(source)
    model_cfg = dataclasses.replace(cfg.model, init_from=None)  # the run's tokenizer unless model.tokenizer names one
    start = StartingPoint(str(source), hf_config, tok_dir)
    loaded = load_model(model_cfg, compute_dtype=cfg.train.compute_dtype, seed=cfg.train.seed, shapes_only=shapes_only, start=start)
    source_model = trained_model_shapes(run_cfg, hf_config, tok_dir)
    shapes = unrolled_shapes(loaded.model)  # both sides unrolled: the source may use the other model.scan_layers
    matched = {p for p, shape in unrolled_shapes(source_model).items() if shapes.get(p) == shape}
    if not any(p[0] == "encoder" for p in matched):
        raise TrainError(f"model.init_from={source}: its encoder does not fit the configured model")
    if not shapes_only:
        params, step = restore_params(source / "best", nnx.to_pure_dict(nnx.state(source_model, nnx.Param)))
        flat = dict(nnx.traversals.flatten_mapping(unstack_layers(params)))
        set_params(loaded.model, nnx.traversals.unflatten_mapping({p: flat[p] for p in matched}))
        fresh = sorted({"/".join(map(str, p[:1])) for p in shapes if p not in matched})
        log.info("initialised from run %s (step %d)%s", source, step, f"; new: {', '.join(fresh)}" if fresh else "")
    for field in INPUT_SETTINGS:
        if getattr(run_cfg.data, field) != getattr(cfg.data, field):
            log.warning(
                "model.init_from=%s was trained with data.%s=%r; this run uses %r",
                source,
                field,
                getattr(run_cfg.data, field),
                getattr(cfg.data, field),
            )
    loaded.pretrained_pooler = loaded.model.pooler is not None and any(p[0] == "pooler" for p in matched)
    return loaded


def check_loss(cfg: Config, model: Any) -> None:
    """Trace the loss of one abstract batch through ``model`` (values or shapes alone): what the first
    training step would refuse (an unknown ``loss.name``, a loss the head cannot take) is refused now,
    before any data is read. Nothing is computed."""
    graphdef, params = nnx.split(model, nnx.Param)
    n, length = 2, min(128, cfg.data.max_length)  # a length training uses: kernels that block rows see a real one
    batch = {
        "input_ids": jax.ShapeDtypeStruct((n, length), jnp.int32),
        "attention_mask": jax.ShapeDtypeStruct((n, length), jnp.int32),
        "labels": jax.ShapeDtypeStruct((n, len(DIMENSIONS)), jnp.float32),
        "label_mask": jax.ShapeDtypeStruct((n, len(DIMENSIONS)), jnp.float32),
        "label_dist": jax.ShapeDtypeStruct((n, len(DIMENSIONS), NUM_LEVELS), jnp.float32),
        "example_mask": jax.ShapeDtypeStruct((n,), jnp.float32),
    }
    if cfg.data.pairs:
        batch.update({k: jax.ShapeDtypeStruct((n, 2, length), jnp.int32) for k in PAIR_KEYS})
    jax.eval_shape(make_loss_fn(graphdef, cfg.loss), nnx.to_pure_dict(params), batch, None)


def check_sequence_lengths(cfg: Config, arch: Any) -> None:
    """Refuse rows longer than the model's positions (``arch.max_sequence_length``) before any data is
    read. The model refuses such a row when it traces it, which would otherwise happen at the first
    batch holding a long item, possibly deep into training."""
    limit = getattr(arch, "max_sequence_length", None)
    if limit is None:  # relative positions alone (DeBERTa)
        return
    where = f"the model's {limit} positions (max_position_embeddings of model.arch or init_from)"
    if cfg.data.max_length > limit:
        raise TrainError(f"data.max_length={cfg.data.max_length} exceeds {where}: set data.max_length <= {limit}")
    padded = bucket_length(cfg.data.max_length, cfg.data.length_buckets)
    if padded > limit:
        raise TrainError(
            f"data.length_buckets={cfg.data.length_buckets} pad inputs of data.max_length={cfg.data.max_length} tokens to {padded}, "
            f"beyond {where}: give a bucket between {cfg.data.max_length} and {limit}"
        )
    for key, length in (("data.pack_length", cfg.data.pack_length), ("eval.pack_length", cfg.eval.pack_length)):
        if length > limit:
            raise TrainError(f"{key}={length} exceeds {where}: set {key} <= {limit}")


def checked_model(cfg: Config, *, shapes_only: bool) -> tuple[LoadedModel, RecordEncoder]:
    """The run's model (:func:`load_initial_model`) and input encoder, with the row lengths checked
    and the loss traced through the model: what a run refuses before it reads any data."""
    loaded = load_initial_model(cfg, shapes_only=shapes_only)
    check_sequence_lengths(cfg, loaded.model.arch)
    check_loss(cfg, loaded.model)
    return loaded, RecordEncoder.from_config(loaded.tokenizer, cfg.data)


def train_compiler_options(cfg: Config) -> dict[str, Any]:
    """The train step's XLA options (``train_step_compiler_options`` under ``train.compiler_options``),
    each checked by XLA now: an unknown name or a wrong type is a ValueError naming the field."""
    return checked_compiler_options(train_step_compiler_options(cfg.train.compiler_options), "train.compiler_options")


def check_training_files(cfg: Config) -> None:
    """Refuse ``data.train`` and ``data.dev`` files (or glob patterns) that are not there, a run with no
    training data, and ``data.keep_fields`` or ``eval.group_by`` naming a field they cannot name (the
    run's later ``eval`` would refuse it); TFDS splits are checked where they are read."""
    if not cfg.data.train and cfg.data.tfds is None:
        raise TrainError("data.train names no file (or set data.tfds)")
    check_keep_fields(cfg.data.keep_fields, "data.keep_fields")
    check_group_by(cfg.eval.group_by, "eval.group_by")
    for split in ("train", "dev"):
        check_split_files(cfg.data, split, f"data.{split}")
    check_pair_files(cfg)


def check_pair_files(cfg: Config) -> None:
    """Refuse a ``data.pairs`` or ``data.dev_pairs`` file that is not there or has a malformed line,
    ``data.pair_items`` files that are not there, and early stopping on the dev pairs without them,
    before the model loads."""
    if cfg.data.pairs:
        read_preferences(cfg.data.pairs, origin="data.pairs")
        if cfg.data.pair_items:
            check_split_files(dataclasses.replace(cfg.data, train=cfg.data.pair_items, tfds=None), "train", "data.pair_items")
        elif not cfg.data.train:
            raise TrainError("data.pairs: set data.pair_items to the files holding the paired candidates (data.train names no file)")
    if cfg.data.dev_pairs:
        read_preferences(cfg.data.dev_pairs, origin="data.dev_pairs")
    if cfg.train.early_stopping_patience and cfg.train.early_stopping_metric == "dev_pair_accuracy" and not cfg.data.dev_pairs:
        raise TrainError("train.early_stopping_metric=dev_pair_accuracy needs data.dev_pairs, the judges' choices between dev items")


def check_run_config(cfg: Config) -> None:
    """Refuse a config that training would refuse after reading its data: the data files that are not
    there, the model (family, arch, head, pooling, ``init_from``'s names and shapes), the input settings,
    the loss, the LR groups and the train step's XLA options, all checked from shapes, with no weights
    read or initialised. A sweep checks every run this way before the first one trains."""
    check_training_files(cfg)
    train_compiler_options(cfg)
    loaded, _ = checked_model(cfg, shapes_only=True)
    build_optimizer(cfg.optim, nnx.to_pure_dict(nnx.state(loaded.model, nnx.Param)), 1, pretrained_pooler=loaded.pretrained_pooler)


def prepare_run(cfg: Config, *, resume: bool = False) -> TrainRun:
    """Build the run described by ``cfg``; with ``resume``, restore its latest checkpoint (state and
    data iterator). A run directory that already has checkpoints is refused without ``resume``."""
    run_dir = Path(cfg.train.output_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise TrainError(f"train.output_dir={cfg.train.output_dir} is a file: name a folder for the run (it is made if missing)")
    mesh = build_mesh(cfg.mesh)
    check_batching(cfg, mesh.shape["data"] * mesh.shape["fsdp"], jax.process_count())
    for line in idle_settings(cfg):
        log.warning("%s", line)
    # a bad eval.lang_weights file fails now, not at the first dev evaluation after an epoch of training
    lang_weights = load_group_weights(cfg.eval.lang_weights) if cfg.eval.lang_weights else None
    compiler_options = train_compiler_options(cfg)
    resuming = bool(saved_steps(run_dir))
    if resuming and not resume:
        raise TrainError(
            f"{run_dir} already has checkpoints: pass --resume (train(cfg, resume=True) from Python) to continue, "
            "or set train.output_dir to a new directory"
        )
    if resume and not resuming:  # a requeued job before its first checkpoint, or a mistyped train.output_dir
        log.warning("--resume: %s has no checkpoint yet (%s); training starts at step 0", run_dir,
                    "the folder exists" if run_dir.is_dir() else "no such folder")  # fmt: skip
    check_training_files(cfg)  # before the model: a Hub model is not downloaded for data that is not there
    loaded, encoder = checked_model(cfg, shapes_only=resuming)
    train_records, skipped = training_records(cfg, encoder)
    pair_batches = preference_batches(cfg, encoder)
    pair_count = None if pair_batches is None else len(pair_batches.pairs)
    if resuming:
        check_same_batches(run_dir, cfg, len(train_records), pairs=pair_count)
    for split in ("dev", "test"):
        shared = files_shared_with_train(cfg.data, split)
        if shared:  # a warning, not an error: a smoke test may mean it
            measured = "the dev metrics, the best checkpoint and early stopping are" if split == "dev" else "the test metrics are"
            log.warning("data.%s reads %s, which data.train reads too: %s measured on training data", split, ", ".join(shared), measured)
    dev_records, dev_skipped = load_split(cfg.data, "dev")
    dev_pairs = dev_preferences(cfg, dev_records)
    dev_inputs = encoder.encode_inputs(dev_records)
    data_counts = input_counts(encoder, train_records, dev_inputs, {"train": skipped, "dev": dev_skipped}, cfg.train.seed)
    if pair_batches is not None:
        data_counts["pairs"] = pair_batches.pairs.counts()
    epoch_steps = steps_per_epoch(cfg, train_records, encoder)
    total_steps = cfg.train.max_steps or max(1, math.ceil(cfg.train.epochs * epoch_steps))

    graphdef, params_state = nnx.split(loaded.model, nnx.Param)
    params = nnx.to_pure_dict(params_state)
    tx, schedules = build_optimizer(cfg.optim, params, total_steps, pretrained_pooler=loaded.pretrained_pooler)
    rules = get_family(cfg.model.family).sharding_rules
    state = state_target(params, tx, mesh, rules) if resuming else init_state(params, tx, cfg.train.seed, mesh, rules)
    state_shardings = jax.tree.map(lambda x: x.sharding, state)
    b_sharding = batch_sharding(mesh)
    step_fn = jax.jit(
        make_train_step(graphdef, tx, loss_cfg=cfg.loss, grad_accum=cfg.train.grad_accum, dropout=loaded.model.dropout_rate > 0),
        in_shardings=(state_shardings, b_sharding),
        out_shardings=(state_shardings, replicated(mesh)),
        donate_argnums=0,
        compiler_options=compiler_options,
    )
    step_fn = under_mesh(step_fn, mesh)
    batches = training_batches(cfg, train_records, encoder)
    checkpoints = RunCheckpoints(run_dir, keep=cfg.checkpoint.keep)
    start = 0
    if resuming:
        check_same_model(run_dir, cfg, loaded.hf_config)
        try:
            state, start = checkpoints.restore(state, batches)
        except StateStructureError as err:
            why = changed_optimizer(run_dir, cfg)
            raise TrainError(f"{run_dir}: its checkpoints hold another train state than this config makes ({err}); {why}") from None
        log.info("resumed from step %d", start)
    if jax.process_index() == 0:
        save_run_metadata(run_dir, cfg, loaded.hf_config, loaded.tokenizer)
        write_train_data(run_dir, len(train_records), pairs=pair_count)
    return TrainRun(
        cfg=cfg,
        run_dir=run_dir,
        mesh=mesh,
        encoder=encoder,
        train_records=train_records,
        dev_records=dev_records,
        dev_ids=dev_inputs.ids,
        skipped_records=skipped,
        data_counts=data_counts,
        epoch_steps=epoch_steps,
        total_steps=total_steps,
        state=state,
        start_step=start,
        step_fn=step_fn,
        predict_fn=jitted_predict_fn(graphdef, mesh),
        batches=batches,
        pair_batches=pair_batches,
        batch_keys=(PACKED_BATCH_KEYS if cfg.data.pack_length > 0 else BATCH_KEYS) + (PAIR_KEYS if pair_batches is not None else ()),
        batch_sharding=b_sharding,
        learning_rates=schedules,
        checkpoints=checkpoints,
        lang_weights=lang_weights,
        dev_pairs=dev_pairs,
    )
