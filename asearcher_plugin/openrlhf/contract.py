"""What the streaming scheduler relies on in OpenRLHF 0.11.2, checked against the installed sources.

`check_contract()` reads names, signatures, the attributes `StreamingGenerateSamplesActor` takes from its parent,
the 4-tuple `generate_samples` returns and the slot token being the trainer's `global_step`, so an OpenRLHF upgrade
that moves any of them fails at install with the list of what changed, not mid-run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

from openrlhf.trainer import ppo_trainer_async as async_trainer
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor


class OpenRLHFContractError(RuntimeError):
    """The installed OpenRLHF lacks something the streaming scheduler relies on."""


def _method_ast(cls, name: str) -> ast.FunctionDef | None:
    fn = getattr(cls, name, None)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (TypeError, OSError, SyntaxError):
        return None
    return tree.body[0] if tree.body and isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef) else None


def _self_attributes_set(fn: ast.AST | None) -> set[str]:
    targets = [
        t
        for node in ast.walk(fn or ast.Module(body=[], type_ignores=[]))
        if isinstance(node, ast.Assign)
        for target in node.targets
        for t in (target.elts if isinstance(target, ast.Tuple) else [target])
    ]
    return {
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _calls(fn: ast.AST | None, attr: str):
    """Calls `<anything>.attr(...)` in `fn`."""
    for node in ast.walk(fn or ast.Module(body=[], type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr:
            yield node


def _unpacks_generate_samples_into(fn: ast.AST | None) -> int | None:
    """How many names `fit` unpacks `self.samples_generator.generate_samples(...)` into."""
    for node in ast.walk(fn or ast.Module(body=[], type_ignores=[])):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "generate_samples":
                target = node.targets[0]
                return len(target.elts) if isinstance(target, ast.Tuple) else 1
    return None


def _params(fn) -> list[str]:
    """Parameter names, without the `_ray_trace_ctx` Ray adds to actor methods."""
    try:
        return [p for p in inspect.signature(fn).parameters if p != "_ray_trace_ctx"]
    except (TypeError, ValueError):
        return []


def check_contract() -> None:
    """What `install()` and `StreamingSamplesGenerator` rely on in OpenRLHF 0.11.2, checked against the installed
    sources: names, signatures, the attributes the subclass reads, the 4-tuple `generate_samples` returns, and the
    slot token being the trainer's `global_step`."""
    problems = []
    current = async_trainer.GenerateSamplesActor
    if hasattr(getattr(current, "__ray_actor_class__", None), "scheduler_settings"):  # ours, installed
        current = stock_generator_actor()
    actor = getattr(current, "__ray_actor_class__", None)
    trainer = getattr(async_trainer.PPOTrainerAsync, "__ray_actor_class__", None)
    training = getattr(getattr(async_trainer, "TrainingActor", None), "__ray_actor_class__", None)
    if actor is None or trainer is None or training is None:
        problems.append("GenerateSamplesActor / PPOTrainerAsync / TrainingActor are no longer @ray.remote classes")
    else:
        params = _params(actor.__init__)
        for name in ("pretrain", "strategy", "vllm_engines", "vllm_lock", "rollout_queue", "rollout_slots"):
            if name not in params:
                problems.append(f"GenerateSamplesActor.__init__ has no {name!r} parameter")
        init = _method_ast(actor, "__init__")
        if "SamplesGenerator" not in actor.__init__.__code__.co_names:
            problems.append("GenerateSamplesActor no longer builds a SamplesGenerator")
        missing = {"samples_generator", "prompts_dataloader", "eval_dataloader", "rollout_slots"}
        missing -= _self_attributes_set(init)
        if missing:
            problems.append(f"GenerateSamplesActor.__init__ no longer sets self.{', self.'.join(sorted(missing))}")
        if "GenerateSamplesActor" not in trainer.__init__.__code__.co_names:
            problems.append("PPOTrainerAsync no longer creates its generator from the module's GenerateSamplesActor")
        fit = _method_ast(actor, "fit")
        if not any(
            isinstance(c.func.value, ast.Attribute) and c.func.value.attr == "rollout_slots"
            for c in _calls(fit, "get")
        ):
            problems.append("GenerateSamplesActor.fit no longer takes a token from self.rollout_slots")
        if (got := _unpacks_generate_samples_into(fit)) != 4:
            problems.append(
                f"GenerateSamplesActor.fit unpacks generate_samples() into {got} values, not "
                "(samples, pass_rate, prompts_consumed, exhausted)"
            )
        puts = [c for c in _calls(_method_ast(training, "fit"), "put") if "rollout_slots" in ast.unparse(c.func)]
        if not puts or not all(
            c.args and isinstance(c.args[0], ast.Name) and c.args[0].id == "global_step" for c in puts
        ):
            problems.append("TrainingActor.fit no longer returns its global_step as the slot token")
    generator_params = _params(SamplesGenerator.__init__)
    for name in ("strategy", "prompts_dataloader", "eval_dataloader", "tokenizer", "vllm_engines"):
        if name not in generator_params:
            problems.append(f"SamplesGenerator.__init__ has no {name!r} parameter")
    if not {"strategy", "tokenizer", "vllm_engines", "args"} <= _self_attributes_set(
        _method_ast(SamplesGenerator, "__init__")
    ):
        problems.append("SamplesGenerator.__init__ no longer sets self.strategy/tokenizer/vllm_engines/args")
    if _params(getattr(SamplesGenerator, "_dispatch_prompts_to_vllm", None))[:3] != ["self", "prompts", "labels"]:
        problems.append("SamplesGenerator._dispatch_prompts_to_vllm(self, prompts, labels, ...) is gone")
    if _params(getattr(SamplesGenerator, "_process_response_into_experience", None))[:2] != ["self", "response"]:
        problems.append("SamplesGenerator._process_response_into_experience(self, response, ...) is gone")
    if not callable(getattr(SamplesGenerator, "generate_samples", None)):
        problems.append("SamplesGenerator.generate_samples is gone")
    engine = getattr(RolloutRayActor, "__ray_actor_class__", RolloutRayActor)
    wanted = ["self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "num_samples", "images"]
    if _params(getattr(engine, "generate_responses", None)) != wanted:
        problems.append(f"RolloutRayActor.generate_responses no longer takes ({', '.join(wanted[1:])})")
    if problems:
        raise OpenRLHFContractError(
            "the installed OpenRLHF does not match what the streaming scheduler was built "
            "for (0.11.2): " + "; ".join(problems)
        )


_STOCK: dict = {}


def stock_generator_actor():
    """OpenRLHF's own GenerateSamplesActor (the undecorated class), also after `install()`."""
    return _STOCK.setdefault("actor", async_trainer.GenerateSamplesActor)
