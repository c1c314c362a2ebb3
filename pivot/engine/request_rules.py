"""The embedded engine's rules for a request: what it refuses (each in one line, before it takes
any of it) and when a sequence is done."""

from __future__ import annotations

from typing import Any

from pivot.engine.sequence import Request, Sequence
from pivot.model import ModelArgs


def check_request(
    request: Request, args: ModelArgs, max_len: int, has_tokenizer: bool
) -> list[int]:
    """The request's tokens (prompt, then those generated before), or ValueError saying what is
    wrong: no prompt, a token outside the vocabulary, log-probs that do not match the tokens, no
    room left to generate within `max_len`, a budget already spent, stop strings without a
    tokenizer to find them with."""
    rid, params = request.id, request.params
    if not request.prompt_ids:
        raise ValueError(f"request {rid}: prompt_ids is empty")
    tokens = list(request.prompt_ids) + list(request.output_ids)
    bad = [t for t in tokens if not 0 <= t < args.vocab_size]
    if bad:
        raise ValueError(
            f"request {rid}: token id {bad[0]} is outside the vocabulary [0, {args.vocab_size})"
        )
    if len(request.output_logprobs) != len(request.output_ids):
        raise ValueError(
            f"request {rid}: {len(request.output_ids)} output_ids but "
            f"{len(request.output_logprobs)} output_logprobs"
        )
    if len(tokens) >= max_len:
        raise ValueError(
            f"request {rid}: {len(tokens)} tokens leave no room to generate within the engine's "
            f"max length {max_len} (min of max_position_embeddings={args.max_position_embeddings} "
            "and the KV capacity)"
        )
    if len(request.output_ids) >= params.max_new_tokens:
        raise ValueError(
            f"request {rid}: already has {len(request.output_ids)} >= max_new_tokens tokens"
        )
    if params.stop and not has_tokenizer:
        raise ValueError(f"request {rid}: stop strings need an engine built with a tokenizer")
    return tokens


def finish_reason(
    seq: Sequence, token: int, eos_ids: frozenset[int], max_len: int, tokenizer: Any
) -> str | None:
    """'stop' (an EOS token unless ignored, or a stop string in the decoded tail), 'length' (the
    budget or the engine's max length reached), or None to go on, after `token` was appended."""
    p = seq.params
    if not p.ignore_eos and token in eos_ids:
        return "stop"
    if p.stop:
        tail = tokenizer.decode(seq.token_ids[seq.prompt_len :][-(max(map(len, p.stop)) + 4) :])
        if any(s in tail for s in p.stop):
            return "stop"
    if seq.num_generated >= p.max_new_tokens or len(seq.token_ids) >= max_len:
        return "length"
    return None
