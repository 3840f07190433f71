"""Question planning (E4, E7): detect classes and members, correct near-miss names, decide the kind.

Kinds: `doc` (retrieve), `chitchat` (not a documentation question: fixed reply, no retrieval) and
`out_of_catalog` (names an API-like identifier the catalog does not have: empty result at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from .catalog import Catalog
from .smalltalk import is_smalltalk
from .text import HAN_RE, IDENTIFIER, IDENTIFIER_RE, NAME_CHARS, STOPWORDS, names_re
from .types import Plan

# Asking how to construct or configure a new instance points at the constructor (`### ClassName(...)`).
CONSTRUCTOR_RE = re.compile(r"构造|创建|新建|实例化|\bnew\b|constructor|instantiat|\bcreat", re.IGNORECASE)
TOKEN_RE = re.compile(rf"\.?{IDENTIFIER}(?:\.{IDENTIFIER})*(?:\s*\(\s*\))?")
WORD_RE = re.compile(rf"[{NAME_CHARS}]+")
# Where a pasted error or traceback starts: an exception's name and its colon (`TypeError:`,
# `django.db.utils.OperationalError:`, `Uncaught TypeError:`), Python's traceback header and frames, a JavaScript stack frame. From
# there to the end of its line the names are the error's, not the question's.
ERROR_RE = re.compile(rf"(?:Uncaught\s+(?:\(in promise\)\s*)?)?(?:{IDENTIFIER}\.)*[A-Z][{NAME_CHARS}]*(?:Error|Exception|Warning|Failure)\s*[:：]"
                      r"|Traceback \(most recent call last\)|^\s*File \"[^\"]*\", line \d+|^\s*at\s+[\w$.<>]+\s*\(",
                      re.MULTILINE)


def _written_first(question: str, unknown: list[str], classes: list[str]) -> bool:
    """Whether the question writes an unknown API before any class of the catalog it names by name: the API it
    names first is what it asks about ("CSS3DRenderer 怎么和 WebGLRenderer 叠在一起用"); one written after a
    known class is a detail around it ("PointsMaterial not rendering in Edge WebVR"). A class named only by an
    alias gives no order: the question stays a documentation question."""
    def position(name: str) -> int:
        match = names_re([name]).search(question)
        return match.start() if match else -1

    known = [p for p in map(position, classes) if p >= 0]
    # Only a camelCase name reads as an API here: a capitalised word ("React 里怎么用 WebGLRenderer") is more
    # often the framework around the question than its subject.
    first = [p for p in map(position, [n for n in unknown if CAMEL_API_RE.search(n)]) if p >= 0]
    return bool(known and first) and min(first) < min(known)


def pasted_error_names(question: str) -> frozenset[str]:
    """The identifiers inside the error lines a question pastes: an unknown class-like name among them is
    part of the error (its type, a table, a module), not an API the question asks about."""
    names = set()
    for match in ERROR_RE.finditer(question):
        end = question.find("\n", match.start())
        names.update(IDENTIFIER_RE.findall(question[match.start(): end if end >= 0 else len(question)]))
    return frozenset(names)


# At most this many words besides stopwords make an English question terse, typed like a search-box query
# ("reindex", "What does reindex print?", "fog near far"): its words are names rather than prose.
TERSE_WORDS = 3


def is_terse(question: str) -> bool:
    """Tell a question typed as keywords (at most TERSE_WORDS words besides stopwords) from prose.

    In prose, a lowercase word that happens to name a member (`color`, `position`, `reindex`) is usually plain
    English, so only camelCase or explicitly written members count there; in a question of a few words each
    word is chosen, so a word that is exactly a member's name is read as that member, as in Chinese text.
    """
    return len([w for w in WORD_RE.findall(question) if w.lower() not in STOPWORDS]) <= TERSE_WORDS


def typo_budget(length: int) -> int:
    """Edit distance allowed for a near miss: 1 up to 6 characters, 2 up to 12, then 3."""
    return 1 if length <= 6 else 2 if length <= 12 else 3


def is_snake_case(token: str) -> bool:
    """`get_current_context`, `CAIRO_FORMAT_ARGB32`, `max_age`: a name with an inner underscore is code, never a word."""
    return "_" in token.strip("_") and re.search(r"[A-Za-z]", token) is not None


CAMEL_API_RE = re.compile(r"[a-z0-9][A-Z]")  # an inner capital: `ArcRotateCamera`, `CSS3DRenderer`


def looks_like_api(token: str, *, in_chinese: bool = True) -> bool:
    """Read camelCase identifiers (`ArcRotateCamera`) as API names; in Chinese text a capitalised Latin word
    (`Rigidbody`) too, while in English prose capitals also start sentences, so only inner capitals count."""
    if len(token) < 4 or not re.search(r"[A-Za-z]", token):
        return False
    if CAMEL_API_RE.search(token):
        return True
    return in_chinese and token[0].isupper() and not token.isupper()


@dataclass
class Planner:
    """Turn a question into a `Plan`, using the catalog of the version being searched."""

    catalog: Catalog
    aliases: dict[str, str] = field(default_factory=dict)  # editable alias table: alias -> class name
    words: dict[str, str] = field(default_factory=dict)  # editable everyday-words table: phrase -> the docs' terms
    _lower_classes: dict[str, str] = field(default_factory=dict, repr=False)
    _members: dict[str, set[str]] = field(default_factory=dict, repr=False)
    _lower_members: dict[str, str] = field(default_factory=dict, repr=False)
    _words_by_length: dict[int, list[str]] = field(default_factory=dict, repr=False)  # vocabulary, 7+ characters
    _han_aliases: list[tuple[str, str]] = field(default_factory=list, repr=False)
    _phrases: dict[str, str] = field(default_factory=dict, repr=False)
    _phrase_re: re.Pattern | None = field(default=None, repr=False)
    _words_re: re.Pattern | None = field(default=None, repr=False)
    _words: dict[str, str] = field(default_factory=dict, repr=False)  # casefolded phrase -> terms

    def __post_init__(self) -> None:
        for word in sorted(self.catalog.vocabulary):
            if len(word) >= 7:
                self._words_by_length.setdefault(len(word), []).append(word)
        self._lower_classes = {n.lower(): n for n in sorted(self.catalog.classes) if self.catalog.is_class(n)}
        for name, entry in self.catalog.classes.items():
            for member in entry["members"]:
                self._members.setdefault(member, set()).add(name)
                self._lower_members.setdefault(member.lower(), member)
        han = {e["alias"]: n for n, e in self.catalog.classes.items() if e["alias"] and HAN_RE.search(e["alias"])}
        latin_aliases = {}
        for alias, name in self.aliases.items():
            if name not in self.catalog.classes:
                continue
            if HAN_RE.search(alias):
                han[alias] = name
            else:
                latin_aliases[alias.lower()] = name
        self._han_aliases = sorted(((a, n) for a, n in han.items() if len(a) >= 2), key=lambda x: -len(x[0]))
        phrases = {**self.catalog.phrase_aliases(), **latin_aliases}
        self._phrases = dict(phrases)
        ordered = sorted(phrases, key=len, reverse=True)
        self._phrase_re = re.compile(
            "(?<![a-z0-9])(" + "|".join(re.escape(p) for p in ordered) + ")(?![a-z0-9])") if ordered else None
        self._words = {" ".join(p.casefold().split()): " ".join(t.split()) for p, t in self.words.items()
                       if p.strip() and t.strip()}
        # Longest first; a Latin phrase is whole words ("blurry", not inside "blurryness"), a Chinese one any run.
        self._words_re = re.compile("|".join(
            re.escape(p) if HAN_RE.search(p) else rf"(?<![a-z0-9]){re.escape(p)}(?![a-z0-9])"
            for p in sorted(self._words, key=len, reverse=True))) if self._words else None

    def run(self, question: str) -> Plan:
        asked = question  # as written, lines and all
        pasted = pasted_error_names(question)
        question = " ".join(question.split())
        if is_smalltalk(question):
            return Plan(question=question, corrected_question=question, kind="chitchat",
                        reason="small talk, not a question about this documentation")
        is_chinese = HAN_RE.search(question) is not None
        terse = not is_chinese and is_terse(question)
        # Everyday words the table maps to the docs' own terms: the terms are planned and searched as if the
        # question had written them (an alias for words, where ClassAlias is one for a class name).
        expansions = self._expansions(question)
        written = question
        # The table's terms are the docs' own words: none of them is an API the docs lack.
        termed = {t for _, terms in expansions for t in re.findall(r"[A-Za-z0-9_$]+", terms)}
        if expansions:
            question = f"{question} {' '.join(dict.fromkeys(terms for _, terms in expansions))}"
        classes: list[str] = []
        hinted: list[str] = []
        members: list[str] = []
        corrections: list[tuple[str, str]] = []
        unknown: list[str] = []

        def add(target: list[str], value: str) -> None:
            if value not in target:
                target.append(value)

        lowered = question.lower()
        for phrase in self._phrase_re.findall(lowered) if self._phrase_re else ():
            name = self._phrases[phrase]
            add(classes if " " in phrase or phrase != name.lower() else hinted, name)
        remaining = question
        for alias, name in self._han_aliases:
            if alias in remaining:
                add(hinted, name)
                remaining = remaining.replace(alias, " ")

        pending_members: list[str] = []
        code_members: list[tuple[str, list[str]]] = []  # code-shaped members found, with the name they were part of
        written_as_code: list[str] = []  # members written dotted or called: `Environment.install_null_translations`
        for raw in TOKEN_RE.findall(question):
            called = raw.rstrip().endswith(")")
            dotted = raw.startswith(".") or "." in raw.strip(".")
            parts = [p for p in re.sub(r"\s*\(\s*\)$", "", raw).strip(".").split(".") if p]
            # `click.IntRange`, `werkzeug.exceptions.NotFound`: the parts before a class are its namespace (a
            # module page of the same name is a hint, not a class the question asks about).
            namespace = max((n for n, p in enumerate(parts) if n and (c := self._class_of(p))
                             and not (p in self._members and p != c)), default=0)  # not a member written on it
            for position, token in enumerate(parts):
                last = position == len(parts) - 1
                explicit_member = dotted and (position > 0 or raw.startswith(".")) or called and last
                name = self._class_of(token)
                if name and position < namespace:
                    add(hinted, name)
                    continue
                # `THREE.PointsMaterial` names the class: its constructor is a member of the same name.
                if name and not (explicit_member and token in self._members and token != name):
                    if token == name and token.islower() and not (dotted or called or is_chinese or terse):
                        # A page named by a plain word (a module `click`, a topic `responses`) written in English
                        # prose is the word, not the API: it hints at the page without leading the evidence.
                        add(hinted, name)
                        continue
                    add(classes, name)
                    if name != token:
                        corrections.append((token, name))
                    continue
                member = self._member_of(token, explicit=explicit_member or is_chinese, terse=terse)
                if member:
                    add(classes if member in self.catalog.classes else members, member)  # a constructor: its class
                    if is_snake_case(member) or re.search(r"[a-z0-9][A-Z]", member):
                        code_members.append((member, parts))
                    if explicit_member:
                        add(written_as_code, member)
                    if member != token:
                        corrections.append((token, member))
                    continue
                if token.lower() in STOPWORDS or token.lower() in self.catalog.vocabulary:
                    continue
                # Inside code (`Templte.render_async`) a capitalised word is a name even in English prose.
                corrected = self._near_class(token, in_chinese=is_chinese or dotted or called)
                if corrected:
                    add(classes, corrected)
                    corrections.append((token, corrected))
                elif looks_like_api(token, in_chinese=is_chinese) or explicit_member or is_snake_case(token):
                    pending_members.append(token)

        for token in pending_members:
            corrected = (self._near_member(token, classes) or self._singular(token)
                         or (None if classes else self._near_any_member(token)))
            if corrected in self.catalog.classes:
                add(classes, corrected)
                corrections.append((token, corrected))
            elif corrected:
                add(members, corrected)
                corrections.append((token, corrected))
            elif looks_like_api(token, in_chinese=is_chinese) and token[0].isupper() and token not in pasted:
                # Only a class-like name (`ArcRotateCamera`) can be an API the docs lack; a lowercase
                # identifier in pasted code (`myText`, `gltfLoader`) is a variable, never an unknown class, and
                # a name in a pasted error line (`OperationalError:`) belongs to the error.
                word = self._near_word(token)
                if word:  # a misspelt name the docs write in their text or code (`Jinja2Templtes`)
                    corrections.append((token, word))
                elif token not in termed:
                    unknown.append(token)

        if CONSTRUCTOR_RE.search(question):
            for name in classes:
                if name in self.catalog.classes[name]["members"]:
                    add(members, name)

        # A member asked on a class but documented on one of its ancestors: search that page too.
        inherited: list[tuple[str, str]] = []
        for member in members:
            named = [c for c in classes if member in self.catalog.classes[c]["members"]]
            if classes and not named:
                for name in list(classes):
                    owner = self.catalog.owner_of(member, name)
                    if owner is not None:
                        inherited.append((member, owner))
                        add(classes, owner)
                        break

        # A member written as code on a named class that neither it nor its ancestors document
        # (`Environment.install_null_translations` on an extension's page, `abort()` beside `Response`): the one
        # page that documents it is asked too.
        for member in written_as_code:
            if classes and member in members and not any(member == m for m, _ in inherited) \
                    and not any(member in self.catalog.classes[c]["members"] for c in classes):
                owners = self._members.get(member, set())
                if len(owners) == 1:
                    add(classes, next(iter(owners)))

        # A named class's property whose type is a documented class, named in the question's words
        # ("DirectionalLight shadows" and `.shadow : DirectionalLightShadow`): that class (and its
        # ancestors) may hold the answer, so it is hinted.
        for name in classes[:2]:
            for member, kind in self.catalog.member_types(name).items():
                if kind not in classes and re.search(rf"(?<![a-z0-9]){re.escape(member.lower())}(?:s|es)?(?![a-z0-9])",
                                                     lowered):
                    for hint in (kind, *self.catalog.ancestors(kind)):
                        add(hinted, hint)

        corrected_question = question
        for wrong, right in corrections:
            if wrong != right:
                corrected_question = names_re([wrong]).sub(lambda _: right, corrected_question)
        hinted = [h for h in hinted if h not in classes]

        # A question that writes this catalog's own code-shaped members (`cairo_surface_set_device_scale`) apart
        # from the unknown name asks about these docs: "HiDPI" beside them is a word, not a missing API.
        if unknown and (not classes or _written_first(asked, unknown, classes)) \
                and not any(not set(parts) & set(unknown) for _, parts in code_members):
            kind, reason = "out_of_catalog", "names an API that is not in this knowledge base: " + ", ".join(unknown)
        else:
            kind, reason = "doc", ""
        return Plan(
            question=written,
            corrected_question=corrected_question,
            kind=kind,
            classes=tuple(classes),
            hinted_classes=tuple(hinted),
            members=tuple(members),
            corrections=tuple(dict.fromkeys(corrections)),
            unknown_identifiers=tuple(unknown),
            inherited=tuple(inherited),
            reason=reason,
            pasted_error=ERROR_RE.search(asked) is not None,
            expansions=expansions,
        )

    def _expansions(self, question: str) -> tuple[tuple[str, str], ...]:
        """The table's phrases in the question, each once, with their terms."""
        if self._words_re is None:
            return ()
        found = dict.fromkeys(self._words_re.findall(question.casefold()))  # spacing was normalised by run()
        return tuple((phrase, self._words[phrase]) for phrase in found)

    def _class_of(self, token: str) -> str | None:
        if token in self.catalog.classes:
            return token
        name = self._lower_classes.get(token.lower())
        # Case-insensitive only where the token is not an ordinary lowercase word (`color`, `scene`).
        if name and (not token.islower() or len(token) >= 10):
            return name
        return None

    def _member_of(self, token: str, *, explicit: bool, terse: bool = False) -> str | None:
        """Return the member a token names: an exact name that is camelCase, written as a member (dotted,
        called, in Chinese text) or a word of a terse English question; else a case-insensitive match of an
        explicit or long token."""
        if len(token) < 2:  # `x`, `y`, `z` of a pasted `rotation.z` name no member worth a route
            return None
        if token in self._members:
            if explicit or terse or re.search(r"[a-z][A-Z]", token) or is_snake_case(token):
                return token
            return None
        member = self._lower_members.get(token.lower())
        if member and (explicit or len(token) >= 8):
            return member
        return None

    def _singular(self, token: str) -> str | None:
        """Read a plural (`normalMaps`, `Textures`) as the class or member it is the plural of."""
        for cut in ("es", "s"):
            if token.endswith(cut) and len(token) - len(cut) >= 4:
                stem = token[: -len(cut)]
                found = self._class_of(stem) or (stem if stem in self._members else None)
                if found:
                    return found
        return None

    def _near_class(self, token: str, *, in_chinese: bool = True) -> str | None:
        if not (looks_like_api(token) if in_chinese else (looks_like_api(token) and not token.istitle())) and len(token) < 10:
            return None
        budget = typo_budget(len(token))
        match = process.extractOne(token.lower(), self._lower_classes.keys(), scorer=Levenshtein.distance,
                                   score_cutoff=budget)
        return self._lower_classes[match[0]] if match else None

    def _near_word(self, token: str) -> str | None:
        """A long class-like name one or two edits from an identifier the docs write (the catalog's vocabulary:
        `Jinja2Templtes` -> `jinja2templates`), when the catalog has no page of that name: a typo of these docs'
        own word, not an API they lack. Only names of 8 characters or more, one edit up to 11, two from 12."""
        if len(token) < 8:
            return None
        budget = 1 if len(token) < 12 else 2
        lowered = token.lower()
        candidates = [w for n in range(len(lowered) - budget, len(lowered) + budget + 1)
                      for w in self._words_by_length.get(n, ())]
        match = process.extractOne(lowered, candidates, scorer=Levenshtein.distance, score_cutoff=budget)
        return match[0] if match else None

    def _near_any_member(self, token: str) -> str | None:
        """A misspelt member when the question names no class: only a long code-shaped name (camelCase or
        snake_case, 8 characters or more) is compared with every member, within one edit (two from 12)."""
        if len(token) < 8 or not (re.search(r"[a-z0-9][A-Z]", token) or is_snake_case(token)):
            return None
        budget = 1 if len(token) < 12 else 2
        match = process.extractOne(token.lower(), self._lower_members.keys(), scorer=Levenshtein.distance,
                                   score_cutoff=budget)
        return self._lower_members[match[0]] if match else None

    def _near_member(self, token: str, classes: list[str]) -> str | None:
        candidates = sorted({m for c in classes for m in self.catalog.classes[c]["members"]})
        if not candidates:
            return None
        budget = 1 if len(token) <= 5 else 2
        lowered = [m.lower() for m in candidates]
        match = process.extractOne(token.lower(), lowered, scorer=Levenshtein.distance, score_cutoff=budget)
        return candidates[match[2]] if match else None

