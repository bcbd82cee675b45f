"""Soft teacher labels: the judge's token log-probabilities (and its samples, and several judges) become
``label_dist``, against a local OpenAI-format server that returns ``logprobs``/``top_logprobs``."""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from omnidistill.cli import main
from omnidistill.data.sources import read_records
from omnidistill.label.config import LabelConfig
from omnidistill.label.labeler import Labeler, LogprobsUnavailable
from omnidistill.label.logprobs import LogprobsError, judgment_distributions, number_offsets

DIMS = ("informativeness", "clarity", "plausibility", "faithfulness")
# digits (with the colon or a space before them) are tokens of their own; the rest in short pieces
TOKEN = re.compile(r":\d|\s?\d|[^\d:]{1,3}|:")


def alternatives(token: str, marker: str) -> list[dict] | None:
    """top_logprobs for a token holding a digit d: by marker, a spread over d's neighbours."""
    at = next(i for i, c in enumerate(token) if c.isdigit())
    d = int(token[at])

    def swap(level: int) -> str:
        return token[:at] + str(level) + token[at + 1 :]

    if marker == "#lpnotop":
        return None
    if marker == "#lpmissing":  # one level and junk: the other levels are absent from the top-k
        table = [(token, 0.7), ("maybe", 0.3)]
    elif marker == "#lplow":  # levels hold too little of the mass
        table = [(token, 0.3), ("maybe", 0.7)]
    else:
        low = d - 1 if d > 1 else d + 1
        table = [(token, 0.6), (swap(low), 0.25), (str(low), 0.05), ("maybe", 0.05), (swap(d + 1 if d < 5 else d - 2), 0.05)]
    return [{"token": t, "logprob": math.log(p)} for t, p in table]


class LogprobJudge(BaseHTTPRequestHandler):
    payloads: ClassVar[list[str]] = []
    lock = threading.Lock()
    fail_after: ClassVar[int | None] = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = payload["messages"][-1]["content"]
        marker = next((m for m in ("#lpnotop", "#lpmissing", "#lplow", "#nolp", "#split", "#nested") if m in prompt), "#lp")
        with self.lock:
            LogprobJudge.payloads.append(json.dumps(payload, sort_keys=True))
            n = len(LogprobJudge.payloads)
        if LogprobJudge.fail_after is not None and n > LogprobJudge.fail_after:
            self.send_response(400)
            self.end_headers()
            return
        scores = {d: 3 + i % 2 for i, d in enumerate(DIMS)}  # 3, 4, 3, 4
        if prompt.startswith("TASK:"):  # the omniscore prompt set: nested, a confidence first
            body = {d: {"score": scores[d], "rationale": "It says 2 of 5 things."} for d in DIMS}
            body["faithfulness"]["issues"] = []
            text = json.dumps({"confidence": 0.8, **body})
        elif marker == "#split":  # compact JSON: the colon and the digit share a token; 4.0 is "4", ".", "0"
            text = json.dumps({"reasoning": "1 or 2? No.", **{d: float(v) for d, v in scores.items()}}, separators=(",", ":"))
        else:
            text = json.dumps({"reasoning": "Between 2 and 5.", **scores})
        body = {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        if payload.get("logprobs") and marker != "#nolp":
            content = []
            for token in TOKEN.findall(text):
                entry = {"token": token, "logprob": -0.1}
                if any(c.isdigit() for c in token):
                    top = alternatives(token, marker)
                    if top is not None:
                        entry["top_logprobs"] = top
                content.append(entry)
            assert "".join(e["token"] for e in content) == text
            body["choices"][0]["logprobs"] = {"content": content}
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture()
def server(monkeypatch):
    LogprobJudge.payloads = []
    LogprobJudge.fail_after = None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), LogprobJudge)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("TEST_JUDGE_KEY", "k")
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def config(url, tmp_path, **kw) -> LabelConfig:
    base = dict(base_url=url, models=["judge-1"], api_key_env="TEST_JUDGE_KEY", timeout_s=2, max_retries=0, backoff_s=0.01)
    return LabelConfig(**{**base, "cache_dir": str(tmp_path / "cache"), "invalid_retries": 0, "logprobs": True, **kw})


