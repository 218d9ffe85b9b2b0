"""A recipe that cannot fit is refused before anything starts: the GPUs the flags ask for (as OpenRLHF 0.11.2 places
them) against `resources:` and the Ray cluster, and per-GPU memory estimates against `gpu_memory_gb`."""

import subprocess
import sys

import pytest

from asearcher_plugin.openrlhf.fit import KNOWN_MODELS, model_shape

pytest.importorskip("openrlhf")


def checked(recipe: str, *overrides: str):
    from asearcher_plugin.recipe import Recipe

    return Recipe.load(recipe, list(overrides)).check()


def memory(fit, what: str) -> float:
    return next(gb for w, gb, _ in fit.memory if w == what)


def test_published_model_sizes():
    # parameter counts from the model cards (Qwen2.5: 7.61B, 14.7B, 32.5B; Qwen3-8B: 8.2B), not from our formula
    assert KNOWN_MODELS["Qwen/Qwen2.5-7B"].params == pytest.approx(7.61e9, rel=0.01)
    assert KNOWN_MODELS["Qwen/Qwen2.5-14B"].params == pytest.approx(14.7e9, rel=0.01)
    assert KNOWN_MODELS["Qwen/Qwen2.5-32B"].params == pytest.approx(32.5e9, rel=0.015)
    assert KNOWN_MODELS["Qwen/Qwen3-8B"].params == pytest.approx(8.2e9, rel=0.01)


def test_a_local_model_is_read_from_its_config(tiny_model):
    shape = model_shape(str(tiny_model))
    assert (shape.hidden, shape.layers, shape.vocab) == (128, 2, 4106)  # the tiny model's printed Qwen2 layout


def test_the_shipped_one_node_recipe_fits_with_its_figures():
    fit = checked("local_7b_1node").fit()
    assert fit.gpus == {"vLLM": 4, "policy": 4} and fit.cluster_gpus == 8  # no reference: kl.init_coef is 0
    assert not fit.problems and not fit.warnings, fit.summary()
    # 7.6B x 2 bytes; 72 GB (0.9 x 80) less weights and the 2 GB allowance over 56 KiB a token (28 layers x 4 KV
    # heads x 128 x K,V x bf16); ZeRO-3: 16 bytes a parameter over 4 actors
    assert memory(fit, "vLLM weights") == pytest.approx(15.2, abs=0.1)
    assert "955," in next(how for w, _, how in fit.memory if w == "vLLM KV cache")
    assert memory(fit, "policy model states") == pytest.approx(30.5, abs=0.1)
    assert memory(fit, "policy logits") == pytest.approx(8000 * 152064 * 10 / 1e9, rel=1e-6)


def test_more_engines_than_the_node_has_is_refused_by_dry_run():
    cli = [sys.executable, "-m", "asearcher_plugin.cli", "train", "local_7b_1node", "--dry-run"]
    ran = subprocess.run([*cli, "--set", "openrlhf.vllm.num_engines=8"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "GPUs: 8 vLLM + 4 policy = 12 of 8" in ran.stdout
    assert "does not fit: the flags ask for 12 GPUs (8 vLLM + 4 policy) and resources: has 1 x 8" in ran.stderr
    assert "arguments accepted" not in ran.stdout


@pytest.mark.parametrize(
    "overrides, gpus",
    [
        # a reference of its own, on OpenRLHF's default ref.num_gpus_per_node (8): more than the node has
        (["openrlhf.algo.kl.init_coef=0.01"], {"vLLM": 4, "policy": 4, "reference": 8}),
        (
            ["openrlhf.algo.kl.init_coef=0.01", "openrlhf.ref.num_gpus_per_node=4"],
            {"vLLM": 4, "policy": 4, "reference": 4},
        ),
        (["openrlhf.algo.kl.init_coef=0.01", "openrlhf.train.colocate_actor_ref=true"], {"vLLM": 4, "policy": 4}),
        (["openrlhf.vllm.tensor_parallel_size=2"], {"vLLM": 8, "policy": 4}),
    ],
)
def test_gpus_are_counted_as_openrlhf_places_them(overrides, gpus):
    fit = checked("local_7b_1node", *overrides).fit()
    assert fit.gpus == gpus
    assert bool(fit.problems) == (sum(gpus.values()) > 8)


def test_an_engine_whose_kv_cache_cannot_hold_one_sequence_is_refused():
    fit = checked("local_7b_1node", "openrlhf.vllm.gpu_memory_utilization=0.2").fit()  # 16 GB: the weights alone
    assert any("less than one data.max_len sequence (8000)" in p for p in fit.problems), fit.summary()


def test_long_micro_batches_warn_and_a_budget_past_the_memory_is_refused():
    long = checked("local_7b_long").fit()  # 32,768-token micro-batches: float32 logits of 152k entries a token
    assert not long.problems and any("a policy actor needs about 94 GB" in w for w in long.warnings), long.summary()
    over = checked("local_7b_long", "openrlhf.train.max_tokens_per_gpu=131072").fit()
    assert any("at least" in p and "of 80 GB" in p for p in over.problems), over.summary()


@pytest.mark.ray
def test_the_launcher_refuses_more_gpus_than_the_ray_cluster_has():
    ray = pytest.importorskip("ray")
    from asearcher_plugin.launch import LaunchError, check_cluster_gpus

    ray.init(address="local", num_cpus=1, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        check_cluster_gpus(checked("cpu_tiny").args)  # 1 engine + 1 policy actor: fits
        with pytest.raises(LaunchError, match=r"ask for 3 GPUs \(2 vLLM \+ 1 policy\) and the Ray cluster has 2"):
            check_cluster_gpus(checked("cpu_tiny", "openrlhf.vllm.num_engines=2").args)
    finally:
        ray.shutdown()
