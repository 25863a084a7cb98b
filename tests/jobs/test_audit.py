"""The provenance audit catches each kind of broken chain."""

import json

import pytest

from pipeline_lib.core import provenance
from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.audit import audit
from tests.conftest import REPO

CLEAN = {"git_commit": "abc123", "dirty": False, "diff_sha256": None, "pipeline_lib_version": "0.1.0"}


@pytest.fixture
def chain(tmp_path, monkeypatch):
    """raw.csv (no sidecar) -> train step (DONE.json, model.txt) -> table.tex."""
    monkeypatch.setattr(provenance, "code_version", lambda: CLEAN)
    raw = tmp_path / "raw.csv"
    raw.write_text("x\n1\n")
    done, model = tmp_path / "run/DONE.json", tmp_path / "run/model.txt"
    write_json(done, {"final_step": 10, "total_steps": 10})
    write_text(model, "weights")
    write_provenance([done, model], step="train", inputs=[raw])
    table = tmp_path / "table.tex"
    write_text(table, "\\begin{table}\\end{table}")
    write_provenance([table], step="paper", inputs=[model])
    return {"raw": raw, "done": done, "model": model, "table": table}


def test_clean_chain_passes(chain):
    report = audit(chain["table"])
    assert report.ok, report.problems
    assert report.files == 3 and any("raw input" in line for line in report.lines)


def test_modified_output_is_caught(chain):
    chain["table"].write_text("tampered")
    assert any("modified after it was written" in p for p in audit(chain["table"]).problems)


def test_modified_input_is_caught(chain):
    chain["raw"].write_text("x\n2\n")
    assert any("raw.csv: content changed since it was used" in p for p in audit(chain["table"]).problems)


def test_missing_sidecar_is_caught(chain):
    (chain["model"].parent / "model.txt.prov.json").unlink()
    assert any("no provenance sidecar" in p for p in audit(chain["table"]).problems)


def test_unfinished_run_is_caught(chain):
    chain["done"].write_text(json.dumps({"final_step": 7, "total_steps": 10}))
    assert any("stopped at step 7 of 10" in p for p in audit(chain["table"]).problems)


def test_dirty_or_mixed_code_versions_are_caught(chain, monkeypatch):
    monkeypatch.setattr(provenance, "code_version", lambda: CLEAN | {"dirty": True, "diff_sha256": "d1ff"})
    write_provenance([chain["table"]], step="paper", inputs=[chain["model"]])
    problems = audit(chain["table"]).problems
    assert any("2 code versions" in p for p in problems) and any("dirty tree" in p for p in problems)


