"""Encoder layers run under ``jax.lax.scan`` over stacked parameters (``model.scan_layers``).

Unrolled, XLA compiles every layer of the encoder separately, so compile time grows with depth.
Scanned, the layers' parameters are stacked along a leading axis and one layer body is compiled and
looped over. Layers differ in structure in some families (ModernBERT's first layer has no attention
norm and every third layer attends globally; Gemma 3 interleaves sliding and full attention), so the
stack is planned from the layers' NNX graph definitions: an unrolled ``head`` of leading layers, then
``repeats`` copies of a block of ``period`` consecutive layers (one stacked module per position in the
block), then an unrolled ``tail``. Uniform encoders get ``period`` 1 and no head or tail.

Parameter paths in the scanned layout: ``encoder/layers/head/<i>/...``, ``encoder/layers/blocks/<j>/...``
(leading axis: repeats) and ``encoder/layers/tail/<i>/...``. Weight tables, sharding rules and
optimizer rules are written for the unrolled layout (``encoder/layers/<n>/...``);
:func:`unstack_layers`, :func:`stack_layers` and :func:`unrolled_names` translate between the two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from omnidistill.models.unpadding import TokenLayout

LayerCall = Callable[[nnx.Module, jax.Array, Any], jax.Array]
"""``call(layer, x, index) -> x``: one layer's forward; ``index`` is the layer number (traced under scan)."""


@dataclasses.dataclass(frozen=True)
class ScanPlan:
    """Layers ``[0, prefix)`` unrolled, then ``repeats`` blocks of ``period`` layers scanned, then the rest unrolled."""

    num_layers: int
    prefix: int
    period: int
    repeats: int

    @property
    def suffix_start(self) -> int:
        return self.prefix + self.period * self.repeats

    def layer_number(self, position: int, repeat: int) -> int:
        """The unrolled number of the layer at ``position`` of block ``repeat``."""
        return self.prefix + repeat * self.period + position


