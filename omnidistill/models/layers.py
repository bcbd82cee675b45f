"""Building blocks shared by every encoder family: dropout, activations, attention, masks."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from omnidistill.models import dropout_masks
from omnidistill.models.blocked_attention import blocked_attention
from omnidistill.models.unpadding import TokenLayout


def _normal_cdf(xf: jax.Array) -> jax.Array:
    return 0.5 * (1.0 + jax.lax.erf(xf * np.float32(1 / math.sqrt(2))))


@jax.custom_vjp
def gelu_exact(x: jax.Array) -> jax.Array:
    """Exact (erf) GELU, ``x Phi(x)``, as PyTorch computes it (``torch.nn.functional.gelu``): in
    float32 with ``erf``, rounded once to the input dtype. Its backward pass keeps only its input.

    ``jax.nn.gelu(approximate=False)`` computes ``erfc`` of an argument rounded to the input dtype
    (in bf16, one bf16 unit off PyTorch's value for 4 inputs in 10), and XLA evaluates ``erfc`` with
    two polynomial branches, an ``exp`` and two divisions per element: on an H200 that was mBERT's
    largest elementwise kernel (``docs/benchmarks.md``). Differentiating it also keeps four
    [B, S, intermediate] tensors per layer for the backward pass; this keeps one and recomputes the
    derivative ``Phi(x) + x phi(x)`` in float32 whatever the input dtype.
    """
    return _gelu(x)


def _gelu(x: jax.Array) -> jax.Array:
    xf = x.astype(jnp.float32)
    return (xf * _normal_cdf(xf)).astype(x.dtype)


def _gelu_exact_fwd(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _gelu(x), x


def _gelu_exact_bwd(x: jax.Array, g: jax.Array) -> tuple[jax.Array]:
    xf = x.astype(jnp.float32)
    pdf = jnp.exp(-0.5 * xf * xf) * np.float32(1 / math.sqrt(2 * math.pi))
    return ((g.astype(jnp.float32) * (_normal_cdf(xf) + xf * pdf)).astype(x.dtype),)


gelu_exact.defvjp(_gelu_exact_fwd, _gelu_exact_bwd)

ACTIVATIONS = {
    "gelu": gelu_exact,
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


def activation(name: str):
    """Activation function by its Hugging Face ``hidden_act`` name."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"hidden_act={name!r} is not supported (supported: {sorted(ACTIVATIONS)})") from None


def embedding_lookup(table: Callable[[jax.Array], jax.Array], ids: jax.Array, padding_idx: int | None) -> jax.Array:
    """``table(ids)``, with no gradient reaching row ``padding_idx``, as ``torch.nn.Embedding(...,
    padding_idx=...)`` leaves that row out of its backward pass: every family's word embedding has the
    config's ``pad_token_id`` there, and XLM-R's position embedding has it too. Padding positions send no
    gradient either way; where the id stands among the real tokens (a decoder whose pad token is the
    end-of-text token its tokenizer appends; an XLM-R token equal to the pad id, which takes the padding
    position), the row would otherwise train where PyTorch's stays fixed
    (``tests/models/test_random_configs.py``). The forward pass is unchanged: XLA folds a select of two
    equal values."""
    x = table(ids)
    if padding_idx is None:
        return x
    return jnp.where((ids == padding_idx)[..., None], jax.lax.stop_gradient(x), x)


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
    """Inverted dropout (masks from :mod:`omnidistill.models.dropout_masks`); the identity when ``rng``
    is None (evaluation) or ``rate`` is 0."""
    if rng is None or rate <= 0.0:
        return x
    return dropout_masks.drop(x, rate, rng)


def sub_rng(rng: jax.Array | None, *tags: int) -> jax.Array | None:
    """Derive a distinct RNG for a call site (None stays None)."""
    if rng is None:
        return None
    for tag in tags:
        rng = jax.random.fold_in(rng, tag)
    return rng


def padding_mask(attention_mask: jax.Array) -> jax.Array:
    """[B, S] 0/1 mask -> boolean [B, 1, 1, S] key mask for ``dot_product_attention``."""
    return attention_mask.astype(bool)[:, None, None, :]


def segment_mask(segment_ids: jax.Array) -> jax.Array:
    """[B, S] segment ids of packed rows (0 = padding) -> boolean [B, 1, S, S] block-diagonal mask.

    A token attends only to tokens of its own segment; padding attends to padding (never to a real
    token), so no attention row is empty.
    """
    return (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["keys", "layout"], meta_fields=["packed", "causal"])
@dataclasses.dataclass(frozen=True)
class AttentionMask:
    """Which keys each query attends to, in compact form. ``keys`` [B, S] is the attention mask (1 real,
    0 padding) or, with ``packed``, the segment ids of packed rows (0 padding); ``causal`` keeps only
    keys at or before the query. :meth:`dense` is the boolean mask the XLA, blocked and cuDNN kernels
    take; the splash kernel takes ``keys`` as segment ids and never builds it. With ``layout`` the
    queries, keys and values come unpadded ([G, t, N, D], :mod:`~omnidistill.models.unpadding`) and
    :func:`attention` pads them to ``keys``' [B, S] rows and back."""

    keys: jax.Array
    layout: TokenLayout | None = None
    packed: bool = False
    causal: bool = False

    def dense(self) -> jax.Array:
        """Boolean [B, 1, 1 or S, S]: key padding, or block-diagonal for packed rows, causal if asked."""
        mask = segment_mask(self.keys) if self.packed else padding_mask(self.keys)
        if self.causal:
            seq = self.keys.shape[1]
            mask = mask & jnp.tril(jnp.ones((seq, seq), bool))[None, None]
        return mask

    def made_causal(self) -> AttentionMask:
        return dataclasses.replace(self, causal=True)

    def unpadded(self, layout: TokenLayout | None) -> AttentionMask:
        """This mask for unpadded queries, keys and values (itself when ``layout`` is None)."""
        if layout is None:
            return self
        if self.packed:
            raise ValueError("packed rows (segment_ids) are not unpadded: eval.batch_tokens is for padded batches")
        return dataclasses.replace(self, layout=layout)

    def padded(self) -> AttentionMask:
        """This mask for queries, keys and values in the padded [B, S] rows (no layout)."""
        return self if self.layout is None else dataclasses.replace(self, layout=None)


def encoder_mask(attention_mask: jax.Array, segment_ids: jax.Array | None) -> AttentionMask:
    """The attention mask of an encoder call: key padding, or block-diagonal for packed rows."""
    if segment_ids is None:
        return AttentionMask(attention_mask)
    return AttentionMask(segment_ids, packed=True)


def segment_positions(segment_ids: jax.Array) -> jax.Array:
    """[B, S] position of each token within its segment (0 at every segment's first token)."""
    seq = segment_ids.shape[1]
    index = jnp.arange(seq, dtype=jnp.int32)[None, :]
    starts = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
    first = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - first


def token_positions(input_ids: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """[B, S] (or [1, S]) absolute positions: 0..S-1, restarting at each segment of a packed row."""
    if segment_ids is None:
        return jnp.arange(input_ids.shape[1], dtype=jnp.int32)[None, :]
    return segment_positions(segment_ids)


_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


ATTENTION_KERNELS = ("auto", "xla", "cudnn", "blocked", "splash")


BLOCKED_FROM = 64
"""``auto`` on CPU takes the blocked kernel from this many tokens on in code that is differentiated
(training). Measured with the kernel's own backward pass (2-core Zen 3, B16, 2026-11-28;
docs/benchmarks.md, "Where training takes the blocked kernel"): from 64 tokens on it was level or
faster for every shape tried (``bench_train.py --attention xla,blocked``: the tiny default 1.12-1.13x
at 64 tokens and 1.20-1.24x at 192, Ettin-32M-like 0.98-1.05x; alternated in one process, MiniLM's and
a BERT-base's shapes 1.01-1.07x); at 32 tokens level, so shorter rows keep XLA's kernel. A forward
pass under :func:`predicting` takes it at every length."""

_PREDICTING = contextvars.ContextVar("omnidistill_predicting", default=False)


@contextlib.contextmanager
def predicting() -> Iterator[None]:
    """Attention traced inside is a forward pass only (scoring, evaluation): ``auto`` on CPU then takes
    the blocked kernel at every length. Without a backward pass it is as fast as XLA's kernel on
    short rows and faster from about 96 tokens on (MiniLM's forward, B32 on 2 cores: 1.63 s against
    1.98 s at 224 tokens, 0.63 s against 0.71 s at 96; docs/benchmarks.md). Enter it inside the traced
    function, so that one jitted function always traces the same way."""
    token = _PREDICTING.set(True)
    try:
        yield
    finally:
        _PREDICTING.reset(token)


def is_predicting() -> bool:
    """Whether the code being traced runs under :func:`predicting` (a forward pass only)."""
    return _PREDICTING.get()


def last_rows_call(rows: int | None, call: Callable[..., jax.Array]) -> Callable[..., jax.Array] | None:
    """The ``last_call`` of :func:`~omnidistill.models.scan.run_layers` for an encoder asked for only
    the first ``rows`` positions of its last hidden state (``first_rows``; None: all of them, no
    special call). ``call(layer, h, index, rows)`` runs the last layer with every position as keys
    and values but only the first ``rows`` as queries, residual and MLP: what first-token pooling
    reads, exactly, for one layer's work on ``rows`` tokens instead of S (MiniLM-L6: about 1/7 of the
    forward pass)."""
    if rows is None:
        return None
    return lambda layer, h, index: call(layer, h, index, rows)


def one_cpu_device() -> bool:
    """Whether the code being traced runs on one CPU device: the CPU backend, and no context mesh
    (``jax.set_mesh``, as the train step and the predict functions run) of several devices. Several
    CPU devices are simulated ones (``--xla_force_host_platform_device_count``: the test suite, a
    rehearsal of a pod's sharding) that share the cores, and every device running the blocked
    kernel's loop at once made it slower than XLA's kernel there: on 8 such devices of a 2-core host
    the Scorer scored MiniLM at 10 examples/s instead of 24, and a tiny model's training step at 256
    tokens took 154 ms instead of 83 ms (docs/benchmarks.md, "Several simulated CPU devices")."""
    mesh = jax.sharding.get_abstract_mesh()
    return jax.default_backend() == "cpu" and (mesh.empty or mesh.size == 1)


def resolve_attention(implementation: str, dtype, seq: int = BLOCKED_FROM) -> str | None:
    """The kernel ``model.attention`` runs here for ``seq`` tokens: ``"cudnn"``, ``"blocked"``
    (:func:`~omnidistill.models.blocked_attention.blocked_attention`), ``"splash"`` (:mod:`omnidistill.models.splash`) or None (XLA's
    ``dot_product_attention``). ``auto`` is splash on a TPU, cuDNN on an NVIDIA GPU in bf16/fp16, the
    blocked kernel on one CPU device (:func:`one_cpu_device`; from :data:`BLOCKED_FROM` tokens unless
    :func:`predicting`), XLA otherwise."""
    if implementation not in ATTENTION_KERNELS:
        raise ValueError(f"model.attention={implementation!r} is not one of {', '.join(ATTENTION_KERNELS)}")
    if implementation == "xla":
        return None
    if implementation == "splash" or (implementation == "auto" and jax.default_backend() == "tpu"):
        if jax.default_backend() != "tpu":
            _warn_once(f"model.attention=splash runs in Pallas interpret mode off a TPU (backend {jax.default_backend()}): exact, slow")
        return "splash"
    blocked_from = 0 if _PREDICTING.get() else BLOCKED_FROM
    if implementation == "blocked" or (implementation == "auto" and one_cpu_device() and seq >= blocked_from):
        return "blocked"
    usable = jax.default_backend() == "gpu" and dtype in _CUDNN_DTYPES
    if implementation == "cudnn" and not usable:
        _warn_once(f"model.attention=cudnn needs an NVIDIA GPU and bf16/fp16 compute (backend {jax.default_backend()}, {dtype}); using xla")
    return "cudnn" if usable else None


@functools.cache
def _warn_once(message: str) -> None:
    logging.getLogger(__name__).warning(message)


def band_mask(mask: jax.Array, seq: int, window: int) -> jax.Array:
    """``mask`` restricted to |query - key| <= ``window`` (a sliding window as an explicit mask)."""
    pos = jnp.arange(seq)
    return mask & (jnp.abs(pos[:, None] - pos[None, :]) <= window)[None, None]


def cudnn_mask(mask: jax.Array, q_len: int, kv_len: int) -> jax.Array:
    """A boolean mask in the shape cuDNN accepts: ``[B, 1, q_len, kv_len]``.

    ``dot_product_attention(implementation="cudnn")`` turns the mask into a bias whose sequence
    dimensions must equal the query and key lengths; a ``[B, 1, 1, S]`` key-padding mask is refused
    ("Bias must have same seq length as QKV"), so it is broadcast over the queries. Exact for any
    padding layout; :func:`cudnn_inputs` takes it only for masks that are not plain key padding.
    """
    return jnp.broadcast_to(mask, (mask.shape[0], 1, q_len, kv_len))


def key_lengths(mask: jax.Array) -> jax.Array:
    """The [B] int32 count of kept keys of a ``[B, 1, 1, S]`` key-padding mask, at least 1.

    For a right-padded batch (kept keys first, as every omnidistill pipeline and a right-padding
    tokenizer produce) attending to the first ``length`` keys is exactly the mask. A row of padding
    only gets length 1 rather than 0 so that cuDNN's softmax stays finite: its outputs are ignored
    (pooling and the loss never read padding), but a NaN there would reach the loss as 0 x NaN.
    A concrete (not traced) mask that is not right-padded is refused; under ``jit`` it cannot be seen."""
    keep = mask.reshape(mask.shape[0], -1)
    lengths = keep.sum(axis=-1, dtype=jnp.int32)
    if not isinstance(keep, jax.core.Tracer) and not bool(jnp.all(keep == (jnp.arange(keep.shape[1])[None] < lengths[:, None]))):
        raise ValueError("model.attention=cudnn takes right-padded batches (kept tokens first); use model.attention=xla for left padding")
    return jnp.maximum(lengths, 1)


def cudnn_inputs(mask: jax.Array, q_len: int, kv_len: int) -> tuple[jax.Array | None, jax.Array | None]:
    """``(mask, lengths)`` for cuDNN's fused attention: a key-padding ``[B, 1, 1, S]`` mask becomes
    sequence lengths (cuDNN's padding mask type, no ``[B, 1, S, S]`` bias read by every head), any
    other mask (segments of packed rows, a folded window) the broadcast :func:`cudnn_mask`.

    Assumes right padding for key-padding masks, as :func:`key_lengths` says."""
    if mask.ndim == 4 and mask.shape[1] == 1 and mask.shape[2] == 1 and q_len == kv_len:
        return None, key_lengths(mask)
    return cudnn_mask(mask, q_len, kv_len), None


SHIFTED_WINDOW_FROM = 4
"""A two-sided window of w tokens goes to cuDNN as a causal window over shifted queries
(:func:`attention_by_lengths`) in rows of at least this many windows (4w tokens, with the window
dropped where it reaches every key); shorter rows fold it into the mask. The shift computes about
(S + w)(2w + 1) scores where the mask computes S²: 0.6x of it at S = 4w, more than S² below 2w.
Measured on one H200 (docs/benchmarks.md): ModernBERT-base training at 512 tokens (w = 64) 1.057x
with the shift, while its realistic-length scoring, most rows 96-256 tokens, was 0.97x with every row
shifted."""


def takes_lengths(mask: AttentionMask | jax.Array, q_len: int, kv_len: int, bias: jax.Array | None, window: int | None) -> bool:
    """Whether :func:`attention_by_lengths` runs this call: an :class:`AttentionMask` of padded rows
    (not packed), as many queries as keys, and for a two-sided window (to be shifted) no bias (no
    family has both) and rows long enough to gain (:data:`SHIFTED_WINDOW_FROM`)."""
    if not isinstance(mask, AttentionMask) or mask.packed or mask.layout is not None or q_len != kv_len:
        return False
    if window is None or mask.causal or window >= q_len - 1:
        return True
    return bias is None and q_len >= SHIFTED_WINDOW_FROM * window


def attention_by_lengths(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: AttentionMask,
    implementation: str | None,
    *,
    bias: jax.Array | None = None,
    scale: float | None = None,
    window: int | None = None,
) -> jax.Array:
    """Attention of right-padded rows with no [B, 1, S, S] mask: key padding as sequence lengths,
    causality as the kernel's own mask, a window as its sliding window. This is how cuDNN's fused
    kernel skips the masked tiles instead of reading a bias that hides them (and, in the backward
    pass, writing the bias's gradient); :func:`takes_lengths` says when it applies.

    cuDNN's sliding window reaches only back, from a causal mask. A two-sided window |i - j| <= w
    (ModernBERT's local layers, EmbeddingGemma) is that kernel's causal attention with a 2w window
    once the queries sit w places later: with w rows of zeros in front of the queries and after the
    keys and values, query i is row i' = i + w, and j <= i' with i' - j <= 2w is exactly
    i - w <= j <= i + w. The w leading rows are dropped from the output (they attend to the first
    keys and are never read). Exact for any w: the same scores, softmax and sum over the same keys.
    A window that reaches every key of the rows (w >= S - 1: short rows of a local layer) is dropped.
    ``implementation`` is passed to ``jax.nn.dot_product_attention`` (XLA's kernel takes the same
    arguments, which is how the CPU tests check this against the mask)."""
    lengths = key_lengths(padding_mask(mask.keys))
    window = None if window is not None and window >= q.shape[1] - 1 else window
    causal, local, shift = mask.causal, None, 0
    if window is not None and causal:
        local = (window, 0)
    elif window is not None:
        shift, causal, local = window, True, (2 * window, 0)
        widen = lambda x, before, after: jnp.pad(x, ((0, 0), (before, after), (0, 0), (0, 0)))
        q, k, v = widen(q, shift, 0), widen(k, 0, shift), widen(v, 0, shift)
    out = jax.nn.dot_product_attention(
        q,
        k,
        v,
        bias,
        scale=scale,
        is_causal=causal,
        local_window_size=local,
        implementation=implementation,
        query_seq_lengths=lengths + shift,
        key_value_seq_lengths=lengths,
    )
    return out[:, shift:]


@dataclasses.dataclass(frozen=True)
class AttentionKernel:
    """How an encoder's attention runs: ``model.attention``, and whether the backward pass recomputes
    the [B, N, S, S] scores instead of keeping them (``model.remat: attention``)."""

    implementation: str = "auto"
    recompute_scores: bool = False


def attention_kernel(implementation: str, remat: str) -> AttentionKernel:
    """The kernel of an encoder built with ``model.attention`` and ``model.remat``."""
    return AttentionKernel(implementation, recompute_scores=remat == "attention")


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: AttentionMask | jax.Array,
    implementation: str | AttentionKernel = "xla",
    *,
    bias: jax.Array | None = None,
    scale: float | None = None,
    window: int | None = None,
) -> jax.Array:
    """Scaled dot-product attention over [B, S, N, D] tensors with an :class:`AttentionMask` (or a
    boolean [B, 1, 1 or S, S] mask, which every kernel but splash takes).

    ``implementation`` is ``model.attention`` (see :func:`resolve_attention`). ``window`` restricts
    query i to keys j with |i - j| <= window (local attention). cuDNN gets padded rows with no mask
    array (:func:`attention_by_lengths`: key padding as sequence lengths, right padding assumed;
    causality and windows as its own masks); packed rows, and fewer queries than keys, get the
    broadcast mask with any window folded in (:func:`cudnn_inputs`). Attention-probability dropout
    is not applied: fused kernels have none.
    A mask with a ``layout`` takes unpadded [G, t, N, D] tensors and gives them back so.
    """
    if isinstance(mask, AttentionMask) and mask.layout is not None:
        if bias is not None:
            raise ValueError("unpadded attention takes no additive bias")
        layout = mask.layout
        out = attention(layout.pad(q), layout.pad(k), layout.pad(v), mask.padded(), implementation, scale=scale, window=window)
        return layout.unpad(out)
    kernel = implementation if isinstance(implementation, AttentionKernel) else AttentionKernel(implementation)
    impl = resolve_attention(kernel.implementation, q.dtype, q.shape[1])
    if impl == "splash" and q.shape[1] != k.shape[1]:
        impl = None  # the first rows' queries only (an encoder's ``first_rows``): a [B, N, rows, S] product in XLA
    if impl == "splash" and bias is not None:
        if kernel.implementation == "splash":
            raise ValueError("model.attention=splash takes no additive bias (DeBERTa's relative positions): use auto or xla")
        impl = None  # auto on a TPU: XLA's kernel for a biased attention
    if impl == "splash":
        if not isinstance(mask, AttentionMask):
            raise ValueError("model.attention=splash takes an AttentionMask (segment ids), not a boolean array")
        from omnidistill.models.splash import splash_attention

        return splash_attention(q, k, v, mask.keys, causal=mask.causal, scale=scale, window=window)
    if impl == "cudnn" and takes_lengths(mask, q.shape[1], k.shape[1], bias, window):
        return attention_by_lengths(q, k, v, mask, impl, bias=bias, scale=scale, window=window)
    if isinstance(mask, AttentionMask):
        mask = mask.dense()
    local = (window, window) if window is not None else None
    lengths = None
    if impl == "cudnn":
        if window is not None:
            # cuDNN has no two-sided sliding window: fold the band into the mask (it becomes a bias).
            mask, local = band_mask(mask, q.shape[1], window), None
        mask, lengths = cudnn_inputs(mask, q.shape[1], k.shape[1])
    core = functools.partial(
        jax.nn.dot_product_attention,
        scale=scale,
        local_window_size=local,
        implementation=impl,
        query_seq_lengths=lengths,
        key_value_seq_lengths=lengths,
    )
    if impl == "blocked":
        core = lambda q, k, v, bias, mask: blocked_attention(q, k, v, mask, bias, scale, window)
    if kernel.recompute_scores and impl != "cudnn":  # cuDNN's fused kernel keeps no scores anyway
        core = jax.checkpoint(core)
    return core(q, k, v, bias, mask)


SAVED_MATMUL = "dense_matmul"
"""``checkpoint_name`` of a dense layer's product computed inside a ``custom_vjp``
(:mod:`omnidistill.models.cpu_matmul`), where ``dots_with_no_batch_dims_saveable`` does not see it."""

REMAT_POLICIES = {
    "none": None,
    "attention": None,  # layers are not rematerialised; attention recomputes its scores (AttentionKernel)
    "full": lambda *_, **__: False,  # save nothing: recompute every layer in the backward pass
    "dots": jax.checkpoint_policies.save_from_both_policies(  # keep matmul outputs, recompute the rest
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable, jax.checkpoint_policies.save_only_these_names(SAVED_MATMUL)
    ),
}


def call_layer(layer, remat: str, *args):
    """``layer(*args)``, rematerialised in the backward pass unless ``remat`` is ``none`` or ``attention``."""
    if REMAT_POLICIES.get(remat, False) is None:
        return layer(*args)
    from flax import nnx

    try:
        policy = REMAT_POLICIES[remat]
    except KeyError:
        raise ValueError(f"model.remat={remat!r} is not one of {sorted(REMAT_POLICIES)}") from None
    return nnx.remat(lambda module, *a: module(*a), policy=policy)(layer, *args)
