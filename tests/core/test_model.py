"""Model processes start without scikit-learn and boto3 (unused imports of transformers, accelerate, tensorboardX),
which stay importable for other code."""

import json
import subprocess
import sys

import pytest

CHECK = """
import sys
import pipeline_lib.core.model
from transformers import AutoTokenizer, Qwen2ForCausalLM  # the generation code, imported by both
from pipeline_lib.core.tracking import _TensorBoard, tracking_from_json
_TensorBoard(tracking_from_json(sys.argv[1])).close()  # imports tensorboardX, as a run with tracking does
assert "sklearn" not in sys.modules, "transformers imported sklearn"
assert "boto3" not in sys.modules, "accelerate or tensorboardX imported boto3"
import sklearn.metrics, boto3  # still there for any code that asks for them
print("ok")
"""


def test_model_processes_skip_sklearn_and_boto3_but_can_still_import_them(tmp_path) -> None:
    pytest.importorskip("sklearn")  # without them there is nothing to skip
    pytest.importorskip("boto3")
    pytest.importorskip("accelerate")
    settings = json.dumps({"backends": ["tensorboard"], "dir": str(tmp_path), "project": "p", "experiment": "t/r/s0"})
    done = subprocess.run([sys.executable, "-c", CHECK, settings], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
