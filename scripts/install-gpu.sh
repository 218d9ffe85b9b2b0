#!/bin/sh
# The GPU install (Linux, NVIDIA), in the one order that resolves. OpenRLHF 0.11.2 requires flash-attn 2.8.3, a
# source package whose build imports torch: pip's isolated build cannot see the torch it is installing, so torch goes
# in first and flash-attn is built against it without isolation; then the plugin with its [train] extra (OpenRLHF,
# vLLM 0.29.0, DeepSpeed, Ray) finds both already satisfied. `python scripts/gpu_install_check.py` checks the last step
# on any machine, with torch and flash-attn stubbed (docs/what-ran-where.md).
set -e
cd "$(dirname "$0")/.."
pip install torch==2.13.0                            # the CUDA build PyPI serves on Linux; vLLM 0.29.0 pins it
pip install psutil ninja packaging wheel             # what flash-attn's build imports besides torch
pip install flash-attn==2.8.3 --no-build-isolation   # builds against that torch (long: MAX_JOBS limits its memory)
pip install -e ".[train]"
