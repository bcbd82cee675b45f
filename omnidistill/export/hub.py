"""Upload an exported folder to the Hugging Face Hub, as people who publish checkpoints expect.

The token is found the way ``huggingface_hub`` finds it (``HF_TOKEN``, else the one saved by
``hf auth login``); the repo is created private when asked; ``revision`` uploads to a branch (created
if missing); ``dry_run`` lists what would go where and contacts nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omnidistill.export.errors import ExportError

HUB = "https://huggingface.co"


@dataclasses.dataclass(frozen=True)
class HubTarget:
    """Where and how an exported folder is uploaded."""

    repo_id: str
    private: bool = False
    revision: str | None = None
    """A branch; created from ``main`` when it does not exist. None: ``main``."""
    commit_message: str = "Upload omnidistill scorer"

    def url(self) -> str:
        return f"{HUB}/{self.repo_id}" + (f"/tree/{self.revision}" if self.revision else "")


def upload_plan(folder: str | Path) -> list[tuple[str, int]]:
    """(path in the repo, bytes) of every file the upload sends, in path order."""
    folder = Path(folder)
    return sorted((p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def hub_token() -> str:
    """The token ``huggingface_hub`` would use: ``HF_TOKEN``, else the cached login; an error without one."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise ExportError("--push-to-hub found no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")
    return token


def push_folder(folder: str | Path, target: HubTarget, *, dry_run: bool = False) -> dict[str, Any]:
    """Upload ``folder`` to ``target``; returns ``{"url", "files", "bytes", "private", "revision",
    "dry_run"}`` and, after a real upload, ``commit_url``. Without a token it fails before any call."""
    files = upload_plan(folder)
    summary: dict[str, Any] = {
        "repo_id": target.repo_id,
        "url": target.url(),
        "private": target.private,
        "revision": target.revision or "main",
        "files": files,
        "bytes": sum(size for _, size in files),
        "dry_run": dry_run,
    }
    if dry_run:
        return summary
    from huggingface_hub import HfApi

    api = HfApi(token=hub_token())
    api.create_repo(target.repo_id, private=target.private, repo_type="model", exist_ok=True)
    if target.revision:
        api.create_branch(target.repo_id, branch=target.revision, repo_type="model", exist_ok=True)
    info = api.upload_folder(
        repo_id=target.repo_id,
        folder_path=str(folder),
        repo_type="model",
        revision=target.revision,
        commit_message=target.commit_message,
    )
    summary["commit_url"] = str(getattr(info, "commit_url", info))
    return summary


def plan_lines(summary: dict[str, Any]) -> list[str]:
    """What a dry run prints: the target, then one line per file."""
    visibility = "private" if summary["private"] else "public"
    head = (
        f"would upload {len(summary['files'])} files ({summary['bytes']:,} bytes) to {summary['url']} "
        f"({visibility} repo {summary['repo_id']}, revision {summary['revision']}); nothing was uploaded"
    )
    return [head, *(f"  {path}  {size:,} bytes" for path, size in summary["files"])]
