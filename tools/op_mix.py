"""Where a jitted step's device time goes: the per-HLO-op times of a ``jax.profiler`` trace, grouped by
the kind of work each op does, which is read from the compiled program's HLO text.

    python tools/bench_train.py --only=deberta --profile prof/     # one op-mix line per case, traces kept
    python tools/op_mix.py prof/*/ --top 2000                      # the kept traces again, every op listed

The trace is the ``*.trace.json.gz`` that ``jax.profiler`` writes beside its ``.xplane.pb`` (no
TensorBoard needed to read it). Each timed event that names an ``hlo_op`` is one op's run: on a GPU
the kernels on the device's stream lines, on the CPU the runtime's thunks. An op's kind comes from
its opcode, a fusion's from the ops inside it (a fusion holding a dot is matmul work), a custom
call's from its target (cuDNN's fused attention, cuBLAS gemms, Pallas/Mosaic kernels).
Only the program's own ops count (:func:`op_events` with its :func:`module_name`): the trace also
holds whatever else ran while it was open.

The same time is also summed by the source line that made each op (:func:`source_mix`: the HLO's
stack frames, the innermost frame JAX kept, which is the caller's line in the model or a library
such as flax) and by pass (forward, backward, or neither: the optimizer update). On a GPU, XLA's
command buffers name every kernel in them after the first of its kind, so for times per line run
with ``XLA_FLAGS=--xla_gpu_enable_command_buffer=``, as the eighth lease did
(``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
from collections.abc import Iterable
from pathlib import Path

STEP_HLO = "step.hlo.txt"
"""The compiled step's HLO text, in a case's folder beside its trace (``bench_train.py --profile``)."""
PROFILED_STEPS = 3
"""The steps ``bench_train.py --profile`` traces per case."""

KINDS = ("matmul", "attention kernel", "gather", "scatter", "reduce", "copy/transpose", "elementwise", "other")
"""The kinds, in the order a report lists them."""

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s")
_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLED = re.compile(r"(?:calls|to_apply|body|condition|called_computations)=\{?([^}]*?)\}?(?:,\s*[a-z_]+=|$)")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_SOURCE = re.compile(r'op_name="([^"]+)"')
_FRAME = re.compile(r"stack_frame_id=(\d+)")
_COPY_OPS = {"copy", "transpose", "bitcast", "reshape", "broadcast", "parameter", "constant", "tuple", "get-tuple-element", "slice",
             "concatenate", "pad", "dynamic-slice", "dynamic-update-slice", "bitcast-convert", "convert"}  # fmt: skip


def _opcode(rest: str) -> str:
    """The opcode of an instruction's right-hand side ``TYPE opcode(operands), attrs``."""
    if rest.startswith("("):  # a tuple type: skip to its closing parenthesis
        depth = 0
        for end, ch in enumerate(rest):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                rest = rest[end + 1 :]
                break
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else rest
    match = re.match(r"\s*([\w\-]+)\(", rest)
    return match.group(1) if match else "?"


def _named_kind(name: str) -> str:
    """The kind of a custom call by its target, or of a library kernel by its name: cuDNN's attention
    (``__cudnn$fmha…``, ``…sdpa…flash…``), Pallas attention, cuBLAS/CUTLASS gemms (``nvjet…``)."""
    n = name.lower()
    if any(k in n for k in ("fmha", "flash", "splash", "attention", "sdpa", "cudnn::fusion")):
        return "attention kernel"
    if any(k in n for k in ("gemm", "matmul", "cublas", "nvjet", "xmma", "cutlass")):
        return "matmul"
    return "other"


def _kind_of(opcodes: set[str], targets: set[str]) -> str:
    """The kind of one op, or of a fusion with these opcodes (and custom-call targets) inside it."""
    kinds = {_named_kind(t) for t in targets}
    if "attention kernel" in kinds:
        return "attention kernel"
    if opcodes & {"dot", "convolution", "ragged-dot"} or "matmul" in kinds:
        return "matmul"
    for opcode, kind in (("scatter", "scatter"), ("gather", "gather"), ("reduce", "reduce"), ("reduce-window", "reduce")):
        if opcode in opcodes:
            return kind
    if opcodes and opcodes <= _COPY_OPS:
        return "copy/transpose"
    if opcodes - {"custom-call"}:
        return "elementwise"
    return "other"


