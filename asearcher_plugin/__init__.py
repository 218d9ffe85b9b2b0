"""asearcher-plugin: long-horizon search agents for OpenRLHF."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# Modules that once sat at the package root, by their old name. Users' recipes and agent files name them
# (`reward.function: asearcher_plugin.reward:f1`, `from asearcher_plugin.config import RunConfig`), so the old
# name still imports: it is the moved module itself (one module object, registered under both names).
MOVED = {
    "config": "settings.config",
    "yamlio": "settings.yamlio",
    "reward": "rewards.reward",
    "reward_function": "rewards.reward_function",
    "judge": "rewards.judge",
    "tool_registry": "tools.registry",
    "template_check": "utils.template_check",
    "dotted": "utils.dotted",
    "text": "utils.text",
    "jsonl": "utils.jsonl",
    "disk_cache": "utils.disk_cache",
    "eval_cli": "commands.eval_cli",
    "quickstart": "commands.quickstart",
    "rollout": "commands.rollout",
    "local_inputs": "commands.local_inputs",
    "cli_help": "commands.cli_help",
}


class _MovedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.specs = {}

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(f"{spec.name} moved to {new}; the old name will be removed", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the moved module has run already; the import system gave it the old name's spec: it keeps its own
        module.__spec__ = self.specs.pop(module.__spec__.name)


sys.meta_path.append(_MovedModule())
