"""Orbax checkpoints of a run directory.

- ``checkpoints/<step>/``: full train state + grain iterator state, the latest ``keep`` steps (resume).
- ``best/<step>/``: parameters of the best dev-MAE evaluation so far (eval and export read these).

Orbax writes each step to a temporary directory and renames it when complete, so a crash never
leaves a half-written step that looks finished.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grain
import jax
import orbax.checkpoint as ocp
from flax import nnx

log = logging.getLogger(__name__)


def _abstract(tree: Any) -> Any:
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


class CheckpointError(RuntimeError):
    """No usable checkpoint, or a state that must not be saved."""


class StateStructureError(CheckpointError):
    """The saved train state has other arrays than the one the config builds: the optimizer settings
    changed the optimizer state (``optim.ema_decay``, ``optim.grad_clip``, the parameter groups)."""

    def __init__(self, only_saved: set[str], only_now: set[str]):
        def some(paths: set[str]) -> str:
            return f"{min(paths)}" + (f" and {len(paths) - 1} more" if len(paths) > 1 else "") if paths else "none"

        super().__init__(f"arrays only in the checkpoint: {some(only_saved)}; only in this config's: {some(only_now)}")


def leaf_paths(tree: Any) -> set[str]:
    """The path of each array of a train state (``opt_state/1/params_average/head/linear/kernel``), the
    same for a ``TrainState`` and for the metadata orbax saved of one."""

    def text(key: Any) -> str:
        return str(getattr(key, "key", getattr(key, "idx", getattr(key, "name", key))))

    leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))
    return {"/".join(text(k) for k in path) for path, _ in leaves}


@jax.jit
def _finite_per_leaf(leaves: list[jax.Array]) -> jax.Array:
    return jax.numpy.stack([jax.numpy.isfinite(x).all() for x in leaves])


def assert_finite(tree: Any, what: str) -> None:
    """Refuse to save NaN/Inf values. One compiled reduction over every floating-point leaf (not two
    dispatches per leaf): a fresh process would otherwise compile two small programs per leaf shape."""
    named = [
        (jax.tree_util.keystr(path), x)
        for path, x in jax.tree_util.tree_leaves_with_path(tree)
        if hasattr(x, "dtype") and jax.numpy.issubdtype(x.dtype, jax.numpy.floating)
    ]
    if not named:
        return
    finite = jax.device_get(_finite_per_leaf([x for _, x in named]))
    bad = [name for (name, _), ok in zip(named, finite, strict=True) if not ok]
    if bad:
        raise CheckpointError(f"refusing to save {what} with non-finite values in {', '.join(bad[:5])}")


def _barriers(name: str) -> ocp.options.MultiprocessingOptions:
    """Each manager's own barrier names. The two managers of a run save the same step at once when a
    best evaluation lands on a checkpoint step; on several processes their async-write barriers
    (``_async_write_complete.<step>``) would then collide and the save fails on a timeout."""
    return ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=name)


def _whole_arrays_from_one_process() -> None:
    """On one process, save each array whole from its first replica. Orbax's default on CPU and TPU
    (replica-parallel saving) splits a replicated array so that every replica writes a part: across
    hosts that spreads the writing, but in one process the same host writes every part, and each
    array shape costs a small compiled slice per replica (144 compiles, 3.7 s, on the first save of
    a tiny run on a data 2 x fsdp 2 x tensor 2 mesh). Several processes keep the default."""
    if jax.process_count() == 1 and ocp.type_handlers.get_type_handler(jax.Array) is not _WHOLE_ARRAYS:
        absl_log = logging.getLogger("absl")  # orbax logs through absl, which logs here
        absl_log.addFilter(_not_an_override_warning)  # orbax warns of any override; this one is meant
        try:
            ocp.type_handlers.register_type_handler(jax.Array, _WHOLE_ARRAYS, override=True)  # once per process
        finally:
            absl_log.removeFilter(_not_an_override_warning)


def _not_an_override_warning(record: logging.LogRecord) -> bool:
    """False for orbax's warning that a type handler is overridden, which every run printed at its start."""
    return "Type handler registry" not in record.getMessage()


_WHOLE_ARRAYS = ocp.type_handlers.ArrayHandler(use_replica_parallel=False)


