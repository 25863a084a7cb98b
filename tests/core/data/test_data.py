"""The data stage: tiny tasks, tokenizer, every real builder on fixtures, bad input and synthesis."""

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline_lib.core.data.build import build_real, build_tiny, build_tokenizer, validate_imagenet
from pipeline_lib.core.data.schema import DataError
from pipeline_lib.core.data.tiny import TASKS, generate_task, solve_countdown
from pipeline_lib.core.io import sha256_file
from pipeline_lib.core.rewards import score
from tests.chat_server import ChatServer
from tests.conftest import FIXTURES, real_spec

TINY = {"n_train": 60, "n_test": 20, "imperfect_fraction": 0.3, "numbers_per_task": [3, 4], "max_number": 9,
        "max_target": 100}
RL_COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


def input_rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


@pytest.mark.parametrize("task", sorted(TASKS))
def test_tiny_tasks_are_deterministic_and_disjoint(task):
    a, b = generate_task(task, TINY, 0), generate_task(task, TINY, 0)
    assert a == b
    assert generate_task(task, TINY, 1)["rl_train"] != a["rl_train"]
    train = {r["prompt"][0]["content"] for r in a["rl_train"]}
    test = {r["prompt"][0]["content"] for r in a["rl_test"]}
    assert not train & test and len(train) == 60 and len(test) == 20
    assert list(a["rl_train"][0]) == RL_COLUMNS


@pytest.mark.parametrize(("task", "reward"), [("countdown_tiny", "countdown"), ("arith_tiny", "math")])
def test_tiny_demonstrations_are_correct_except_the_deliberate_slips(task, reward):
    rows = generate_task(task, TINY, 0)
    for rl, sft in zip(rows["rl_train"], rows["sft_train"], strict=True):
        demonstration, gold = sft["messages"][-1]["content"], rl["reward_model"]["ground_truth"]
        slipped = sft["extra_info"]["imperfect_demonstration"]
        assert score(reward, demonstration, gold)["score"] == (0.0 if slipped else 1.0)
        assert score(reward, rl["extra_info"]["reference"], gold)["score"] == 1.0
        # the slip stops one step early: the demonstration is the reference's first lines, then a wrong answer
        steps = demonstration.count(" = ")
        assert steps == rl["extra_info"]["reference"].count(" = ") - (1 if slipped else 0), demonstration
    slips = sum(r["extra_info"]["imperfect_demonstration"] for r in rows["sft_train"])
    assert 5 <= slips <= 35


@pytest.mark.parametrize("task", sorted(TASKS))
def test_tiny_validation_split_is_disjoint_and_slips_follow_the_blind_spot(task):
    rows = generate_task(task, {**TINY, "n_val": 15, "imperfect_fraction": 0.0, "blind_spot_slip": 1.0}, 0)
    splits = {key: {r["prompt"][0]["content"] for r in rows[f"rl_{key}"]} for key in ("train", "val", "test")}
    assert len(splits["val"]) == 15 and not splits["val"] & (splits["train"] | splits["test"])
    for row in rows["sft_train"]:
        info, prompt = row["extra_info"], row["messages"][0]["content"]
        person = dict(info["facts"])["mover"] if task == "meeting_tiny" else prompt.split()[0]
        blind_spot = (info["numbers"][0] <= 4 if task == "countdown_tiny" else
                      person in ("Ava", "Ben", "Cleo", *(("Dev",) if task == "arith_tiny" else ())))
        assert info["imperfect_demonstration"] == blind_spot == info["blind_spot"], prompt
    assert all(row["extra_info"]["blind_spot"] in (True, False) for row in rows["rl_test"])


def test_countdown_solver():
    expr, steps = solve_countdown([3, 5, 2], 16)
    assert eval(expr) == 16 and len(steps) == 2
    assert solve_countdown([1, 1, 1], 100) is None


