"""The model's chat template, with the tool schemas, as agent_type tool-calls uses it.

Two renders matter. A call's prompt as the template renders the conversation so far (`prompt_ids`): what a deployed
model sees. And the tokens the template puts between one assistant turn and the next call (`between_ids`): the end
of the assistant's turn the model did not sample itself, the tool messages, the next assistant header. They are cut
from a render whose assistant message is a sentinel, so the model's own tokens are never re-tokenised: a training
sequence is the prompt, the sampled ids, `between_ids`, the sampled ids, ...
"""

from __future__ import annotations

from ..settings.config import ConfigError

SENTINEL = "\x00assistant-turn\x00"


class ChatRender:
    def __init__(self, tokenizer, tools: list[dict]):
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.special = set(getattr(tokenizer, "all_special_ids", None) or [])

    def text(self, messages: list[dict], generation: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation
        )

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """`apply_chat_template(messages, tools=..., add_generation_prompt=True)` as token ids."""
        return self.tokenizer(text=self.text(messages), add_special_tokens=False)["input_ids"]

    def between_ids(self, before: list[dict], after: list[dict], sampled: list[int]) -> list[int]:
        """What follows an assistant turn that came after `before` and sampled `sampled`: the rest of its turn, the
        messages `after` and the next assistant header, as the template renders them."""
        rendered = self.text([*before, {"role": "assistant", "content": SENTINEL}, *after])
        cut = rendered.rfind(SENTINEL)
        if cut < 0:
            raise ConfigError("the chat template does not copy an assistant message's content into its rendering")
        tail = rendered[cut + len(SENTINEL) :]
        if sampled and sampled[-1] in self.special:  # the model sampled its end-of-turn token itself
            end = self.tokenizer.decode(sampled[-1:], skip_special_tokens=False)
            tail = tail.removeprefix(end)
        return self.tokenizer(text=tail, add_special_tokens=False)["input_ids"]

    def check(self) -> None:
        """A template that drops the tool schemas or the assistant's tool calls would train a model on calls it was
        never shown: refused at the first trajectory, naming what is missing."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError("agent_type tool-calls needs a tokenizer with a chat template (a chat model's)")
        if not self.tools:
            return
        probe = [{"role": "user", "content": "q"}]
        if self.text(probe) == self.tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True):
            raise ConfigError(
                "the tokenizer's chat template ignores tools=: agent_type tool-calls needs a template with function "
                "calling (Qwen2.5/Qwen3, Llama 3.1+, Hermes; a tiny model made by an older `asearcher "
                "make-tiny-model` lacks it: make it again)"
            )
        name = self.tools[0]["function"]["name"]
        call = {"type": "function", "function": {"name": name, "arguments": {"probe_argument": 1}}}
        shown = self.text([*probe, {"role": "assistant", "content": "", "tool_calls": [call]}], generation=False)
        if "probe_argument" not in shown:
            raise ConfigError("the tokenizer's chat template does not render an assistant message's tool_calls")
