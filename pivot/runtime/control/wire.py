"""Typed MessagePack for control messages: nothing read from a socket is ever unpickled.

A message travels as (type code, payload). The code is its index in `messages.MESSAGE_TYPES`,
so a frame can only ever become one of those classes; the payload is decoded by msgspec against
that class's annotations (ints stay ints, a token list is a `list[int]`, nested records are
their own dataclasses, `__post_init__` checks run). Decoding builds plain data: it never imports,
calls or looks up anything named by the input, which is what makes pickle a remote shell.
Tensors are refused at encode time (msgspec has no encoder for them), so none can sneak onto a
message as a pickle; every field is a list of numbers or a record of them.
"""

from __future__ import annotations

import msgspec

from pivot.runtime.control.messages import MESSAGE_TYPES, Message


class WireError(ValueError):
    """A payload that is not a well-formed message of its declared type."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: tuple[msgspec.msgpack.Decoder[Message], ...] = tuple(
    msgspec.msgpack.Decoder(t) for t in MESSAGE_TYPES
)
_CODES = {t: i for i, t in enumerate(MESSAGE_TYPES)}
_BATCH = msgspec.msgpack.Decoder(list[tuple[int, bytes]])


def encode(msg: object) -> tuple[int, bytes]:
    """(type code, MessagePack payload) of a control message; anything else raises TypeError."""
    code = _CODES.get(type(msg))
    if code is None:
        raise TypeError(
            f"not a control message: {type(msg).__name__} (see pivot/runtime/control/messages.py)"
        )
    return code, _ENCODER.encode(msg)


def decode(code: int, payload: bytes | memoryview) -> Message:
    """The message of type `code` in `payload`; anything else raises WireError."""
    if not 0 <= code < len(_DECODERS):
        raise WireError(f"unknown message type {code}")
    try:
        return _DECODERS[code].decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WireError(f"malformed {MESSAGE_TYPES[code].__name__}: {e}") from None
    except Exception as e:  # a record's own __post_init__ may raise anything on odd values
        raise WireError(
            f"malformed {MESSAGE_TYPES[code].__name__}: {type(e).__name__}: {e}"
        ) from None


def encode_many(msgs: list[object]) -> bytes:
    """Several messages in one buffer (a replica leader forwards them to its TP group)."""
    return _ENCODER.encode([encode(msg) for msg in msgs])


def decode_many(data: bytes | memoryview) -> list[Message]:
    try:
        pairs = _BATCH.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WireError(f"malformed message batch: {e}") from None
    return [decode(code, payload) for code, payload in pairs]