def test_tiny_build_writes_manifest_with_hashes(tmp_path):
    outputs = build_tiny("meeting_tiny", TINY, 0, {"similarity": 1.0}, tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for entry in manifest["outputs"].values():
        assert sha256_file(entry["path"]) == entry["sha256"]
    assert manifest["row_counts"] == {"rl_train": 60, "rl_test": 20, "sft_train": 60}
    rl = pd.read_parquet(tmp_path / "rl_train.parquet")
    assert rl["extra_info"][0]["reward_weights"] == {"similarity": 1.0}
    assert "facts" in rl["extra_info"][0] and len(outputs) == 4


def test_tokenizer_is_deterministic_and_keeps_tags(tmp_path):
    build_tiny("countdown_tiny", TINY, 0, None, tmp_path / "data")
    inputs = [tmp_path / "data" / "sft_train.parquet"]
    build_tokenizer(inputs, 400, tmp_path / "a")
    build_tokenizer(inputs, 400, tmp_path / "b")
    assert (tmp_path / "a/tokenizer.json").read_bytes() == (tmp_path / "b/tokenizer.json").read_bytes()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a")
    text = "<think>3 + 5 = 8</think>\n<answer>(3 + 5) * 2</answer>"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert len(tokenizer("<think>")["input_ids"]) == 1
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("name", ["gsm8k", "countdown", "deepmath", "meetingbank", "openthoughts"])
def test_real_builders_account_for_every_row(name, tmp_path):
    build_real(name, real_spec(name), tmp_path, None)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for entry in manifest["outputs"].values():
        assert sha256_file(entry["path"]) == entry["sha256"]
    rl_train = pd.read_parquet(tmp_path / "rl_train.parquet")
    rl_test = pd.read_parquet(tmp_path / "rl_test.parquet")
    assert list(rl_train.columns) == RL_COLUMNS and len(rl_test) > 0
    counts, filters = manifest["row_counts"], manifest["filters"]
    if name == "gsm8k":
        raw = input_rows(FIXTURES / "gsm8k/main/train.jsonl") + input_rows(FIXTURES / "gsm8k/main/test.jsonl")
        dropped = filters["train prompt also in test (removed from train)"] + \
            filters["unparseable gold answer (no finite decimal number after ####)"]
        assert counts["rl_train"] + counts["rl_test"] + dropped == raw
        assert rl_train["reward_model"].map(lambda r: r["ground_truth"]).tolist() == ["72", "10", "3600"]
        assert counts["sft_train"] == 2
    elif name == "countdown":
        raw = input_rows(FIXTURES / "countdown/main/train.jsonl")
        assert counts["rl_train"] + counts["rl_test"] + filters["duplicate prompt within train"] + \
            filters["train prompt also in test (removed from train)"] == raw
        gold = input_rows(FIXTURES / "countdown/gold/train.jsonl")
        assert counts["sft_train"] + filters.get("GOLD task also in the RL test split (removed)", 0) == gold
        assert counts["rl_sim_train"] == counts["sft_train"]
        truth = json.loads(rl_train["reward_model"][0]["ground_truth"])
        assert set(truth) == {"numbers", "target"}
    else:
        raw = input_rows(next((FIXTURES / name).glob("*.jsonl")))
        accounted = counts["rl_train"] + counts["rl_test"] + sum(filters.values())
        assert accounted == raw, (counts, filters)
    if name == "meetingbank":
        assert "NON-COMMERCIAL" in manifest["licence"]
    if name == "deepmath":
        sft = pd.read_parquet(tmp_path / "sft_train.parquet")
        demo = sft["messages"][0][-1]["content"]
        assert demo.startswith("Short:")  # the shortest of the three r1 solutions
        assert filters["no non-empty r1 solution"] == 1


def test_gsm8k_prompt_is_the_authors(tmp_path):
    """Word for word the authors' prepare_data.py math prompt: their system message, then the question and the
    math suffix on its own line; the SFT rows see the same prompt."""
    build_real("gsm8k", real_spec("gsm8k"), tmp_path, None)
    system = "You are a helpful assistant. Think through the problem before providing the answer."
    for prompt in pd.read_parquet(tmp_path / "rl_test.parquet")["prompt"]:
        assert [m["role"] for m in prompt] == ["system", "user"] and prompt[0]["content"] == system
        question, _, suffix = prompt[1]["content"].rpartition("\n")
        assert question and suffix == "Please reason step by step, and put your final answer within \\boxed{}."
    for messages in pd.read_parquet(tmp_path / "sft_train.parquet")["messages"]:
        assert messages[0]["content"] == system and messages[-1]["role"] == "assistant"


def test_countdown_exact_and_sim_prompts_are_the_authors(tmp_path):
    """The authors' Countdown prompt for the exact (Countdown-Tasks-3to4) and the similarity (GOLD) rows alike:
    GOLD's own system and user turns are replaced, its assistant turn is the reference and the demonstration."""
    build_real("countdown", real_spec("countdown"), tmp_path, None)
    system = "You are a helpful assistant. Think through the problem before providing the answer."
    for kind in ("rl_train", "rl_test", "rl_sim_train"):
        frame = pd.read_parquet(tmp_path / f"{kind}.parquet")
        for prompt, truth in zip(frame["prompt"], frame["reward_model"], strict=True):
            gold = json.loads(truth["ground_truth"])
            assert [m["role"] for m in prompt] == ["system", "user"] and prompt[0]["content"] == system
            assert prompt[1]["content"] == (
                f"Using the numbers {list(gold['numbers'])}, create an equation that equals {gold['target']}. "
                "Use only +, -, *, / and parentheses, and use each number exactly once. Show your work in "
                "<think> </think> tags and return the final expression in <answer> </answer> tags.")
    sim = pd.read_parquet(tmp_path / "rl_sim_train.parquet")
    sft = pd.read_parquet(tmp_path / "sft_train.parquet")
    for prompt, messages, info in zip(sim["prompt"], sft["messages"], sim["extra_info"], strict=True):
        assert list(messages[:2]) == list(prompt) and messages[-1]["content"] == info["reference"]


def test_missing_column_names_dataset_and_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "final_answer": "1"}) + "\n")
    spec = real_spec("deepmath")
    spec["sources"]["main"]["local"] = str(bad)
    with pytest.raises(DataError, match=r"deepmath: .*bad\.jsonl: missing column\(s\) \['r1_solution_1'"):
        build_real("deepmath", spec, tmp_path / "out", None)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_bad_row_names_the_row(tmp_path):
    bad = tmp_path / "train.jsonl"
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            {"conversations": [{"from": "gpt", "value": "no question"}]}]
    bad.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = real_spec("openthoughts")
    spec["sources"]["main"]["local"] = str(bad)
    with pytest.raises(DataError, match=r"openthoughts: .*train\.jsonl, line 2: conversations must be \[human, gpt\]"):
        build_real("openthoughts", spec, tmp_path / "out", None)