def _parse(hlo_text: str) -> dict[str, list[tuple[str, str, str, list[str], str, str]]]:
    """Computation name -> its instructions as (name, opcode, custom-call target, called computations,
    the JAX op name and the stack frame id from the metadata)."""
    computations: dict[str, list[tuple[str, str, str, list[str], str, str]]] = {}
    current: list | None = None
    for line in hlo_text.splitlines():
        if line and not line[0].isspace():  # a computation's header or closing brace, or module-level text
            header = _HEADER.match(line) if line.rstrip().endswith("{") else None
            current = computations.setdefault(header.group(1), []) if header else None
            continue
        named = _NAME.match(line)
        if current is None or not named:
            continue
        name, rest = named.groups()
        target, source, frame = _TARGET.search(rest), _SOURCE.search(rest), _FRAME.search(rest)
        called = [c.strip().lstrip("%") for m in _CALLED.finditer(rest) for c in m.group(1).split(",") if c.strip()]
        metadata = (source.group(1) if source else "", frame.group(1) if frame else "")
        current.append((name, _opcode(rest), target.group(1) if target else "", called, *metadata))
    return computations


_DEFINING = {"matmul": ("dot", "convolution", "ragged-dot", "custom-call"), "attention kernel": ("custom-call",),
             "scatter": ("scatter",), "gather": ("gather",), "reduce": ("reduce", "reduce-window")}  # fmt: skip
"""The opcodes whose JAX op name names a fusion of that kind (a matmul fusion by its dot's einsum)."""


def hlo_ops(hlo_text: str) -> dict[str, tuple[str, str]]:
    """Every instruction's name in a compiled module's HLO text, mapped to (its kind, one of
    :data:`KINDS`; the JAX op name that made it, from the metadata; for a fusion, that of the op that
    gives it its kind, else of its root)."""
    return {name: (kind, op_name) for name, (kind, op_name, _) in _named_ops(_parse(hlo_text)).items()}


def _named_ops(computations: dict[str, list[tuple[str, str, str, list[str], str, str]]]) -> dict[str, tuple[str, str, str]]:
    """:func:`hlo_ops` of a :func:`_parse`-d module, with each instruction's stack frame id beside its JAX
    op name: for a fusion, both from the op that gives it its kind (its own, else none, where no such op
    carries metadata)."""
    memo: dict[str, tuple[set[str], set[str], dict[str, tuple[str, str]]]] = {}

    def contents(computation: str) -> tuple[set[str], set[str], dict[str, tuple[str, str]]]:
        """Opcodes, custom-call targets and each opcode's first (JAX op name, frame id), of a
        computation and everything it calls."""
        if computation not in memo:
            memo[computation] = (set(), set(), {})  # a cycle guard
            opcodes, targets, sources = set(), set(), {}
            for _, opcode, target, called, source, frame in computations.get(computation, []):
                opcodes.add(opcode)
                targets |= {target} if target else set()
                if source:
                    sources.setdefault(opcode, (source, frame))
                for c in called:
                    inner = contents(c)
                    opcodes |= inner[0]
                    targets |= inner[1]
                    sources = {**inner[2], **sources}
            memo[computation] = (opcodes, targets, sources)
        return memo[computation]

    ops = {}
    for instructions in computations.values():
        for name, opcode, target, called, source, frame in instructions:
            opcodes, targets, sources = {opcode}, {target} if target else set(), {}
            if opcode == "fusion":
                for c in called:
                    inner = contents(c)
                    opcodes, targets, sources = opcodes | inner[0], targets | inner[1], {**inner[2], **sources}
                opcodes.discard("fusion")
            kind = _kind_of(opcodes, targets)
            named = [sources[o] for o in _DEFINING.get(kind, ()) if o in sources]
            ops[name] = (kind, *(named[0] if named else (source, frame)))
    return ops


