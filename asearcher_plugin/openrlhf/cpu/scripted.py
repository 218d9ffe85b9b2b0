"""The agent file of the CPU harness's scheduling workload (see workload.py): the plugin's agent, every model call
going through the scripted engine of its rollout actor.

Pass it as the agent file (`--set openrlhf.train.agent_func_path=$(python -m
asearcher_plugin.openrlhf.cpu.scripted)`) with the workload in the run config (`--set 'cpu_harness.workload={...}'`,
`Workload`'s fields). OpenRLHF loads this file by path
(as `agent_module`, not registered in `sys.modules`), so it holds no dataclass and imports only absolute names.
"""

from pathlib import Path

from asearcher_plugin.agent.executor import AgentExecutor as _AgentExecutor
from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload


class AgentExecutor(_AgentExecutor):
    """The plugin's agent, with every model call going through the scripted engine of its rollout actor."""

    def __init__(self):
        super().__init__()
        self.workload = Workload.from_run_config()
        self._engines: dict[int, ScriptedEngine] = {}

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None):
        engine = self._engines.get(id(llm_engine))
        if engine is None:
            engine = self._engines[id(llm_engine)] = ScriptedEngine(llm_engine, self.workload, hf_tokenizer)
        return await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)


if __name__ == "__main__":
    print(Path(__file__).resolve())
