"""Per-call training sequences: every model call of a trajectory as a record, merged as ASearcher merges them.

A call whose input is an exact token-prefix extension of the current sequence (its input and output so far) is
merged into it: the tokens in between (tool output) join it unmasked-for-loss, the call's output becomes one more
action span. A call whose context changed (a page chunk replaced by its stub, the reasoning agent's rebuilt
prompt) starts a new sequence. Token ids are kept as the engine returned them, never re-tokenised, so each
sequence is exactly what some call saw and generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def call_logprobs(out) -> list[float]:
    """The log-prob of each generated token of a vLLM `CompletionOutput` (0.0 where the engine gave none)."""
    values = [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs or [])]
    return values + [0.0] * (len(out.token_ids) - len(values))


@dataclass
class Sequence:
    """One training sequence: `action_ranges` are the generated spans; `logprobs` one per token (0 elsewhere)."""

    tokens: list[int]
    logprobs: list[float] | None
    action_ranges: list[tuple[int, int]] = field(default_factory=list)
    turn_times: list[float] = field(default_factory=list)  # wall clock when each merged call began
    last_token_at: float | None = None

    def to_openrlhf(self) -> dict:
        """The per-sequence fields of OpenRLHF's trajectory dict."""
        return {
            "observation_tokens": self.tokens,
            "action_ranges": self.action_ranges,
            "rollout_log_probs": self.logprobs,
            "token_times": [self.turn_times[0] if self.turn_times else None, self.last_token_at],
            "turn_times": self.turn_times,
        }


class CallRecords:
    """The sequences of one trajectory, built call by call."""

    def __init__(self, want_logprobs: bool):
        self.want_logprobs = want_logprobs
        self.sequences: list[Sequence] = []

    def add(self, prompt_ids: list[int], out, started: float, ended: float) -> None:
        """One model call: the token ids it was given and its output (vLLM's `CompletionOutput`)."""
        current = self.sequences[-1] if self.sequences else None
        if current is None or not _extends(prompt_ids, current.tokens):
            current = Sequence([], [] if self.want_logprobs else None)
            self.sequences.append(current)
        context = list(prompt_ids[len(current.tokens) :])
        current.tokens.extend(context)
        start = len(current.tokens)
        current.tokens.extend(out.token_ids)
        current.action_ranges.append((start, len(current.tokens)))
        if current.logprobs is not None:
            current.logprobs += [0.0] * len(context) + call_logprobs(out)
        current.turn_times.append(started)
        current.last_token_at = ended

    def to_openrlhf(self) -> list[dict]:
        return [s.to_openrlhf() for s in self.sequences]


def _extends(prompt_ids: list[int], tokens: list[int]) -> bool:
    return len(prompt_ids) >= len(tokens) and prompt_ids[: len(tokens)] == tokens
