"""A deterministic fake tokenizer and text generator for the simulated engine.

Tokens are the units the benchmark client's prompt builder counts (autotune/bench/prompts.py):
a run of word characters, one punctuation mark, or a run of newlines. A token's id is the CRC-32
of its text, so ids are stable across processes and Python versions (no PYTHONHASHSEED), and two
prompts share a cached prefix exactly when their texts do.

Generated text is made of token *pieces* that re-tokenize to the same ids: a word is rendered with
a leading space, punctuation and newlines bare. That makes an agent's next turn (previous prompt +
the assistant's answer + new text) match the radix cache through the whole answer, as it does on
a real engine. What is generated depends on the kind of text (FIELD-NOTES C4): prose draws common
words, code draws identifiers and punctuation, extraction echoes spans of the prompt (which is
why n-gram speculation accepts more drafts there).
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]

_UNIT_RE = re.compile(r"\w+|[^\w\s]|\n+")
_WORD_RE = re.compile(r"\w+")

# Token id of the end-of-turn token reported as `matched_stop` when a request ends by "EOS".
EOS_TOKEN_ID = 151645

_ID_CACHE: dict[str, int] = {}


def token_id(unit: str) -> int:
    tid = _ID_CACHE.get(unit)
    if tid is None:
        tid = zlib.crc32(unit.encode("utf-8"))
        if len(_ID_CACHE) < 1_000_000:
            _ID_CACHE[unit] = tid
    return tid


def piece(unit: str) -> str:
    """How a token is rendered in generated text: words with a leading space."""
    return " " + unit if _WORD_RE.fullmatch(unit) else unit


def split(text: str) -> list[str]:
    return _UNIT_RE.findall(text)


def encode(text: str) -> IdArray:
    units = _UNIT_RE.findall(text)
    return np.fromiter((token_id(u) for u in units), dtype=np.int64, count=len(units))


def count(text: str) -> int:
    return len(_UNIT_RE.findall(text))


# --- chat template ---------------------------------------------------------------------------


def message_text(content: object) -> str:
    """OpenAI message content: a string, or a list of parts of which text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
        return "".join(out)
    raise ValueError(f"message content must be a string or a list of parts, got {content!r}")


def chat_prompt(messages: Sequence[dict[str, object]]) -> str:
    """A ChatML-style template (Qwen's), so that each turn extends the previous prompt."""
    parts = []
    for m in messages:
        role = str(m.get("role", "user"))
        parts.append(f"<|im_start|>{role}\n{message_text(m.get('content'))}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


# --- generation --------------------------------------------------------------------------------

_PROSE_WORDS = (
    "the of and to in is was for it with as on be at by had are but from or have an they which "
    "one you were all there would their we been has when who will more no if out so said what "
    "up its about into than them can only other new some could time these two may then do first "
    "any now such like our over even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little "
    "state good very make world still own see work long get here between both life being under "
    "never day same another know while last might great old year off come since against go came "
    "right used take three place small found part general high upon every does got left number "
    "course until always away something fact though water less public put think almost hand "
    "enough far took head yet system better set told nothing night end why called find going "
    "look asked later point knew city next program business give group toward young days let "
    "room side social given present several order national possible rather second face among "
    "form important often things looked early white case become large need four within felt "
    "along saw best ever least power development light thought seemed family interest want "
    "mind country area others done turned although open service certain kind problem began "
    "different door thus help sense means whole matter perhaps itself law human line above name "
    "example action company local show whether five history gave today either act across taken "
    "past quite anything seen having body half really field word already information together "
    "money period held keep sure probably free seems real behind cannot question making office "
    "brought special heard major ago became moment study available known result street reason"
).split()
_CODE_UNITS = (
    (
        "value items count index total result data key name size node item list path text line "
        "start end offset limit buffer state config cache entry record field token batch block "
        "left right parent child queue stack table row width height score weight level depth "
        "get set load save parse build update merge split find check apply reset compute "
        "def return if for in not None self import class while else"
    ).split()
    + list("()[]{}:.,=+-*<>")
    + ["\n"]
)


class _Vocab:
    def __init__(self, units: Sequence[str]):
        self.units = list(units)
        self.ids = np.array([token_id(u) for u in self.units], dtype=np.int64)
        self.pieces = {int(i): piece(u) for i, u in zip(self.ids, self.units, strict=True)}


_PROSE = _Vocab([*_PROSE_WORDS, ".", ","])
_CODE = _Vocab(_CODE_UNITS)
_PERIOD, _COMMA = int(_PROSE.ids[-2]), int(_PROSE.ids[-1])
_NEWLINE = token_id("\n")
_PIECES: dict[int, str] = {**_PROSE.pieces, **_CODE.pieces}


def request_seed(seed: int, prompt_ids: IdArray) -> int:
    """A request's generation seed: the engine seed and the prompt (temperature-0 style: the
    same prompt gives the same answer)."""
    return zlib.crc32(prompt_ids[-4096:].tobytes(), seed & 0xFFFFFFFF)


def generate(kind: str, n: int, seed: int, prompt_ids: IdArray | None = None) -> IdArray:
    """n output token ids of the given text kind, deterministic in (kind, n, seed, prompt)."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    if kind == "extraction" and prompt_ids is not None and len(prompt_ids) >= 16:
        # Echo spans of the prompt: what "extract/quote/repeat" answers look like.
        spans = []
        got = 0
        p = len(prompt_ids)
        while got < n:
            length = int(rng.integers(8, 40))
            start = int(rng.integers(0, max(p - length, 1)))
            span = prompt_ids[start : start + length]
            spans.append(span)
            got += len(span)
        return np.concatenate(spans)[:n].astype(np.int64)
    if kind == "code":
        ids = _CODE.ids[rng.integers(0, len(_CODE.ids), n)]
        # two newlines in a row would re-tokenize as one "\n\n" unit
        nl = ids == _NEWLINE
        dup = nl[1:] & nl[:-1]
        ids[1:][dup] = _CODE.ids[0]
        if ids[0] == _NEWLINE:  # after the template's "\n" it would merge into "\n\n"
            ids[0] = _CODE.ids[0]
        return ids
    ids = _PROSE.ids[rng.integers(0, len(_PROSE_WORDS), n)]
    marks = rng.random(n)
    ids[marks < 0.08] = _PERIOD
    ids[(marks >= 0.08) & (marks < 0.12)] = _COMMA
    # punctuation never twice in a row, never first
    punct = (ids == _PERIOD) | (ids == _COMMA)
    again = np.zeros(n, dtype=bool)
    again[0] = punct[0]
    again[1:] = punct[1:] & punct[:-1]
    ids[again] = _PROSE.ids[0]
    return ids


def placeholder_ids(seed: int, n: int) -> IdArray:
    """Deterministic ids, distinct per seed, for answers whose text nobody reads."""
    return (np.arange(n, dtype=np.int64) * 2654435761 + seed * 40503 + 1) % (2**31 - 1)


class Detokenizer:
    """Maps generated ids back to text pieces; knows the prompt's own units for echoes."""

    def __init__(self, prompt_units: Sequence[str] | None = None):
        self._extra: dict[int, str] = {}
        if prompt_units:
            for u in prompt_units:
                self._extra.setdefault(token_id(u), piece(u))

    def pieces(self, ids: IdArray) -> list[str]:
        get, extra = _PIECES.get, self._extra
        return [get(i) or extra.get(i, " tok") for i in ids.tolist()]


def sampled_length(seed: int, lo: int = 64, hi: int = 512) -> int:
    """The length a request without max_tokens ends at (an EOS), seeded by the request."""
    return random.Random(seed).randint(lo, hi)
