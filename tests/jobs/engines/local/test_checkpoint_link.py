"""A run's ``checkpoint/`` that is a symbolic link to scratch storage (issue 60 item 7): the local trainer's first
save crashed (``shutil.rmtree`` refuses a link). Now the checkpoint is written and replaced where the link points,
the link is kept, and a run that sets old state aside moves the scratch copy aside there, keeping the link."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from pipeline_lib.core.checkpoint import claim_run_dir, run_identity
from pipeline_lib.jobs.engines.local.common import TrainingCheckpoint


class _Model(torch.nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((2,), value))

    def save_pretrained(self, directory: Path) -> None:
        from safetensors.torch import save_file

        Path(directory).mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.detach()}, str(Path(directory) / "model.safetensors"))


class _Tokenizer:
    def save_pretrained(self, directory: Path) -> None:
        (Path(directory) / "tokenizer.json").write_text("{}")


def _weight(directory: Path) -> float:
    from safetensors.torch import load_file

    return float(load_file(str(directory / "model.safetensors"))["weight"][0])


def test_a_symlinked_checkpoint_folder_is_written_where_it_points_and_stays_a_link(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "scratch" / "run-ckpt"
    run_dir.mkdir()
    scratch.mkdir(parents=True)
    (run_dir / "checkpoint").symlink_to(scratch)
    checkpoint = TrainingCheckpoint(run_dir, "cfg")
    checkpoint.save(_Model(1.0), _Tokenizer(), {"step": 1})  # the first save: crashed before
    checkpoint.save(_Model(2.0), _Tokenizer(), {"step": 2})  # replaced as one unit, still behind the link
    assert (run_dir / "checkpoint").is_symlink() and Path(os.path.realpath(run_dir / "checkpoint")) == scratch
    assert _weight(scratch) == 2.0 and checkpoint.load()["step"] == 2
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint"]  # nothing written beside it in the run dir
    assert sorted(p.name for p in scratch.parent.iterdir()) == ["run-ckpt"]  # no .tmp or .old left on scratch


def test_a_link_to_a_scratch_folder_not_made_yet_is_followed(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "scratch" / "later" / "ckpt"
    run_dir.mkdir()
    (run_dir / "checkpoint").symlink_to(scratch)
    TrainingCheckpoint(run_dir, "cfg").save(_Model(3.0), _Tokenizer(), {"step": 1})
    assert (run_dir / "checkpoint").is_symlink() and _weight(scratch) == 3.0


def test_another_run_sets_the_scratch_checkpoint_aside_and_keeps_the_link(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "scratch" / "ckpt"
    run_dir.mkdir()
    scratch.mkdir(parents=True)
    (run_dir / "checkpoint").symlink_to(scratch)
    # a first run finds the linked folder with no run recorded: it is set aside on scratch, the link stays
    claim_run_dir(run_dir, run_identity({"config_sha256": "a"}, []), "local")
    assert (run_dir / "checkpoint").is_symlink()
    TrainingCheckpoint(run_dir, "a").save(_Model(1.0), _Tokenizer(), {"step": 5})
    moved = claim_run_dir(run_dir, run_identity({"config_sha256": "b"}, []), "local")  # another config
    assert (run_dir / "checkpoint").is_symlink() and not scratch.exists()  # the link stays, dangling for now
    (aside,) = [p for p in moved if p.name == "checkpoint"]
    assert aside.is_symlink() and _weight(Path(os.path.realpath(aside))) == 1.0  # the old state, kept on scratch
    checkpoint = TrainingCheckpoint(run_dir, "b")
    assert checkpoint.load() is None
    checkpoint.save(_Model(4.0), _Tokenizer(), {"step": 1})
    assert _weight(scratch) == 4.0 and _weight(Path(os.path.realpath(aside))) == 1.0
