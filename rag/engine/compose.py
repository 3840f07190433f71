"""The extractive answer (E7, E8): what the question asks, read from its words, answered from the structure of
the evidence (member headings and signatures, "Default is" lines, the follow-up a page requires, parameter
lists, code examples), with no model.

`read_intent(question)` tells what kind of answer is wanted (a value, how to do something, why something
fails, yes or no, a comparison, a list of options, a signature, an example); `Composer.run(question, plan,
hits)` builds the answer: one block per section that answers (each member the question names, each class it
names, else the best section), the setter rather than the getter when the question wants to change something,
the value and follow-up sentences of each section, a short code example, then supporting quotes. When the
evidence names nothing the question asks about and shares too few of its words, the answer says the
documentation does not cover it and lists the nearest pages as related, citing none. Citations are numbered
1..n in the order the answer cites them. Every rule reads the documents' own shape, in Chinese and English.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .text import DEFINED_NAME_RE, IDENTIFIER, names_re
from .types import Answer, Citation, Hit, Plan

# -- what the question asks ------------------------------------------------------------------------------

_I = re.IGNORECASE
VALUE_RE = re.compile(r"默认|缺省|初始值|多少|多大|多长|多快|多高|多远|几个|几层|取值|范围|上限|下限|最大|最小|"
                      r"\bdefaults?\b|\bhow (?:many|much|fast|big|large|long|high|far)\b|\bwhat value\b|"
                      r"\binitial value\b|\branges?\b|\bmaximum\b|\bminimum\b|\blimits?\b", _I)
HOWTO_RE = re.compile(r"怎么|怎样|如何|咋|要怎|用法|步骤|\bhow (?:do|can|to|should|would|does)\b|\bway to\b|"
                      r"\bsteps?\b|\bset up\b|\busage\b", _I)
CHANGE_RE = re.compile(r"设置|设为|设成|改成|改为|修改|改变|更改|调整|调节|开启|打开|启用|关闭|禁用|切换|"
                       r"\bset(?:ting)?\b|\bchange\b|\bmodify\b|\badjust\b|\benable\b|\bdisable\b|\bturn (?:on|off)\b|"
                       r"\bswitch\b|\bconfigure\b|\bincrease\b|\bdecrease\b|\braise\b|\blower\b", _I)
READ_RE = re.compile(r"获取|得到|拿到|读取|取得|查询|\bget\b|\bread\b|\bobtain\b|\bretrieve\b|\bfind out\b", _I)
WHY_RE = re.compile(r"为什么|为何|怎么回事|没有效果|没效果|不生效|没用|不起作用|不更新|不显示|报错|错误|异常|"
                    r"\bwhy\b|\berror\b|\bexception\b|doesn'?t work|does not work|not working|no effect|"
                    r"nothing happens|\bfails?\b", _I)
WHETHER_RE = re.compile(r"能不能|能否|可不可以|是否|会不会|有没有|吗\s*[？?]|吗\s*$|"
                        r"^\s*(?:can|could|does|do|is|are|will|should|may)\b", _I)
COMPARE_RE = re.compile(r"区别|差别|不同|对比|比较|关系|\bvs\.?(?=\s)|\bversus\b|\bdifferences?\b|\bcompare|"
                        r"\brelationship\b", _I)
OPTIONS_RE = re.compile(r"哪些|哪几|什么类型|什么值|可选|选项|\bwhich\b|\bwhat (?:kinds?|types?|options|values)\b|"
                        r"\boptions\b|\bpossible values\b", _I)
SIGNATURE_RE = re.compile(r"参数|签名|返回值|返回什么|\bsignatures?\b|\bparameters?\b|\barguments?\b|\breturns?\b", _I)
CODE_RE = re.compile(r"代码|示例|例子|样例|写法|\bexamples?\b|\bsnippet\b|\bsample\b|\bcode\b", _I)
LIMITS_RE = re.compile(r"限制|局限|注意事项|要注意|需要注意|注意什么|\blimitations?\b|\brestrictions?\b|\bcaveats?\b|"
                       r"\bgotchas?\b|\bconstraints?\b|\bpitfalls?\b", _I)


@dataclass(frozen=True, slots=True)
class Intent:
    """The kinds of answer a question asks for (several at once: "what is the default, and how to change it")."""

    value: bool = False  # a default, a value, a range or a count
    howto: bool = False  # how to do something
    change: bool = False  # to set, change or enable something: the setter, not the getter
    read: bool = False  # to get or read something: the getter
    why: bool = False  # why something fails, an error
    whether: bool = False  # a yes or no: can it, does it
    compare: bool = False
    options: bool = False  # which values, types or options
    signature: bool = False  # parameters, a return type
    code: bool = False  # an example
    limits: bool = False  # what something cannot do or requires: its limitations, caveats

    def kinds(self) -> tuple[str, ...]:
        return tuple(name for name in self.__slots__ if getattr(self, name))

    @property
    def accessor(self) -> str:
        """Which of a getter and its setter answers: "setter" to change something (and not read it), "getter" to
        read something, "" when the question does neither."""
        return "setter" if self.change and not self.read else "getter" if self.read else ""


def read_intent(question: str) -> Intent:
    """Read what a question asks for from its words (Chinese and English)."""
    return Intent(value=bool(VALUE_RE.search(question)), howto=bool(HOWTO_RE.search(question)),
                  change=bool(CHANGE_RE.search(question)), read=bool(READ_RE.search(question)),
                  why=bool(WHY_RE.search(question)), whether=bool(WHETHER_RE.search(question)),
                  compare=bool(COMPARE_RE.search(question)), options=bool(OPTIONS_RE.search(question)),
                  signature=bool(SIGNATURE_RE.search(question)), code=bool(CODE_RE.search(question)),
                  limits=bool(LIMITS_RE.search(question)))


# -- what a section says ---------------------------------------------------------------------------------

# A sentence stating a value: "Default is 50.", "默认值为 0.1。", "Defaults to `true`".
DEFAULT_RE = re.compile(r"\bdefaults?\b|\binitial value\b|默认|缺省|初始值", _I)
# A sentence requiring something of the reader: "you will have to call .updateProjectionMatrix",
# "must be set to true", "需要调用 update()", "必须先……".
FOLLOW_UP_RE = re.compile(r"\b(?:must|need to|needs to|have to|has to|required|requires)\b|"
                          r"\bcall(?:ed|ing)?\b[^.。]*\(|\bcall(?:ed|ing)?\s+`?\.?" + IDENTIFIER + "|"
                          r"\bset\b[^.。]*\bto (?:true|false)\b|需要|必须|须要|务必|才能|才会|调用", _I)
# A sentence saying what is not possible or what something is limited to.
LIMIT_RE = re.compile(r"\bnot\b|\bcannot\b|\bcan't\b|\bonly\b|\bno longer\b|\bunsupported\b|\bignored\b|"
                      r"不能|不可|无法|不是|不会|不支持|无效|仅|只", _I)
# A getter and its setter: getPixelRatio / setPixelRatio, isEnabled / setEnabled, a property x / setX.
GETTER_RE = re.compile(r"^(?:get|is|has)(?=[A-Z_])")
LIST_ITEM_RE = re.compile(r"(?:[-*] |\||\d+\. )")
# A line defining a name: a parameter or option and what it is ("near — the near plane. Default is 0.1.").
DEFINITION_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*(?:\s*:\s*[\w.\[\]]+)?\s+[-—–]\s+\S")
DEFINITION_CHARS = 300
COMMENT_MARKS = ("//", "#", "/*", "*", "--", "<!--")  # a line of code that is a comment, in the usual languages


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences: after 。！？； and after . ! ? followed by a space or the end, but never inside
    parentheses or `code`, so "Default: `./data` (relative; created if missing)." stays one sentence."""
    sentences, current, depth, in_code = [], [], 0, False
    for position, char in enumerate(text):
        current.append(char)
        if char == "`":
            in_code = not in_code
        elif in_code:
            continue
        elif char in "(（":
            depth += 1
        elif char in ")）":
            depth = max(0, depth - 1)
        elif depth == 0 and (char in "。！？；" or (char in ".!?" and text[position + 1: position + 2] in (" ", "\n", ""))):
            sentences.append("".join(current).strip())
            current = []
    sentences.append("".join(current).strip())
    return [s for s in sentences if s]


