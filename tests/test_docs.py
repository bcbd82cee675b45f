"""The README and docs/ show only commands, flags, tools, files and config keys that exist."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import re
import shlex
import types
import typing
from pathlib import Path

import pytest

from omnidistill.cli import build_parser
from omnidistill.config import Config
from omnidistill.label.config import LabelConfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
SECTIONS = ("model", "data", "optim", "loss", "mesh", "train", "checkpoint", "eval")
KEY_SPAN = re.compile(rf"`((?:{'|'.join(SECTIONS)})\.[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)(?:=[^`]*)?`")
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


FILE_SUFFIXES = ("json", "jsonl", "safetensors", "bin", "yaml", "md", "png", "py", "txt")


def valid_key(key: str) -> bool:
    """Whether ``key`` names a config section or field: walked through the config types, optional
    sections (``data.tfds``) included; anything below a mapping field is accepted."""
    tp: object = Config
    for part in key.split("."):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
            tp = args[0]
        if typing.get_origin(tp) is dict or tp is dict:
            return True
        if not dataclasses.is_dataclass(tp):
            return False
        hints = typing.get_type_hints(tp)
        if part not in hints:
            return False
        tp = hints[part]
    return True


def shell_lines(page: Path) -> list[str]:
    """Command lines of the page's code blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in FENCE.findall(page.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def subcommands() -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices)


def page_ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_every_omnidistill_command_and_flag_exists(page):
    parsers = subcommands()
    label_keys = {f.name for f in dataclasses.fields(LabelConfig)}
    for line in shell_lines(page):
        for part in re.split(r"&&|\|", line):
            try:
                tokens = shlex.split(part)
            except ValueError:
                tokens = part.split()
            if len(tokens) < 2 or tokens[0] != "omnidistill":
                continue
            command = tokens[1]
            assert command in parsers, f"{page.name}: `{line}`: no subcommand {command!r}"
            actions = {s: a for a in parsers[command]._actions for s in a.option_strings}
            takes_value = False
            for token in tokens[2:]:
                if takes_value:  # the value of the flag before, e.g. --compare NAME=FILE
                    takes_value = False
                    continue
                if token.startswith("--"):
                    flag = token.split("=")[0]
                    assert flag in actions, f"{page.name}: `{line}`: {command} has no flag {token}"
                    takes_value = actions[flag].nargs != 0 and "=" not in token
                elif "=" in token and not token.startswith(("-", "/")) and re.match(r"^[a-z_][a-z0-9_.]*=", token):
                    key = token.split("=")[0]
                    ok = key in label_keys if command == "label" else valid_key(key)
                    assert ok, f"{page.name}: `{line}`: no config key {key!r}"


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_every_tool_script_and_config_file_exists(page):
    text = page.read_text(encoding="utf-8")
    for line in shell_lines(page):
        for match in re.findall(r"(?:python3? |bash )((?:tools|launch|\.ci)/[\w./-]+)", line):
            assert (ROOT / match).is_file(), f"{page.name}: `{line}`: no file {match}"
    for path in set(re.findall(r"\b(configs/[\w./-]+\.yaml)\b", text)):
        assert (ROOT / path).is_file(), f"{page.name}: no config file {path}"


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_every_config_key_shown_exists(page):
    text = page.read_text(encoding="utf-8")
    keys = set(KEY_SPAN.findall(text))
    for line in shell_lines(page):
        keys |= {t.split("=")[0] for t in line.split() if re.match(rf"^(?:{'|'.join(SECTIONS)})\.[a-z_.]+=", t)}
    bad = sorted(k for k in keys if k.rsplit(".", 1)[-1] not in FILE_SUFFIXES and not valid_key(k))
    assert not bad, f"{page.name}: config keys that do not exist: {bad}"


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``omnidistill.train.loop`` or ``omnidistill.train.loop.train``) names a module,
    or an attribute of the longest module that prefixes it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_every_module_and_python_name_shown_exists(page):
    """Source files (`omnidistill/models/regressor.py`), dotted names (`omnidistill.train.loop`) and the
    ``from omnidistill... import ...`` lines of Python examples."""
    text = page.read_text(encoding="utf-8")
    for path in set(re.findall(r"`(omnidistill/[\w/]+\.py)", text)):
        assert (ROOT / path).is_file(), f"{page.name}: no file {path}"
    names = set(re.findall(r"`(omnidistill(?:\.\w+)+)", text))
    for module, imported in re.findall(r"^\s*from (omnidistill[\w.]*) import ([\w, ]+)$", text, re.M):
        names |= {f"{module}.{name.strip()}" for name in imported.split(",")}
    bad = sorted(name for name in names if not resolves(name))
    assert not bad, f"{page.name}: names that do not exist: {bad}"


HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def heading_anchors(text: str) -> set[str]:
    """The ``#fragment`` names a Markdown page's headings get, as GitHub makes them: lower case,
    punctuation but ``-`` and ``_`` dropped, spaces made ``-``, a repeated name suffixed ``-1``,
    ``-2``, ... Headings inside code blocks are none."""
    anchors, times_seen = set(), {}
    for title in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = times_seen.get(slug, 0)
        anchors.add(f"{slug}-{n}" if n else slug)
        times_seen[slug] = n + 1
    return anchors


@functools.cache
def page_anchors(path: Path) -> set[str]:
    """:func:`heading_anchors` of a page, read once however many links point into it."""
    return heading_anchors(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_relative_links_point_to_files_and_headings(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, fragment = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.exists(), f"{page.name}: broken link {target}"
        if fragment and path.suffix == ".md":
            assert fragment in page_anchors(path), f"{page.name}: no heading for {target}"


def test_heading_anchors_are_githubs():
    text = "# Set-up: two commands\n## Per value (`--group-by`)\n```\n# not a heading\n```\n## Notes\n## Notes\n"
    assert heading_anchors(text) == {"set-up-two-commands", "per-value---group-by", "notes", "notes-1"}


def test_readme_is_the_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    text = "\n".join(lines)
    for page in ("configuration", "models", "evaluation", "labelling", "launch", "benchmarks"):
        assert f"docs/{page}.md" in text and (ROOT / "docs" / f"{page}.md").is_file()


def test_the_checker_catches_a_wrong_key_and_flag():
    assert valid_key("data.max_length") and valid_key("model") and valid_key("data.tfds.name") and valid_key("data.tfds.fields.source")
    assert not valid_key("data.max_len") and not valid_key("data.tfds.nme")
    flags = {s for a in subcommands()["eval"]._actions for s in a.option_strings}
    assert "--lang-weights" in flags and "--no-such-flag" not in flags
    assert resolves("omnidistill.Scorer") and resolves("omnidistill.train.loop.train") and resolves("omnidistill.eval.run_eval")
    assert not resolves("omnidistill.train.loop.fit") and not resolves("omnidistill.training.loop")
