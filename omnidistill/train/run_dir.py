"""What a run directory holds besides checkpoints: resolved config, model description, tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omnidistill.config import Config, dump_config, load_config


def save_run_metadata(run_dir: str | Path, cfg: Config, hf_config: dict[str, Any], tokenizer: Any) -> None:
    """Write ``config.yaml``, ``model.json`` and ``tokenizer/`` so that eval/export need only the run dir."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    (run_dir / "model.json").write_text(json.dumps({"family": cfg.model.family, "hf_config": hf_config}, indent=2), encoding="utf-8")
    tokenizer.save_pretrained(run_dir / "tokenizer")


def load_run_metadata(run_dir: str | Path) -> tuple[Config, dict[str, Any], Path]:
    """(config, HF-style model config, tokenizer folder) of a run directory."""
    run_dir = Path(run_dir)
    for name in ("config.yaml", "model.json", "tokenizer"):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir}: not an omnidistill run directory (missing {name})")
    cfg = load_config(run_dir / "config.yaml")
    model = json.loads((run_dir / "model.json").read_text(encoding="utf-8"))
    return cfg, model["hf_config"], run_dir / "tokenizer"