@dataclass(frozen=True, slots=True)
class Section:
    """A chunk read for quoting: its signature (its heading), its sentences and its first code example."""

    signature: str
    sentences: tuple[str, ...]
    code: tuple[str, ...]

    @property
    def callable(self) -> bool:
        return "(" in self.signature


def read_section(chunk) -> Section:
    """Split a chunk into its heading, its prose sentences (list items and table rows count as one each) and
    its first fenced code block. A later part of a long section that starts at one of its sub-headings
    ("Parameters") has no signature: that heading is not the member's."""
    section = read_text(chunk.text)
    if chunk.part and section.signature and chunk.member and chunk.member not in section.signature:
        return replace(section, signature="")
    return section


def group_text(text: str, group: str) -> str:
    """The text under a `## group` heading of a chunk, up to the next heading ("" when it has no such heading)."""
    lines, inside = [], False
    for line in text.splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line.strip())
        if heading:
            if inside:
                break
            inside = heading.group(1).strip() == group.strip()
        elif inside:
            lines.append(line)
    return "\n".join(lines)


@lru_cache(maxsize=4096)
def read_text(text: str) -> Section:
    signature, prose, code, in_code, done = "", [], [], False, False
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            prose.extend(split_sentences(" ".join(paragraph)))
            paragraph.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            flush()
            in_code = not in_code
            if not done:
                code.append(line)
                done = not in_code
            continue
        if in_code:
            if not done:
                code.append(line)
            continue
        if stripped.startswith("#"):
            flush()
            if not signature:
                signature = stripped.lstrip("#").strip()
        elif not stripped or stripped.startswith(">"):
            flush()
        elif stripped.startswith(("- ", "* ", "|")) or re.match(r"\d+\. ", stripped):
            flush()
            if not set(stripped) <= set("|-: "):
                prose.append(stripped)
        elif not paragraph and DEFINITION_RE.match(stripped) and len(stripped) <= DEFINITION_CHARS:
            flush()
            prose.append(stripped)  # "antialias - whether to antialias. Default is false.": one item, name and value
        else:
            paragraph.append(stripped)
    flush()
    if code and not code[-1].lstrip().startswith(("```", "~~~")):
        code.append(code[0].strip()[:3])
    return Section(signature=signature, sentences=tuple(prose), code=tuple(code))