@pytest.mark.parametrize("damage, says", [
    (lambda text: text[: len(text) // 2], "unreadable provenance sidecar (JSONDecodeError"),
    (lambda text: "[1, 2]", "provenance sidecar holds list, not a JSON object"),
    (lambda text: "null", "provenance sidecar holds null, not a JSON object"),
    (lambda text: '{"outputs": 7}', "'outputs' is int, not a list of files"),
    (lambda text: '{"outputs": [{"path": 1}], "inputs": [null]}', "1 of its 'outputs' entries lack a path or sha256"),
    (lambda text: "[" * 200_000 + "]" * 200_000, "unreadable provenance sidecar (nested too deeply"),  # issue 60
], ids=["truncated", "list", "null", "outputs_not_a_list", "entries_without_path", "nested_200000_deep"])
def test_a_damaged_sidecar_is_named_by_the_audit_command_not_a_traceback(chain, damage, says, capsys):
    from pipeline_lib.jobs.audit import main

    sidecar = chain["model"].parent / "model.txt.prov.json"
    sidecar.write_text(damage(sidecar.read_text()))
    assert main([str(chain["table"])]) == 1
    out = capsys.readouterr().out
    assert f"{sidecar}: {says}" in out, out


def test_a_damaged_done_sentinel_is_named(chain):
    chain["done"].write_text('{"final_step": 1')
    assert any(f"{chain['done']}: unreadable DONE sentinel" in p for p in audit(chain["table"]).problems)


def test_a_directory_is_reported_as_a_directory_not_missing(chain):
    report = audit(chain["done"].parent)
    assert not report.ok and "a directory, not a file" in report.problems[0]
    assert not any("missing" in p for p in report.problems)


# --- the config an output was made with (issue 35, class 11) --------------------------------------------------------


@pytest.fixture
def made_in_workflow(tmp_path, monkeypatch):
    """An SFT run and an RL run made from it as the workflow makes them: its resolved config exported to the job."""
    import copy

    from pipeline_lib.plan.table import load_config

    monkeypatch.setattr(provenance, "code_version", lambda: CLEAN)
    config = load_config([REPO / "config/config.yaml"], REPO / "workflow/schemas/config.schema.yaml")
    monkeypatch.setenv("PIPELINE_CONFIG_FILE", str(provenance.resolved_config_file(config, tmp_path / "wf")))
    sft = tmp_path / "results/train/countdown_tiny/sft/seed0/DONE.json"
    write_json(sft, {"final_step": 3, "total_steps": 3})
    write_provenance([sft], step="train_sft", params={"spec": {"lr": 3e-3}})
    rl = tmp_path / "results/train/countdown_tiny/grpo_exact/seed0/DONE.json"
    write_json(rl, {"final_step": 3, "total_steps": 3})
    write_provenance([rl], step="train_rl", inputs=[sft], params={"spec": {"lr": 1e-4}})
    monkeypatch.delenv("PIPELINE_CONFIG_FILE")
    return {"config": config, "sft": sft, "rl": rl, "copy": copy.deepcopy}


def test_an_output_made_with_another_config_fails_the_audit_naming_the_setting(made_in_workflow):
    """The reported case: after train.sft.lr changed, snakemake -n replans the SFT run, yet its audit passed."""
    config, sft, rl = made_in_workflow["config"], made_in_workflow["sft"], made_in_workflow["rl"]
    sidecar = json.loads(sft.with_name("DONE.json.prov.json").read_text())
    assert "train.sft.lr" in sidecar["step_config"]["settings"]
    assert audit(rl, config).ok  # unchanged config: the whole chain passes
    changed = made_in_workflow["copy"](config)
    changed["train"]["sft"]["lr"] = 1e-3
    report = audit(rl, changed)  # the RL run's chain reaches the SFT run, whose setting changed
    assert [p for p in report.problems if "config" in p] == [
        f"{sft}: made with another config (step train_sft): changed train.sft.lr"]


def test_only_the_settings_a_step_read_are_compared(made_in_workflow):
    config, sft = made_in_workflow["config"], made_in_workflow["sft"]
    for key, value in (("rl", {"lr": 5e-4}), ("seeds", [0, 1, 2, 3]), ("tasks", ["countdown_tiny"])):
        changed = made_in_workflow["copy"](config)
        changed["train"][key] = value if not isinstance(value, dict) else changed["train"][key] | value
        assert audit(sft, changed).ok, key  # another step's setting, or more runs: this run is what it was
    changed = made_in_workflow["copy"](config)
    changed["train"]["rl"]["lr"] = 5e-4
    assert "changed train.rl.lr" in " ".join(audit(made_in_workflow["rl"], changed).problems)


def test_the_audit_command_compares_with_the_config_files_it_is_given(made_in_workflow, tmp_path, capsys):
    import yaml

    from pipeline_lib.jobs.audit import main

    (tmp_path / "lr.yaml").write_text(yaml.safe_dump({"train": {"sft": {"lr": 1e-3}}}))
    assert main([str(made_in_workflow["sft"]), "--configfile", str(REPO / "config/config.yaml")]) == 0
    capsys.readouterr()
    assert main([str(made_in_workflow["sft"]), "--configfile", str(REPO / "config/config.yaml"),
                 str(tmp_path / "lr.yaml")]) == 1
    assert "made with another config (step train_sft): changed train.sft.lr" in capsys.readouterr().out


# --- compact output (issue 36 part 4) ---------------------------------------------------------------------------------


def test_a_shared_input_is_printed_once_and_later_references_point_back(chain):
    """Two runs read raw.csv and the tokenizer-like model: each subtree appears once, a step's files share a line."""
    second = chain["table"].parent / "run2/model.txt"
    write_text(second, "weights 2")
    write_provenance([second], step="train", inputs=[chain["raw"]])
    write_provenance([chain["table"]], step="paper", inputs=[chain["model"], chain["done"], second])
    report = audit(chain["table"])
    assert report.ok, report.problems
    lines = "\n".join(report.lines)
    assert sum(str(chain["raw"]) in line for line in report.lines) == 2, lines  # shown once, referred to once
    assert f"(see above: {chain['raw']})" in lines, lines
    assert f"{chain['done'].parent}/{{model.txt, DONE.json}}  [ok] step train" in lines, lines  # one step's files
    assert len(report.lines) == 5 and report.files == 5, lines
    chain["raw"].write_text("x\n2\n")  # both consumers' recorded hashes are still checked
    changed = [p for p in audit(chain["table"]).problems if "raw.csv: content changed since it was used" in p]
    assert len(changed) == 2, changed


GROUP_SNAKEFILE = '''
from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import write_provenance

rule table:
    input: expand("runs/{name}/DONE.json", name=("a", "b"))
    output: "table.tex"
    run:
        write_text(output[0], "table")
        write_provenance([output[0]], step="paper", inputs=["runs/a/model.txt", "runs/b/model.txt"])

rule group_job:  # one job, two step runs (as train_local_group runs a task's RL methods)
    input: "raw.csv"
    output: "runs/a/DONE.json", "runs/b/DONE.json"
    log: "logs/group_job.log"
    run:
        for name in ("a", "b"):
            write_json(f"runs/{name}/DONE.json", {"final_step": 1, "total_steps": 1})
            write_text(f"runs/{name}/model.txt", name)
            write_provenance([f"runs/{name}/DONE.json", f"runs/{name}/model.txt"], step="train", inputs=["raw.csv"])
'''


def test_a_group_jobs_runs_share_one_line_under_their_job_and_its_inputs_are_shown_once(tmp_path, monkeypatch):
    """A real Snakemake run of a group job writing two step runs, then a table reading both: the audit reads which
    job made each file from Snakemake's record (.snakemake/metadata), so the two runs are one line naming the job,
    with their shared input once; without that record, each step run is its own line."""
    from tests.conftest import snakemake

    (tmp_path / "Snakefile").write_text(GROUP_SNAKEFILE)
    (tmp_path / "raw.csv").write_text("x\n1\n")
    result = snakemake(tmp_path, "--cores", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    monkeypatch.chdir(tmp_path)
    lines = audit("table.tex").lines
    assert len(lines) == 3, lines
    assert lines[1].startswith("  runs/{a, b}/model.txt  [") and lines[1].endswith(
        ", 2 runs of job group_job (logs/group_job.log)"), lines
    assert lines[2].startswith("    raw.csv  ["), lines
    for record in (tmp_path / ".snakemake/metadata").iterdir():
        record.unlink()
    lines = audit("table.tex").lines
    assert [line.split("  [")[0] for line in lines] == ["table.tex", "  runs/a/model.txt", "    raw.csv",
                                                       "  runs/b/model.txt", "    (see above: raw.csv)"], lines


def test_the_judges_code_digest_covers_its_rubric_prompts_and_the_audit_names_an_edit(tmp_path):
    import shutil
    import subprocess
    import sys

    from pipeline_lib.core.provenance import code_modules
    from tests.conftest import REPO

    prompts = {"config/prompts/meetingbank.txt", "config/prompts/poetry.txt"}
    assert prompts <= set(code_modules("pipeline_lib.jobs.judge.score"))
    assert not any(k.startswith("config/") for k in code_modules("pipeline_lib.core.theory.formulas"))

    root = tmp_path / "checkout"
    shutil.copytree(REPO / "pipeline_lib", root / "pipeline_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "config/prompts", root / "config/prompts")
    work = tmp_path / "work"
    work.mkdir()
    script = ("from pathlib import Path\nfrom pipeline_lib.core.provenance import write_provenance\n"
              "Path('scores.jsonl').write_text('{}\\n')\n"
              "write_provenance(['scores.jsonl'], step='judge_score', entry='pipeline_lib.jobs.judge.score')\n"
              "Path('theory.csv').write_text('x\\n')\n"
              "write_provenance(['theory.csv'], step='theory', entry='pipeline_lib.core.theory.formulas')\n")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], cwd=work, env=env, check=True, timeout=120)

    def audit(target):
        return subprocess.run([sys.executable, "-m", "pipeline_lib", "audit", target], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)

    assert audit("scores.jsonl").returncode == 0, audit("scores.jsonl").stdout
    prompt = root / "config/prompts/meetingbank.txt"
    prompt.write_text(prompt.read_text() + "\nBe lenient.\n")
    result = audit("scores.jsonl")
    assert result.returncode == 1 and "changed config/prompts/meetingbank.txt" in result.stdout, result.stdout
    assert audit("theory.csv").returncode == 0  # an output whose code reads no prompt is not stale
