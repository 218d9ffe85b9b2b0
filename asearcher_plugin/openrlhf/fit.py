"""Does a recipe fit the cluster its `resources:` names? Checked before anything starts.

GPUs: what OpenRLHF 0.11.2's `train()` (`cli/train_ppo_ray.py`) places, read from its code: vLLM engines x tensor
parallel (in the actor's placement group only with `colocate_all` and no async), the policy actors, the reference when
`algo.kl.init_coef > 0` (on the actor's GPUs with `colocate_actor_ref` / `colocate_all`), a critic and a reward model
when named. A placement group that asks for more than the cluster has waits forever in `ray.get(pg.ready())`.

Memory per GPU: estimates from the model's shape (its `config.json` when the path is local, else `KNOWN_MODELS`), not
measurements:
- an engine holds bf16 weights / tensor parallel, and its KV cache gets `gpu_memory_utilization` x memory minus the
  weights and `ENGINE_OVERHEAD_GB`; vLLM refuses to start when one `data.max_len` sequence does not fit in it;
- a policy actor holds its model states (ZeRO-3: 16 bytes a parameter split over the actors: bf16 weight and
  gradient, float32 master weight and Adam's two moments; ZeRO-2: the bf16 weights whole, the rest split), the logits
  of its largest micro-batch (bf16, the float32 copy OpenRLHF makes in `models/actor.py`, and its gradient: 10 bytes a
  token and vocabulary entry) and the activations (with gradient checkpointing, each layer's input kept and one layer
  recomputed).
The lower bound (model states, float32 logits, checkpointed inputs) over the memory refuses; the estimate over 90%
of it warns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

GB = 1e9
ENGINE_OVERHEAD_GB = 2.0  # vLLM's activations at profiling, CUDA graphs, NCCL buffers: an allowance, not measured
TIGHT = 0.9  # an estimate above this share of a GPU's memory is reported as tight


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    tied: bool = False

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> int:
        attn = self.hidden * self.heads * self.dim * 2 + self.hidden * self.kv_heads * self.dim * 2
        layer = attn + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


# From each model's published config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, vocab_size, head_dim, tie_word_embeddings), for recipes that name a hub model.
_QWEN25_7B = ModelShape(3584, 18944, 28, 28, 4, 152064)
_QWEN25_14B = ModelShape(5120, 13824, 48, 40, 8, 152064)
_QWEN25_32B = ModelShape(5120, 27648, 64, 40, 8, 152064)
KNOWN_MODELS = {
    "Qwen/Qwen2.5-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen2.5-14B": _QWEN25_14B,
    "Qwen/Qwen2.5-14B-Instruct": _QWEN25_14B,
    "Qwen/Qwen2.5-32B": _QWEN25_32B,
    "Qwen/Qwen2.5-32B-Instruct": _QWEN25_32B,
    "Qwen/QwQ-32B": _QWEN25_32B,
    "Qwen/Qwen3-8B": ModelShape(4096, 12288, 36, 32, 8, 151936, head_dim=128),
}


def model_shape(name: str) -> ModelShape | None:
    """A local model folder's config.json, else the table; None when neither knows it."""
    config = Path(name) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        c = c.get("text_config", c)
        return ModelShape(
            hidden=c["hidden_size"],
            intermediate=c["intermediate_size"],
            layers=c["num_hidden_layers"],
            heads=c["num_attention_heads"],
            kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
            vocab=c["vocab_size"],
            head_dim=c.get("head_dim") or 0,
            tied=bool(c.get("tie_word_embeddings", False)),
        )
    return KNOWN_MODELS.get(name)


@dataclass
class Fit:
    gpus: dict[str, int]  # role: GPUs of its own
    cluster_gpus: int | None
    memory: list[tuple[str, float, str]] = field(default_factory=list)  # (what, GB a GPU, how)
    problems: list[str] = field(default_factory=list)  # refused: it cannot start or cannot fit
    warnings: list[str] = field(default_factory=list)

    @property
    def gpus_needed(self) -> int:
        return sum(self.gpus.values())

    @property
    def asked(self) -> str:
        return describe(self.gpus)

    def summary(self) -> str:
        of = f" of {self.cluster_gpus}" if self.cluster_gpus is not None else " (resources: names none)"
        lines = [f"GPUs: {self.asked} = {self.gpus_needed}{of}"]
        lines += [f"memory a GPU, {what}: {gb:.1f} GB ({how})" for what, gb, how in self.memory]
        lines += [f"tight: {w}" for w in self.warnings]
        lines += [f"does not fit: {p}" for p in self.problems]
        return "\n".join(lines)


def _group(args, role: str) -> int:
    section = getattr(args, role)
    return int(section.num_nodes) * int(section.num_gpus_per_node)


def gpus_asked(args) -> dict[str, int]:
    """The GPUs each role takes for itself, as `train()` places them."""
    t, colocate_all = args.train, bool(args.train.colocate_all)
    engines = int(args.vllm.num_engines or 0) * int(args.vllm.tensor_parallel_size)
    if colocate_all and not t.async_enable:
        engines = 0  # the engines share the actor's placement group
    out = {"vLLM": engines, "policy": _group(args, "actor")}
    if args.algo.kl.init_coef > 0 and not (t.colocate_actor_ref or colocate_all):
        out["reference"] = _group(args, "ref")
    if args.critic.model_name_or_path and not colocate_all:
        out["critic"] = _group(args, "critic")
    if not args.reward.remote_url and not colocate_all and not t.colocate_critic_reward:
        out["reward"] = _group(args, "reward")
    return out


