"""Command line: ``omnidistill train | prepare | eval | score | label | sweep | export | import | tfds-build``. A thin layer
over the library."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from omnidistill import compile_cache
from omnidistill.config import ConfigError, limits

PACK_HELP = "pack items into rows of N tokens (several per row, same scores; 0: one padded item per row; default: {default})"
TOKENS_HELP = (
    "batches of up to N real tokens per device, the encoder's layers skipping the padding (BERT, XLM-R, DeBERTa, ModernBERT; same scores;"
    " 0: batches of --batch-size items; default: {default})"
)


def _train(args: argparse.Namespace) -> int:
    from omnidistill.config import load_config
    from omnidistill.train.distributed import maybe_initialize_distributed
    from omnidistill.train.loop import train

    cfg = load_config(args.config, args.overrides)
    maybe_initialize_distributed()
    summary = train(cfg, resume=args.resume)
    if summary["preempted"]:
        print(f"preempted at step {summary['steps']}: checkpoint saved in {summary['run_dir']}; continue with --resume")
        return 0
    print(f"done: {summary['steps']} steps, best dev MAE {summary['best_dev_mae']}, checkpoints in {summary['run_dir']}")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from omnidistill.config import load_config
    from omnidistill.train.prepare import prepare_caches

    cfg = load_config(args.config, args.overrides)
    for row in prepare_caches(cfg):
        state = "built" if row["built"] else "reused"
        print(f"{row['split']}: {row['examples']} examples, {row['tokens']} tokens, {state} in {row['seconds']} s: {row['folder']}")
    return 0


ON_ONE_HOST = "run it on one host (one worker of a TPU slice, one SLURM task), where it uses all of that host's devices"


def _eval(args: argparse.Namespace) -> int:
    _one_process("eval", ON_ONE_HOST)  # before the heavy imports: a refused process stops in a second
    from omnidistill.eval.report import report_markdown
    from omnidistill.eval.run_eval import evaluate_run

    compare = {}
    for spec in args.compare or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--compare {spec!r}: expected NAME=FILE")
        compare[name] = path
    report = evaluate_run(
        args.run_dir,
        files=args.data,
        split=args.split,
        out_dir=args.out,
        checkpoint=args.checkpoint,
        batch_size=args.batch_size,
        bootstrap_samples=args.bootstrap,
        null=args.null,
        plots=not args.no_plots,
        compare=compare,
        lang_weights=args.lang_weights,
        skip_invalid=True if args.skip_invalid else None,
        usd_per_hour=args.usd_per_hour,
        pack_length=args.pack_length,
        batch_tokens=args.batch_tokens,
        compiler_options=dict(args.xla_option),
        compute_dtype=args.dtype,
        keep_fields=args.keep_fields,
        group_by=args.group_by,
        pairs=args.pairs,
    )
    print(report_markdown(report, f"{args.split}: {report['meta']['items']} items, step {report['meta']['step']}"))
    if compare:
        from omnidistill.eval.compare import comparison_markdown
        from omnidistill.eval.significance import differences_markdown

        print(comparison_markdown(report["comparison"]))
        print(differences_markdown(report["judge_differences"]))
    print(f"report written to {args.out or args.run_dir + '/eval'}")
    return 0


def _one_process(command: str, advice: str) -> None:
    """Join a multi-process job as ``train`` does, and refuse to run ``command`` in more than one process:
    each would do all of the work on its own and write the same files."""
    import jax

    from omnidistill.train.distributed import maybe_initialize_distributed

    maybe_initialize_distributed()
    if jax.process_count() > 1:
        raise ValueError(f"{command} runs in one process, and this is one of {jax.process_count()}: {advice}")


def _sweep(args: argparse.Namespace) -> int:
    _one_process("sweep", "on several hosts, launch each run with `omnidistill train` (launch/), or run the sweep on one host")
    from omnidistill.sweep import run_sweep, summary_markdown

    only = args.only.split(",") if args.only else ()
    outcome = run_sweep(args.sweep_file, args.overrides, output_dir=args.output_dir, only=only, resume=args.resume)
    print(summary_markdown(outcome.rows))
    if outcome.preempted:
        print(f"preempted during run {outcome.preempted}: its checkpoint is saved; continue the sweep with --resume")
    return 0


def _score(args: argparse.Namespace) -> int:
    _one_process("score", ON_ONE_HOST)
    import jax

    from omnidistill.data.preference_file import read_preferences
    from omnidistill.eval.preferences import preference_markdown
    from omnidistill.score_file import auto_input_workers, check_paths, input_bytes, score_file
    from omnidistill.scorer import Scorer

    inputs, _ = check_paths(args.input, args.output, args.resume, args.keep_fields, args.group_by or ())  # before the model is loaded
    pairs = read_preferences(args.pairs) if args.pairs else None
    scorer = Scorer.load(
        args.model,
        batch_size=args.batch_size,
        pack_length=args.pack_length,
        batch_tokens=args.batch_tokens,
        compiler_options=dict(args.xla_option),
        compute_dtype=args.dtype,
    )
    workers = args.input_workers
    if workers is None:
        workers = auto_input_workers(jax.default_backend(), size=input_bytes(inputs))
    done = score_file(
        scorer,
        inputs,
        args.output,
        resume=args.resume,
        skip_invalid=args.skip_invalid,
        chunk=args.chunk,
        progress=True,
        keep_fields=args.keep_fields,
        group_by=args.group_by or (),
        pairs=pairs,
        as_labels=args.as_labels,
        input_workers=workers,
    )
    resumed = f" (kept {done['resumed']} already scored, scored {done['scored']})" if args.resume else ""
    skipped = f"; {done['skipped']} invalid skipped" if done["skipped"] else ""
    print(f"scored {done['items']} items with {scorer.source} -> {args.output}{resumed}{skipped}")
    print(f"mean scores (also in {args.output}.means.json):\n" + done["means"].table())
    if pairs is not None:
        print(f"agreement with the judges' choices in {args.pairs} (also in {args.output}.pairs.json):")
        print(preference_markdown(done["pairs"]))
    return 0


def _label(args: argparse.Namespace) -> int:
    from omnidistill.label.config import load_label_config
    from omnidistill.label.labeler import Labeler

    cfg = load_label_config(args.config, args.overrides)
    if args.pairwise:
        stats = Labeler(cfg).label_pairs(args.input, args.output, args.keep_fields)
        print(f"judged {stats['judged']} of {stats['pairs']} pairs ({stats['failed']} failed -> {args.output}.failed.jsonl)")
        return 0
    stats = Labeler(cfg).label_file(args.input, args.output, args.keep_fields)
    print(
        f"labelled {stats['labelled']} of {stats['items']} items ({stats['failed']} failed -> {args.output}.failed.jsonl); "
        f"{stats['requests']} requests, {stats['cached_answers']} cached answers, {stats['invalid_answers']} invalid answers, "
        f"{stats['prompt_tokens']} + {stats['completion_tokens']} tokens, ${stats['cost_usd']:.4f}"
    )
    if stats["cut_answers"]:
        cut = stats["cut_answers"]
        print(f"{cut} answers were cut at max_tokens={cfg.max_tokens}: raise max_tokens and run again (the rest is cached)")
    return 0


def _tfds_build(args: argparse.Namespace) -> int:
    from omnidistill.data.tfds_source import build_schema_dataset

    folder, built = build_schema_dataset(args.manual_dir, args.data_dir, overwrite=args.overwrite)
    done = "prepared omnidistill_schema in" if built else "omnidistill_schema was already prepared from these files in"
    print(f"{done} {folder}; train with data.tfds.name=omnidistill_schema data.tfds.data_dir={args.data_dir}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from omnidistill.export.card_metadata import CardInfo
    from omnidistill.export.hf_export import export_run
    from omnidistill.export.hub import HubTarget, plan_lines

    hub_only = [flag for flag, value in (("--private", args.private), ("--revision", args.revision), ("--dry-run", args.dry_run)) if value]
    if hub_only and not args.push_to_hub:
        raise ValueError(f"{', '.join(hub_only)} need --push-to-hub REPO")
    hub = (
        HubTarget(args.push_to_hub, private=args.private, revision=args.revision, commit_message=args.commit_message)
        if args.push_to_hub
        else None
    )
    card = CardInfo(
        license=args.license,
        license_name=args.license_name,
        license_link=args.license_link,
        datasets=tuple(args.dataset),
        teacher=args.teacher,
    )
    verify = None if args.verify == "auto" else args.verify == "on"
    summary = export_run(
        args.run_dir,
        args.out_dir,
        checkpoint=args.checkpoint,
        verify=verify,
        hub=hub,
        dry_run=args.dry_run,
        folder_format=args.format,
        card=card,
    )
    check = (
        f"verified with {summary['verified_with']} (max |score diff| {summary['max_abs_diff']:.1e})"
        if summary["verified"]
        else "not verified"
    )
    print(f"exported step {summary['step']} as {summary['format']} to {summary['out_dir']} ({summary['tensors']} tensors, {check})")
    if "hub" in summary:
        pushed = summary["hub"]
        print("\n".join(plan_lines(pushed)) if pushed["dry_run"] else f"pushed to {pushed['url']}: {pushed['commit_url']}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from omnidistill.export.hf_import import import_hf

    summary = import_hf(args.source, args.run_dir, require_head=args.require_head, overwrite=args.overwrite)
    note = f"; left at random init: {', '.join(summary['random_init'])}" if summary["random_init"] else ""
    print(f"imported {args.source} ({summary['family']}) into {summary['run_dir']}{note}")
    return 0


def at_least(low: float, kind: type = int) -> Callable[[str], float]:
    """An argparse ``type``: a number of ``kind`` within the config's range rule ``>= low``
    (:func:`omnidistill.config.limits.at_least`; ``--chunk 0`` scored nothing)."""
    ok, phrase = limits.at_least(low)

    def parse(text: str) -> float:
        value = kind(text)  # a ValueError reads "invalid <name> value"
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {phrase}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def field_names(text: str) -> list[str]:
    """An argparse ``type``: ``NAME[,NAME]`` as a list of names (blanks dropped)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def add_keep_fields(p: argparse.ArgumentParser, carried: str) -> None:
    """``--keep-fields`` (``omnidistill.data.own_fields``): fields of the user's own, ``carried`` to the output."""
    p.add_argument(
        "--keep-fields",
        type=field_names,
        default=[],
        metavar="NAME[,NAME]",
        help=f"fields of your own (outside the schema, e.g. system), never model input: {carried}",
    )


