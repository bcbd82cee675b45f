"""A bench tool run with one lever set: a change undone, or a variant not in the code yet, patched into
the modules before the tool runs, so that both sides of an A/B run the same tool on the same machine.

    python tools/bench_levers.py LEVER train|score [bench_train.py / bench_score.py options]
    python tools/bench_levers.py deberta-slices train --only=deberta

Levers (docs/benchmarks.md says what each measured):

- ``old-gelu``: ``jax.nn.gelu(approximate=False)``, the GELU before it computed float32 ``erf``.
- ``deberta-one-block``: DeBERTa's position scores from one block of all rows (``QUERY_BLOCK = 0``).
- ``deberta-slices``: each block's relative-embedding rows a static slice of one gather of the
  2S − 1 distances, so the backward pass scatters 2S − 1 rows per table, not S/T · (S + T − 1).
- ``deberta-dot-order``: the position scores' product as ``[N, S/T, B, T, S+T−1]``, the queries
  first, where ``jnp.einsum`` gives ``[N, S/T, S+T−1, B, T]`` and a transpose of the last axis.

The DeBERTa variants give the model's scores and gradients (``tests/test_bench.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import omnidistill.models.deberta_v2.modeling as deberta
import omnidistill.models.layers as layers

Patch = tuple[Any, str, Any]
"""(object, attribute, value) set on the object before the tool runs: ``obj[attr]`` for a dict, which
the modules that imported it share."""


def slices_of_one_gather(table: jax.Array, columns: np.ndarray, block: int, c2p: bool) -> jax.Array:
    """``deberta.block_rows`` as static slices of one gather of the 2S − 1 distances' rows: window g
    is ``rows[S − T − gT : 2S − 1 − gT]``, of the rows reversed for c2p."""
    rows = table[columns][::-1] if c2p else table[columns]
    seq = (rows.shape[0] + 1) // 2
    return jnp.stack([rows[start : start + seq + block - 1] for start in range(seq - block, -1, -block)])


def queries_first(x: jax.Array, rows: jax.Array, block: int) -> jax.Array:
    """``deberta.block_product`` from a product laid out [N, S/T, B, T, S + T − 1], whose move of B
    to the front keeps each [T, S + T − 1] tile whole."""
    b, s = x.shape[:2]
    blocks = x.reshape(b, s // block, block, *x.shape[2:])
    return jnp.transpose(jax.lax.dot_general(blocks, rows, (((4,), (3,)), ((3, 1), (2, 0)))), (2, 0, 1, 3, 4))


LEVERS: dict[str, Callable[[], list[Patch]]] = {
    "old-gelu": lambda: [(layers.ACTIVATIONS, "gelu", lambda x: jax.nn.gelu(x, approximate=False))],
    "deberta-one-block": lambda: [(deberta, "QUERY_BLOCK", 0)],
    "deberta-slices": lambda: [(deberta, "block_rows", slices_of_one_gather)],
    "deberta-dot-order": lambda: [(deberta, "block_product", queries_first)],
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in LEVERS or argv[1] not in ("train", "score"):
        sys.exit(f"usage: bench_levers.py {{{','.join(LEVERS)}}} train|score [bench options]")
    lever, kind, *args = argv
    for obj, attr, value in LEVERS[lever]():
        if isinstance(obj, dict):
            obj[attr] = value
        else:
            setattr(obj, attr, value)
    from bench_cases import run_cli

    print(f'{{"lever": "{lever}"}}', flush=True)
    run_cli(kind, args)


if __name__ == "__main__":
    main(sys.argv[1:])
