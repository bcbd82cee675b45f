"""Releasing to the Hub: the token found as huggingface_hub finds it, private repos, branches, commit
messages, a dry run that contacts nothing, and a model card whose metadata huggingface_hub parses
into the run's own test metrics. No network: HfApi is a stand-in that records its calls."""

from __future__ import annotations

import json
import re
from typing import ClassVar

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

from omnidistill.cli import main
from omnidistill.dimensions import DIMENSIONS
from omnidistill.export.errors import ExportError
from omnidistill.export.hub import HubTarget, push_folder


class RecordingApi:
    """Stands in for huggingface_hub.HfApi: records every call and its arguments."""

    calls: ClassVar[list[tuple[str, dict]]] = []

    def __init__(self, token=None):
        RecordingApi.calls.append(("init", {"token": token}))

    def create_repo(self, repo_id, **kwargs):
        RecordingApi.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def create_branch(self, repo_id, **kwargs):
        RecordingApi.calls.append(("create_branch", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, **kwargs):
        RecordingApi.calls.append(("upload_folder", kwargs))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"})()


@pytest.fixture()
def api(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub import constants

    RecordingApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))  # no login unless a test saves one
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return RecordingApi


@pytest.fixture()
def evaluated_run(trained_tiny):
    """The session's shared tiny run, trained and evaluated (eval/test.json feeds the card's model-index)."""
    return trained_tiny


def test_the_token_comes_from_hf_token_or_the_cached_login(api, tmp_path, monkeypatch):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ExportError, match="HF_TOKEN or run `hf auth login`"):
        push_folder(tmp_path, HubTarget("me/scorer"))
    assert api.calls == []
    (tmp_path / "hf-home").mkdir()
    (tmp_path / "hf-home" / "token").write_text("cached-secret")  # where `hf auth login` saves it
    push_folder(tmp_path, HubTarget("me/scorer"))
    assert api.calls[0] == ("init", {"token": "cached-secret"})
    api.calls = []
    monkeypatch.setenv("HF_TOKEN", "env-secret")  # the environment wins, as in huggingface_hub
    push_folder(tmp_path, HubTarget("me/scorer"))
    assert api.calls[0] == ("init", {"token": "env-secret"})


def test_private_branch_and_commit_message_reach_the_api(api, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "secret")
    (tmp_path / "model.safetensors").write_bytes(b"0" * 10)
    summary = push_folder(tmp_path, HubTarget("me/scorer", private=True, revision="v1", commit_message="first release"))
    assert [name for name, _ in api.calls] == ["init", "create_repo", "create_branch", "upload_folder"]
    assert api.calls[1][1] == {"repo_id": "me/scorer", "private": True, "repo_type": "model", "exist_ok": True}
    assert api.calls[2][1] == {"repo_id": "me/scorer", "branch": "v1", "repo_type": "model", "exist_ok": True}
    upload = api.calls[3][1]
    assert upload["folder_path"] == str(tmp_path) and upload["revision"] == "v1" and upload["commit_message"] == "first release"
    assert summary["commit_url"].endswith("/commit/abc") and summary["files"] == [("model.safetensors", 10)]