def sentence_scores(question_tokens: list[str], sentences: list[list[str]], *, k1: float = 1.2,
                    b: float = 0.75) -> list[float]:
    """Score each tokenized sentence against the question with Okapi BM25 (Robertson and Zaragoza, 2009),
    the sentences themselves being the collection; k1 and b are the usual defaults."""
    if not sentences:
        return []
    n = len(sentences)
    average = sum(len(s) for s in sentences) / n or 1.0
    frequency: dict[str, int] = {}
    for tokens in sentences:
        for token in set(tokens):
            frequency[token] = frequency.get(token, 0) + 1
    terms = set(question_tokens)
    scores = []
    for tokens in sentences:
        score = 0.0
        for term in terms:
            tf = tokens.count(term)
            if tf:
                idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(tokens) / average))
        scores.append(score)
    return scores


HOWTO_CODE = 1.2  # a how-to answer that shows what to run or call outweighs one that only describes
SUBJECTLESS_CHARS = 24  # a value sentence shorter than this ("Default is true.") leans on the one before


def covering(question_tokens: list[str], sentences: list[list[str]], limit: int) -> list[int]:
    """Up to `limit` sentences chosen greedily, each covering the most question words (weighted by BM25's idf
    over the sentences) that the sentences chosen before it did not; ties go to the earlier sentence."""
    n = len(sentences)
    terms = set(question_tokens)
    frequency = {t: sum(1 for s in sentences if t in s) for t in terms}
    weight = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items() if f}
    covered: set[str] = set()
    chosen: list[int] = []
    sets = [set(s) & set(weight) for s in sentences]
    while len(chosen) < limit:
        gains = [(sum(weight[t] for t in sets[i] - covered), -i) for i in range(n) if i not in chosen]
        if not gains:
            break
        gain, position = max(gains)
        if gain <= 0:
            break
        chosen.append(-position)
        covered |= sets[-position]
    return chosen


def joined(sentences: list[str]) -> str:
    """Join sentences with a space, or with nothing after Chinese punctuation."""
    text = ""
    for sentence in sentences:
        text += sentence if not text or text[-1] in "。！？；：" else " " + sentence
    return text


def group_requires(note, member) -> list[str]:
    """The sentences of `note` (a chunk without a member) that require something of the reader about the group
    `member` belongs to: the text under its `## group` heading on the same page ("Note that after changing these
    properties you have to call …"); [] when `note` holds no such text."""
    if note.member or not member.member or len(member.heading_path) < 3 or note.source != member.source:
        return []
    group = member.heading_path[1]
    if note.heading_path == member.heading_path[:2]:
        text = note.text
    elif note.heading_path == member.heading_path[:1]:
        text = group_text(note.text, group)  # a short page: the group's note shares the page's first chunk
    else:
        return []
    return [s for s in read_text(text).sentences if FOLLOW_UP_RE.search(s)]