def describe(gpus: dict[str, int]) -> str:
    return " + ".join(f"{n} {role}" for role, n in gpus.items() if n) or "none"


def micro_batch_tokens(args, per_call: bool) -> int:
    """The most tokens one training micro-batch holds (padding included)."""
    if per_call or args.train.dynamic_batch_enable:  # a sequence longer than the budget is a micro-batch alone
        return max(int(args.train.max_tokens_per_gpu), int(args.data.max_len))
    return int(args.train.micro_batch_size) * int(args.data.max_len)


def check_fit(args, resources, *, per_call: bool = False, in_flight: int | None = None) -> Fit:
    """`args`: OpenRLHF's parsed args; `resources`: the recipe's (GPUs not counted against it when it names none:
    a --cpu recipe; the launcher counts them against the Ray cluster too); `in_flight`: trajectories the scheduler
    admits."""
    nodes, per_node = getattr(resources, "nodes", None) or 1, getattr(resources, "gpus_per_node", None)
    fit = Fit(gpus_asked(args), nodes * per_node if per_node else None)
    if fit.cluster_gpus is not None:
        if fit.gpus_needed > fit.cluster_gpus:
            fit.problems.append(
                f"the flags ask for {fit.gpus_needed} GPUs ({fit.asked}) and resources: has {nodes} x {per_node}: "
                "OpenRLHF would wait for a placement group forever"
            )
        for role, count in (("vllm.tensor_parallel_size", args.vllm.tensor_parallel_size),
                            ("actor.num_gpus_per_node", args.actor.num_gpus_per_node)):  # fmt: skip
            if int(count) > per_node:
                fit.problems.append(f"{role} {count} is more than the {per_node} GPUs of a node")
    memory = getattr(resources, "gpu_memory_gb", None)
    shape = model_shape(str(args.actor.model_name_or_path))
    if memory and shape:
        _engine_memory(fit, args, shape, memory, in_flight)
        _trainer_memory(fit, args, shape, memory, per_call)
    elif memory:
        fit.warnings.append(f"memory not estimated: no config.json for {args.actor.model_name_or_path} here")
    return fit


def _engine_memory(fit: Fit, args, shape: ModelShape, memory: float, in_flight: int | None) -> None:
    engines = int(args.vllm.num_engines or 0)
    if not engines:
        return
    tp = int(args.vllm.tensor_parallel_size)
    weights = shape.params * 2 / tp / GB
    kv_token = 2 * shape.layers * max(shape.kv_heads / tp, 1) * shape.dim * 2  # K and V, bf16, this GPU's heads
    budget = memory * float(args.vllm.gpu_memory_utilization)
    tokens = max(0.0, (budget - weights - ENGINE_OVERHEAD_GB) * GB / kv_token)
    params = f"{shape.params / 1e9:.1f}B parameters in bf16 / tensor parallel {tp}"
    fit.memory.append(("vLLM weights", weights, params))
    max_len = int(args.data.max_len)
    held = f"{tokens:,.0f} tokens, {tokens / max_len:.0f} sequences of data.max_len {max_len}"
    if in_flight:  # not a warning: trajectories waiting on tools hold no KV, and vLLM preempts rather than fails
        held += f"; {in_flight / engines:.0f} trajectories in flight an engine"
    fit.memory.append(("vLLM KV cache", budget - weights - ENGINE_OVERHEAD_GB, held))
    if tokens < max_len:
        fit.problems.append(
            f"an engine's KV cache holds {tokens:,.0f} tokens, less than one data.max_len sequence ({max_len}): "
            "vLLM refuses to start; raise vllm.gpu_memory_utilization or vllm.tensor_parallel_size"
        )


def _trainer_memory(fit: Fit, args, shape: ModelShape, memory: float, per_call: bool) -> None:
    n = int(args.actor.num_nodes) * int(args.actor.num_gpus_per_node)
    p, stage = shape.params, int(args.ds.zero_stage)
    optimizer = 0 if args.ds.adam_offload else 12
    split = {3: (0, 4 + optimizer), 2: (2, 2 + optimizer), 1: (4, optimizer)}.get(stage, (4 + optimizer, 0))
    states = (p * split[0] + p * split[1] / n) / GB
    t = micro_batch_tokens(args, per_call)
    logits = t * shape.vocab * 10 / GB
    kept = shape.layers * t * shape.hidden * 2 / GB
    layer = t * (10 * shape.hidden + 4 * shape.intermediate) * 2 / GB
    activations = kept + layer if args.actor.gradient_checkpointing_enable else shape.layers * layer
    estimate, lower = states + logits + activations, states + t * shape.vocab * 4 / GB + kept
    fit.memory += [
        ("policy model states", states, f"ZeRO-{stage} over {n} actors"),
        ("policy logits", logits, f"{t} tokens a micro-batch x {shape.vocab} vocabulary"),
        ("policy activations", activations, "gradient checkpointing" if args.actor.gradient_checkpointing_enable
         else "no gradient checkpointing"),
    ]  # fmt: skip
    where = (
        f"a policy actor needs about {estimate:.0f} GB at its largest micro-batch ({t} tokens; at least "
        f"{lower:.0f} GB) of {memory:g} GB"
    )
    advice = "lower train.max_tokens_per_gpu (and data.max_len with per_call), or add policy GPUs for the states"
    if lower > memory:
        fit.problems.append(f"{where}: {advice}")
    elif estimate > TIGHT * memory:
        fit.warnings.append(f"{where}: it may run out of memory when the longest sequences come; {advice}")
