"""AdamW with per-parameter learning rate, weight decay and freezing, selected by path regex.

Each parameter gets (learning rate, weight decay, frozen) from the first matching rule of
``optim.param_groups``, then the built-in head rule (``optim.head_lr``): ``^(pooler|head)/`` for a new
pooler, ``^head/`` when the family pooler's weights are pretrained (BERT's ``pooler.dense`` from the
checkpoint: it then trains with the encoder); unmatched parameters (the encoder) use ``optim.lr``.
``optim.layer_decay`` scales encoder learning rates by depth
(COMET); ``optim.freeze_encoder_steps``/``fraction`` hold encoder learning rates at 0 for the first steps.
Weight decay applies to matrices only (not biases or norm scales), as in Hugging Face fine-tuning.
Parameters with equal settings share one AdamW instance (``optax.multi_transform``).
Rules match unrolled paths (``encoder/layers/<n>/...``) in either layer layout; a stacked parameter of
``model.scan_layers`` takes the settings of its layers, which must agree (else it is refused by name).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from omnidistill.config import OptimConfig, ParamGroupRule
from omnidistill.models.scan import plan_of, unrolled_names
from omnidistill.parallel.mesh import path_string
from omnidistill.runs.checkpoint import PARAMS_AVERAGE

HEAD_PATTERN = r"^(pooler|head)/"
HEAD_ONLY_PATTERN = r"^head/"
ENCODER_PATTERN = re.compile(r"^encoder/")
LAYER_PATTERN = re.compile(r"^encoder/layers/(\d+)/")
group_adamw: Callable[..., optax.GradientTransformation] = optax.adamw
"""Each group's AdamW; ``tools/bench_levers.py packed-vectors`` sets ``packed_vectors.adamw_vectors_packed``."""


def group_rules(cfg: OptimConfig, pretrained_pooler: bool = False) -> list[ParamGroupRule]:
    """User rules followed by the head rule (which leaves a pretrained pooler to the encoder LR)."""
    return [*cfg.param_groups, ParamGroupRule(pattern=HEAD_ONLY_PATTERN if pretrained_pooler else HEAD_PATTERN, lr=cfg.head_lr)]


def _layer_views(params: Any) -> Any:
    """Per parameter: the unrolled names it stands for and one layer's number of dimensions."""
    plan = plan_of(params)

    def view(path, leaf) -> tuple[list[str], int]:
        names, shape = unrolled_names(path_string(path), tuple(np.shape(leaf)), plan)
        return names, len(shape)

    return jax.tree_util.tree_map_with_path(view, params)


def _is_view(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], list)


def num_encoder_layers(params: Any) -> int:
    names = [n for names, _ in jax.tree.leaves(_layer_views(params), is_leaf=_is_view) for n in names]
    layers = {int(m.group(1)) for n in names if (m := LAYER_PATTERN.match(n))}
    return max(layers) + 1 if layers else 0


def param_settings(params: Any, cfg: OptimConfig, pretrained_pooler: bool = False) -> Any:
    """Tree of (lr, weight_decay, frozen, is_encoder) per parameter."""
    rules = [(re.compile(r.pattern), r) for r in group_rules(cfg, pretrained_pooler)]
    n_layers = num_encoder_layers(params)

    def settings_of(name: str) -> tuple[float, float, bool, bool]:
        lr, wd, frozen = cfg.lr, cfg.weight_decay, False
        matched = next((rule for regex, rule in rules if regex.search(name)), None)
        if matched is not None:
            lr = matched.lr if matched.lr is not None else lr
            wd = matched.weight_decay if matched.weight_decay is not None else wd
            frozen = matched.frozen
        is_encoder = bool(ENCODER_PATTERN.match(name))
        if cfg.layer_decay is not None and is_encoder and (matched is None or matched.lr is None):
            layer = LAYER_PATTERN.match(name)
            depth = n_layers - int(layer.group(1)) if layer else n_layers + 1
            lr = lr * cfg.layer_decay**depth
        return (float(lr), float(wd), frozen, is_encoder)

    def settings(view: tuple[list[str], int]) -> tuple[float, float, bool, bool]:
        names, _ = view
        per_layer = {settings_of(name) for name in names}
        if len(per_layer) > 1:
            raise ValueError(
                f"model.scan_layers stacks {names[0]} .. {names[-1]} into one array, but optim.param_groups or "
                "optim.layer_decay give its layers different settings: set model.scan_layers=false"
            )
        return per_layer.pop()

    return jax.tree.map(settings, _layer_views(params), is_leaf=_is_view)


