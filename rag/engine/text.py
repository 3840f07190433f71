"""Text helpers shared by the chunker, the planner and BM25: hashing, identifiers, tokens."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import re
import sys
import tempfile
import threading

# An identifier as code writes it, in ASCII: Python's \w also matches Han, and Chinese prose runs on right after a
# name (".specular高亮"), so every pattern of names is built from these.
NAME_CHARS = "A-Za-z0-9_$"
IDENTIFIER = rf"[A-Za-z_$][{NAME_CHARS}]*"
IDENTIFIER_RE = re.compile(IDENTIFIER)
# A dotted identifier as written in questions: `renderer.setAnimationLoop`, `Scene.overrideMaterial`.
DOTTED_RE = re.compile(rf"{IDENTIFIER}(?:\.{IDENTIFIER})*")
CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")
HAN_RE = re.compile(r"[\u3400-\u9fff]")
# The name an item of a parameter or option list defines: "antialias - whether to perform antialiasing",
# "- center, -- the box's centre", "* size: the font size" (the name, then a dash or a colon); read with match().
DEFINED_NAME_RE = re.compile(rf"(?:[-*+]\s+)?`?({IDENTIFIER})`?\s*,?\s*(?:--|[-—–:])\s")


def names_re(names, prefix: str = "") -> re.Pattern:
    """Any of these identifiers written whole: bounded by characters that cannot continue an identifier."""
    return re.compile(rf"(?<![{NAME_CHARS}]){prefix}(?:{'|'.join(map(re.escape, sorted(names)))})(?![{NAME_CHARS}])")


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


def _import_jieba():
    """Import jieba without pkg_resources, which it only uses to open its dictionary and falls back from
    to a plain open() of the same file; importing pkg_resources scans every installed package (~0.2 s)."""
    blocked = "pkg_resources" not in sys.modules
    if blocked:
        sys.modules["pkg_resources"] = None  # makes `import pkg_resources` raise ImportError
    try:
        import jieba
    finally:
        if blocked and sys.modules.get("pkg_resources", "") is None:
            del sys.modules["pkg_resources"]
    return jieba


class PrefixDictionary:
    """jieba's prefix dictionary (word -> frequency; 0 for a prefix of longer words), looked up in a
    memory-mapped file instead of loaded whole.

    jieba unmarshals its half-million entries into a dict when it starts, which costs a fresh process
    about a second (mostly first-touch memory), while a question looks up a few hundred of them. Here the
    words of each length are one sorted array, searched on demand and remembered; words taught at run time
    (`add_word`) are kept in a dict on top. jieba reads the table only through `in`, `[]`, `get` and
    `[]=`, so its segmentation is the same as with its own dict.
    """

    MAGIC = b"rag-jieba-prefix-1\n"
    KNOWN_LIMIT = 65_536  # lookups remembered (a few MB); then forgotten at once, so new words cannot grow it

    def __init__(self, tables: dict, total: int):
        self._tables = tables  # length -> (sorted words as a numpy unicode array, their frequencies)
        self.total = total
        self._known: dict[str, int | None] = {}  # looked up so far, None for "not in the dictionary"
        self._added: dict[str, int] = {}

    @classmethod
    def write(cls, path: str, freq: dict[str, int], total: int) -> None:
        """Store jieba's table at `path` (atomically): a JSON header, then per word length the sorted words
        (UTF-32) and their frequencies (int32)."""
        import numpy as np

        by_length: dict[int, list[str]] = {}
        for word in freq:
            by_length.setdefault(len(word), []).append(word)
        parts, tables, offset = [], [], 0
        for length in sorted(by_length):
            words = np.sort(np.array(by_length[length], dtype=f"<U{length}"))
            freqs = np.array([freq[w] for w in words.tolist()], dtype="<i4")
            tables.append([length, len(words), offset, offset + words.nbytes])
            parts += [words.tobytes(), freqs.tobytes()]
            offset += words.nbytes + freqs.nbytes
        header = json.dumps({"total": total, "tables": tables, "size": offset}).encode()
        header += b" " * (-(len(cls.MAGIC) + 8 + len(header)) % 8)  # keep the arrays 4-byte aligned
        folder = os.path.dirname(path) or "."
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".prefix-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(cls.MAGIC + len(header).to_bytes(8, "little") + header)
                for part in parts:
                    out.write(part)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    @classmethod
    def open(cls, path: str) -> "PrefixDictionary | None":
        """Map a stored table; None when it is missing or not one this code wrote."""
        import numpy as np

        try:
            with open(path, "rb") as source:
                data = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
            if data[: len(cls.MAGIC)] != cls.MAGIC:
                return None
            start = len(cls.MAGIC) + 8
            size = int.from_bytes(data[len(cls.MAGIC) : start], "little")
            header = json.loads(data[start : start + size])
            base = start + size
            if len(data) != base + header["size"]:
                return None
            tables = {
                length: (np.frombuffer(data, dtype=f"<U{length}", count=count, offset=base + words_at),
                         np.frombuffer(data, dtype="<i4", count=count, offset=base + freqs_at))
                for length, count, words_at, freqs_at in header["tables"]
            }
            return cls(tables, int(header["total"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _lookup(self, word: str) -> int | None:
        try:
            return self._known[word]
        except KeyError:
            pass
        found = None
        table = self._tables.get(len(word))
        if table is not None:
            words, freqs = table
            position = int(words.searchsorted(word))
            if position < len(words) and words[position] == word:
                found = int(freqs[position])
        if len(self._known) >= self.KNOWN_LIMIT:
            self._known.clear()
        self._known[word] = found
        return found

    def __contains__(self, word) -> bool:
        return word in self._added or self._lookup(word) is not None

    def __getitem__(self, word) -> int:
        if word in self._added:
            return self._added[word]
        found = self._lookup(word)
        if found is None:
            raise KeyError(word)
        return found

    def get(self, word, default=None):
        if word in self._added:
            return self._added[word]
        found = self._lookup(word)
        return default if found is None else found

    def __setitem__(self, word, frequency: int) -> None:
        self._added[word] = frequency


def _prefix_dictionary_path(jieba, folder: str) -> str:
    """Where the table of this jieba and dictionary is kept (a new jieba or dictionary gets a new file)."""
    stat = os.stat(os.path.join(os.path.dirname(jieba.__file__), "dict.txt"))
    return os.path.join(folder, f"prefix-{jieba.__version__}-{stat.st_size}-{int(stat.st_mtime)}.bin")


def _segmenter():
    """Return jieba, initialised once per process: from the stored prefix table when there is one, else
    by jieba itself (about a second), storing the table for the next process."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                jieba = _import_jieba()
                jieba.setLogLevel(logging.WARNING)
                folder = _cache_dir or tempfile.gettempdir()
                os.makedirs(folder, exist_ok=True)
                jieba.dt.tmp_dir = folder
                path = _prefix_dictionary_path(jieba, folder)
                fresh = not jieba.dt.initialized  # else someone set it up (and maybe taught it words) already
                table = PrefixDictionary.open(path) if fresh else None
                if table is not None:
                    jieba.dt.FREQ, jieba.dt.total, jieba.dt.initialized = table, table.total, True
                else:
                    jieba.initialize()
                    if fresh and isinstance(jieba.dt.FREQ, dict):
                        try:
                            PrefixDictionary.write(path, jieba.dt.FREQ, jieba.dt.total)
                        except OSError:
                            logging.getLogger(__name__).warning("could not store the jieba table in %s", folder)
                _jieba = jieba
    return _jieba


