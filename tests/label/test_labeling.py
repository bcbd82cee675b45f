"""Teacher labelling against a real OpenAI-format HTTP server on 127.0.0.1 (429s, 500s, timeouts, bad answers)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from omnidistill.cli import main
from omnidistill.data.schema import Record
from omnidistill.label.aggregate import aggregate, majority_with_fallback
from omnidistill.label.config import LabelConfig, load_label_config
from omnidistill.label.labeler import Labeler
from omnidistill.label.parse import JudgeOutputError, parse_checklist, parse_judgment
from omnidistill.label.prompts import judge_messages

DIMS = ("informativeness", "clarity", "plausibility", "faithfulness")


class FakeJudge(BaseHTTPRequestHandler):
    """Behaviour is chosen by a marker in the candidate text of the prompt."""

    counts: ClassVar[Counter] = Counter()
    prompts: ClassVar[list[str]] = []
    lock = threading.Lock()

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, code: int, body: dict | None = None, headers: dict | None = None):
        try:
            self._write(code, body, headers)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up
            pass

    def _write(self, code, body, headers):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if body is not None:
            self.wfile.write(json.dumps(body).encode())

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = payload["messages"][-1]["content"]
        marker = next((m for m in ("#429", "#500", "#slow", "#badonce", "#bad", "#seed") if m in prompt), "#ok")
        with self.lock:
            FakeJudge.counts["total"] += 1
            FakeJudge.counts[marker] += 1
            n = FakeJudge.counts[marker]
            FakeJudge.prompts.append(prompt)
        if self.headers.get("Authorization") != "Bearer test-key":
            return self._send(401, {"error": "bad key"})
        if marker == "#429" and n == 1:
            return self._send(429, {"error": "slow down"}, {"Retry-After": "0"})
        if marker == "#500" and n == 1:
            return self._send(500, {"error": "oops"})
        if marker == "#slow" and n == 1:
            time.sleep(1.0)
        if '"checklist"' in prompt:
            text = json.dumps({"checklist": ["Does the answer name the city?", "Is anything invented?"]})
        elif marker == "#bad" or (marker == "#badonce" and n == 1):
            text = "It looks fine to me, maybe a 4."
        elif marker == "#seed":
            score = {0: 2, 1: 4, 2: 4}[payload.get("seed", 0)]
            text = json.dumps({"reasoning": "ok", **{d: score for d in DIMS}})
        else:
            text = "Reasoning first.\n```json\n" + json.dumps({"reasoning": "ok", **{d: 3 + i % 2 for i, d in enumerate(DIMS)}}) + "\n```"
        self._send(
            200,
            {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 100, "completion_tokens": 20}},
        )


@pytest.fixture()
def server(monkeypatch):
    FakeJudge.counts = Counter()
    FakeJudge.prompts = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TEST_JUDGE_KEY", "test-key")
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def cfg_for(url, tmp_path, **kw):
    base = dict(
        base_url=url,
        models=["judge-1"],
        api_key_env="TEST_JUDGE_KEY",
        timeout_s=0.5,
        backoff_s=0.01,
        max_retries=3,
        invalid_retries=2,
        concurrency=4,
        cache_dir=str(tmp_path / "cache"),
        price_input_per_mtok=1.0,
        price_output_per_mtok=2.0,
    )
    return LabelConfig(**{**base, **kw})


def write_inputs(path, markers):
    path.write_text(
        "\n".join(
            json.dumps({"id": m, "task": "qa", "lang": "en", "question": "Capital of France?", "candidate": f"Paris {m}"}) for m in markers
        )
    )
    return path


def test_labels_with_retries_and_never_invents_scores(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#429", "#500", "#slow", "#badonce", "#bad"])
    stats = Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "out.jsonl")
    labelled = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()}
    assert set(labelled) == {"#ok", "#429", "#500", "#slow", "#badonce"}
    assert labelled["#ok"]["labels"] == {"informativeness": 3.0, "clarity": 4.0, "plausibility": 3.0, "faithfulness": 4.0}
    failed = [json.loads(line) for line in (tmp_path / "out.jsonl.failed.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failed] == ["#bad"] and "no JSON object" in failed[0]["label_errors"][0]
    assert "labels" not in failed[0]
    assert FakeJudge.counts["#bad"] == 3  # 1 + invalid_retries, then given up
    assert stats["labelled"] == 5 and stats["failed"] == 1 and stats["invalid_answers"] == 4
    assert stats["prompt_tokens"] > 0 and stats["cost_usd"] > 0
    saved = json.loads((tmp_path / "out.jsonl.stats.json").read_text())
    assert saved == stats


def test_rerun_is_served_from_the_cache(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#badonce", "#bad"])
    Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "a.jsonl")
    before = FakeJudge.counts["total"]
    stats = Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "b.jsonl")
    assert FakeJudge.counts["total"] == before and stats["requests"] == 0 and stats["cached_answers"] > 0
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_samples_majority_and_checklist_mode(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#seed"])
    cfg = cfg_for(server, tmp_path, samples=3, aggregation="majority", checklist=True, temperature=0.7)
    stats = Labeler(cfg).label_file([str(inputs)], tmp_path / "out.jsonl")
    # judgments 2, 4, 4: variance 4/3 -> r*wg = 1 - (4/3)/2 under the uniform null
    assert stats["agreement"]["judgments_per_item"] == 3
    assert stats["agreement"]["rwg_star_uniform"] == pytest.approx(1 - (4 / 3) / 2)
    item = json.loads((tmp_path / "out.jsonl").read_text())
    assert item["labels"]["clarity"] == 4.0  # 2-of-3 rule over seeds 0, 1, 2 -> 2, 4, 4
    assert len(item["annotations"]) == 3
    judge_prompts = [p for p in FakeJudge.prompts if '"checklist"' not in p]
    assert all("Does the answer name the city?" in p for p in judge_prompts)


def test_wrong_key_is_a_clear_failure(server, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_JUDGE_KEY", "wrong")
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok"])
    stats = Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "out.jsonl")
    assert stats["failed"] == 1
    assert "HTTP 401" in (tmp_path / "out.jsonl.failed.jsonl").read_text()


def test_label_cli(server, tmp_path, repo_root, capsys):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#429"])
    args = [
        "label",
        "--config",
        str(repo_root / "configs" / "label" / "gpt41.yaml"),
        "--input",
        str(inputs),
        "--output",
        str(tmp_path / "o.jsonl"),
        f"base_url={server}",
        "api_key_env=TEST_JUDGE_KEY",
        "backoff_s=0.01",
        f"cache_dir={tmp_path / 'c'}",
    ]
    assert main(args) == 0
    assert "labelled 2 of 2 items" in capsys.readouterr().out
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 2


def test_parse_judgment_is_strict():
    good = '{"reasoning": "x", "informativeness": 5, "clarity": 4, "plausibility": 3, "faithfulness": 2}'
    assert parse_judgment("blah ```json\n" + good + "\n``` blah")["faithfulness"] == 2.0
    for bad in (
        "no json",
        good.replace("5", "6"),
        good.replace("4", "4.5"),
        good.replace('"clarity": 4, ', ""),
        good.replace("3", '"3"'),
        "[1, 2]",
    ):
        with pytest.raises(JudgeOutputError):
            parse_judgment(bad)
    assert parse_checklist('{"checklist": ["a?", "b?"]}') == ["a?", "b?"]


def test_aggregation_rules():
    js = [{d: v for d in DIMS} for v in (2.0, 4.0, 4.0)]
    assert aggregate(js, "mean")["clarity"] == pytest.approx(10 / 3)
    assert aggregate(js, "median")["clarity"] == 4.0
    assert aggregate(js, "majority")["clarity"] == 4.0
    assert majority_with_fallback([1.0, 3.0, 5.0]) == 3.0  # no majority: the median
    assert aggregate([{"clarity": 2.0}], "mean") == {"clarity": 2.0}


def test_prompts_cover_tasks_and_reference_modes():
    rec = Record(id="1", task="mt", lang="de", source="The Moon.", reference="Der Mond.", candidate="Der Mond.")
    based = judge_messages(rec, reference_mode="based")[-1]["content"]
    free = judge_messages(rec, reference_mode="free")[-1]["content"]
    assert "[Reference]" in based and "[Reference]" not in free and "translat" in based
    for task in ("qa", "mt", "summarization", "headline", "paraphrase", "chat"):
        text = judge_messages(Record(id="x", task=task, lang="en", candidate="c"))[-1]["content"]
        assert all(d in text for d in DIMS) and "integer from 1 to 5" in text


def test_label_config_validation(repo_root, tmp_path):
    assert load_label_config(repo_root / "configs" / "label" / "gpt41.yaml").models == ["gpt-4.1"]
    load_label_config(repo_root / "configs" / "label" / "three-samples-majority.yaml")
    from omnidistill.config import ConfigError

    with pytest.raises(ConfigError, match="aggregation"):
        load_label_config(None, ["aggregation=vote"])
