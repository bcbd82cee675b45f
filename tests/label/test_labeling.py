"""Teacher labelling against a real OpenAI-format HTTP server on 127.0.0.1 (429s, 500s, timeouts, bad answers)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from omnidistill.cli import main
from omnidistill.data.schema import DataError, Record
from omnidistill.label.aggregate import aggregate, majority_with_fallback
from omnidistill.label.client import EndpointError
from omnidistill.label.config import LabelConfig, load_label_config
from omnidistill.label.labeler import Labeler, pairwise_verdict
from omnidistill.label.parse import JudgeOutputError, parse_judgment, parse_pairwise_choice
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
        marker = next((m for m in ("#429", "#500", "#400", "#slow", "#badonce", "#bad", "#seed", "#think", "#cut") if m in prompt), "#ok")
        with self.lock:
            FakeJudge.counts["total"] += 1
            FakeJudge.counts[marker] += 1
            n = FakeJudge.counts[marker]
            FakeJudge.prompts.append(prompt)
        if self.headers.get("Authorization") != "Bearer test-key":
            return self._send(401, {"error": "bad key"})
        if payload["model"] == "reasoning-judge" and "max_tokens" in payload:  # as OpenAI's reasoning and GPT-5 models answer
            message = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
            error = {"message": message, "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}
            return self._send(400, {"error": error})
        if marker == "#429" and n == 1:
            return self._send(429, {"error": "slow down"}, {"Retry-After": "0"})
        if marker == "#500" and n == 1:
            return self._send(500, {"error": "oops"})
        if marker == "#400":  # this item's request is refused (e.g. too long); others are not
            return self._send(400, {"error": "context length exceeded"})
        if marker == "#slow" and n == 1:
            time.sleep(1.0)
        if '"concepts"' in prompt:
            text = json.dumps({"concepts": ["capital city", "geography"]})
        elif '"checklist"' in prompt:
            text = json.dumps({"checklist": ["Does the answer name the city?", "Is anything invented?"]})
        elif '"errors"' in prompt:
            errors = [
                {"type": "accuracy/mistranslation", "severity": "major", "span": "Paris", "explanation": "wrong city"},
                {"type": "fluency/grammar", "severity": "minor", "span": "is", "explanation": "agreement"},
                {"type": "fluency/grammar", "severity": "minor", "span": "the", "explanation": "article"},
            ]
            text = json.dumps({"errors": errors if "#errs" in prompt else []})
        elif "[Response A]" in prompt:
            text = "A misses the point; B answers it.\nTherefore, I choose " + (
                "A" if "#better" in prompt.split("[Response B]")[0] else "B"
            )
            text += " as the better response."
        elif prompt.startswith("TASK:"):
            body = {d: {"score": 4, "rationale": "Fine."} for d in DIMS}
            body["faithfulness"] = {"score": 2, "rationale": "Wrong city.", "issues": [{"type": "hallucination", "text_span": "Paris"}]}
            text = json.dumps({"confidence": 0.8, **body} if "#noconf" not in prompt else body)
        elif marker == "#bad" or (marker == "#badonce" and n == 1):
            text = "It looks fine to me, maybe a 4."
        elif marker == "#seed":
            score = {0: 2, 1: 4, 2: 4}[payload.get("seed", 0)]
            text = json.dumps({"reasoning": "ok", **{d: score for d in DIMS}})
        elif marker == "#think":  # a reasoning model's thinking block, with a draft answer in it, ahead of the answer
            draft = "```json\n" + json.dumps({"reasoning": "draft", **dict.fromkeys(DIMS, 1)}) + "\n```"
            text = f"<think>\nThe user wants scores. A first try: {draft} No, too harsh.\n</think>\n\n" + json.dumps(
                {"reasoning": "ok", **dict.fromkeys(DIMS, 5)}
            )
        elif marker == "#cut":  # the answer reached max_tokens
            text = json.dumps({"reasoning": "A long explanation " * 20, **dict.fromkeys(DIMS, 4)})[:60]
        else:
            text = "Reasoning first.\n```json\n" + json.dumps({"reasoning": "ok", **{d: 3 + i % 2 for i, d in enumerate(DIMS)}}) + "\n```"
        finish = "length" if marker == "#cut" else "stop"
        self._send(
            200,
            {
                "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20},
            },
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
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#429", "#500", "#400", "#slow", "#badonce", "#bad"])
    stats = Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "out.jsonl")
    labelled = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()}
    assert set(labelled) == {"#ok", "#429", "#500", "#slow", "#badonce"}
    assert labelled["#ok"]["labels"] == {"informativeness": 3.0, "clarity": 4.0, "plausibility": 3.0, "faithfulness": 4.0}
    failed = [json.loads(line) for line in (tmp_path / "out.jsonl.failed.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failed] == ["#400", "#bad"] and "no JSON object" in failed[1]["label_errors"][0]
    assert "HTTP 400" in failed[0]["label_errors"][0]  # refused for this item only: the run goes on
    assert "labels" not in failed[1]
    assert FakeJudge.counts["#bad"] == 3  # 1 + invalid_retries, then given up
    assert stats["labelled"] == 5 and stats["failed"] == 2 and stats["invalid_answers"] == 4
    assert stats["prompt_tokens"] > 0 and stats["cost_usd"] > 0
    saved = json.loads((tmp_path / "out.jsonl.stats.json").read_text())
    assert saved == stats


def test_reasoning_blocks_are_skipped_and_cut_answers_fail_at_once(server, tmp_path):
    """A ``<think>`` block's draft JSON was taken for the answer (or made it invalid JSON), and an answer
    cut at max_tokens was asked for again invalid_retries times, to fail as 'invalid JSON'."""
    inputs = write_inputs(tmp_path / "in.jsonl", ["#think", "#cut"])
    stats = Labeler(cfg_for(server, tmp_path, max_tokens=50)).label_file([str(inputs)], tmp_path / "out.jsonl")
    labelled = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in labelled] == ["#think"] and labelled[0]["labels"] == dict.fromkeys(DIMS, 5.0)
    (failed,) = [json.loads(line) for line in (tmp_path / "out.jsonl.failed.jsonl").read_text().splitlines()]
    assert "cut at max_tokens=50 (finish_reason: length)" in failed["label_errors"][0]
    assert "raise max_tokens" in failed["label_errors"][0]
    assert FakeJudge.counts["#cut"] == 1 and stats["cut_answers"] == 1


def test_reasoning_blocks_in_every_parser():
    think = '<think>I choose A as the better response? {"clarity": 1}</think>'
    verdict = "B is right.\nTherefore, I choose B as the better response."
    assert parse_pairwise_choice(think + verdict) == "B"
    assert pairwise_verdict(think + verdict) == {"choice": "B", "feedback": verdict}  # the reasoning is not feedback
    scores = dict.fromkeys(DIMS, 2)
    assert parse_judgment(think + json.dumps(scores)) == scores
    with pytest.raises(JudgeOutputError, match="never closed"):
        parse_judgment('<think>Let me weigh {"clarity": 3} against')
    assert parse_judgment("Scores: " + json.dumps(scores)) == scores  # no block: the whole answer, as before


def test_samples_without_temperature_are_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="omnidistill.label.labeler"):
        Labeler(cfg_for("http://127.0.0.1:9/v1", tmp_path, samples=3, temperature=0.7))
        assert not caplog.records
        Labeler(cfg_for("http://127.0.0.1:9/v1", tmp_path, samples=3))
    assert "samples=3 at temperature=0" in caplog.text and "3 times the cost" in caplog.text


def test_rerun_is_served_from_the_cache(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#badonce", "#bad"])
    Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "a.jsonl")
    before = FakeJudge.counts["total"]
    stats = Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "b.jsonl")
    assert FakeJudge.counts["total"] == before and stats["requests"] == 0 and stats["cached_answers"] > 0
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_samples_majority_and_checklist_mode(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#seed"])
    cfg = cfg_for(server, tmp_path, samples=3, aggregation="majority", mode="checklist", temperature=0.7)
    stats = Labeler(cfg).label_file([str(inputs)], tmp_path / "out.jsonl")
    # judgments 2, 4, 4: variance 4/3 -> r*wg = 1 - (4/3)/2 under the uniform null
    assert stats["agreement"]["judgments_per_item"] == 3
    assert stats["agreement"]["rwg_star_uniform"] == pytest.approx(1 - (4 / 3) / 2)
    item = json.loads((tmp_path / "out.jsonl").read_text())
    assert item["labels"]["clarity"] == 4.0  # 2-of-3 rule over seeds 0, 1, 2 -> 2, 4, 4
    assert len(item["annotations"]) == 3
    assert item["label_dist"]["clarity"] == pytest.approx([0, 1 / 3, 0, 2 / 3, 0])  # the three answers' empirical distribution
    judge_prompts = [p for p in FakeJudge.prompts if '"checklist"' not in p and '"concepts"' not in p]
    assert len(judge_prompts) == 3 and all("Does the answer name the city?" in p for p in judge_prompts)
    # CE-Judge steps: concepts of instruction and response, then one checklist per direction (both kept)
    assert sum('"concepts"' in p for p in FakeJudge.prompts) == 2 and sum('"checklist"' in p for p in FakeJudge.prompts) == 2
    assert item["teacher"]["checklists"]["judge-1"] == ["Does the answer name the city?", "Is anything invented?"] * 2
    assert stats["agreement"]["rwg_by_dimension_uniform"]["clarity"] == pytest.approx(1 - (4 / 3) / 2)


def test_a_refused_key_stops_the_run_at_once(server, tmp_path, monkeypatch):
    """Every request would get the 401: the run stops after the requests already in flight (at most
    ``concurrency``), instead of sending one per item and writing every item as failed."""
    inputs = write_inputs(tmp_path / "in.jsonl", [f"#ok{i}" for i in range(40)])
    for key in ("wrong", None):
        FakeJudge.counts.clear()
        if key is None:
            monkeypatch.delenv("TEST_JUDGE_KEY")
        else:
            monkeypatch.setenv("TEST_JUDGE_KEY", key)
        with pytest.raises(EndpointError) as err:
            Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path / "out.jsonl")
        assert "HTTP 401" in str(err.value) and "$TEST_JUDGE_KEY" in str(err.value)
        assert ("which is not set" in str(err.value)) is (key is None)
        assert FakeJudge.counts["total"] <= 4  # cfg_for's concurrency
        assert not (tmp_path / "out.jsonl").exists()


def test_a_refused_request_field_stops_the_run_and_names_the_setting(server, tmp_path):
    """Each item got the same HTTP 400 for itself, and every item was written as failed, status 0."""
    inputs = write_inputs(tmp_path / "in.jsonl", [f"#ok{i}" for i in range(40)])
    with pytest.raises(EndpointError) as err:
        Labeler(cfg_for(server, tmp_path, models=["reasoning-judge"])).label_file([str(inputs)], tmp_path / "out.jsonl")
    message = str(err.value)
    assert "'max_tokens' is not supported" in message and "set max_tokens_field: max_completion_tokens" in message
    assert "check base_url" not in message  # neither the endpoint nor the key is at fault
    assert FakeJudge.counts["total"] <= 4 and not (tmp_path / "out.jsonl").exists()
    cfg = cfg_for(server, tmp_path, models=["reasoning-judge"], max_tokens_field="max_completion_tokens")
    assert Labeler(cfg).label_file([str(inputs)], tmp_path / "out.jsonl")["labelled"] == 40


def test_an_unreachable_endpoint_stops_the_run(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    inputs = write_inputs(tmp_path / "in.jsonl", [f"#ok{i}" for i in range(40)])
    labeler = Labeler(cfg_for(f"http://127.0.0.1:{port}/v1", tmp_path))
    calls = []
    complete = labeler.client.complete
    labeler.client.complete = lambda *a, **k: calls.append(1) or complete(*a, **k)
    with pytest.raises(EndpointError, match=r"no answer after 4 attempts \(URLError: .*refused.*stopped"):
        labeler.label_file([str(inputs)], tmp_path / "out.jsonl")
    assert len(calls) <= 4 and not (tmp_path / "out.jsonl").exists()  # the items in flight, not all 40


def test_fields_of_your_own_go_through_labelling_into_training_data(server, tmp_path):
    """A system column was refused by ``label``; ``keep_fields`` writes it back into each labelled line,
    and training reads the output with ``data.keep_fields``."""
    from omnidistill.config import DataConfig
    from omnidistill.data.splits import load_split

    rows = [
        json.loads(line) | {"system": f"sys{i}"}
        for i, line in enumerate(write_inputs(tmp_path / "in.jsonl", ["#ok", "#429"]).read_text().splitlines())
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    with pytest.raises(DataError, match="unknown field\\(s\\) system"):
        Labeler(cfg_for(server, tmp_path)).label_file([str(tmp_path / "in.jsonl")], out)
    assert Labeler(cfg_for(server, tmp_path)).label_file([str(tmp_path / "in.jsonl")], out, keep_fields=["system"])["labelled"] == 2
    assert [json.loads(line)["system"] for line in out.read_text().splitlines()] == ["sys0", "sys1"]
    with pytest.raises(DataError, match="unknown field\\(s\\) system"):
        load_split(DataConfig(train=[str(out)]), "train")
    records, _ = load_split(DataConfig(train=[str(out)], keep_fields=["system"]), "train")
    assert [r.extra for r in records] == [{"system": "sys0"}, {"system": "sys1"}] and records[0].labels[1] == 4.0


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
    write_inputs(inputs, ["#ok", "#cut"])
    assert main([*args, "max_tokens=40"]) == 0
    assert "1 answers were cut at max_tokens=40: raise max_tokens" in capsys.readouterr().out


def test_the_output_is_checked_before_any_request(server, tmp_path):
    """An output that is an input is refused (the judge's labels would replace the items' own labels);
    a missing output folder is made up front, not found missing after the labelling."""
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok", "#429"])
    before = inputs.read_text()
    for method in ("label_file", "label_pairs"):
        with pytest.raises(ValueError, match="is one of the inputs"):
            getattr(Labeler(cfg_for(server, tmp_path)), method)([str(inputs)], tmp_path / "." / "in.jsonl")
    with pytest.raises(ValueError, match="is a folder"):
        Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], tmp_path)  # found only when writing, after the labelling
    assert FakeJudge.counts["total"] == 0 and inputs.read_text() == before
    out = tmp_path / "new" / "dir" / "o.jsonl"
    assert Labeler(cfg_for(server, tmp_path)).label_file([str(inputs)], out)["labelled"] == 2
    assert len(out.read_text().splitlines()) == 2 and not list(out.parent.glob("*.tmp"))


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
        good.replace("5", "NaN"),  # Python's json reads these; they crashed the labelling run (int(nan))
        good.replace("5", "Infinity"),
    ):
        with pytest.raises(JudgeOutputError):
            parse_judgment(bad)


def test_aggregation_rules():
    js = [{d: v for d in DIMS} for v in (2.0, 4.0, 4.0)]
    assert aggregate(js, "mean")["clarity"] == pytest.approx(10 / 3)
    assert aggregate(js, "median")["clarity"] == 4.0
    assert aggregate(js, "majority")["clarity"] == 4.0
    assert majority_with_fallback([1.0, 2.0, 5.0]) == 3.0  # no majority: the neutral midpoint (paper 002), not the median 2
    assert majority_with_fallback([2.0, 2.0, 5.0]) == 2.0
    assert aggregate([{"clarity": 2.0}], "mean") == {"clarity": 2.0}


def test_prompts_cover_tasks_and_reference_modes():
    rec = Record(id="1", task="mt", lang="de", source="The Moon.", reference="Der Mond.", candidate="Der Mond.")
    based = judge_messages(rec, reference_mode="based")[-1]["content"]
    auto = judge_messages(rec, reference_mode="auto")[-1]["content"]
    free = judge_messages(rec, reference_mode="free")[-1]["content"]
    assert "[Reference]" in based and "[Reference]" not in free and "translat" in based
    assert based != auto and "gold reference" in based and "gold reference" not in auto
    with pytest.raises(ValueError, match="reference_mode=based needs a reference"):
        judge_messages(Record(id="2", task="qa", lang="en", candidate="c"), reference_mode="based")
    for task in ("qa", "mt", "summarization", "headline", "paraphrase", "chat"):
        text = judge_messages(Record(id="x", task=task, lang="en", candidate="c"))[-1]["content"]
        assert all(d in text for d in DIMS) and "integer from 1 to 5" in text


def test_label_config_validation(repo_root, tmp_path):
    assert load_label_config(repo_root / "configs" / "label" / "gpt41.yaml").models == ["gpt-4.1"]
    load_label_config(repo_root / "configs" / "label" / "three-samples-majority.yaml")
    from omnidistill.config import ConfigError

    with pytest.raises(ConfigError, match="aggregation"):
        load_label_config(None, ["aggregation=vote"])
    for override, message in [
        ("samples=0", "samples: must be >= 1, got 0"),  # sent no request and wrote every item as failed
        ("concurrency=0", "concurrency: must be >= 1, got 0"),
        ("timeout_s=0", "timeout_s: must be > 0, got 0.0"),
        ("logprobs_min_mass=1.5", "logprobs_min_mass: must be in [0, 1], got 1.5"),
        ("price_input_per_mtok=-2", "price_input_per_mtok: must be >= 0, got -2.0"),
        ("models=[gpt-4.1,gpt-4.1-mini,gpt-4.1]", "models lists gpt-4.1 more than once"),  # a judge that always agrees
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_label_config(None, [override])
    load_label_config(None, ["samples=1", "concurrency=1", "max_retries=0", "temperature=0", "top_logprobs=20"])  # the edges


# --------------------------------------------------------------------------- OmniScore prompts (appendix G)
from omnidistill.data.sources import read_records  # noqa: E402
from omnidistill.label.error_report import parse_error_report, penalty_to_likert  # noqa: E402
from omnidistill.label.omniscore_prompts import PROMPTS, omniscore_messages, prompt_key  # noqa: E402
from omnidistill.label.parse import parse_nested_judgment  # noqa: E402


def omni_record(task, **kw):
    base = dict(id="1", task=task, lang="en", candidate="Paris is the capital.", question="Capital of France?", source="Some text.")
    return Record(**{**base, **kw})


@pytest.mark.parametrize(
    ("task", "dataset", "key"),
    [("qa", "nq", "nq"), ("qa", "multinativqa", "multinativqa"), ("qa", None, "multinativqa"), ("summarization", None, "summarization"),
     ("headline", None, "headline"), ("paraphrase", None, "paraphrase"), ("mt", None, "mt"), ("chat", None, "wildchat")],
)  # fmt: skip
def test_the_seven_prompts_are_chosen_by_task_and_dataset(task, dataset, key):
    assert prompt_key(omni_record(task, dataset=dataset)) == key


@pytest.mark.parametrize("key", sorted(PROMPTS))
def test_every_prompt_has_five_anchors_per_dimension_and_the_answer_schema(key):
    task = {"nq": "qa", "multinativqa": "qa", "wildchat": "chat"}.get(key, key)
    system, user = (m["content"] for m in omniscore_messages(omni_record(task, dataset="nq" if key == "nq" else None)))
    for n, dim in enumerate(DIMS, start=1):
        section = system.split(f"{n}) ")[1].split(f"{n + 1}) ")[0]
        assert section.lower().startswith(dim)
        assert [line[:2] for line in section.splitlines() if line[:2] in ("1:", "2:", "3:", "4:", "5:")] == ["1:", "2:", "3:", "4:", "5:"]
    assert ('"confidence"' in user) == (key != "summarization")  # the paper's summarization schema has no confidence
    assert all(t in system for t in ("hallucination", "distortion", "contradiction", "unsupported_specificity"))
    plausibility = system.split("3) ")[1].split("4) ")[0]
    assert "world knowledge" not in plausibility and "consistent with itself" in plausibility


def test_prompts_carry_task_fields_and_faithfulness_per_task():
    mt = omni_record("mt", source="The Moon.", src_lang="English", tgt_lang="Hindi", lang="hi")
    system, user = (m["content"] for m in omniscore_messages(mt))
    assert "SOURCE LANGUAGE:\nEnglish" in user and "TARGET LANGUAGE:\nHindi" in user and "SOURCE TEXT alone" in system
    chat = omni_record("chat", context="user: hi\nassistant: hello")
    assert "CONVERSATION:\nuser: hi\nassistant: hello" in omniscore_messages(chat)[1]["content"]
    nq_system = omniscore_messages(omni_record("qa", dataset="nq"))[0]["content"]
    assert "no source or context" in nq_system.lower()
    summ_user = omniscore_messages(omni_record("summarization", title="Budget"))[1]["content"]
    assert "TITLE:\nBudget" in summ_user
    with pytest.raises(ValueError, match="the summarization prompt needs source"):
        omniscore_messages(omni_record("summarization", source=None))


def nested(**changes):
    body = {"confidence": 0.7, **{d: {"score": 4, "rationale": "ok"} for d in DIMS}}
    body["faithfulness"] = {"score": 3, "rationale": "one slip", "issues": [{"type": "distortion", "text_span": "the capital"}]}
    body.update(changes)
    return json.dumps(body)


def test_nested_answer_schema_is_parsed_strictly_and_keeps_details():
    out = parse_nested_judgment(nested(), candidate="Paris is  the capital.")
    assert out["scores"]["faithfulness"] == 3.0 and out["confidence"] == 0.7
    assert out["rationales"]["clarity"] == "ok" and out["issues"] == [{"type": "distortion", "text_span": "the capital", "verbatim": True}]
    assert parse_nested_judgment(nested(confidence=None).replace('"confidence": null, ', ""), confidence=False)["confidence"] is None
    too_many = [{"type": "hallucination", "text_span": "x"}] * 7
    for bad, message in (
        (nested(extra=1), "unexpected key"),
        (nested().replace('"confidence": 0.7, ', ""), "missing key"),
        (nested(confidence=1.5), "confidence must be"),
        (nested(clarity={"score": 6, "rationale": "x"}), "clarity.score"),
        (nested(clarity={"score": 4}), "missing key"),
        (nested(faithfulness={"score": 3, "rationale": "x", "issues": [{"type": "typo", "text_span": "x"}]}), "type must be one of"),
        (nested(faithfulness={"score": 3, "rationale": "x", "issues": too_many}), "at most 6"),
        (nested(faithfulness={"score": 3, "rationale": "x", "issues": [{"type": "hallucination", "text_span": "w " * 26}]}), "25 words"),
    ):
        with pytest.raises(JudgeOutputError, match=message):
            parse_nested_judgment(bad)


def test_omniscore_labelling_keeps_details_and_its_output_trains(server, tmp_path):
    inputs = tmp_path / "in.jsonl"
    rows = [
        {"id": "a", "task": "qa", "dataset": "nq", "lang": "en", "question": "Capital of France?", "candidate": "Paris"},
        {"id": "b", "task": "summarization", "lang": "en", "title": "T", "source": "Text.", "candidate": "Sum #noconf"},
        {"id": "c", "task": "summarization", "lang": "en", "candidate": "no source"},
    ]
    inputs.write_text("\n".join(json.dumps(r) for r in rows))
    stats = Labeler(cfg_for(server, tmp_path, prompt_set="omniscore", reference_mode="free")).label_file(
        [str(inputs)], tmp_path / "o.jsonl"
    )
    assert stats["labelled"] == 2 and stats["failed"] == 1
    out = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()}
    assert out["a"]["labels"]["faithfulness"] == 2.0 and out["a"]["teacher"]["prompt"] == "nq"
    judgment = out["a"]["teacher"]["judgments"][0]
    assert judgment["confidence"] == 0.8 and judgment["issues"][0] == {"type": "hallucination", "text_span": "Paris", "verbatim": True}
    assert out["b"]["teacher"]["prompt"] == "summarization" and out["b"]["teacher"]["judgments"][0]["confidence"] is None
    assert "the summarization prompt needs source" in (tmp_path / "o.jsonl.failed.jsonl").read_text()
    records, _ = read_records([str(tmp_path / "o.jsonl")])  # the labelled file is valid training data
    assert [r.id for r in records] == ["a", "b"] and records[0].dataset == "nq"


def test_tasks_without_an_omniscore_prompt_are_refused_before_any_request(server, tmp_path):
    """Each such item failed on its own, after checklist mode had paid four requests for it."""
    inputs = tmp_path / "in.jsonl"
    rows = [{"task": t, "lang": "en", "source": "Der Mond.", "candidate": "The Moon."} for t in ("mt", "translation", "translation", "QA")]
    inputs.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = cfg_for(server, tmp_path, prompt_set="omniscore", mode="checklist")
    with pytest.raises(ValueError) as err:
        Labeler(cfg).label_file([str(inputs)], tmp_path / "o.jsonl")
    assert f"the task 'translation' (2 items, first: {inputs}:2), 'QA' (1 item, first: {inputs}:4)" in str(err.value)
    assert "use prompt_set: flat" in str(err.value)
    assert FakeJudge.counts["total"] == 0 and not (tmp_path / "o.jsonl").exists()


def test_an_item_the_judge_prompt_cannot_take_costs_no_checklist_requests(server, tmp_path):
    inputs = write_inputs(tmp_path / "in.jsonl", ["#ok"])  # no reference
    stats = Labeler(cfg_for(server, tmp_path, mode="checklist", reference_mode="based")).label_file([str(inputs)], tmp_path / "o.jsonl")
    assert stats["failed"] == 1 and "reference" in (tmp_path / "o.jsonl.failed.jsonl").read_text()
    assert FakeJudge.counts["total"] == 0  # four checklist requests were paid before the item failed


def test_error_report_scores_from_severities(server, tmp_path):
    assert [penalty_to_likert(s) for s in (0, -1, -4, -5, -9, -10, -14, -15, -25)] == [5, 4, 4, 3, 3, 2, 2, 1, 1]
    inputs = write_inputs(tmp_path / "in.jsonl", ["#errs", "#ok"])
    Labeler(cfg_for(server, tmp_path, mode="error_report")).label_file([str(inputs)], tmp_path / "o.jsonl")
    out = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()}
    # one major mistranslation (faithfulness s = -5 -> 3), two minor grammar errors (clarity s = -2 -> 4)
    assert out["#errs"]["labels"] == {"informativeness": 5.0, "clarity": 4.0, "plausibility": 5.0, "faithfulness": 3.0}
    assert out["#errs"]["teacher"]["judgments"][0]["instructscore"] == -7
    assert out["#ok"]["labels"] == dict.fromkeys(DIMS, 5.0)
    six = [{"type": "fluency/grammar", "severity": "minor", "span": "x", "explanation": "y"}] * 6
    for bad, message in (
        ({"errors": six}, "at most 5"),
        ({"errors": [{**six[0], "severity": "critical"}]}, "major or minor"),
        ({"errors": [{**six[0], "type": "grammar"}]}, "not an MQM type"),
        ({"errors": [], "score": 3}, "unexpected key"),
    ):
        with pytest.raises(JudgeOutputError, match=message):
            parse_error_report(json.dumps(bad))


def test_pairwise_preferences_from_the_cli(server, tmp_path, repo_root, capsys):
    inputs = tmp_path / "in.jsonl"
    rows = [
        {"id": f"c{i}", "task": "qa", "lang": "en", "question": "Capital of France?", "candidate": c}
        for i, c in enumerate(["Lyon", "Paris #better", "Nice"])
    ]
    rows.append({"id": "other", "task": "qa", "lang": "en", "question": "Another question?", "candidate": "x"})
    for i, row in enumerate(rows[:2]):  # a field of the user's own, absent from the third candidate
        row["system"] = f"sys{i}"
    inputs.write_text("\n".join(json.dumps(r) for r in rows))
    config = str(repo_root / "configs" / "label" / "three-samples-majority.yaml")
    args = ["label", "--pairwise", "--config", config, "--input", str(inputs), "--output", str(tmp_path / "pairs.jsonl"),
            f"base_url={server}", "api_key_env=TEST_JUDGE_KEY", f"cache_dir={tmp_path / 'c'}"]  # fmt: skip
    assert main(args) == 2 and "unknown field(s) system" in capsys.readouterr().err
    assert main([*args, "--keep-fields", "system"]) == 0
    assert "judged 3 of 3 pairs" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert {(p["id_a"], p["id_b"]): p["winner"] for p in lines} == {("c0", "c1"): "c1", ("c0", "c2"): "c2", ("c1", "c2"): "c1"}
    assert [(p["system_a"], p["system_b"]) for p in lines] == [("sys0", "sys1"), ("sys0", None), ("sys1", None)]
    # the output trains as written: data.pairs finds both candidates of each pair in the labelled input
    from transformers import AutoTokenizer

    from omnidistill.config import DataConfig
    from omnidistill.data.preference_batches import load_training_pairs
    from omnidistill.data.sources import read_records
    from omnidistill.data.tokenize import RecordEncoder

    encoder = RecordEncoder(AutoTokenizer.from_pretrained(repo_root / "assets" / "tiny-wordpiece"), 64)
    data = DataConfig(pairs=str(tmp_path / "pairs.jsonl"), pair_items=[str(inputs)], keep_fields=["system"])
    judged = load_training_pairs(data, encoder)
    records = read_records(inputs, require_labels=False, keep=frozenset({"system"}))[0]
    id_of = {encoder.token_ids(r).tobytes(): r.id for r in records}
    members = zip(judged.winners, judged.losers, strict=True)
    assert [(id_of[judged.tokens[w].tobytes()], id_of[judged.tokens[v].tobytes()]) for w, v in members] == [
        ("c1", "c0"), ("c2", "c0"), ("c1", "c2")
    ]  # fmt: skip
    with pytest.raises(JudgeOutputError):
        parse_pairwise_choice("I choose A as the better response. No, I choose B as the better response.")