def test_empty_split_is_an_error(tmp_path):
    (tmp_path / "train.jsonl").write_text("")
    spec = real_spec("meetingbank")
    spec["sources"]["main"]["local"] = str(tmp_path / "train.jsonl")
    with pytest.raises((DataError, ValueError)):
        build_real("meetingbank", spec, tmp_path / "out", None)


def test_poetry_synthesis_is_cached_across_a_crash(tmp_path):
    poems = input_rows(FIXTURES / "poetry/train.jsonl")
    with ChatServer(failures=[200, 200, 200, 400, 400]) as server:
        spec = real_spec("poetry", synthesis={"base_url": server.base_url, "model": "m", "concurrency": 1,
                                              "backoff_s": 0.01})
        build_real("poetry", spec, tmp_path, None)
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    first = json.loads((tmp_path / "manifest.json").read_text())
    failed = "instruction synthesis failed (rerun to retry; finished items are cached)"
    assert first["filters"][failed] == 2
    assert first["row_counts"]["rl_train"] + first["row_counts"]["rl_test"] == poems - 2
    # the rerun after the "crash" asks only for the two failures: the same endpoint again (its URL is part of the
    # cache key, issue 60: another server is another model and is asked again)
    with ChatServer(port=port) as server:
        spec["synthesis"]["base_url"] = server.base_url
        build_real("poetry", spec, tmp_path, None)
    assert len(server.requests) == 2
    second = json.loads((tmp_path / "manifest.json").read_text())
    assert failed not in second["filters"]
    rl = pd.read_parquet(tmp_path / "rl_train.parquet")
    assert rl["prompt"][0][0]["content"] == "You are a helpful assistant that writes poetry."
    assert rl["prompt"][0][1]["content"].startswith("Write a short poem")


