"""The agent file of the CPU harness's scheduling workload (see workload.py): the plugin's agent, every model call
going through the scripted engine of its rollout actor.

Pass it as the agent file (`--set openrlhf.train.agent_func_path=$(python -m
asearcher_plugin.openrlhf.cpu.scripted)`) with the workload in the run config (`--set 'cpu_harness.workload={...}'`,
`Workload`'s fields). OpenRLHF loads this file by path
(as `agent_module`, not registered in `sys.modules`), so it holds no dataclass and imports only absolute names.

With `cpu_harness.engine_stats` set, each trajectory's model calls are written to `versions-PID.jsonl` there: the
weight version its engine held when each call was sent and the tokens it produced (`CallVersions`), keyed by the
`harness_engine_pid` and `harness_trajectory` the trajectory's sample carries into the trainer's info.
"""

import json
import os
from pathlib import Path

from asearcher_plugin.agent.executor import AgentExecutor as _AgentExecutor
from asearcher_plugin.openrlhf.cpu.switches import switches
from asearcher_plugin.openrlhf.cpu.workload import CallVersions, ScriptedEngine, Workload


class AgentExecutor(_AgentExecutor):
    """The plugin's agent, with every model call going through the scripted engine of its rollout actor."""

    def __init__(self):
        super().__init__()
        self.workload = Workload.from_run_config()
        self._engines: dict[int, ScriptedEngine] = {}
        self._trajectories = 0
        self._folder = switches().engine_stats

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None):
        engine = self._engines.get(id(llm_engine))
        if engine is None:
            engine = self._engines[id(llm_engine)] = ScriptedEngine(llm_engine, self.workload, hf_tokenizer)
        calls = CallVersions(engine)
        out = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, calls, images)
        self._trajectories += 1
        # two keys of exact float32 integers (the trainer may carry info as float32): the process, its count
        out["extra_logs"] = {
            **out["extra_logs"],
            "harness_engine_pid": os.getpid(),
            "harness_trajectory": self._trajectories,
        }
        if self._folder:
            line = {"trajectory": self._trajectories, "calls": calls.calls}
            with open(os.path.join(self._folder, f"versions-{os.getpid()}.jsonl"), "a") as fh:
                fh.write(json.dumps(line) + "\n")
        return out


if __name__ == "__main__":
    print(Path(__file__).resolve())