def param_group_labels(params: Any, cfg: OptimConfig, pretrained_pooler: bool = False) -> tuple[Any, dict[str, tuple]]:
    """Group label per parameter and the settings of each group."""
    settings = param_settings(params, cfg, pretrained_pooler)
    groups: dict[tuple, str] = {}
    labels = jax.tree.map(lambda s: groups.setdefault(s, f"group{len(groups)}"), settings, is_leaf=lambda x: isinstance(x, tuple))
    return labels, {name: s for s, name in groups.items()}


def lr_schedule(peak: float, total_steps: int, cfg: OptimConfig) -> Callable[[Any], Any]:
    """Linear warmup to ``peak``, then linear/cosine decay to 0, constant, or warmup-stable-decay."""
    total_steps = max(1, total_steps)
    warmup = round(cfg.warmup_ratio * total_steps)
    decay_steps = max(1, total_steps - warmup)
    if cfg.schedule == "constant":
        after = optax.constant_schedule(peak)
    elif cfg.schedule == "cosine":
        after = optax.cosine_decay_schedule(peak, decay_steps)
    elif cfg.schedule == "wsd":
        tail = max(1, round(cfg.decay_ratio * total_steps))
        stable = max(0, decay_steps - tail)
        after = optax.join_schedules([optax.constant_schedule(peak), optax.linear_schedule(peak, 0.0, tail)], [stable])
    else:
        after = optax.linear_schedule(peak, 0.0, decay_steps)
    if warmup == 0:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


def frozen_for(total_steps: int, cfg: OptimConfig) -> int:
    """Number of initial steps during which the encoder is frozen."""
    return max(cfg.freeze_encoder_steps, round(cfg.freeze_encoder_fraction * total_steps))


def build_optimizer(
    cfg: OptimConfig, params: Any, total_steps: int, *, pretrained_pooler: bool = False
) -> tuple[optax.GradientTransformation, dict[str, Callable]]:
    """The optimizer and each group's learning-rate schedule (for logging)."""
    labels, groups = param_group_labels(params, cfg, pretrained_pooler)
    decay_mask = jax.tree.map(lambda view: view[1] >= 2, _layer_views(params), is_leaf=_is_view)  # per layer, not per stack
    hold = frozen_for(total_steps, cfg)
    schedules: dict[str, Callable] = {}
    transforms: dict[str, optax.GradientTransformation] = {}
    for name, (lr, wd, frozen, is_encoder) in groups.items():
        if frozen:
            transforms[name] = optax.set_to_zero()
            schedules[name] = optax.constant_schedule(0.0)
            continue
        base = lr_schedule(lr, total_steps, cfg)
        sched = (lambda b: lambda step: jnp.where(step < hold, 0.0, b(step)))(base) if (is_encoder and hold) else base
        schedules[name] = sched
        transforms[name] = group_adamw(sched, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=wd, mask=decay_mask)
    tx = optax.multi_transform(transforms, labels)
    if cfg.grad_clip is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.grad_clip), tx)
    if cfg.ema_decay is not None:
        tx = optax.chain(tx, weights_average(cfg.ema_decay))
    return tx, schedules


class WeightsAverageState(NamedTuple):
    count: jax.Array
    """Updates averaged so far."""
    params_average: Any
    """The moving average, a tree like the parameters (sharded like them: its leaves' paths end with theirs)."""


assert WeightsAverageState._fields[1] == PARAMS_AVERAGE  # the name runs.checkpoint finds it by


def weights_average(decay: float) -> optax.GradientTransformation:
    """``optim.ema_decay``: an exponential moving average of the weights, in the optimizer state.

    Chained after every other transformation, it sees the update the step applies: after update ``t``
    (counted from 0), ``average = d * average + (1 - d) * new_weights`` with
    ``d = min(decay, (1 + t) / (10 + t))``, TensorFlow's ``ExponentialMovingAverage`` with
    ``num_updates``, so that the first updates are not drowned by the initial weights. The average
    starts as the initial weights. The updates pass through unchanged, and a step the train step
    discards (non-finite) leaves the average as it was, with the rest of the optimizer state."""

    def init(params: Any) -> WeightsAverageState:
        return WeightsAverageState(jnp.zeros([], jnp.int32), jax.tree.map(jnp.array, params))

    def update(updates: Any, state: WeightsAverageState, params: Any = None) -> tuple[Any, WeightsAverageState]:
        t = state.count.astype(jnp.float32)
        d = jnp.minimum(jnp.float32(decay), (1.0 + t) / (10.0 + t))
        new = optax.apply_updates(params, updates)
        average = jax.tree.map(lambda a, w: (d * a + (1.0 - d) * w).astype(a.dtype), state.params_average, new)
        return updates, WeightsAverageState(state.count + 1, average)

    return optax.GradientTransformation(init, update)
