"""AdamW with per-parameter-group learning rate and weight decay, selected by path regex.

Rules are tried in order (``optim.param_groups`` first, then the built-in ``^(pooler|head)/`` rule at
``optim.head_lr``); unmatched parameters (the encoder) use ``optim.lr``. Weight decay applies to
matrices only (not biases or norm scales), as in Hugging Face fine-tuning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import optax

from omnidistill.config import OptimConfig, ParamGroupRule
from omnidistill.train.mesh import path_string

HEAD_PATTERN = r"^(pooler|head)/"


def group_rules(cfg: OptimConfig) -> list[ParamGroupRule]:
    """User rules followed by the head rule."""
    return [*cfg.param_groups, ParamGroupRule(pattern=HEAD_PATTERN, lr=cfg.head_lr)]


def param_group_labels(params: Any, rules: list[ParamGroupRule]) -> Any:
    """Tree of group names (``group0``, ``group1``, ..., ``default``) matching ``params``."""
    compiled = [re.compile(r.pattern) for r in rules]

    def label(path, _):
        name = path_string(path)
        for i, regex in enumerate(compiled):
            if regex.search(name):
                return f"group{i}"
        return "default"

    return jax.tree_util.tree_map_with_path(label, params)


def lr_schedule(peak: float, total_steps: int, cfg: OptimConfig) -> Callable[[Any], Any]:
    """Linear warmup to ``peak`` then linear decay to 0, cosine decay, or constant."""
    total_steps = max(1, total_steps)
    warmup = round(cfg.warmup_ratio * total_steps)
    decay_steps = max(1, total_steps - warmup)
    if cfg.schedule == "constant":
        after = optax.constant_schedule(peak)
    elif cfg.schedule == "cosine":
        after = optax.cosine_decay_schedule(peak, decay_steps)
    else:
        after = optax.linear_schedule(peak, 0.0, decay_steps)
    if warmup == 0:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


def build_optimizer(cfg: OptimConfig, params: Any, total_steps: int) -> tuple[optax.GradientTransformation, dict[str, Callable]]:
    """The optimizer and each group's learning-rate schedule (for logging)."""
    rules = group_rules(cfg)
    groups = {"default": (cfg.lr, cfg.weight_decay)}
    for i, rule in enumerate(rules):
        groups[f"group{i}"] = (
            rule.lr if rule.lr is not None else cfg.lr,
            rule.weight_decay if rule.weight_decay is not None else cfg.weight_decay,
        )
    decay_mask = jax.tree.map(lambda p: p.ndim >= 2, params)
    schedules = {name: lr_schedule(lr, total_steps, cfg) for name, (lr, _) in groups.items()}
    transforms = {
        name: optax.adamw(schedules[name], b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=wd, mask=decay_mask)
        for name, (_, wd) in groups.items()
    }
    tx = optax.multi_transform(transforms, param_group_labels(params, rules))
    if cfg.grad_clip is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.grad_clip), tx)
    return tx, schedules
