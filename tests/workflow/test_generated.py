"""The files generated from the config schema (``config/README.md``'s key tables, the resolved-config snapshots under
``tests/fixtures/config``) are what ``python -m pipeline_lib settings`` writes: a schema edit without the command
fails here, naming the file and the command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline_lib.core import schema_docs
from pipeline_lib.core.schema_docs import COMMAND, README, SCHEMA, generated, stale

REPO = Path(__file__).resolve().parents[2]


def test_no_generated_file_is_stale():
    files = generated(REPO)
    assert README in files and len(files) == 1 + len(schema_docs.SNAPSHOTS)
    old = [path for path, text in files.items() if (REPO / path).read_text(encoding="utf-8") != text]
    assert not old, f"{', '.join(map(str, old))} stale: run `{COMMAND}`"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The schema, the shipped configs and the generated files in a scratch tree."""
    for path in [SCHEMA, *map(Path, schema_docs.SNAPSHOTS.values()), *generated(REPO)]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)
    return tmp_path


def test_a_changed_default_makes_the_readme_and_snapshots_stale(copy):
    """A default edited in the schema alone leaves the README row and the paper snapshot stale (the check can fail).
    (A key config/paper.yaml's site block does not set: the ones it sets are the site's values, not defaults.)"""
    schema = copy / SCHEMA
    text = schema.read_text(encoding="utf-8")
    edited = "and DONE.json exist.\n        default: 10\n"
    assert text.count(edited) == 1
    schema.write_text(text.replace(edited, edited.replace("10", "11")), encoding="utf-8")
    assert set(stale(copy)) >= {README, Path("tests/fixtures/config/resolved_paper.json")}
    assert "`site.rollout_dump_every` | integer >= 1 | `11` |" in generated(copy)[README]


def test_the_readme_needs_its_markers(copy):
    readme = copy / README
    readme.write_text(readme.read_text(encoding="utf-8").replace(schema_docs.END, ""), encoding="utf-8")
    with pytest.raises(ValueError, match=r"config/README\.md lacks the generated-table markers"):
        generated(copy)
