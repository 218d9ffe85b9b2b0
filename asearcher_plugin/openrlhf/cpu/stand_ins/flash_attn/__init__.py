"""Import-only stand-in for `flash_attn` (CUDA kernels), used by `asearcher_plugin.openrlhf.cpu`.

OpenRLHF imports it at module level (`openrlhf/models/ring_attn_utils.py`) but calls it only
with ring attention (`--ds.ring_attn_size > 1`), which the CPU harness never enables. Calling
anything here raises.
"""