def as_text(sentences: list[str]) -> str:
    """Sentences as prose, and the list items or table rows among them each on a line of its own."""
    lines: list[str] = []
    prose: list[str] = []
    for sentence in sentences:
        if LIST_ITEM_RE.match(sentence):
            if prose:
                lines.append(joined(prose))
                prose = []
            lines.append(sentence)
        else:
            prose.append(sentence)
    if prose:
        lines.append(joined(prose))
    return "\n".join(lines)


def member_label(chunk) -> str:
    member = chunk.member if chunk.member and chunk.member != chunk.class_name else ""
    return f"{chunk.class_name}.{member}" if member else (chunk.class_name or chunk.title)


def refers_to(chunk, other) -> bool:
    """Whether `chunk` is another member section (not the constructor) of `other`'s class whose text names
    `other`'s member as `.member`, the way reference pages point at another member of the same class."""
    if not other.member or chunk.class_name != other.class_name or chunk.member in (other.member, "",
                                                                                     chunk.class_name):
        return False
    return names_re([other.member], prefix=r"\.").search(chunk.text) is not None


def same_section(chunk, other) -> bool:
    """Whether two chunks are parts of one section (a long section is cut into several chunks)."""
    return chunk.section_key == other.section_key


def about(chunk, classes: set[str]) -> bool:
    """Whether a section is about one of the classes a question names: it documents one, or its text names one
    (`Line.computeLineDistances`: "the distances LineDashedMaterial needs"); any section when none is named."""
    return not classes or chunk.class_name in classes or names_re(classes).search(chunk.text) is not None


def setter_of(member: str) -> str:
    """The setter a getter or property would have: getPixelRatio, isEnabled and pixelRatio give setPixelRatio."""
    stem = GETTER_RE.sub("", member)
    return "set" + stem[:1].upper() + stem[1:] if stem else ""


def getters_of(member: str) -> tuple[str, ...]:
    """The getters a setter's name points at: setPixelRatio gives getPixelRatio; setFromCenterAndSize, which sets a
    box from a center and a size, gives getCenter and getSize, the getters of the values its name joins by And."""
    if not re.match(r"set[A-Z]", member):
        return ()
    values = re.split(r"And(?=[A-Z])", re.sub(r"^From(?=[A-Z])", "", member[3:]))
    return tuple(dict.fromkeys(f"get{value}" for value in values if value))


def is_setter_of(member: str, other: str) -> bool:
    """Whether `member` is the setter of `other` (a getter or a property)."""
    return bool(member) and member != other and member == setter_of(other)


@lru_cache(maxsize=8192)
def _stems(text: str) -> tuple[str, ...]:
    from .text import tokenize

    return tuple(tokenize(text, stem=True))


def stems(text: str) -> list[str]:
    """The text's BM25 tokens, stemmed (rag.engine.text.tokenize); a section's sentences are read again for every
    question that cites them, so the last few thousand are kept."""
    return list(_stems(text))


def words_of(tokens: list[str]) -> list[str]:
    """The tokens that are words: not the `_` a snake_case name is split at."""
    return [t for t in tokens if t.strip("_")]


def is_chinese(text: str) -> bool:
    return re.search(r"[\u3400-\u9fff]", text) is not None


# -- the composer -----------------------------------------------------------------------------------------

NOT_COVERED = ("文档中没有找到回答这个问题的内容。", "The documentation does not cover this.")
RELATED = ("相关内容（不是答案）：", "Related sections (not an answer): ")
EXAMPLE = ("示例", "Example")