def test_export_pushes_from_the_cli_and_a_dry_run_uploads_nothing(api, evaluated_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "export"
    base = ["export", str(evaluated_run), str(out), "--verify", "off", "--push-to-hub", "me/tiny-scorer"]
    assert main([*base, "--dry-run", "--private", "--revision", "v2"]) == 0
    printed = capsys.readouterr().out
    assert api.calls == []  # not even a token look-up or an HfApi
    assert "would upload" in printed and "https://huggingface.co/me/tiny-scorer/tree/v2" in printed and "private repo" in printed
    for name in ("model.safetensors", "config.json", "README.md", "tokenizer.json"):
        assert f"  {name}  " in printed
    fresh = tmp_path / "no-token"
    assert main(["export", str(evaluated_run), str(fresh), "--push-to-hub", "me/tiny-scorer"]) == 2  # refused before any work
    assert "no Hugging Face token" in capsys.readouterr().err and not fresh.exists() and api.calls == []
    monkeypatch.setenv("HF_TOKEN", "secret")
    assert main([*base, "--commit-message", "tiny release"]) == 0
    assert "pushed to https://huggingface.co/me/tiny-scorer" in capsys.readouterr().out
    create, upload = api.calls[1][1], api.calls[2][1]
    assert create["private"] is False and upload["commit_message"] == "tiny release" and upload["folder_path"] == str(out)
    assert main(["export", str(evaluated_run), str(tmp_path / "x"), "--dry-run"]) == 2  # a Hub flag without a repo
    assert "--dry-run need --push-to-hub" in capsys.readouterr().err


def test_the_model_card_metadata_parses_into_the_runs_test_metrics(evaluated_run, tmp_path, repo_root):
    out = tmp_path / "export"
    args = ["export", str(evaluated_run), str(out), "--verify", "off", "--license", "mit", "--dataset", "qcri/omniscore-bench"]
    assert main([*args, "--teacher", "gpt-4.1"]) == 0
    card = ModelCard.load(out / "README.md")
    data = card.data
    assert data.license == "mit" and data.datasets == ["qcri/omniscore-bench"]
    assert data.library_name == "omniscore" and data.pipeline_tag == "text-classification" and "omnidistill" in data.tags
    langs = {json.loads(line)["lang"] for line in (repo_root / "data" / "sample" / "train.jsonl").read_text().splitlines()}
    assert sorted(data.language) == sorted(langs)
    report = json.loads((evaluated_run / "eval" / "test.json").read_text())
    name, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert name == "export"
    by_name = {r.metric_name: r for r in results}
    for dim in DIMENSIONS:
        got = report["overall"]["dimensions"][dim]
        for key, label in (("mae", "MAE"), ("rmse", "RMSE"), ("pearson", "Pearson r"), ("acc1", "Acc@±1")):
            assert by_name[f"{label} ({dim})"].metric_value == pytest.approx(got[key], abs=1e-4)
    assert by_name["L-MAE"].metric_value == pytest.approx(report["lang_mae_weighted"], abs=1e-4)
    assert {r.dataset_type for r in results} == {"qcri/omniscore-bench"} and {r.dataset_split for r in results} == {"test"}
    assert data.base_model is None  # a randomly initialised encoder has none
    text = card.text
    assert "| informativeness |" in text and "**Teacher:** gpt-4.1" in text and "2,100 training items" in text
    assert f"{report['meta']['items']} test items" in text


# The ids the Hub's validator listed when it refused a card's license (huggingface/huggingface_hub issue 4218,
# May 2026, `Invalid metadata in README.md. - "license" must be one of [...]`): a source apart from our list.
HUB_VALIDATOR_2026_05 = (
    "apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m afl-3.0 "
    "artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0 "
    "cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0 cc-by-nc-nd-4.0 "
    "cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 "
    "epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc h-research "
    "intel-research lppl-1.3c ms-pl apple-ascl apple-amlr mpl-2.0 odc-by odbl openmdw-1.0 openrail++ osl-3.0 postgresql "
    "ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license fair-noncommercial-research-license llama2 llama3 "
    "llama3.1 llama3.2 llama3.3 llama4 grok2-community gemma unknown other"
).split()


def test_a_license_the_hub_would_refuse_stops_the_export_before_it_writes(evaluated_run, tmp_path, capsys):
    from omnidistill.config import Config
    from omnidistill.export.card_metadata import CardInfo, DataSummary, front_matter

    for license_id in HUB_VALIDATOR_2026_05:
        CardInfo(license=license_id, license_name="Our terms" if license_id == "other" else None)
    out = tmp_path / "export"
    refusals = [
        (["--license", "Apache-2.0"], "--license Apache-2.0: not a Hub license id, and the Hub refuses .*did you mean apache-2.0\\?"),
        (["--license", "GPL-3.0-or-later"], "did you mean gpl-3.0\\? .* --license other --license-name NAME"),
        (["--license", "other"], "--license other needs --license-name NAME"),
        (["--license", "mit", "--license-link", "https://example.org/LICENSE"], "go with --license other; mit is a license"),
    ]
    for flags, message in refusals:
        assert main(["export", str(evaluated_run), str(out), "--verify", "off", *flags]) == 2
        assert re.search(message, capsys.readouterr().err), flags
        assert not out.exists()
    info = CardInfo(license="other", license_name="Our terms", license_link="https://example.org/LICENSE")
    text = front_matter(Config(), "omniscore", info, DataSummary(None, None, (), ()), None, "export")
    data = ModelCard(text + "\nbody\n").data
    assert (data.license, data.license_name, data.license_link) == ("other", "Our terms", "https://example.org/LICENSE")