def add_words(words) -> None:
    """Teach the segmenter domain words (e.g. Chinese class titles) so they stay whole."""
    jieba = _segmenter()
    for word in words:
        if word and HAN_RE.search(word):
            jieba.add_word(word, freq=20000)


_stemmer = None


def _stem_words(words: list[str]) -> list[str]:
    """English Snowball stems (PyStemmer): shadows and shadow, rotating and rotate meet."""
    global _stemmer
    if _stemmer is None:
        import Stemmer

        _stemmer = Stemmer.Stemmer("english")
    return _stemmer.stemWords(words)


def tokenize(text: str, *, characters: bool = False, stem: bool = False) -> list[str]:
    """Tokenize for BM25: jieba for Chinese, identifiers whole and split on camelCase, lowercased.

    With `characters`, each Chinese word also contributes its single characters, the usual n-gram backoff
    of Chinese retrieval: 图层 in a question still meets 层 in a page when the segmenter cut them apart.
    With `stem`, English words and the parts of camelCase identifiers are reduced to their Snowball stems
    (an identifier is also kept whole, unstemmed), so "shadows" meets `castShadow` and "blurry" meets "blur".
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
            if len(parts) > 1:
                if lower not in STOPWORDS:
                    tokens.append(lower)
                parts = [p for p in parts if p not in STOPWORDS and len(p) > 1]
                tokens.extend(_stem_words(parts) if stem else parts)
            elif lower not in STOPWORDS:
                tokens.append(_stem_words([lower])[0] if stem and lower.isalpha() else lower)
        for number in re.findall(r"(?<![A-Za-z_$])[0-9]+(?:\.[0-9]+)?", piece):
            tokens.append(number)
    return tokens


def pieces(text: str) -> list[str]:
    """The text cut into words, spaces and punctuation (jieba, with this product's dictionary): joined, they give
    the text back, so a word can be marked where it is written."""
    return _segmenter().lcut(text)


def identifiers(text: str) -> list[str]:
    """Return the Latin identifiers written in a text, dotted parts split, in order."""
    found: list[str] = []
    for dotted in DOTTED_RE.findall(text):
        found.extend(dotted.split("."))
    return found