def plan_scan(kinds: Sequence[Any]) -> ScanPlan:
    """The plan that compiles the fewest distinct layer bodies for layers of the given kinds
    (anything comparable: the layers' graph definitions). Ties go to the shorter unrolled head."""
    n = len(kinds)
    ids = [next(i for i in range(n) if kinds[i] == kind) for kind in kinds]
    best = ScanPlan(n, n, 0, 0)
    best_cost = n
    for prefix in range(n):
        for period in range(1, (n - prefix) // 2 + 1):
            span = period  # extend the run of repeated blocks as far as the layers repeat
            while prefix + span < n and ids[prefix + span] == ids[prefix + span % period]:
                span += 1
            repeats = span // period
            span = repeats * period
            if repeats < 2:
                continue
            cost = prefix + period + (n - prefix - span)
            if cost < best_cost:
                best, best_cost = ScanPlan(n, prefix, period, repeats), cost
    return best


def _stack(modules: Sequence[nnx.Module]) -> nnx.Module:
    graphdef, *_ = nnx.split(modules[0])
    states = [nnx.split(m)[1] for m in modules]
    return nnx.merge(graphdef, jax.tree.map(lambda *xs: jnp.stack(xs), *states))


class ScannedLayers(nnx.Module):
    """An encoder's layers laid out by a :class:`ScanPlan`: the repeated blocks run under one scan."""

    def __init__(self, layers: Sequence[nnx.Module]):
        plan = plan_scan([nnx.graphdef(layer) for layer in layers])
        self.plan = plan
        self.head = nnx.List(list(layers[: plan.prefix]))
        self.blocks = nnx.List([_stack([layers[plan.layer_number(j, r)] for r in range(plan.repeats)]) for j in range(plan.period)])
        self.tail = nnx.List(list(layers[plan.suffix_start :]))

    def __call__(
        self, x: jax.Array, call: LayerCall, *, collect: bool = False, last_call: LayerCall | None = None
    ) -> tuple[jax.Array, list[jax.Array]]:
        """Run every layer in order; returns the output and (with ``collect``) each layer's output.
        ``last_call`` runs the last layer when it is unrolled (in the tail, or in the head of a plan
        without repeats)."""
        plan = self.plan
        x, states = _run_unrolled(self.head, x, call, first=0, last_call=None if plan.repeats or len(self.tail) else last_call)
        if plan.repeats:
            split = [nnx.split(block) for block in self.blocks]
            graphdefs = [graphdef for graphdef, _ in split]

            def body(carry: jax.Array, xs: tuple[list[Any], jax.Array]) -> tuple[jax.Array, jax.Array | None]:
                block_states, repeat = xs
                outputs = []
                for j, (graphdef, state) in enumerate(zip(graphdefs, block_states, strict=True)):
                    carry = call(nnx.merge(graphdef, state), carry, plan.layer_number(j, repeat))
                    outputs.append(carry)
                return carry, (jnp.stack(outputs) if collect else None)

            x, ys = jax.lax.scan(body, x, ([state for _, state in split], jnp.arange(plan.repeats, dtype=jnp.int32)))
            if collect:
                states.extend(list(ys.reshape(-1, *x.shape)))
        x, tail_states = _run_unrolled(self.tail, x, call, first=plan.suffix_start, last_call=last_call)
        return x, states + tail_states


def _run_unrolled(
    layers: Sequence[nnx.Module], x: jax.Array, call: LayerCall, *, first: int, last_call: LayerCall | None = None
) -> tuple[jax.Array, list[jax.Array]]:
    """Layers one after another, numbered from ``first`` (the last through ``last_call`` when given);
    the output and each layer's output."""
    states = []
    for i, layer in enumerate(layers):
        x = (last_call if last_call is not None and i == len(layers) - 1 else call)(layer, x, first + i)
        states.append(x)
    return x, states


def layer_stack(layers: Sequence[nnx.Module], *, scan: bool) -> nnx.List | ScannedLayers:
    """The ``layers`` attribute of an encoder: a plain list, or :class:`ScannedLayers` with ``scan``."""
    return ScannedLayers(layers) if scan else nnx.List(list(layers))


def run_layers(
    layers: nnx.List | ScannedLayers,
    x: jax.Array,
    call: LayerCall,
    *,
    collect: bool = False,
    last_call: LayerCall | None = None,
    layout: TokenLayout | None = None,
) -> tuple[jax.Array, list[jax.Array]]:
    """Run an encoder's layers (either layout); returns the output and, with ``collect``, every layer's output.

    ``last_call`` runs the last layer instead of ``call`` where that layer is unrolled (always in the
    unrolled layout; in the scanned one when it is in the unrolled tail); inside a scan every repeat
    runs ``call``, so a caller reads from the output only what both calls give.

    With ``layout`` the [B, S, H] input is unpadded before the first layer and every output padded
    back (:mod:`~omnidistill.models.unpadding`): ``call`` then sees [G, t, H] and must attend with a
    mask that has the layout; ``last_call`` sees the padded [B, S, H] (its output is kept as it is)."""
    if layout is None:
        return _run_any(layers, x, call, collect=collect, last_call=last_call)
    wrapped = None if last_call is None else (lambda layer, h, i: last_call(layer, layout.pad(h), i))
    y, states = _run_any(layers, layout.unpad(x), call, collect=collect, last_call=wrapped)
    ran_last = wrapped is not None and runs_last_call(layers)
    states = [s if ran_last and j == len(states) - 1 else layout.pad(s) for j, s in enumerate(states)]
    return (y if ran_last else layout.pad(y)), states


def _run_any(
    layers: nnx.List | ScannedLayers, x: jax.Array, call: LayerCall, *, collect: bool, last_call: LayerCall | None
) -> tuple[jax.Array, list[jax.Array]]:
    if isinstance(layers, ScannedLayers):
        return layers(x, call, collect=collect, last_call=last_call)
    return _run_unrolled(layers, x, call, first=0, last_call=last_call)


def runs_last_call(layers: nnx.List | ScannedLayers) -> bool:
    """Whether :func:`run_layers` runs the last layer through its ``last_call`` (the layer is unrolled)."""
    if isinstance(layers, ScannedLayers):
        return len(layers.tail) > 0 or (not layers.plan.repeats and len(layers.head) > 0)
    return len(layers) > 0


# --- parameter trees: unrolled <-> scanned ------------------------------------------------------


def _layers_node(tree: Mapping[Any, Any]) -> Mapping[Any, Any] | None:
    encoder = tree.get("encoder") if isinstance(tree, Mapping) else None
    layers = encoder.get("layers") if isinstance(encoder, Mapping) else None
    return layers if isinstance(layers, Mapping) else None


def is_scanned(tree: Mapping[Any, Any]) -> bool:
    """Whether a parameter tree (nested dict) is in the scanned layout."""
    layers = _layers_node(tree)
    return layers is not None and "blocks" in layers


def plan_of(tree: Any) -> ScanPlan | None:
    """The :class:`ScanPlan` of a scanned parameter tree, None for an unrolled one (or anything else)."""
    return tree_plan(tree) if isinstance(tree, Mapping) and is_scanned(tree) else None


def tree_plan(tree: Mapping[Any, Any]) -> ScanPlan:
    """The :class:`ScanPlan` a scanned parameter tree was stacked with (read from its structure)."""
    layers = _layers_node(tree)
    if layers is None or "blocks" not in layers:
        raise ValueError("not a scanned parameter tree (no encoder/layers/blocks)")
    blocks = layers["blocks"]
    period = len(blocks)
    repeats = int(np.shape(jax.tree.leaves(blocks)[0])[0]) if period else 0
    prefix, suffix = len(layers.get("head", {})), len(layers.get("tail", {}))
    return ScanPlan(prefix + period * repeats + suffix, prefix, period, repeats)


def _with_layers(tree: Mapping[Any, Any], layers: dict[Any, Any]) -> dict[Any, Any]:
    return {**tree, "encoder": {**tree["encoder"], "layers": layers}}


def unstack_layers(tree: Mapping[Any, Any]) -> dict[Any, Any]:
    """A parameter tree in the unrolled layout (``encoder/layers/<n>/...``); unrolled trees are returned as they are."""
    if not is_scanned(tree):
        return dict(tree)
    plan = tree_plan(tree)
    layers = _layers_node(tree)
    out: dict[Any, Any] = {}
    for i, sub in layers.get("head", {}).items():
        out[int(i)] = sub
    for j, stacked in layers["blocks"].items():
        for r in range(plan.repeats):
            out[plan.layer_number(int(j), r)] = jax.tree.map(lambda a, r=r: a[r], stacked)
    for i, sub in layers.get("tail", {}).items():
        out[plan.suffix_start + int(i)] = sub
    return _with_layers(tree, out)


def stack_layers(tree: Mapping[Any, Any], plan: ScanPlan) -> dict[Any, Any]:
    """An unrolled parameter tree (possibly partial: layers absent from it stay absent) in the scanned layout of ``plan``."""
    layers = _layers_node(tree)
    if layers is None or is_scanned(tree):
        return dict(tree)
    head = {i: layers[i] for i in range(plan.prefix) if i in layers}
    tail = {i - plan.suffix_start: layers[i] for i in range(plan.suffix_start, plan.num_layers) if i in layers}
    blocks = {}
    for j in range(plan.period):
        members = [layers.get(plan.layer_number(j, r)) for r in range(plan.repeats)]
        present = [m for m in members if m is not None]
        if not present:
            continue
        if len(present) != len(members):
            raise ValueError(
                f"scanned layers are set together: layers {[plan.layer_number(j, r) for r in range(plan.repeats)]} must all be given"
            )
        blocks[j] = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *members)
    scanned: dict[Any, Any] = {}
    if head:
        scanned["head"] = head
    if blocks:
        scanned["blocks"] = blocks
    if tail:
        scanned["tail"] = tail
    return _with_layers(tree, scanned)


def unrolled_names(name: str, shape: tuple[int, ...], plan: ScanPlan | None) -> tuple[list[str], tuple[int, ...]]:
    """The unrolled path names (``encoder/layers/<n>/...``) a parameter stands for, and one layer's shape.

    An unrolled parameter stands for itself; a stacked one for each layer it holds (its leading axis)."""
    parts = name.split("/")
    if plan is None or parts[:2] != ["encoder", "layers"] or len(parts) < 4 or parts[2] not in ("head", "blocks", "tail"):
        return [name], shape
    kind, index, rest = parts[2], int(parts[3]), "/".join(parts[4:])
    if kind == "head":
        return [f"encoder/layers/{index}/{rest}"], shape
    if kind == "tail":
        return [f"encoder/layers/{plan.suffix_start + index}/{rest}"], shape
    return [f"encoder/layers/{plan.layer_number(index, r)}/{rest}" for r in range(plan.repeats)], shape[1:]
