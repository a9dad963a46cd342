"""Ids, tokens and join codes: made here, stored elsewhere."""

import hashlib
import secrets
import uuid

# Easy to read aloud: no 0/O, 1/I/L. 31^8 codes, so guessing one is hopeless.
JOIN_CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
JOIN_CODE_LENGTH = 8


def new_id() -> str:
    return uuid.uuid4().hex


def new_token() -> str:
    return secrets.token_urlsafe(32)


def new_join_code() -> str:
    code = "".join(secrets.choice(JOIN_CODE_ALPHABET) for _ in range(JOIN_CODE_LENGTH))
    return f"{code[:4]}-{code[4:]}"


def normalize_join_code(typed: str) -> str:
    """What a pupil types, read kindly: any case, with or without the dash or spaces."""
    compact = "".join(ch for ch in typed.upper() if ch.isalnum())
    return f"{compact[:4]}-{compact[4:]}" if len(compact) == JOIN_CODE_LENGTH else compact


def digest(token: str) -> str:
    # Session keys hold a hash of the token, so a copy of Redis hands no one a working session.
    return hashlib.sha256(token.encode()).hexdigest()