def test_imagenet_is_validated_not_copied(tmp_path):
    for split in ("train", "val"):
        for name in ("n01", "n02"):
            (tmp_path / "imnet" / split / name).mkdir(parents=True)
            (tmp_path / "imnet" / split / name / "a.JPEG").write_bytes(b"x")
    spec = {"dataset": {"kind": "imagefolder", "root": str(tmp_path / "imnet"), "expected_classes": 2}}
    (manifest,) = validate_imagenet(spec, tmp_path / "out")
    record = json.loads(manifest.read_text())
    assert record["classes"] == 2 and record["images"] == {"train": 2, "val": 2}


def test_tokenizer_survives_being_saved_next_to_a_qwen2_model(tmp_path):
    """transformers rebuilds a Qwen2 model directory's tokenizer as Qwen2Tokenizer: ids must not change."""
    from transformers import AutoTokenizer

    from pipeline_lib.core.model import build_model, save_model_atomic

    build_tiny("countdown_tiny", TINY, 0, None, tmp_path / "data")
    build_tokenizer([tmp_path / "data" / "sft_train.parquet"], 400, tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    model = build_model(tokenizer, {"hidden_size": 16, "intermediate_size": 32, "layers": 1, "heads": 2,
                                    "kv_heads": 1, "max_positions": 256}, 0)
    save_model_atomic(model, tokenizer, tmp_path / "model")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "model")
    for text in ("9 + 5 = 14", "<think>3 + 5 = 8</think>\n<answer>(3 + 5) * 2</answer>", "café 東京 $1,000.50\n\n x"):
        assert tokenizer(text)["input_ids"] == reloaded(text)["input_ids"]


def test_deepmath_similarity_reference_has_the_shortest_final_text(tmp_path):
    """r_sim's reference is the r1 solution whose final text is shortest (the authors' prepare_data.py: min over
    final_text(solution) by length); the SFT demonstration stays the shortest whole solution."""
    from tests.conftest import _build, _deepmath_row

    long_trace = "<think>" + "a long trace " * 50 + "</think>\nSo \\boxed{0}."  # longest whole, shortest final text
    short_whole = "<think>hm</think>\nThe sum of the two numbers is computed directly, so the answer is \\boxed{0}."
    rows = [_deepmath_row(i, r1_solution_1=long_trace, r1_solution_2=short_whole) for i in range(8)]
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = _build("deepmath", source, tmp_path)
    rl = pd.read_parquet(out / "rl_train.parquet")
    assert set(rl["extra_info"].map(lambda extra: extra["reference"])) == {long_trace}
    sft = pd.read_parquet(out / "sft_train.parquet")
    assert {messages[-1]["content"] for messages in sft["messages"]} == {short_whole}


def test_openthoughts_prompts_carry_the_authors_system_message(tmp_path):
    """Word for word the authors' prepare_data.py OpenThoughts prompt: their system message plus the think-tag
    instruction, then the question; the SFT rows see the same prompt."""
    build_real("openthoughts", real_spec("openthoughts"), tmp_path, None)
    system = ("You are a helpful assistant. Think through the problem before providing the answer. Put your reasoning "
              "in <think> </think> tags, followed by your final answer.")
    for kind in ("rl_train", "rl_test"):
        for prompt in pd.read_parquet(tmp_path / f"{kind}.parquet")["prompt"]:
            assert [m["role"] for m in prompt] == ["system", "user"] and prompt[0]["content"] == system
    for messages in pd.read_parquet(tmp_path / "sft_train.parquet")["messages"]:
        assert messages[0]["content"] == system and messages[-1]["role"] == "assistant"
