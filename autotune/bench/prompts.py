"""Seeded synthetic prompts whose token count is controlled without a tokenizer.

Text is built from units that BPE tokenizers (Qwen, Llama, GPT) keep as about one token each: short
common English words with a leading space, single punctuation marks, single digits (Qwen splits
numbers into digits), newlines. `estimate_tokens` counts those units; the real count always comes
from the server's ``usage.prompt_tokens`` when it reports one, the estimate is only the target.

Three kinds of text, because speculative decoding accepts different shares of drafts on each
(FIELD-NOTES C4: NGRAM accept rate prose 0.062, code 0.110, echo-style extraction 0.231). The kind
is never labelled in the request: it is only the text.

Every prompt is drawn from ``random.Random(seed_key)`` with a string key such as ``"0:r1:i7"``;
string seeds are hashed with SHA-512 by ``random``, so prompts are identical across processes and
Python versions and do not depend on PYTHONHASHSEED. Distinct keys give prompts that differ from
their first word, so unrelated requests never share a cached prefix by accident.
"""

from __future__ import annotations

import random
import re
from typing import Literal

TextKind = Literal["prose", "code", "extraction"]
TEXT_KINDS: tuple[TextKind, ...] = ("prose", "code", "extraction")

# Short, frequent English words: each is a single token (with its leading space) in common BPE
# vocabularies, so one word ~ one token.
_WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three place small found part general "
    "high upon school every don does got united left number course war until always away "
    "something fact though water less public put think almost hand enough far took head yet "
    "government system better set told nothing night end why called didn eyes find going look "
    "asked later point knew city next program business give group toward young days let room "
    "president side social given present several order national possible rather second face per "
    "among form important often things looked early white case john become large big need four "
    "within felt along children saw best church ever least power development light thought "
    "seemed family interest want members mind country area others done turned although open god "
    "service certain kind problem began different door thus help sense means whole matter "
    "perhaps itself york times law human line above name example action company hands local "
    "show whether five history gave today either act feet across taken past quite anything "
    "seen having body half really field word words already themselves information tell together "
    "college shall money period held keep sure probably free seems real behind cannot miss "
    "political air question making office brought whose special heard major problems ago became "
    "federal moment study available known result street economic boy position reason change"
).split()

# Code is built from single-token identifiers and keywords so the estimate stays close.
_NAMES = (
    "value items count index total result data key name size node item list path text line "
    "start end offset limit buffer state config cache entry record field token batch block "
    "left right parent child queue stack table row col width height score weight level depth"
).split()
_VERBS = "get set load save parse build update merge split find check apply reset compute".split()

_UNIT_RE = re.compile(r"\w+|[^\w\s]|\n+")


def estimate_tokens(text: str) -> int:
    """Approximate token count: a word, a punctuation mark or a run of newlines is one token."""
    return len(_UNIT_RE.findall(text))


def _prose(rng: random.Random, target: int) -> str:
    out: list[str] = []
    n = 0
    sentences = 0
    while n < target:
        length = min(rng.randint(6, 16), max(1, target - n - 1))
        words = rng.choices(_WORDS, k=length)
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + ".")
        n += length + 1
        sentences += 1
        if sentences % 5 == 0 and n < target:
            out.append("\n\n")
            n += 1
        else:
            out.append(" ")
    return "".join(out).rstrip()


def _code_line(rng: random.Random, indent: int) -> tuple[str, int]:
    a, b, c = rng.sample(_NAMES, 3)
    d = rng.randint(0, 9)
    pad = "    " * indent
    choice = rng.randrange(7)
    if choice == 0:
        line = f"{pad}{a} = {b} + {c}"
    elif choice == 1:
        line = f"{pad}if {a} > {d}:"
    elif choice == 2:
        line = f"{pad}return {a}"
    elif choice == 3:
        line = f"{pad}for {a} in {b}:"
    elif choice == 4:
        line = f"{pad}{a}.append({b} * {d})"
    elif choice == 5:
        line = f"{pad}{a} = {rng.choice(_VERBS)}({b}, {c})"
    else:
        line = f"{pad}{a}[{b}] = {c} - {d}"
    opens_block = line.endswith(":")
    return line, (indent + 1 if opens_block else max(1, indent - rng.randrange(2)))


def _code(rng: random.Random, target: int) -> str:
    lines: list[str] = []
    n = 0
    indent = 0
    while n < target:
        if indent == 0:
            verb, noun = rng.choice(_VERBS), rng.choice(_NAMES)
            a, b = rng.sample(_NAMES, 2)
            line = f"def {verb}_{noun}({a}, {b}):"
            indent = 1
        else:
            line, indent = _code_line(rng, indent)
            if rng.random() < 0.08:
                indent = 0  # close the function; the next line starts a new one
        lines.append(line)
        n += estimate_tokens(line) + 1
    return "\n".join(lines)


_EXTRACT_TAIL = "\n\nRepeat the passage above exactly, word for word, and write nothing else."


def _extraction(rng: random.Random, target: int) -> str:
    # The passage comes first so that different requests share no prefix; the instruction after.
    tail_tokens = estimate_tokens(_EXTRACT_TAIL)
    return _prose(rng, max(1, target - tail_tokens)) + _EXTRACT_TAIL


def make_text(kind: TextKind, approx_tokens: int, seed_key: str) -> str:
    """Seeded text of about `approx_tokens` tokens of the given kind.

    >>> make_text("prose", 20, "0:i1") == make_text("prose", 20, "0:i1")
    True
    """
    if approx_tokens < 1:
        raise ValueError(f"approx_tokens must be >= 1, got {approx_tokens}")
    rng = random.Random(seed_key)
    if kind == "prose":
        return _prose(rng, approx_tokens)
    if kind == "code":
        return _code(rng, approx_tokens)
    if kind == "extraction":
        return _extraction(rng, approx_tokens)
    raise ValueError(f"unknown text kind {kind!r}; valid: {', '.join(TEXT_KINDS)}")
