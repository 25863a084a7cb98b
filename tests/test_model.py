"""Model processes start without transformers' scikit-learn import, and scikit-learn stays importable for other code."""

import subprocess
import sys

import pytest

CHECK = """
import sys
import pipeline_lib.model
from transformers import AutoTokenizer, Qwen2ForCausalLM  # the generation code, imported by both
assert "sklearn" not in sys.modules, "transformers imported sklearn"
import sklearn.metrics  # still there for any code that asks for it
print("ok")
"""


def test_model_processes_skip_sklearn_but_can_still_import_it() -> None:
    pytest.importorskip("sklearn")  # without it there is nothing to skip
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