def saved_steps(run_dir: str | Path) -> list[int]:
    """The finished steps in ``RUN/checkpoints``, read without creating anything (none if it is absent)."""
    return sorted(ocp.utils.checkpoint_steps(Path(run_dir).absolute() / "checkpoints"))


class RunCheckpoints:
    """The two checkpoint managers of a run."""

    def __init__(self, run_dir: str | Path, keep: int = 2):
        _whole_arrays_from_one_process()
        run_dir = Path(run_dir).absolute()
        self.unreadable_dir = run_dir / "checkpoints_unreadable"
        self.latest = ocp.CheckpointManager(
            run_dir / "checkpoints",
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, multiprocessing_options=_barriers("latest")),
            item_handlers={"state": ocp.StandardCheckpointHandler(), "data": grain.checkpoint.CheckpointHandler()},
        )
        self.best = ocp.CheckpointManager(
            run_dir / "best",
            options=ocp.CheckpointManagerOptions(
                max_to_keep=1, best_fn=lambda m: m["dev_mae"], best_mode="min", create=True, multiprocessing_options=_barriers("best")
            ),
            item_handlers={"params": ocp.StandardCheckpointHandler()},
        )

    def save(self, step: int, state: Any, data_iter: Any) -> None:
        assert_finite(state.params, "parameters")
        self.latest.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(data_iter)),
            force=True,
        )

    def save_best(self, step: int, params: Any, dev_mae: float) -> None:
        assert_finite(params, "parameters")
        if step in self.best.all_steps():
            # a resumed run re-evaluated a step it had already saved as best (it died before the
            # latest checkpoint of that step); resume is exact, so the saved parameters are these
            log.info("best checkpoint of step %d already saved", step)
            return
        self.best.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params)), metrics={"dev_mae": float(dev_mae)}, force=True)

    def latest_step(self) -> int | None:
        return self.latest.latest_step()

    def restore(self, state_like: Any, data_iter: Any) -> tuple[Any, int]:
        """Restore the newest readable step: train state (resharded to ``state_like``'s shardings, so the
        mesh may differ from the one that saved it) and the iterator, in place. A step that fails to
        load (truncated or corrupted files) is skipped with a warning in favour of the one before, and
        moved to ``checkpoints_unreadable/`` so that the resumed run can save that step again."""
        steps = sorted(self.latest.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError("no checkpoint to resume from")
        self._check_same_arrays(steps[0], state_like)
        for step in steps:
            try:
                restored = self.latest.restore(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardRestore(_abstract(state_like)), data=grain.checkpoint.CheckpointRestore(data_iter)
                    ),
                )
            except Exception as err:  # orbax/tensorstore raise many types for damaged files
                log.warning("checkpoint step %d is unreadable (%s: %s); trying an earlier step", step, type(err).__name__, err)
                continue
            for bad in (s for s in steps if s > step):
                self._set_aside(bad)
            return restored.state, step
        raise CheckpointError(f"none of the checkpoints {steps} could be restored")

    def _check_same_arrays(self, step: int, state_like: Any) -> None:
        """Refuse a state with other arrays than the saved one's (:class:`StateStructureError`) before
        trying any step: every step would fail alike, each read as unreadable, and the error say only
        that none could be restored. A step whose metadata cannot be read is left to the fallback."""
        try:
            meta = self.latest.item_metadata(step)["state"]
        except Exception:  # orbax/tensorstore raise many types for damaged files
            return
        if meta is None:
            return
        saved, now = leaf_paths(meta), leaf_paths(state_like)
        if saved != now:
            raise StateStructureError(saved - now, now - saved)

    def _set_aside(self, step: int) -> None:
        self.unreadable_dir.mkdir(parents=True, exist_ok=True)
        target = self.unreadable_dir / str(step)
        shutil.rmtree(target, ignore_errors=True)
        (Path(self.latest.directory) / str(step)).rename(target)
        self.latest.reload()
        log.warning("moved unreadable checkpoint step %d to %s", step, target)

    def wait(self) -> None:
        self.latest.wait_until_finished()
        self.best.wait_until_finished()

    @contextlib.contextmanager
    def finished_on_interrupt(self) -> Iterator[None]:
        """Ctrl-C inside the block: the checkpoint orbax is still writing in the background is finished
        (and kept) and the managers closed before ``KeyboardInterrupt`` goes on; otherwise the process
        ended under the write, leaving an unfinished ``*.orbax-checkpoint-tmp`` folder."""
        try:
            yield
        except KeyboardInterrupt:
            self.wait()
            self.close()
            raise

    def close(self) -> None:
        self.latest.close()
        self.best.close()


