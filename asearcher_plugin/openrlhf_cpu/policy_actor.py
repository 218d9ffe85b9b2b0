"""CPU stand-ins for OpenRLHF's `PolicyModelActor` and `ReferenceModelActor` (DeepSpeed ZeRO needs CUDA).

It answers every call OpenRLHF's trainer makes of the policy group, with real work on CPU:
`forward` (action log-probs through OpenRLHF's own `Actor` wrapper), `append` + `fit` (one
optimiser step per micro-batch on OpenRLHF's own `PolicyLoss`, IS correction included, with
plain AdamW instead of a DeepSpeed engine), `broadcast_to_vllm` (every parameter, one
`update_weight` call per engine and a gloo broadcast, as the NCCL path does), and
`save_checkpoint` / `get_checkpoint_states` / `save_model` (weights, optimiser and the client
states the trainer resumes from).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import ray
import torch
from openrlhf.trainer.ray.launcher import BaseModelActor

from .weight_sync import join_group

LATEST = "latest"
FIT_SECONDS_ENV = "ASEARCHER_CPU_FIT_SECONDS"


class CPUPolicyModelActor(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        from openrlhf.models import Actor, PolicyLoss
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.strategy, self.args = strategy, strategy.args
        args = self.args
        torch.manual_seed(args.train.seed)
        model = AutoModelForCausalLM.from_pretrained(pretrain, dtype=torch.float32)
        self.actor = Actor(model, temperature=args.rollout.temperature)
        self.actor.packing_samples = False  # set only when Actor loads from a path; packing needs flash-attn
        self.tokenizer = AutoTokenizer.from_pretrained(pretrain)
        self.optim = torch.optim.AdamW(
            self.actor.parameters(), lr=args.actor.adam.lr, betas=tuple(args.actor.adam.betas), eps=args.actor.adam.eps
        )
        self.loss_fn = PolicyLoss(
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold,
        )
        self.buffer: list = []
        self.fits = self.broadcasts = 0
        self.vllm_engines = vllm_engines
        self.checkpoint_states = self._load_checkpoint() if args.ckpt.load_enable else {}
        self._group = self._init_sync_group() if vllm_engines else None

    # -- experience making -----------------------------------------------------------------
    def forward(
        self, sequences, action_mask=None, attention_mask=None, packed_seq_lens=None, mm_train_inputs_list=None
    ):
        self.actor.eval()
        with torch.no_grad():
            return self.actor(sequences, action_mask, attention_mask)

    def empty_cache(self) -> None:
        pass  # no device memory to release

    # -- training --------------------------------------------------------------------------
    def append(self, experience):
        self.buffer.append(experience)

    def fit(self, kl_ctl: float = 0):
        self.actor.train()
        stats = []
        for _ in range(self.args.train.max_epochs):
            for exp in self.buffer:
                log_probs = self.actor(exp.sequences, exp.action_mask, attention_mask=exp.attention_mask)
                loss, clip_ratio, ppo_kl, vllm_kl, _ = self.loss_fn(
                    log_probs,
                    exp.action_log_probs,
                    exp.advantages,
                    action_mask=exp.action_mask,
                    rollout_log_probs=exp.rollout_log_probs,
                )
                self.optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.actor.parameters(), max(self.args.actor.max_norm, 1e-6))
                self.optim.step()
                stats.append(
                    {
                        "policy_loss": loss.item(),
                        "ppo_clip_ratio": float(clip_ratio),
                        **({"vllm_kl": float(vllm_kl)} if vllm_kl is not None else {}),
                    }
                )
        # A GPU training step of the benchmark's chosen length (the tiny model trains in milliseconds)
        time.sleep(float(os.environ.get(FIT_SECONDS_ENV, "0") or 0))
        self._log_fit()
        self.buffer.clear()
        self.fits += 1
        keys = stats[0].keys() if stats else ()
        return {k: sum(s[k] for s in stats) / len(stats) for k in keys} | {"actor_fits": float(self.fits)}

    def _log_fit(self):
        """What each update trained on, one JSON line per fit (`cpu_harness_fits.jsonl` beside the checkpoints)."""
        rows = [
            {
                "prompts": list(exp.prompts),
                "samples": int(exp.sequences.shape[0]),
                "info": {k: v.flatten().tolist() for k, v in exp.info.items() if isinstance(v, torch.Tensor)},
            }
            for exp in self.buffer
        ]
        path = Path(self.args.ckpt.path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / "cpu_harness_fits.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"fit": self.fits + 1, "time": time.time(), "experiences": rows}) + "\n")

    # -- weight sync -----------------------------------------------------------------------
    def _init_sync_group(self):
        with socket.socket() as sock:  # loopback: the CPU harness runs on one machine
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        world = len(self.vllm_engines) + 1
        refs = [
            engine.init_process_group.remote(
                "127.0.0.1", port, i + 1, world, "openrlhf", backend="gloo", use_ray=False
            )
            for i, engine in enumerate(self.vllm_engines)
        ]
        group = join_group("127.0.0.1", port, 0, world)
        ray.get(refs)
        return group

    def broadcast_to_vllm(self):
        resets = (
            [e.reset_prefix_cache.remote() for e in self.vllm_engines] if self.args.vllm.enable_prefix_caching else []
        )
        params = list(self.actor.model.named_parameters())
        for count, (name, param) in enumerate(params, 1):
            refs = [
                e.update_weight.remote(name, dtype=param.dtype, shape=param.shape, empty_cache=count == len(params))
                for e in self.vllm_engines
            ]
            self._group.broadcast(param.data.contiguous(), 0).wait()
            ray.get(refs)
        ray.get(resets)
        self.broadcasts += 1

    def get_stats(self) -> dict:
        return {"fits": self.fits, "broadcasts": self.broadcasts}

    # -- checkpoints -----------------------------------------------------------------------
    def _ckpt_dir(self) -> Path:
        return Path(self.args.ckpt.path) / "_actor"

    def save_checkpoint(self, tag, client_states=None, metric_value=None, metric_key=None):
        out = self._ckpt_dir() / tag
        out.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "model": self.actor.model.state_dict(),
                "optim": self.optim.state_dict(),
                "client_states": client_states or {},
            },
            out / "state.pt",
        )
        tmp = self._ckpt_dir() / f"{LATEST}.tmp"
        tmp.write_text(json.dumps({"tag": tag, "metric_value": metric_value, "metric_key": metric_key}))
        os.replace(tmp, self._ckpt_dir() / LATEST)

    def _load_checkpoint(self) -> dict:
        latest = self._ckpt_dir() / LATEST
        if not latest.is_file():
            return {}
        state = torch.load(self._ckpt_dir() / json.loads(latest.read_text())["tag"] / "state.pt", weights_only=False)
        self.actor.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        return state["client_states"]

    def get_checkpoint_states(self):
        return self.checkpoint_states

    def save_model(self):
        self.actor.model.save_pretrained(self.args.ckpt.output_dir)
        self.tokenizer.save_pretrained(self.args.ckpt.output_dir)

    def reload_states(self):
        pass  # --ds.enable_sleep offloads DeepSpeed states; nothing is offloaded here

    def offload_states(self):
        pass


class CPUReferenceModelActor(BaseModelActor):
    """CPU stand-in for `ReferenceModelActor`: the initial policy's log-probs, for the KL term."""

    def init_model_from_pretrained(self, strategy, pretrain):
        from openrlhf.models import Actor
        from transformers import AutoModelForCausalLM

        self.strategy = strategy
        model = AutoModelForCausalLM.from_pretrained(pretrain, dtype=torch.float32)
        self.actor = Actor(model, temperature=strategy.args.rollout.temperature).eval()
        self.actor.packing_samples = False

    def forward(
        self, sequences, action_mask=None, attention_mask=None, packed_seq_lens=None, mm_train_inputs_list=None
    ):
        with torch.no_grad():
            return self.actor(sequences, action_mask, attention_mask)

    def empty_cache(self) -> None:
        pass