def add_group_by(p: argparse.ArgumentParser, reported: str) -> None:
    """``--group-by``: fields whose values each get ``reported`` of their own."""
    p.add_argument(
        "--group-by",
        type=field_names,
        metavar="NAME[,NAME]",
        help=f"fields whose values each get {reported}, as tasks and languages do: your own (read as --keep-fields) "
        "or the schema's dataset, src_lang, tgt_lang",
    )


XLA_OPTION_HELP = (
    "an XLA option for the scoring program, NAME=VALUE (VALUE read as YAML: true, 4, or nothing for an empty"
    " string), e.g. xla_gpu_enable_command_buffer= ; repeatable; over the run's eval.compiler_options"
)


def add_scoring_program_options(p: argparse.ArgumentParser) -> None:
    """``--xla-option`` and ``--dtype``: how ``score`` and ``eval`` build their scoring program."""
    p.add_argument("--xla-option", type=xla_option, action="append", default=[], metavar="NAME=VALUE", help=XLA_OPTION_HELP)
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help="compute dtype for scoring (default: the run's eval.compute_dtype; float32 for an exported folder): bfloat16 is faster on "
        "GPUs and TPUs, its scores a little off float32's",
    )


def xla_option(text: str) -> tuple[str, object]:
    """An argparse ``type``: ``NAME=VALUE`` as (name, value), the value read as YAML so that XLA gets
    the type it expects (``true`` a bool, ``4`` an int, nothing an empty string)."""
    import yaml

    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), yaml.safe_load(raw) if raw.strip() else ""