PARAMS_AVERAGE = "params_average"
"""The field of the optimizer state that holds the weights' moving average (``optim.ema_decay``)."""


def weights_to_evaluate(state: Any) -> Any:
    """The weights a train state is evaluated, saved as best and scored with: the moving average of
    ``optim.ema_decay`` when its optimizer state has one, else the parameters. ``state`` is a
    ``TrainState`` or one read back from a checkpoint (dicts and lists)."""
    params, opt_state = (state["params"], state["opt_state"]) if isinstance(state, dict) else (state.params, state.opt_state)
    average = _field_in(opt_state, PARAMS_AVERAGE)
    return params if average is None else average


def _field_in(node: Any, name: str) -> Any:
    """The first ``name`` field of a NamedTuple, or ``name`` key of a dict, in a tree of tuples, lists
    and dicts (depth first); None if there is none."""
    if isinstance(node, dict) and name in node:
        return node[name]
    if name in getattr(node, "_fields", ()):
        return getattr(node, name)
    children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else ()
    for child in children:
        found = _field_in(child, name)
        if found is not None:
            return found
    return None


def restore_params(ckpt_dir: str | Path, params_like: Any, *, step: int | None = None) -> tuple[Any, int]:
    """Parameters of a run's best checkpoint (``RUN/best``) or of a latest-state checkpoint
    (``RUN/checkpoints``: the weights' moving average when the run keeps one, :func:`weights_to_evaluate`)."""
    ckpt_dir = Path(ckpt_dir).absolute()
    is_best = ckpt_dir.name == "best"
    if step is None:  # read without creating the folder: a run without checkpoints stays as it is
        steps = sorted(ocp.utils.checkpoint_steps(ckpt_dir)) if ckpt_dir.is_dir() else []
        if not steps:
            when = (
                "at the first dev evaluation; --checkpoint latest reads the last train state"
                if is_best
                else "every checkpoint.every_steps, or after each dev evaluation"
            )
            raise FileNotFoundError(f"{ckpt_dir}: no checkpoint yet (written {when})")
        step = steps[-1]
    if is_best:
        mgr = ocp.CheckpointManager(ckpt_dir, item_handlers={"params": ocp.StandardCheckpointHandler()})
        try:  # closed on a failed restore too
            out = mgr.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(_abstract(params_like)))).params
        finally:
            mgr.close()
    else:
        raw = read_state_arrays(ckpt_dir, step)
        state = raw if isinstance(raw, dict) else {"params": raw[1], "opt_state": raw[2]}
        out = _like(params_like, weights_to_evaluate(state))
    return out, step


def _like(params_like: Any, saved: Any) -> Any:
    """``saved`` arranged as ``params_like`` (same keys and dtypes). Checkpoints store dict keys as
    strings, so an ``nnx.List``'s layer ``0`` comes back as ``'0'``: leaves are matched by path text."""
    by_text = {tuple(map(str, path)): leaf for path, leaf in nnx.traversals.flatten_mapping(saved).items()}
    flat = nnx.traversals.flatten_mapping(params_like)
    missing = [path for path in flat if tuple(map(str, path)) not in by_text]
    if missing:
        raise CheckpointError(f"the checkpoint has no {'/'.join(map(str, missing[0]))} ({len(missing)} parameters missing)")
    out = {path: jax.numpy.asarray(by_text[tuple(map(str, path))], like.dtype) for path, like in flat.items()}
    return nnx.traversals.unflatten_mapping(out)


def read_state_arrays(ckpt_dir: str | Path, step: int | None = None) -> Any:
    """A saved train state as single-device arrays, whatever mesh or number of processes wrote it."""
    mgr = ocp.CheckpointManager(Path(ckpt_dir).absolute(), item_handlers={"state": ocp.StandardCheckpointHandler()})
    try:
        step = mgr.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{ckpt_dir}: no checkpoint found")
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        meta = mgr.item_metadata(step)["state"]
        like = lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device)
        target = jax.tree.map(like, meta, is_leaf=lambda x: hasattr(x, "shape"))
        return mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))).state
    finally:
        mgr.close()