def trace_file(trace_dir: str | Path) -> Path:
    """The newest ``*.trace.json.gz`` under a ``jax.profiler`` log folder."""
    found = sorted(Path(trace_dir).glob("plugins/profile/*/*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"{trace_dir}: no plugins/profile/*/*.trace.json.gz (was the trace written by jax.profiler?)")
    return found[-1]


def module_name(hlo_text: str) -> str:
    """The ``HloModule`` name of a compiled program's HLO text (``jit_train_step``), which the
    profiler writes as the ``hlo_module`` of each of its ops' events."""
    found = re.match(r"\s*HloModule\s+([\w.\-]+)", hlo_text)
    if not found:
        raise ValueError("the HLO text does not start with an HloModule line")
    return found.group(1)


def op_event_records(trace: dict, module: str | None = None) -> list[dict]:
    """The trace events of every op run in a Chrome-format trace. Where the trace has device
    lines (a GPU or TPU), only their stream lines count, so that derived summary lines are not
    counted twice; on the CPU, the runtime's events that name an op.

    With ``module`` (:func:`module_name`), an event that names another ``hlo_module`` is not
    counted: a trace holds every program run while it was open (a run's trace has its dev evaluation
    and metric ops beside the step, and any thread of the process may run one), and their ops would
    be read as the step's. A name with a program id in brackets (``jit_f(12)``) is the same module.
    If no op event is left but some named other modules, that is an error naming them."""
    events = trace.get("traceEvents", [])
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    devices = {pid for pid, name in processes.items() if name.startswith("/device:")}
    streams = {key for key, name in threads.items() if key[0] in devices and name.lower().startswith("stream")}

    def on_device_line(e: dict) -> bool:
        if devices:
            key = (e["pid"], e["tid"])
            return key in streams if streams else e["pid"] in devices
        return True

    def of_module(e: dict) -> bool:
        named = e["args"].get("hlo_module")
        return module is None or named is None or re.sub(r"\(\d+\)$", "", named) == module

    ran = _innermost([e for e in events if e.get("ph") == "X" and "hlo_op" in e.get("args", {}) and on_device_line(e)])
    kept = [e for e in ran if of_module(e)]
    if ran and not kept:
        others = sorted({str(e["args"].get("hlo_module")) for e in ran})
        raise ValueError(f"no op of module {module!r} in the trace; its ops are of {others}")
    return kept


def op_events(trace: dict, module: str | None = None) -> list[tuple[str, float]]:
    """(hlo op, microseconds) of every op run in a Chrome-format trace (:func:`op_event_records`)."""
    return op_times(op_event_records(trace, module))


def op_times(records: list[dict]) -> list[tuple[str, float]]:
    """(hlo op, microseconds) of each op event."""
    return [(_op_name(e), float(e.get("dur", 0.0))) for e in records]


IDLE_GAP_US = 100.0
"""The idle time between two ops above which :func:`idle_gaps` counts a gap as long."""


def idle_gaps(records: list[dict]) -> dict:
    """How the device waited between the ops of :func:`op_event_records` (one device's stream lines):
    the idle time from the first op's start to the last op's end, split into gaps longer than
    :data:`IDLE_GAP_US` (a stall before a program's launch, say) and shorter ones (launch latency
    between kernels), in ms, with the number of long gaps. Ops that overlap (several streams) count
    as one busy stretch."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in records if "ts" in e)
    long_us = short_us = 0.0
    long_n = 0
    end = spans[0][1] if spans else 0.0
    for start, stop in spans[1:]:
        gap = start - end
        if gap > IDLE_GAP_US:
            long_us, long_n = long_us + gap, long_n + 1
        elif gap > 0:
            short_us += gap
        end = max(end, stop)
    return {"long_gaps": long_n, "ms_in_long_gaps": round(long_us / 1e3, 3), "ms_in_short_gaps": round(short_us / 1e3, 3)}


TIME_RESOLUTION_US = 0.001
"""The resolution of a Chrome-format trace's times as ``jax.profiler`` writes them (microseconds with
three decimals: nanoseconds)."""


def _innermost(events: list[dict]) -> list[dict]:
    """The events that hold no other event of their line (process, thread). On the CPU a control-flow
    op (a ``while`` from ``lax.map`` or a scan) is an event that spans its body's ops, whose time would
    otherwise count twice; a GPU stream's kernels do not nest, so nothing is dropped there. An event
    without a start time is kept.

    An event holds another only if the other lies within it, to the trace's resolution
    (:data:`TIME_RESOLUTION_US`): two ops run one after the other on a line, the second starting where
    the first ends, can overlap by a rounding of their times (``ts + dur`` in binary floating point),
    and the first is then not a control-flow op."""
    outer: set[int] = set()
    lines: dict[tuple, list[dict]] = collections.defaultdict(list)
    for e in events:
        if "ts" in e:
            lines[(e.get("pid"), e.get("tid"))].append(e)
    end = lambda e: float(e["ts"]) + float(e.get("dur", 0.0))
    half = TIME_RESOLUTION_US / 2
    within = lambda e, o: float(e["ts"]) < end(o) - half and end(e) <= end(o) + half
    for line in lines.values():
        line.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        open_: list[dict] = []
        for e in line:
            while open_ and not within(e, open_[-1]):
                open_.pop()
            if open_:
                outer.add(id(open_[-1]))
            open_.append(e)
    return [e for e in events if id(e) not in outer]


def _op_name(event: dict) -> str:
    """The op an event ran. Inside an XLA command buffer (a CUDA graph), every kernel names the buffer
    as its ``hlo_op``; its own name is then the op's (an XLA fusion's kernel is named after it) or a
    library kernel's (cuBLAS, cuDNN)."""
    op = event["args"]["hlo_op"]
    return event["name"] if op.startswith("command_buffer") else op


def _lookup(ops: dict[str, tuple[str, str]], op: str) -> tuple[str, str]:
    """(kind, JAX op name) of an op of the trace: by its HLO name, by the kernel name XLA derives from
    it (``loop_add_fusion.3`` runs as ``loop_add_fusion_3``), else as a library kernel."""
    if op in ops:
        return ops[op]
    dotted = re.sub(r"_(\d+)$", r".\1", op)
    if dotted in ops:
        return ops[dotted]
    return _named_kind(op), ""


def op_mix(events: Iterable[tuple[str, float]], ops: dict[str, tuple[str, str]], steps: int, top: int = 12) -> dict:
    """Per-step device time by kind (ms and share) and the ``top`` slowest ops, each as [name, kind,
    JAX op name, ms per step, runs per step], from :func:`op_events` over ``steps`` steps and
    :func:`hlo_ops`. On a GPU, XLA compiles identical fusions (one per layer, say) into one kernel
    named after the first, so one name may stand for many ops: the runs tell how many."""
    by_kind: collections.Counter[str] = collections.Counter()
    by_op: collections.Counter[str] = collections.Counter()
    runs: collections.Counter[str] = collections.Counter()
    for op, us in events:
        by_kind[_lookup(ops, op)[0]] += us
        by_op[op] += us
        runs[op] += 1
    total = sum(by_kind.values())
    ms = lambda us: round(us / steps / 1e3, 3)
    return {
        "device_ms_per_step": ms(total),
        "by_kind_ms": {k: ms(by_kind[k]) for k in KINDS if by_kind[k]},
        "by_kind_share": {k: round(by_kind[k] / total, 3) for k in KINDS if by_kind[k]} if total else {},
        "top_ops": [[op[:80], *_lookup(ops, op), ms(us), round(runs[op] / steps, 2)] for op, us in by_op.most_common(top)],
    }


_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")


def source_lines(hlo_text: str) -> dict[str, str]:
    """Instruction name -> ``dir/file.py:LINE function`` of its innermost stack frame, read from the
    module's FileNames, FunctionNames, FileLocations and StackFrames tables. A fusion without a frame of
    its own (XLA's CPU library fusions, e.g. ``ynn_fusion``, carry no metadata) takes that of the op
    that names it in :func:`hlo_ops`; instructions without any frame are left out."""
    tables: dict[str, dict[int, str]] = {"FileNames": {}, "FunctionNames": {}, "FileLocations": {}, "StackFrames": {}}
    current: dict[int, str] | None = None
    for line in hlo_text.splitlines():
        if line in tables:
            current = tables[line]
            continue
        row = _TABLE_ROW.match(line) if current is not None else None
        if row:
            current[int(row.group(1))] = row.group(2).strip('"')
            continue
        current = None
    computations = _parse(hlo_text)
    frames = {name: frame for instructions in computations.values() for name, *_, frame in instructions if frame}
    for name, (_, _, frame) in _named_ops(computations).items():
        if frame and name not in frames:
            frames[name] = frame

    def label(frame_id: str) -> str | None:
        frame = dict(_FIELD.findall(tables["StackFrames"].get(int(frame_id), "")))
        location = dict(_FIELD.findall(tables["FileLocations"].get(int(frame.get("file_location_id", 0)), "")))
        if not location:
            return None
        path = "/".join(tables["FileNames"].get(int(location["file_name_id"]), "?").split("/")[-2:])
        return f"{path}:{location['line']} {tables['FunctionNames'].get(int(location['function_name_id']), '?')}"

    labels = {frame_id: label(frame_id) for frame_id in set(frames.values())}
    return {name: labels[frame_id] for name, frame_id in frames.items() if labels[frame_id]}


def _pass_of(op_name: str) -> str:
    """``backward`` for an op JAX made by transposing (``transpose(jvp(...))``), ``forward`` for one
    of the differentiated function, ``other`` for the rest (the optimizer update, the metrics)."""
    return "backward" if "transpose(" in op_name else "forward" if "jvp(" in op_name else "other"


def source_mix(
    events: Iterable[tuple[str, float]], ops: dict[str, tuple[str, str]], sources: dict[str, str], steps: int, top: int = 12
) -> list:
    """The ``top`` source lines by device time per step, each as [``file:line function``, pass, ms per
    step, runs per step, {kind: ms} of every kind among its ops], from :func:`op_events`,
    :func:`hlo_ops` and :func:`source_lines`.
    Ops without a frame count under ``?``."""
    time: collections.Counter[tuple[str, str]] = collections.Counter()
    runs: collections.Counter[tuple[str, str]] = collections.Counter()
    kinds: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for op, us in events:
        kind, op_name = _lookup(ops, op)
        key = (sources.get(op, "?"), _pass_of(op_name))
        time[key] += us
        runs[key] += 1
        kinds[key][kind] += us
    ms = lambda us: round(us / steps / 1e3, 3)
    return [
        [*key, ms(us), round(runs[key] / steps, 2), {k: ms(v) for k, v in kinds[key].most_common()}] for key, us in time.most_common(top)
    ]


def read_trace(trace_dir: str | Path) -> dict:
    """The newest trace under ``trace_dir`` (:func:`trace_file`), read."""
    with gzip.open(trace_file(trace_dir), "rt", encoding="utf-8") as fh:
        return json.load(fh)


def trace_op_mix(trace_dir: str | Path, hlo_text: str, steps: int, top: int = 12) -> dict:
    """:func:`op_mix` of the newest trace under ``trace_dir``, for the program whose HLO text is given,
    with its :func:`source_mix` as ``by_source``."""
    trace = read_trace(trace_dir)
    events, ops = op_events(trace, module_name(hlo_text)), hlo_ops(hlo_text)
    return {**op_mix(events, ops, steps, top), "by_source": source_mix(events, ops, source_lines(hlo_text), steps, top)}


def programs_op_mix(trace_dir: str | Path, hlo_texts: list[str], passes: int, wall_s: float, top: int = 12) -> dict:
    """:func:`op_mix` per pass of the newest trace under ``trace_dir``, over several compiled programs of
    one function (a realistic-length scoring pass runs one per padded shape), with ``programs`` (how
    many) and ``device_busy``: the share of the traced passes' wall time ``wall_s`` that their ops took
    on the device (on a GPU, below 1: the device waited, for the host say; on the CPU, ops of several
    threads overlap, so it may pass 1), and ``idle``: that wait as long and short gaps
    (:func:`idle_gaps`). The programs share one module name, so an op's kind
    is looked up in their HLO texts together: where two programs give one fusion name to different
    work, the later text's kind counts for both."""
    trace = read_trace(trace_dir)
    records = [e for module in sorted({module_name(t) for t in hlo_texts}) for e in op_event_records(trace, module)]
    events = op_times(records)
    ops = {name: kind for text in hlo_texts for name, kind in hlo_ops(text).items()}
    mix = op_mix(events, ops, passes, top)
    busy = sum(us for _, us in events) / 1e6 / wall_s if wall_s > 0 else 0.0
    return {
        "device_ms_per_pass": mix.pop("device_ms_per_step"),
        **mix,
        "programs": len(hlo_texts),
        "device_busy": round(busy, 3),
        "idle": idle_gaps(records),
    }


def main(argv: list[str] | None = None) -> None:
    """One JSON line per case folder: its :func:`trace_op_mix`, with the folder's name as ``case`` and its
    path as ``folder`` (runs kept under several roots, one per lever, have the same case names)."""
    parser = argparse.ArgumentParser(description="The op mix of the traces that bench_train.py --profile kept.")
    parser.add_argument("cases", nargs="+", type=Path, help=f"a case's folder: its jax.profiler trace and {STEP_HLO}")
    parser.add_argument("--steps", type=int, default=PROFILED_STEPS, help="steps the trace holds (default: %(default)s)")
    parser.add_argument("--top", type=int, default=12, help="slowest ops and source lines to list (default: %(default)s)")
    args = parser.parse_args(argv)
    for folder in args.cases:
        hlo = folder / STEP_HLO
        if not hlo.is_file():
            parser.error(f"{folder}: no {STEP_HLO} (a case folder that bench_train.py --profile wrote)")
        try:
            mix = trace_op_mix(folder, hlo.read_text(encoding="utf-8"), args.steps, args.top)
        except (FileNotFoundError, ValueError) as err:
            parser.error(f"{folder}: {err}")
        print(json.dumps({"case": folder.name, "folder": str(folder), **mix}), flush=True)


if __name__ == "__main__":
    main()
