"""`asearcher make-tiny-model DIR`: a tiny random Qwen2-architecture model for smoke tests anywhere.

No model hub is needed: the byte-level BPE tokenizer is trained on the bundled Wikipedia sample,
the weights are randomly initialised from a seed, and a ChatML chat template is attached. Its
outputs are noise; it exists to run the whole machinery (agent, engines, scheduler) on a laptop.
"""

from __future__ import annotations

from pathlib import Path

# ChatML, with Qwen2.5's (Hermes-style) function calling: with `tools=`, a system turn lists their schemas; an
# assistant turn's tool_calls are `<tool_call>{json}</tool_call>`; tool results are `<tool_response>` blocks of one
# user turn. Without tools it renders exactly plain ChatML.
CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and tools and loop.first %}"
    "{%- elif message['role'] == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant' }}{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{\\"name\\": \\"\' }}{{- tool_call.name }}{{- \'\\", \\"arguments\\": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The action tags become single tokens, so even a random model emits whole actions now and then.
ACTION_TOKENS = [
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<access>",
    "</access>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
]


# Written beside the weights, so a report can say its answers come from an untrained random model.
RANDOM_MARKER = "asearcher-random-weights.json"


def is_random_tiny_model(path: str | Path | None) -> bool:
    return bool(path) and (Path(path) / RANDOM_MARKER).is_file()


def _sample_texts(limit_chars: int = 3_000_000):
    from local_retriever.sample import sample_dump_path
    from local_retriever.wikitext import clean_wikitext
    from local_retriever.wikixml import iter_pages

    total = 0
    for page in iter_pages(sample_dump_path()):
        if page.ns == 0 and not page.redirect:
            text = clean_wikitext(page.text)
            total += len(text)
            yield text
            if total > limit_chars:
                return


def ensure_tiny_model(out_dir: str | Path) -> Path:
    """The tiny model at `out_dir`, made with the defaults unless already there."""
    out = Path(out_dir)
    return out if (out / "config.json").is_file() else make_tiny_model(out)


def make_tiny_model(
    out_dir: str | Path,
    vocab_size: int = 4096,
    hidden_size: int = 128,
    layers: int = 2,
    heads: int = 2,  # head_dim 64: the smallest head vLLM's CPU attention kernels take (16 is refused)
    kv_heads: int = 1,
    max_positions: int = 8192,
    seed: int = 0,
) -> Path:
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_sample_texts(), trainer=trainer)
    # Single tokens, but not special ones: decoding with skip_special_tokens (vLLM's and HF's default) would drop
    # them from a model's text, and the agent would never see an action the model wrote.
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in ACTION_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(out)
    import json

    (out / RANDOM_MARKER).write_text(json.dumps({"random_weights": True, "seed": seed}) + "\n")
    return out