def inputs(tmp_path, markers, name="in.jsonl"):
    path = tmp_path / name
    rows = [{"id": f"i{k}{m}", "task": "qa", "lang": "en", "question": "Q?", "candidate": f"Paris {m} n{k}"} for k, m in enumerate(markers)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def labelled(path):
    return {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()}


# The spread the server gives a score d (with d - 1 >= 1 and d + 1 <= 5): 0.6 on d, 0.25 + 0.05 on d - 1
# (the tokens " 3" and "3" count as one level), 0.05 on d + 1, and 0.05 on a token that is no level.
SPREAD = {3: [0, 0.30 / 0.95, 0.60 / 0.95, 0.05 / 0.95, 0], 4: [0, 0, 0.30 / 0.95, 0.60 / 0.95, 0.05 / 0.95]}


@pytest.mark.parametrize("marker", ["#lp", "#split"])
def test_top_logprobs_of_each_score_token_become_label_dist(server, tmp_path, marker):
    out = tmp_path / "o.jsonl"
    stats = Labeler(config(server, tmp_path)).label_file([str(inputs(tmp_path, [marker]))], out)
    item = next(iter(labelled(out).values()))
    assert stats["labelled"] == 1 and stats["logprobs_fallbacks"] == 0
    for i, dim in enumerate(DIMS):
        want = SPREAD[3 + i % 2]
        assert item["label_dist"][dim] == pytest.approx(want, abs=1e-12)
        assert item["labels"][dim] == pytest.approx(sum((c + 1) * p for c, p in enumerate(want)), abs=1e-9)
    assert json.loads(LogprobJudge.payloads[0])["top_logprobs"] == 5  # asked for, as the OpenAI API names it
    records, _ = read_records([str(out)])  # the output is valid training data: label_dist passes validation
    assert records[0].label_dist[1] == pytest.approx(tuple(SPREAD[4]))


def test_nested_schema_reads_the_score_field_not_the_first_digit(server, tmp_path):
    """The omniscore answer begins with a confidence (0.8) and its rationales hold digits: the score
    field's token must be the one read."""
    out = tmp_path / "o.jsonl"
    Labeler(config(server, tmp_path, prompt_set="omniscore", reference_mode="free")).label_file([str(inputs(tmp_path, ["#nested"]))], out)
    item = next(iter(labelled(out).values()))
    assert item["label_dist"]["clarity"] == pytest.approx(SPREAD[4])
    assert item["label_dist"]["plausibility"] == pytest.approx(SPREAD[3])


def test_levels_missing_from_the_top_k_get_no_mass(server, tmp_path):
    out = tmp_path / "o.jsonl"
    Labeler(config(server, tmp_path)).label_file([str(inputs(tmp_path, ["#lpmissing"]))], out)
    item = next(iter(labelled(out).values()))
    assert item["label_dist"]["clarity"] == [0.0, 0.0, 0.0, 1.0, 0.0]  # 0.7 on level 4, renormalised; junk dropped


@pytest.mark.parametrize("marker", ["#lpnotop", "#lplow"])
def test_no_usable_top_logprobs_fails_the_answer_or_falls_back_to_it(server, tmp_path, marker):
    out = tmp_path / "o.jsonl"
    stats = Labeler(config(server, tmp_path)).label_file([str(inputs(tmp_path, [marker]))], out)
    assert stats["failed"] == 1 and stats["labelled"] == 0
    errors = json.loads((tmp_path / "o.jsonl.failed.jsonl").read_text())["label_errors"][0]
    assert ("no top_logprobs" if marker == "#lpnotop" else "carry 0.300") in errors
    stats = Labeler(config(server, tmp_path, logprobs_fallback="answer")).label_file([str(inputs(tmp_path, [marker]))], out)
    assert stats["labelled"] == 1 and stats["logprobs_fallbacks"] == 1
    item = next(iter(labelled(out).values()))
    assert item["label_dist"]["clarity"] == [0.0, 0.0, 0.0, 1.0, 0.0] and item["labels"]["clarity"] == 4.0


def test_a_server_without_logprobs_stops_the_run_unless_told_to_fall_back(server, tmp_path, repo_root, capsys):
    path = inputs(tmp_path, ["#nolp"])
    with pytest.raises(LogprobsUnavailable, match="logprobs_fallback: answer"):
        Labeler(config(server, tmp_path)).label_file([str(path)], tmp_path / "o.jsonl")
    args = ["label", "--config", str(repo_root / "configs" / "label" / "logprobs.yaml"), "--input", str(path)]
    args += ["--output", str(tmp_path / "o.jsonl"), f"base_url={server}", "api_key_env=TEST_JUDGE_KEY", f"cache_dir={tmp_path / 'c'}"]
    assert main(args) == 2 and "answered without logprobs" in capsys.readouterr().err
    assert main([*args, "logprobs_fallback=answer"]) == 0
    assert next(iter(labelled(tmp_path / "o.jsonl").values()))["label_dist"]["clarity"] == [0.0, 0.0, 0.0, 1.0, 0.0]


def test_samples_and_judges_mix_their_distributions(server, tmp_path):
    out = tmp_path / "o.jsonl"
    cfg = config(server, tmp_path, models=["judge-1", "judge-2"], samples=2, temperature=0.7)
    Labeler(cfg).label_file([str(inputs(tmp_path, ["#lp"]))], out)
    item = next(iter(labelled(out).values()))
    assert item["label_dist"]["clarity"] == pytest.approx(SPREAD[4])  # four equal judgments mix to the same spread
    assert len(item["annotations"]) == 4
    # without logprobs: the empirical distribution of the answers (every answer here is 4)
    Labeler(config(server, tmp_path, logprobs=False, samples=3, temperature=0.7)).label_file([str(inputs(tmp_path, ["#lp"]))], out)
    assert next(iter(labelled(out).values()))["label_dist"]["clarity"] == [0.0, 0.0, 0.0, 1.0, 0.0]


def test_an_interrupted_labelling_run_resumes_without_repeating_a_request(server, tmp_path):
    path = inputs(tmp_path, ["#lp", "#split", "#lpmissing", "#lp"])
    LogprobJudge.fail_after = 2  # the server breaks after two answers: the run ends with failures
    first = Labeler(config(server, tmp_path, concurrency=1)).label_file([str(path)], tmp_path / "o.jsonl")
    assert first["labelled"] == 2 and first["failed"] == 2
    LogprobJudge.fail_after = None
    second = Labeler(config(server, tmp_path, concurrency=1)).label_file([str(path)], tmp_path / "o.jsonl")
    assert second["labelled"] == 4 and second["cached_answers"] == 2
    answered = LogprobJudge.payloads[:2] + LogprobJudge.payloads[4:]  # the two refused requests are asked again
    assert len(answered) == 4 and len(set(answered)) == 4  # no answered request is repeated


def test_score_tokens_are_found_by_key_path():
    text = 'Sure.\n```json\n{"reasoning": "3 or 4", "clarity": {"score": 5, "x": [1, 2]}, "n": -2.5e3}\n```'
    offsets = number_offsets(text)
    assert text[offsets[("clarity", "score")]] == "5" and offsets[("clarity", "x", 1)] == text.index("2]")
    assert text[offsets[("n",)] :].startswith("-2.5e3")
    content = [{"token": text, "logprob": 0.0}]
    with pytest.raises(LogprobsError, match=r"informativeness\.score: no number"):
        judgment_distributions(text, content, nested=True)
    with pytest.raises(LogprobsError, match="do not spell"):
        judgment_distributions(text, [{"token": "x", "logprob": 0.0}], nested=True)
    thinking = '<think>Draft: ```json\n{"clarity": {"score": 2}}\n```</think>\n'  # a reasoning model's block ahead of the answer
    offsets = number_offsets(thinking + text)
    assert offsets[("clarity", "score")] == len(thinking) + text.index("5,")


def test_label_dist_is_validated_on_read_with_file_line_and_field(tmp_path):
    from omnidistill.data.schema import DataError

    good = {"id": "a", "task": "qa", "lang": "en", "candidate": "c", "labels": {"clarity": 4}}
    cases = [
        ({"clarity": [0.5, 0.5, 0, 0]}, "label_dist.clarity must be a list of 5"),
        ({"clarity": [0.5, 0.6, 0, 0, -0.1]}, r"label_dist.clarity\[4\] must be a non-negative"),
        ({"clarity": [0.5, 0.5, 0, 0, 0.01]}, "label_dist.clarity sums to 1.01"),
        ({"clarity": [0.5, "x", 0, 0, 0.5]}, r"label_dist.clarity\[1\]"),
        ({"fluency": [1, 0, 0, 0, 0]}, "label_dist has unknown dimension"),
    ]
    for dist, message in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "label_dist": dist}) + "\n")
        with pytest.raises(DataError, match=f"bad.jsonl:2: {message}"):
            read_records([str(path)])
    path.write_text(json.dumps({**good, "label_dist": {"clarity": [0, 0, 0.3, 0.7 + 4e-7, 0], "faithfulness": None}}) + "\n")
    record = read_records([str(path)])[0][0]
    assert record.label_dist[1] == (0, 0, 0.3, 0.7 + 4e-7, 0) and record.label_dist[3] is None