@dataclass
class Composer:
    """Build the extractive answer from the plan, the question's intent and the evidence's structure."""

    window: int = 3  # the evidence a lead may come from when the question names no member
    max_sections: int = 4  # sections answered in full: the members and classes asked about
    max_sentences: int = 3  # sentences chosen by the question's words, besides the value and follow-up ones
    max_facts: int = 5  # sentences of one section in all
    max_options: int = 12  # list items kept when the question asks which options there are
    max_quotes: int = 2  # supporting quotes after the sections, one sentence each
    max_limits: int = 3  # ... and, asked for limitations, up to this many it rules out or requires
    max_code_lines: int = 16  # lines of code an example shows (blank lines not counted); see shown_code
    whole_chars: int = 280  # a callable's section this short is quoted whole, as a list (its parameters)
    related_sections: int = 3
    _numbers: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def run(self, question: str, plan: Plan, hits: list[Hit], *, prefix: tuple[str, ...] = (),
            covered: bool = True, confidence: str = "medium") -> Answer:
        """Answer from `hits`; `covered` False (the evidence does not answer the question) gives the refusal."""
        # One composer serves every answer of a process, on several threads: the citation numbers of this
        # answer live on a copy of its own.
        composer = copy.copy(self)
        composer._numbers = {}
        return composer._compose(question, plan, hits, prefix=prefix, covered=covered, confidence=confidence)

    def _compose(self, question: str, plan: Plan, hits: list[Hit], *, prefix: tuple[str, ...],
                 covered: bool, confidence: str) -> Answer:
        chinese = is_chinese(question)
        if not covered:
            text = "\n\n".join((*prefix, self.refusal(hits, chinese)))
            return Answer(text=text.strip(), citations=(), confidence="none", mode="extractive", reason="not_covered")
        intent = read_intent(question)

        tokens = words_of(stems(question))
        focus = self.focus(question, plan, hits, intent, tokens)
        parts = list(prefix)
        has_code = False
        for order, position in enumerate(focus):
            block, code = self.block(tokens, intent, hits, position, lead=order == 0, has_code=has_code)
            parts.append(block)
            has_code = has_code or code
        if not has_code and (intent.code or intent.howto):
            example = self.example(hits, focus, chinese)
            if example:
                parts.append(example)
        quotes = []
        for position in range(len(hits)):
            if position in self._numbers or len(quotes) >= self.max_quotes:
                continue
            quote = self.quote(tokens, intent, hits[position], position, said="\n".join(parts + quotes))
            if quote:
                quotes.append(quote)
        if quotes:
            parts.append("\n".join(quotes))
        citations = tuple(Citation(number, hits[p].chunk.chunk_id, hits[p].chunk.source, hits[p].chunk.heading_path,
                                   hits[p].chunk.anchor)
                          for p, number in sorted(self._numbers.items(), key=lambda item: item[1]))
        return Answer(text="\n\n".join(parts).strip(), citations=citations, confidence=confidence, mode="extractive")

    def cite(self, position: int) -> str:
        """The citation mark of an evidence position, numbered in the order the answer first cites it."""
        number = self._numbers.setdefault(position, len(self._numbers) + 1)
        return f"[{number}]"

    # -- which sections answer --

    def focus(self, question: str, plan: Plan, hits: list[Hit], intent: Intent, tokens: list[str]) -> list[int]:
        """The evidence positions answered in full, in the order the answer gives them: the section of each
        member the question names (of a class it names, when it names one), else a member it writes as a word
        in the first `window` hits, else the first hit; then the best section of each other class it names;
        a getter or property gives way to its setter when the question wants to change something."""
        classes = set(plan.classes)
        owners = classes | {owner for _, owner in plan.inherited}
        chosen: list[int] = []

        def add(position: int | None) -> None:
            # One block per section: another part of a long section already answered is at most quoted.
            if position is not None and position not in chosen and len(chosen) < self.max_sections \
                    and not any(same_section(hits[position].chunk, hits[p].chunk) for p in chosen):
                chosen.append(position)

        for member in plan.members:
            add(next((p for p, h in enumerate(hits)
                      if h.chunk.member == member and (not owners or h.chunk.class_name in owners)), None))
        if not chosen:
            # Written as code (`setSize`, `max_age`, `.near`), or any Latin word in Chinese text (as the planner
            # reads it); in English prose a plain word that is also a member (`view`) is just a word.
            written = {w for w in re.findall(rf"\.?{IDENTIFIER}", question)
                       if w.startswith(".") or is_chinese(question) or not re.fullmatch(r"[a-z]+", w)}
            written = {w.lstrip(".") for w in written}
            add(next((p for p, h in enumerate(hits[:self.window])
                      if h.chunk.member and h.chunk.member in written and h.chunk.member != h.chunk.class_name), None))
        if not chosen and hits:
            # A pasted error's words are the error's, seldom the docs': its evidence keeps the search's order.
            add(0 if plan.pasted_error else self.best_covering(tokens, hits[:self.window], intent))
        for name in plan.classes[1:] if len(plan.classes) > 1 else ():
            if not any(hits[p].chunk.class_name == name for p in chosen):
                add(next((p for p, h in enumerate(hits) if h.chunk.class_name == name), None))
        if plan.members and chosen and all(m in plan.classes for m in plan.members):
            # Only a constructor named ("beyond what I passed to the constructor"): a member section the search
            # ranked above it, sharing the question's words, is answered too, in the search's order.
            above = [p for p, h in enumerate(hits[:min(chosen[0], self.window)])
                     if h.chunk.member and h.source != "structure" and self.related(tokens, h.chunk)]
            chosen[:0] = above[:self.max_sections - len(chosen)]
        if not plan.members:
            # No member named: the answer may take several members ("the defaults of the dash and the gap"), so
            # each member section among the first hits that shares the question's words is answered in full, the
            # one whose sentences cover most of the question first.
            for position, hit in enumerate(hits[:self.window + 1]):
                if hit.chunk.member and hit.source != "structure" and self.related(tokens, hit.chunk) \
                        and about(hit.chunk, owners):
                    add(position)
            if not plan.pasted_error:
                # A question asking a value ("how many", "the default") is answered first by a section that states
                # one: a section stating none cannot answer it, however many of its words it shares.
                scores = dict(zip(chosen, self.covering_scores(tokens, [hits[p] for p in chosen], intent)))
                chosen[:] = sorted(chosen, key=lambda p: (not (intent.value and self.states_value(hits[p].chunk)),
                                                          -scores[p]))
        if intent.accessor == "setter":
            # A getter gives way to its setter; a property keeps its place (its value) and its setter follows.
            swapped: list[int] = []
            for position in chosen:
                setter = self.setter_position(hits, position)
                member = hits[position].chunk.member
                swapped += [setter] if GETTER_RE.match(member) else [position, setter]
            chosen = list(dict.fromkeys(swapped))[:self.max_sections]
        elif intent.accessor == "getter":
            # A setter gives way to the getters of what it sets, when the evidence holds them (the search completes
            # it with them): "get the size and the center" is answered by getSize and getCenter, not by
            # setFromCenterAndSize.
            swapped = []
            for position in chosen:
                getters = getters_of(hits[position].chunk.member)
                swapped += [p for p, h in enumerate(hits) if h.chunk.member in getters
                            and h.chunk.class_name == hits[position].chunk.class_name] or [position]
            chosen = list(dict.fromkeys(swapped))[:self.max_sections]
        # A section that names an answered member as `.member` (a setting that acts only with it: "used if
        # .enableDamping is set to true"), of the same class, that the search completed the evidence with.
        for position, hit in enumerate(hits):
            if hit.source == "structure" and any(refers_to(hit.chunk, hits[p].chunk) for p in chosen):
                add(position)
        # A member section of a class the question points at through a typed property (`.shadow : LightShadow`),
        # that the search found by following it (rag.engine.complete), when it shares the question's words.
        answered = {hits[p].chunk.class_name for p in chosen} | {h.chunk.class_name for h in hits[:self.window]}
        for position, hit in enumerate(hits):
            chunk = hit.chunk
            if hit.source == "structure" and chunk.member and chunk.class_name not in answered and self.related(
                    tokens, chunk):
                add(position)
                answered.add(chunk.class_name)
        return list(dict.fromkeys(chosen))

    def covering_scores(self, tokens: list[str], hits: list[Hit], intent: Intent = Intent()) -> list[float]:
        """How much of the question each hit's answering sentences cover: the question's words in its best
        `max_sentences` covering sentences (and its heading), each weighted by how rare it is among these hits (as
        BM25's idf). A long section with the words spread over many sentences scores by the sentences it would
        be quoted with, not by its whole text. For a how-to question, a section that shows what to run or call (a
        code example, or `inline code` in those sentences) counts `HOWTO_CODE` times as much."""

        sections, shows = [], []
        for hit in hits:
            section = read_section(hit.chunk)
            texts = section.sentences
            sentences = [words_of(stems(s)) for s in texts]
            chosen = covering(tokens, sentences, self.max_sentences)
            words = set(words_of(stems(hit.chunk.member)))
            sections.append(words.union(*(sentences[i] for i in chosen)))
            shows.append(intent.howto and (bool(section.code) or any("`" in texts[i] for i in chosen)))
        n = len(sections)
        weight = {t: math.log(1 + (n - f + 0.5) / (f + 0.5))
                  for t in set(tokens) if (f := sum(t in s for s in sections))}
        return [sum(weight.get(t, 0.0) for t in section & set(tokens)) * (HOWTO_CODE if show else 1.0)
                for section, show in zip(sections, shows)]

    def best_covering(self, tokens: list[str], hits: list[Hit], intent: Intent = Intent()) -> int:
        """The hit whose answering sentences cover the most of the question (`covering_scores`), the earlier on a
        tie: "field of view" leads with the section that says "field of view", not with one whose member happens
        to be called `view`."""
        scores = self.covering_scores(tokens, hits, intent)
        return max(range(len(hits)), key=lambda i: (scores[i], -i)) if hits else 0

    @staticmethod
    def states_value(chunk) -> bool:
        """Whether a section states a value: a number in its text, or a default."""
        text = read_section(chunk).sentences
        return any(re.search(r"\d", sentence) or DEFAULT_RE.search(sentence) for sentence in text)

    @staticmethod
    def related(tokens: list[str], chunk) -> bool:
        """Whether a section shares a word with the question (its heading included)."""

        return bool(set(tokens) & set(words_of(stems(f"{chunk.member}\n{chunk.text}"))))

    @staticmethod
    def setter_position(hits: list[Hit], position: int) -> int:
        """The evidence position of the setter of the getter or property at `position` (same class), if any."""
        chunk = hits[position].chunk
        if not chunk.member or chunk.member.startswith("set"):
            return position
        for other, hit in enumerate(hits):
            if hit.chunk.class_name == chunk.class_name and is_setter_of(hit.chunk.member, chunk.member):
                return other
        return position

    # -- what each part says --

    def facts(self, tokens: list[str], intent: Intent, section: Section) -> list[str]:
        """The sentences of a section that answer: all of a short one; else those covering most of the question's
        words (each adds words the ones before did not cover), its values ("Default is") and the follow-ups it
        requires ("you will have to call …"), and for a yes-or-no or a why what it rules out; in the section's
        order. A value sentence too short to name its subject ("默认为 false。") keeps the sentence before it."""

        sentences = list(section.sentences)
        if not sentences:
            return []
        if len(sentences) <= self.max_facts and sum(map(len, sentences)) <= self.whole_chars:
            return sentences  # a short section is its own best answer, whole
        tokenized = [stems(s) for s in sentences]
        scores = sentence_scores(tokens, tokenized)
        best = covering(tokens, tokenized, self.max_sentences) or [0]
        is_property = not section.callable
        values = [i for i, s in enumerate(sentences) if DEFAULT_RE.search(s) and (scores[i] > 0 or (
            is_property and (intent.value or len(sentences) <= 4)))]
        follow_ups = [i for i, s in enumerate(sentences) if FOLLOW_UP_RE.search(s)]
        # For a yes-or-no or a why, what it rules out that the question speaks of; asked for its limitations,
        # everything it rules out or requires ("不支持阴影。", "Only MeshStandardMaterial is supported.").
        limits = [i for i, s in enumerate(sentences) if LIMIT_RE.search(s) and (
            intent.limits or ((intent.whether or intent.why) and scores[i] > 0))]
        # A parameter or option the question names ("antialias - whether to perform antialiasing. Default is
        # false."): its own item answers, before any sentence chosen by the question's other words.
        defined = {i: _stems(item.group(1))[:1] for i, s in enumerate(sentences) if (item := DEFINED_NAME_RE.match(s))}
        named = [i for i, name in defined.items() if name and name[0] in tokens]
        kept = list(dict.fromkeys([*named, *best, *values, *follow_ups, *limits]))[:self.max_facts]
        for i in list(kept):
            if i > 0 and i in values and len(sentences[i]) < SUBJECTLESS_CHARS and i - 1 not in kept:
                kept.append(i - 1)
        if intent.options:  # the choices a section lists, each an item of its own
            kept += [i for i, s in enumerate(sentences) if LIST_ITEM_RE.match(s)][:self.max_options]
        return [sentences[i] for i in sorted(set(kept))]

    def block(self, tokens: list[str], intent: Intent, hits: list[Hit], position: int, *, lead: bool,
              has_code: bool) -> tuple[str, bool]:
        """One section answered: its label and signature, its facts, what the note of its group requires, and
        its code example when short (the lead's always, another's when the question asks how or for an example
        and none is shown yet)."""
        chunk = hits[position].chunk
        section = read_section(chunk)
        mark = self.cite(position)
        heading = f"**{member_label(chunk)}**"
        if section.signature and section.signature.lstrip(".") not in (chunk.member, member_label(chunk)):
            heading += f" — `{section.signature}`" if chunk.member else f" — {section.signature}"
        block = f"{heading} {mark}"
        if section.callable and 2 < len(section.sentences) and sum(map(len, section.sentences)) <= self.whole_chars:
            block += "\n\n" + "\n".join(f"- {s}" for s in section.sentences) + f" {mark}"
        else:
            facts = self.facts(tokens, intent, section)
            if facts:
                block += "\n\n" + as_text(facts) + f" {mark}"
        note = self.group_note(hits, chunk)
        if note is not None and note[0] not in self._numbers:  # a group's note is given once
            block += "\n\n" + joined(note[1]) + f" {self.cite(note[0])}"
        shown = self.shown_code(section.code, {chunk.member} - {""})
        code = bool(shown) and (lead or (not has_code and (intent.code or intent.howto)))
        if code:
            block += "\n\n" + "\n".join(shown)
        return block, code

    def shown_code(self, code: tuple[str, ...], names: set[str]) -> tuple[str, ...]:
        """A section's code example as an answer shows it: whole when it has at most `max_code_lines` lines of code
        (its fences and blank lines not counted); a longer one up to its last line, within that many, that uses a
        member the answer gives (`geometry.setAttribute(…)`; a comment naming it, up to the statement it describes),
        then `…`; () when it has none of those."""
        body = code[1:-1]
        if not any(line.strip() for line in body):
            return ()
        if sum(1 for line in body if line.strip()) <= self.max_code_lines:
            return code
        uses = names_re(names) if names else None
        cut, counted = None, 0
        for n, line in enumerate(body):
            counted += bool(line.strip())
            if counted > self.max_code_lines:
                break
            if uses is not None and uses.search(line):
                cut = n
        if cut is None:
            return ()
        while cut + 1 < len(body) and (not body[cut].strip() or body[cut].lstrip().startswith(COMMENT_MARKS)):
            cut += 1  # a comment names what the statement after it does: the example ends with that statement
        return (code[0], *body[:cut + 1], "…", code[-1])

    @staticmethod
    def group_note(hits: list[Hit], chunk) -> tuple[int, list[str]] | None:
        """The follow-ups the note of a member's group requires ("after changing these properties call …"),
        when that note is among the evidence: (its position, its sentences that require something)."""
        for position, hit in enumerate(hits):
            required = group_requires(hit.chunk, chunk)
            if required:
                return position, required
        return None

    def example(self, hits: list[Hit], focus: list[int], chinese: bool) -> str:
        """A short code example from the evidence of a class answered, when no answered section has one."""
        classes = {hits[p].chunk.class_name for p in focus}
        names = {hits[p].chunk.member for p in focus} - {""}
        for position, hit in enumerate(hits):
            if hit.chunk.class_name not in classes:
                continue
            shown = self.shown_code(read_section(hit.chunk).code, names)
            if shown:
                where, mark = member_label(hit.chunk), self.cite(position)
                head = f"{EXAMPLE[0]}（{where}）{mark}：" if chinese else f"{EXAMPLE[1]} ({where}) {mark}:"
                return head + "\n\n" + "\n".join(shown)
        return ""

    def quote(self, tokens: list[str], intent: Intent, hit: Hit, position: int, said: str = "") -> str:
        """One line for a supporting section: its best sentence by the question's words that the answer (`said`)
        does not already give, and its value sentence when the question asks for a value; nothing when it shares
        no word with the question."""

        section = read_section(hit.chunk)
        if not section.sentences:
            return ""
        # A sentence the answer already gives (the overlap of a long section's parts) is not quoted again.
        scores = [0.0 if s in said else score
                  for s, score in zip(section.sentences, sentence_scores(tokens, [stems(s) for s in section.sentences]))]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        if scores[best] <= 0:
            return ""  # a quote sharing no word with the question supports nothing
        chosen = [best]
        if intent.value:
            chosen += [i for i, s in enumerate(section.sentences)
                       if DEFAULT_RE.search(s) and i != best and s not in said][:1]
        if intent.limits:  # asked for limitations: what the section rules out or requires
            chosen += [i for i, s in enumerate(section.sentences) if (LIMIT_RE.search(s) or FOLLOW_UP_RE.search(s))
                       and i not in chosen and s not in said][:self.max_limits]
        where = member_label(hit.chunk)
        if section.signature and hit.chunk.member and section.signature.lstrip(".") != hit.chunk.member:
            where = f"{where} (`{section.signature}`)"
        return f"> {where}: {joined([section.sentences[i] for i in sorted(chosen)])} {self.cite(position)}"

    def refusal(self, hits: list[Hit], chinese: bool) -> str:
        """Say the documentation does not cover the question, and name the nearest sections as related (the class
        and member of each, not cited: they are not an answer)."""
        pages = list(dict.fromkeys(member_label(h.chunk) for h in hits))[:self.related_sections]
        text = NOT_COVERED[0 if chinese else 1]
        if pages:
            text += "\n\n" + RELATED[0 if chinese else 1] + ("、" if chinese else ", ").join(pages)
        return text
