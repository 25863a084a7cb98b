"""``docs/fidelity.md`` is what ``python -m pipeline_lib fidelity`` writes from the paper plan and the reference file:
a plan or reference edit without the command fails here, and so does a difference from the paper or the authors
that has no reason (issue 56 item 8)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline_lib.core import schema_docs
from pipeline_lib.paper import fidelity
from pipeline_lib.paper.fidelity import COMMAND, LEDGER, REFERENCE, ledger_rows, ledger_text, missing_reasons

REPO = Path(__file__).resolve().parents[2]


def test_the_ledger_is_current_and_every_difference_has_a_reason():
    rows, outputs = ledger_rows(REPO)
    assert not missing_reasons(rows, outputs)
    assert (REPO / LEDGER).read_text(encoding="utf-8") == ledger_text(REPO), f"{LEDGER} stale: run `{COMMAND}`"
    # every paper table, figure and quoted number names a target the paper plan makes
    assert outputs and all(item["planned"] for item in outputs)
    # the rows are read from the plan: App. B's per-task values are what the plan's run specs hold
    steps = {task: row.ours for row in rows if row.setting == "training iterations" for task in row.tasks}
    assert steps == {"gsm8k": 1000, "countdown": 2000, "deepmath": 3220, "poetry": 1350, "meetingbank": 3220,
                     "openthoughts": 3220}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The schema, the shipped configs, the reference file and the ledger in a scratch tree."""
    for path in [schema_docs.SCHEMA, *map(Path, schema_docs.SNAPSHOTS.values()), REFERENCE, LEDGER]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)
    return tmp_path


def test_a_changed_plan_makes_the_ledger_stale(copy):
    """A schema default the plan reads (the PPO clip above) edited alone: the shipped ledger no longer matches, and the
    row now differs from the paper and the authors with no reason (the checks can fail)."""
    schema = copy / schema_docs.SCHEMA
    text = schema.read_text(encoding="utf-8")
    old = "verl clip_ratio_high)., default: 0.28}"
    assert text.count(old) == 1
    schema.write_text(text.replace(old, old.replace("0.28", "0.3")), encoding="utf-8")
    assert fidelity.stale(copy)
    assert "| PPO clip [low, high] | gsm8k, countdown, deepmath, poetry, meetingbank, openthoughts | [0.2, 0.3] ≠ |" \
        in ledger_text(copy)
    assert [p.split(":")[0] for p in missing_reasons(*ledger_rows(copy))] == [
        "PPO clip [low, high] (gsm8k, countdown, deepmath, poetry, meetingbank, openthoughts)"]


def test_a_difference_without_a_reason_is_named(copy):
    """The authors' learning rate edited to differ from the plan's, with no reason: the check names the row."""
    reference = copy / REFERENCE
    text = reference.read_text(encoding="utf-8")
    old = 'authors: {value: 1.0e-6, source: "base.yaml actor_rollout_ref.actor.optim.lr"}'
    assert old in text
    reference.write_text(text.replace(old, old.replace("1.0e-6", "2.0e-6")), encoding="utf-8")
    problems = missing_reasons(*ledger_rows(copy))
    assert len(problems) == 1 and problems[0].startswith("learning rate (gsm8k, countdown, deepmath, poetry, "
                                                         "meetingbank, openthoughts): ours 1e-06 differs from the "
                                                         "authors value with no reason")
    assert "Reason: NO REASON" in ledger_text(copy)


def test_a_setting_the_plan_does_not_have_fails_loudly(copy):
    reference = copy / REFERENCE
    text = reference.read_text(encoding="utf-8")
    reference.write_text(text.replace("ours: {spec: rl.lr}", "ours: {spec: rl.learning_rate}"), encoding="utf-8")
    with pytest.raises(KeyError, match=r"setting 'learning rate', task gsm8k: no 'rl.learning_rate'"):
        ledger_rows(copy)