def version_line() -> str:
    """``omnidistill X`` and the versions of the stack it runs on (for bug reports), read from the
    installed packages' metadata without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    from omnidistill import __version__

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    stack = ", ".join(f"{name} {installed(name)}" for name in ("jax", "flax", "optax", "orbax-checkpoint", "grain", "transformers"))
    return f"omnidistill {__version__} (Python {sys.version.split()[0]}; {stack})"


class PrintVersion(argparse.Action):
    """``--version``: :func:`version_line` on one line (argparse's own action wraps it to the terminal),
    looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string: str | None = None):
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    from omnidistill.config.reference import config_reference_text

    parser = argparse.ArgumentParser(prog="omnidistill", description="Distill LLM-judge Likert labels into fast encoder regressors (JAX).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action=PrintVersion, help="print the versions of omnidistill and its stack, and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "train",
        help="train a regressor from a YAML config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train, evaluate on dev periodically, keep the best checkpoint by dev MAE.",
        epilog="config keys (override any with key=value):\n" + config_reference_text(),
    )
    p.add_argument("config", help="YAML config file, e.g. configs/tiny.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. optim.lr=3e-5 mesh.data=8")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in train.output_dir")
    p.set_defaults(func=_train)

    p = sub.add_parser(
        "prepare",
        help="tokenize a config's splits once into data.token_cache (training then reads the tokens from there)",
    )
    p.add_argument("config", help="YAML config file, e.g. configs/tiny.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. data.token_cache=.cache/tokens")
    p.set_defaults(func=_prepare)

    p = sub.add_parser("eval", help="evaluate a run on labelled data; writes JSON + Markdown reports")
    p.add_argument("run_dir", help="run directory written by `omnidistill train` (train.output_dir)")
    p.add_argument(
        "--split", default="test", choices=["train", "dev", "test"], help="config split to evaluate and name of the report (default: test)"
    )
    p.add_argument("--data", nargs="+", metavar="FILE", help="JSONL, CSV or Parquet files to evaluate instead of the config's split")
    p.add_argument("--out", help="report directory (default: RUN_DIR/eval)")
    p.add_argument(
        "--checkpoint", default="best", choices=["best", "latest"], help="which checkpoint to evaluate (default: best by dev MAE)"
    )
    p.add_argument(
        "--batch-size", type=at_least(1), help="batches of this many items (default: eval.batch_tokens, else eval.batch_size, of the run)"
    )
    p.add_argument("--batch-tokens", type=at_least(0), metavar="N", help=TOKENS_HELP.format(default="eval.batch_tokens of the run"))
    p.add_argument("--pack-length", type=at_least(0), metavar="N", help=PACK_HELP.format(default="eval.pack_length of the run"))
    p.add_argument(
        "--bootstrap",
        type=at_least(0),
        default=1000,
        metavar="N",
        help="bootstrap resamples for 95%% intervals and --compare's paired tests (0 disables; default 1000)",
    )
    p.add_argument(
        "--null",
        default="uniform",
        choices=["uniform", "max_disagreement"],
        help="rwg null variance: uniform (2) or maximum disagreement (4)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--usd-per-hour",
        type=at_least(0.0, float),
        metavar="USD",
        help="machine price: the report adds dollars per 1,000 items (the paper's Table 9 cost)",
    )
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed records (counted in the report) instead of stopping")
    p.add_argument(
        "--lang-weights",
        metavar="FILE",
        help="L-MAE weights: JSON/YAML mapping language -> weight (default: eval.lang_weights, else items per language)",
    )
    add_keep_fields(p, "read and written into the predictions (beside the run's data.keep_fields)")
    add_group_by(p, "metrics (default: eval.group_by of the run)")
    add_scoring_program_options(p)
    p.add_argument(
        "--compare",
        action="append",
        metavar="NAME=FILE",
        help="another judge, shown side by side with the student and tested against it: a predictions file (JSONL, CSV or "
        "Parquet with id + pred or labels) or a run directory, whose best checkpoint scores the same items; repeatable",
    )
    p.add_argument(
        "--pairs",
        metavar="FILE",
        help="a teacher's pairwise preferences over these items (the output of label --pairwise): the report adds how often "
        "the student orders each pair as the judges chose",
    )
    p.set_defaults(func=_eval)

    p = sub.add_parser("score", help="score a JSONL/CSV/Parquet file with a trained or exported model")
    p.add_argument("--model", required=True, help="run directory (orbax checkpoint), exported Hugging Face folder, or Hub id")
    p.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="input files or quoted glob patterns: .jsonl, .csv (either also .gz/.bz2/.xz) or .parquet; candidate and context fields",
    )
    p.add_argument("--output", required=True, help="output JSONL: each input item plus its scores")
    p.add_argument("--batch-size", type=at_least(1), default=64, help="items per batch where batches are not filled by tokens (default 64)")
    p.add_argument(
        "--batch-tokens",
        type=at_least(0),
        metavar="N",
        help=TOKENS_HELP.format(default="a run's eval.batch_tokens; else 1024 on one CPU device, 0 otherwise"),
    )
    p.add_argument("--skip-invalid", action="store_true", help="skip malformed lines (counted) instead of failing on the first")
    add_keep_fields(p, "read and written back beside the scores")
    add_group_by(p, "mean scores")
    p.add_argument(
        "--pairs",
        metavar="FILE",
        help="a teacher's pairwise preferences (the output of label --pairwise): how often the scores order each "
        "pair as the judges chose (also in OUTPUT.pairs.json)",
    )
    p.add_argument(
        "--as-labels",
        action="store_true",
        help="write the scores as each item's labels (and a level-distribution head's distributions as label_dist): "
        "OUTPUT is then a training file, to distil this model into another one",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted OUTPUT: keep its complete lines (checked by id), score the rest"
    )
    p.add_argument(
        "--pack-length", type=at_least(0), metavar="N", help=PACK_HELP.format(default="a run's eval.pack_length; 0 for an exported folder")
    )
    p.add_argument(
        "--chunk", type=at_least(1), default=4096, help="items read, scored and written at a time (memory is flat in the input size)"
    )
    p.add_argument(
        "--input-workers",
        type=at_least(0),
        metavar="N",
        help="processes that read, check and tokenize the input ahead of the model (the same output with any number; "
        "0: a thread of this process; default: 0 on a CPU or for inputs under 32 MiB, else one per 4 cores, at most 4)",
    )
    add_scoring_program_options(p)
    p.set_defaults(func=_score)

    p = sub.add_parser("label", help="label items with an LLM judge through an OpenAI-compatible endpoint")
    p.add_argument("--config", required=True, help="labelling config, e.g. configs/label/gpt41.yaml")
    p.add_argument("--input", required=True, nargs="+", help="JSONL/CSV/Parquet items (labels not needed)")
    p.add_argument("--output", required=True, help="labelled JSONL (failed items go to OUTPUT.failed.jsonl, counts to OUTPUT.stats.json)")
    p.add_argument(
        "--pairwise",
        action="store_true",
        help="pairwise preferences (CE-Judge checklists) between candidates that share one input, instead of 1-5 labels",
    )
    add_keep_fields(p, "written back into each labelled line (--pairwise: NAME_a and NAME_b); training reads them with data.keep_fields")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. concurrency=4 models=[gpt-4.1-mini]")
    p.set_defaults(func=_label)

    p = sub.add_parser("tfds-build", help="build the omnidistill_schema TFDS dataset from local train/dev/test files")
    p.add_argument("--manual-dir", required=True, help="folder with train/dev/test .jsonl, .csv or .parquet files")
    p.add_argument("--data-dir", required=True, help="TFDS data directory to write")
    p.add_argument("--overwrite", action="store_true", help="rebuild a dataset there that was prepared from other files")
    p.set_defaults(func=_tfds_build)

    p = sub.add_parser("sweep", help="train a grid of config overrides and write one comparison table")
    p.add_argument(
        "sweep_file", help="sweep YAML (base, output_dir, overrides, runs and/or grid, seeds, test), e.g. configs/ablations/heads.yaml"
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every run, e.g. train.max_steps=50")
    p.add_argument("--output-dir", help="where runs and summary.{md,json} go (default: the sweep file's output_dir)")
    p.add_argument(
        "--only",
        metavar="RUN[,RUN]",
        help="train only these runs of the file, by name (a grid's: lr=0.001+head_lr=0.003) or seed folder "
        "(every run's config is still checked)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep (or one run in parts with --only): finished runs keep their rows, "
        "interrupted ones resume from their checkpoints, the table lists every finished run",
    )
    p.set_defaults(func=_sweep)

    p = sub.add_parser("export", help="write a Hugging Face folder (safetensors + config + tokenizer + card) from a run")
    p.add_argument("run_dir", help="run directory written by `omnidistill train` or `omnidistill import`")
    p.add_argument("out_dir", help="folder to write: new, or an earlier export (replaced atomically)")
    p.add_argument("--checkpoint", default="best", choices=["best", "latest"], help="which checkpoint to export (default: best)")
    p.add_argument(
        "--verify",
        default="auto",
        choices=["auto", "on", "off"],
        help="reload with the consumer (transformers for hf, the omniscore package for omniscore) and compare scores "
        "(fail above 1e-3); auto = on when the consumer is installed",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "hf", "omniscore"],
        help="hf: transformers *ForSequenceClassification; omniscore: the omniscore package's OmniScoreModel; "
        "auto (default): hf where the head fits a transformers class, else omniscore",
    )
    p.add_argument("--push-to-hub", metavar="REPO", help="upload to this Hub repo (token: HF_TOKEN, else the one saved by `hf auth login`)")
    p.add_argument("--private", action="store_true", help="create the Hub repo private (an existing repo keeps its visibility)")
    p.add_argument("--revision", metavar="BRANCH", help="upload to this branch of the Hub repo (created from main if missing)")
    p.add_argument("--commit-message", default="Upload omnidistill scorer", help="the Hub commit message")
    p.add_argument("--dry-run", action="store_true", help="list what --push-to-hub would upload where, and upload nothing")
    p.add_argument(
        "--license",
        default="apache-2.0",
        help="Hub license id for the model card, one the Hub lists (match the base model's; default apache-2.0)",
    )
    p.add_argument("--license-name", metavar="NAME", help="with --license other: the license's name (one the Hub does not list)")
    p.add_argument("--license-link", metavar="URL", help="with --license other: a link to the license's text")
    p.add_argument("--dataset", action="append", default=[], metavar="ID", help="Hub dataset id for the model card (repeatable)")
    p.add_argument("--teacher", help="the judge that labelled the data, for the model card (default: as recorded by `omnidistill label`)")
    p.set_defaults(func=_export)

    p = sub.add_parser("import", help="turn a Hugging Face PyTorch model into a run directory")
    p.add_argument(
        "source", help="HF model folder or hub id: a backbone (BertModel), a 4-label *ForSequenceClassification, or an omniscore folder"
    )
    p.add_argument("run_dir", help="run directory to create")
    p.add_argument("--require-head", action="store_true", help="fail unless pooler and 4-label classifier weights are present")
    p.add_argument("--overwrite", action="store_true", help="replace RUN_DIR if it already holds files (everything in it is removed)")
    p.set_defaults(func=_import)
    return parser


COMPILING = ("train", "eval", "score", "sweep", "export", "import")
"""The commands that compile JAX programs: they use XLA's persistent compilation cache (:mod:`omnidistill.compile_cache`)."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in COMPILING:
        compile_cache.configure()  # before JAX is imported
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("absl", "orbax", "jax._src"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.func(args)
    except (ConfigError, ValueError, OSError, RuntimeError) as err:  # OSError: a missing, blocked or unwritable path
        print(f"omnidistill {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what is kept and how to go on, not a traceback
        print(f"\nomnidistill {args.command}: interrupted{interrupted_hint(args)}", file=sys.stderr)
        return 130


def interrupted_hint(args: argparse.Namespace) -> str:
    """What a command interrupted by Ctrl-C left, and the command that continues it."""
    if args.command == "score":
        return f"; the lines already written to {args.output} are kept: the same command with --resume scores the rest"
    if args.command in ("train", "sweep"):
        return "; the checkpoints already saved are kept: the same command with --resume continues from the last one"
    if args.command == "label":
        return "; the answers already received are cached: the same command does not ask for them again"
    return ""


if __name__ == "__main__":
    sys.exit(main())
