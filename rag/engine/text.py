"""Text helpers shared by the chunker, the planner and BM25: hashing, identifiers, tokens."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading

IDENTIFIER_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
# A dotted identifier as written in questions: `renderer.setAnimationLoop`, `Scene.overrideMaterial`.
DOTTED_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)*")
CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")
HAN_RE = re.compile(r"[\u3400-\u9fff]")

# Function words that carry no retrieval signal. Short on purpose: BM25's IDF handles the rest.
STOPWORDS = frozenset(
    """
    的 了 是 吗 呢 吧 啊 呀 么 和 与 及 或 在 把 被 让 给 对 从 向 到 就 都 也 还 又 而 但 并 等
    这 那 这个 那个 这些 那些 这样 那样 这种 那种 一个 一下 一些 有 没有 没 不 要 会 能 可以 可 该
    我 你 他 她 它 我们 你们 他们 它们 自己 什么 怎么 怎么样 怎样 如何 为什么 哪 哪个 哪些 哪里 多少 几
    吗 么 呢 个 里 中 上 下 时 时候 之后 以后 之前 如果 的话 然后 还是 是否 是不是 能不能 会不会
    a an the of to in on for and or is are was were be been it its this that these those with as by at
    from how what which when where why do does did can could should would will i you we my your me
    """.split()
)

_jieba_lock = threading.Lock()
_jieba = None
_cache_dir: str | None = None


def set_cache_dir(path: str) -> None:
    """Keep the segmenter's dictionary cache in this folder (the data directory) instead of /tmp."""
    global _cache_dir
    _cache_dir = path


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def camel_parts(identifier: str) -> list[str]:
    """Split `setPixelRatio` into set, pixel, ratio and `WebGLRenderer` into web, gl, renderer."""
    return [p.lower() for p in CAMEL_RE.findall(identifier)]


def _segmenter():
    """Return jieba, initialised once per process (its dictionary load takes about a second)."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                if _cache_dir:
                    os.makedirs(_cache_dir, exist_ok=True)
                    jieba.dt.tmp_dir = _cache_dir
                jieba.initialize()
                _jieba = jieba
    return _jieba


def add_words(words) -> None:
    """Teach the segmenter domain words (e.g. Chinese class titles) so they stay whole."""
    jieba = _segmenter()
    for word in words:
        if word and HAN_RE.search(word):
            jieba.add_word(word, freq=20000)


def tokenize(text: str, *, characters: bool = False) -> list[str]:
    """Tokenize for BM25: jieba for Chinese, identifiers whole and split on camelCase, lowercased.

    With `characters`, each Chinese word also contributes its single characters, the usual n-gram backoff
    of Chinese retrieval: 图层 in a question still meets 层 in a page when the segmenter cut them apart.
    """
    jieba = _segmenter()
    tokens: list[str] = []
    for piece in jieba.lcut_for_search(text):
        piece = piece.strip()
        if not piece:
            continue
        if HAN_RE.search(piece):
            if piece not in STOPWORDS:
                tokens.append(piece)
                if characters and len(piece) >= 2:
                    tokens.extend(ch for ch in piece if HAN_RE.match(ch) and ch not in STOPWORDS)
            continue
        for identifier in IDENTIFIER_RE.findall(piece):
            lower = identifier.lower()
            parts = camel_parts(identifier)
            if lower not in STOPWORDS:
                tokens.append(lower)
            if len(parts) > 1:
                tokens.extend(p for p in parts if p not in STOPWORDS and len(p) > 1)
        for number in re.findall(r"(?<![A-Za-z_$])[0-9]+(?:\.[0-9]+)?", piece):
            tokens.append(number)
    return tokens


def identifiers(text: str) -> list[str]:
    """Return the Latin identifiers written in a text, dotted parts split, in order."""
    found: list[str] = []
    for dotted in DOTTED_RE.findall(text):
        found.extend(dotted.split("."))
    return found
