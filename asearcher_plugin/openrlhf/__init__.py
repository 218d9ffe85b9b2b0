"""Everything that touches OpenRLHF 0.11.2's internals, in one place: what an OpenRLHF upgrade has to revisit.

- `args.py`: OpenRLHF's own parser and checks run on a recipe's flags (`cli/train_ppo_ray.py`, read, not copied);
- `settings.py`: the scheduler settings resolved against OpenRLHF's parsed args (imports nothing of OpenRLHF, so
  `--dry-run` works without it);
- `contract.py`: what the adapter relies on in OpenRLHF, checked against the installed version;
- `streaming.py`: the streaming scheduler (`asearcher_plugin.scheduler`, framework-free) inside OpenRLHF's async
  trainer, as a generator actor installed before `train()`;
- `per_call.py`: the trainer and policy hooks that train per-call sequences as trajectories;
- `cpu/`: the CPU harness (`asearcher train --cpu`): OpenRLHF's and vLLM's own code with the CUDA-only calls
  redirected, and the scripted workloads of the CPU tests and benchmarks.

Importing this package imports nothing of OpenRLHF; its modules do, when used.
"""
