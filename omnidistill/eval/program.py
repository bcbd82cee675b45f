"""The scoring program that ``score``, ``eval`` and the scoring benchmark share: the parameters as it
takes them, the jitted prediction function, and how it batches items (padded length buckets, packed
rows or a token budget), built once from the ``eval`` settings so that the three cannot drift apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from flax import nnx
from jax.sharding import Mesh

from omnidistill.config import MeshConfig
from omnidistill.data.pipeline import InferencePacking
from omnidistill.data.token_batches import TokenBudget
from omnidistill.eval.predict import (
    CompilerOptions,
    inference_buckets,
    inference_packing,
    jitted_predict_fn,
    predict_ids,
    scoring_params,
    token_budget,
    used_buckets,
    warm_up,
)
from omnidistill.parallel.mesh import MeshBoundFunction, build_mesh


@dataclasses.dataclass(frozen=True)
class ScoringProgram:
    """A model ready to score token ids: its parameters placed, its prediction function jitted, and the
    batching its ``eval`` settings ask for."""

    params: Any
    """The parameters as the program takes them (:func:`scoring_params`: kernels cast, replicated)."""
    predict_fn: MeshBoundFunction
    mesh: Mesh
    max_length: int
    batch_size: int
    """Items per batch (padded rows), or what sizes the packed rows' batches."""
    buckets: tuple[int, ...]
    """The padded lengths (``eval.length_step``)."""
    packing: InferencePacking | None
    """Several items per row (``eval.pack_length``), or None."""
    budget: TokenBudget | None
    """Batches of up to so many real tokens, the encoder's layers unpadded (``eval.batch_tokens``), or
    None: batches of ``batch_size`` items."""
    levels: bool
    """The model's head gives level distributions (``classification``, ``ordinal``)."""

    @classmethod
    def build(
        cls,
        graphdef: Any,
        params: Any,
        *,
        max_length: int,
        batch_size: int,
        length_step: int = 32,
        pack_length: int = 0,
        batch_tokens: int | None = None,
        compiler_options: CompilerOptions | None = None,
        mesh: Mesh | None = None,
    ) -> ScoringProgram:
        """The program for ``graphdef`` and its float32 ``params`` on ``mesh`` (default: every device on
        the batch axis). ``pack_length`` (0: off), ``batch_tokens`` (None: the platform's default, 0:
        batches of items; only for an encoder that runs unpadded, and never with packed rows),
        ``length_step`` and ``compiler_options`` (checked already: :func:`checked_compiler_options`) are
        the ``eval`` settings of those names."""
        mesh = mesh or build_mesh(MeshConfig())
        params = scoring_params(graphdef, params, mesh)
        model = nnx.merge(graphdef, params)
        packing = inference_packing(pack_length, batch_size, max_length)
        buckets = inference_buckets(max_length, length_step)
        budget = token_budget(batch_tokens, mesh, buckets, unpadded=model.takes_token_index and packing is None)
        predict_fn = jitted_predict_fn(graphdef, mesh, levels=model.has_levels, packing=packing, compiler_options=compiler_options)
        return cls(params, predict_fn, mesh, max_length, batch_size, buckets, packing, budget, model.has_levels)

    def warm_up(self, lengths: Sequence[int] | None = None) -> None:
        """Compile the program for every padded length that items of these (untruncated) token counts
        need (None: every bucket), so that a timed pass compiles nothing."""
        buckets = self.buckets if lengths is None else used_buckets(lengths, self.max_length, self.buckets)
        batching = dict(batch_size=self.batch_size, buckets=buckets, packing=self.packing, budget=self.budget)
        warm_up(self.predict_fn, self.params, self.mesh, **batching)

    def predict(
        self,
        ids: Sequence[np.ndarray],
        *,
        pad_id: int,
        batch_size: int | None = None,
        progress: bool = False,
        in_flight: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(scores [N, 4], level probabilities [N, 4, 5] or None) of N items' token ``ids``, in their
        order. ``batch_size``: batches of that many items for this call, instead of the program's
        batches (and without its token budget). ``in_flight``: see :func:`predict_ids`."""
        out = predict_ids(
            self.predict_fn,
            self.params,
            ids,
            self.mesh,
            pad_id=pad_id,
            batch_size=batch_size or self.batch_size,
            buckets=self.buckets,
            packing=self.packing,
            budget=None if batch_size else self.budget,
            progress=progress,
            in_flight=in_flight,
        )
        return (out[..., 0], out[..., 1:]) if self.levels else (out, None)
