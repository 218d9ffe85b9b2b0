"""The token sequence of one trajectory as it grows: the prompt, the model's turns, the tool output between them."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sequences import call_logprobs


@dataclass
class Transcript:
    """`action_ranges` are the spans the model generated; `logprobs` (None unless asked for) holds one value per
    token, 0 outside those spans. `texts` is joined once at the end: concatenating every turn is quadratic."""

    tokens: list[int]
    texts: list[str]
    logprobs: list[float] | None
    action_ranges: list[tuple[int, int]] = field(default_factory=list)
    # (token span, short ids, index in texts, short text) of a block to replace by its stub after the next call
    pending_stub: tuple | None = None

    @classmethod
    def start(cls, text: str, ids: list[int], want_logprobs: bool) -> Transcript:
        return cls(list(ids), [text], [0.0] * len(ids) if want_logprobs else None)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def add_turn(self, out) -> None:
        """A model call's output (vLLM's `CompletionOutput`); then the block shown to that call is stubbed."""
        self.action_ranges.append((len(self.tokens), len(self.tokens) + len(out.token_ids)))
        self.tokens.extend(out.token_ids)
        if self.logprobs is not None:
            self.logprobs += call_logprobs(out)
        self.texts.append(out.text)
        if self.pending_stub is not None:
            self._stub(*self.pending_stub)
            self.pending_stub = None

    def add_feedback(self, ids: list[int], text: str, short_ids: list[int] | None = None, short: str = "") -> None:
        """Tool output; with `short_ids` it is shown whole to the next call only, then replaced by `short`."""
        if short_ids is not None:
            self.pending_stub = ((len(self.tokens), len(self.tokens) + len(ids)), short_ids, len(self.texts), short)
        self.tokens.extend(ids)
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(ids)
        self.texts.append(text)

    def _stub(self, span: tuple[int, int], short_ids: list[int], text_index: int, short_text: str) -> None:
        """ASearcher tokenises the full and the short text of a block separately and concatenates token ids; so do
        we. Turns generated after the block move with it."""
        start, end = span
        shift = len(short_ids) - (end - start)
        self.tokens = self.tokens[:start] + short_ids + self.tokens[end:]
        if self.logprobs is not None:
            self.logprobs = self.logprobs[:start] + [0.0] * len(short_ids) + self.logprobs[end:]
        self.action_ranges = [(a + shift, b + shift) if a >= end else (a, b) for a, b in self.action_ranges]
        self.texts[text_index] = short_text
