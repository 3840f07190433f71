"""Coverage gaps: the questions users asked that the docs did not answer, grouped by meaning.

`gaps_compute` (a beat job, `manage.py ops_gaps`) reads the web and MCP requests of the last WINDOW_DAYS that
came back empty or with low confidence, got a thumbs-down, or asked for an SDK version that is not indexed;
merges wordings that differ only in case, spacing or end punctuation (`grouping.question_key`); embeds each
question once with the engine's embedder (multilingual, so Chinese and English questions about one thing meet;
the vector is kept); groups them with `grouping.cluster`; and stores per group its size per day, examples, the
classes and pages the engine reached for and a reason. Groups keep their number and status across runs.

From a group, `gap_drafts` turns its questions into draft golden cases (the thumbs-down drafting, for each of
them), and `gap_mark_covered` marks it covered once the docs changed: `gaps_recheck` (run by the same job) asks
its questions again, without recording them, once a newer index serves their knowledge base, and closes the
group when every one now finds evidence answered with more than low confidence, else reopens it.
The ops pages only read what the job stored (`opsboard.selectors.gap_groups`).
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
from django.db import transaction
from django.db.models import Count, Max, Min, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from evaluation.models import GoldenItem, GoldenSet
from evaluation.services.golden import draft_from_request
from infra.errors import ServiceError
from opsboard import grouping
from opsboard.models import GapGroup, GapQuestion
from rag.models import Channel, KnowledgeBase, RequestRecord
from rag.services.embeddings import embedding_model, question_vector

log = logging.getLogger(__name__)

GAP_CHANNELS = (Channel.WEB, Channel.MCP)  # what users asked through the assistant faces; never eval traffic
WINDOW_DAYS = 30
UNANSWERED = (RequestRecord.Outcome.EMPTY, RequestRecord.Outcome.LOW)
VERSION_NOT_INDEXED = "sdk_version_not_found"
MAX_EMBEDDED_PER_RUN = 5_000  # new questions embedded per run, most asked first; the rest wait for the next run
EXAMPLES = 5
RECHECKED_QUESTIONS = 10  # a covered group's most asked questions asked again against the new index
DRAFTED_QUESTIONS = 50


def unanswered(since: datetime.datetime, until: datetime.datetime):
    """The user requests of the window that the docs did not answer."""
    bad = (Q(outcome__in=UNANSWERED) | Q(feedback__isnull=False) | Q(error_code=VERSION_NOT_INDEXED))
    return RequestRecord.objects.filter(bad, channel__in=list(GAP_CHANNELS), created_at__gte=since,
                                        created_at__lt=until)


@dataclass
class Asked:
    """One question of the window (its wordings merged): how often and when it went unanswered."""

    key: str
    kb: str
    wordings: Counter = field(default_factory=Counter)
    daily: Counter = field(default_factory=Counter)
    first: datetime.datetime | None = None
    last: datetime.datetime | None = None
    latest_id: int = 0

    @property
    def times(self) -> int:
        return sum(self.daily.values())

    def add(self, question: str, day: datetime.date, times: int, first, last, latest_id: int) -> None:
        self.wordings[question] += times
        self.daily[day.isoformat()] += times
        self.first = first if self.first is None else min(self.first, first)
        self.last = last if self.last is None else max(self.last, last)
        self.latest_id = max(self.latest_id, latest_id)


def _asked(rows, settled: dict[tuple[str, str], datetime.datetime]) -> dict[tuple[str, str], Asked]:
    tz = timezone.get_current_timezone()
    grouped = (rows.annotate(day=TruncDate("created_at", tzinfo=tz)).values("question", "kb", "day")
               .annotate(times=Count("id"), first=Min("created_at"), last=Max("created_at"), latest=Max("id")))
    asked: dict[tuple[str, str], Asked] = {}
    for row in grouped.iterator(chunk_size=5_000):
        key = grouping.question_key(row["question"])[:255]
        if not key:
            continue
        at = (row["kb"], key)
        if at in settled and row["last"] <= settled[at]:
            continue  # asked only before its group closed
        asked.setdefault(at, Asked(key=key, kb=row["kb"])).add(
            row["question"], row["day"], row["times"], row["first"], row["last"], row["latest"])
    return asked


def _reached(record: dict) -> tuple[list[str], list[str]]:
    """The classes and pages the engine reached for: what it adopted, else the classes the plan named."""
    adopted = record["adopted"] if isinstance(record["adopted"], list) else []
    classes = [a.get("class_name") for a in adopted if isinstance(a, dict) and a.get("class_name")]
    pages = [a.get("source") for a in adopted if isinstance(a, dict) and a.get("source")]
    plan = record["plan"] if isinstance(record["plan"], dict) else {}
    if not classes:
        classes = [c for c in (plan.get("classes") or []) + (plan.get("hinted_classes") or []) if isinstance(c, str)]
    return list(dict.fromkeys(classes)), list(dict.fromkeys(pages))


def _reason_of(record: dict) -> str:
    if record["error_code"] == VERSION_NOT_INDEXED:
        return GapGroup.Reason.VERSION_NOT_INDEXED
    plan = record["plan"] if isinstance(record["plan"], dict) else {}
    if plan.get("kind") == "out_of_catalog":
        return GapGroup.Reason.OUT_OF_CATALOG
    return GapGroup.Reason.NO_PAGE


def _latest_records(ids: list[int]) -> dict[int, dict]:
    out = {}
    for start in range(0, len(ids), 2_000):
        for row in RequestRecord.objects.filter(id__in=ids[start:start + 2_000]).values(
                "id", "request_id", "channel", "plan", "adopted", "error_code"):
            out[row["id"]] = row
    return out


def _vectors(questions: list[GapQuestion]) -> tuple[np.ndarray, int]:
    """Every question's kept vector, embedding those without one (most asked first, at most
    MAX_EMBEDDED_PER_RUN); returns the matrix (rows of zeros for the ones left for the next run) and how many
    were left."""
    model, dimension = embedding_model()
    missing = sorted((q for q in questions if q.model != model or not q.vector), key=lambda q: -q.times)
    left = max(0, len(missing) - MAX_EMBEDDED_PER_RUN)
    for question in missing[:MAX_EMBEDDED_PER_RUN]:
        question.vector, question.model = question_vector(question.question).tobytes(), model
    matrix = np.zeros((len(questions), dimension), dtype=np.float32)
    for row, question in enumerate(questions):
        if question.model == model and question.vector:
            matrix[row] = np.frombuffer(bytes(question.vector), dtype=np.float32)
    return matrix, left


def _golden_vectors(kbs: set[str]) -> tuple[list[GoldenItem], np.ndarray]:
    """The answerable items of the latest version of every golden set over these knowledge bases: a group near
    one of them asks what a page answers (the set names it), so retrieval missed it."""
    latest = {}
    for golden_set in GoldenSet.objects.order_by("name", "-version"):
        latest.setdefault(golden_set.name, golden_set.id)
    items = list(GoldenItem.objects.filter(golden_set_id__in=latest.values(), answerable=True, kb__in=kbs)
                 .exclude(expected_classes=[]).select_related("golden_set"))
    if not items:
        return [], np.zeros((0, 0), dtype=np.float32)
    return items, np.stack([question_vector(i.question) for i in items])


def _answered_later(asked: dict[tuple[str, str], Asked], since) -> set[tuple[str, str]]:
    """Questions that a later request (same knowledge base, same wording up to question_key) got answered without
    a thumbs-down: one grouped scan of the window's answered user requests."""
    later = set()
    rows = (RequestRecord.objects.filter(channel__in=list(GAP_CHANNELS), outcome=RequestRecord.Outcome.OK,
                                         feedback__isnull=True, created_at__gte=since)
            .values("kb", "question").annotate(last=Max("created_at")))
    for row in rows.iterator(chunk_size=5_000):
        at = (row["kb"], grouping.question_key(row["question"])[:255])
        if at in asked and row["last"] > asked[at].last:
            later.add(at)
    return later


@dataclass(frozen=True)
class GapsRun:
    questions: int
    groups: int
    embedded_left: int
    rechecked: int
    closed: int


def gaps_compute(*, now: datetime.datetime | None = None, threshold: float = grouping.DISTANCE_THRESHOLD) -> GapsRun:
    """Recompute the groups from the last WINDOW_DAYS of unanswered user requests; then re-check covered ones."""
    now = now or timezone.now()
    since = now - datetime.timedelta(days=WINDOW_DAYS)
    settled = {(q.kb, q.key): q.settled_at for q in GapQuestion.objects.filter(settled_at__isnull=False)}
    asked = _asked(unanswered(since, now), settled)
    kept = {(q.kb, q.key): q for q in GapQuestion.objects.filter(
        Q(kb__in={kb for kb, _ in asked}) | Q(group__isnull=False)).select_related("group")}
    before = {q.pk: _state(q) for q in kept.values()}
    records = _latest_records([a.latest_id for a in asked.values()])
    later = _answered_later(asked, since)
    rows: list[GapQuestion] = []
    for at, item in asked.items():
        record = records.get(item.latest_id)
        if record is None:
            continue
        question = kept.get(at) or GapQuestion(kb=item.kb, key=item.key)
        classes, pages = _reached(record)
        question.question = item.wordings.most_common(1)[0][0]
        question.times, question.first_seen, question.last_seen = item.times, item.first, item.last
        question.request_id, question.channel = record["request_id"], record["channel"]
        reason = _reason_of(record)
        question.reason = GapGroup.Reason.MISSED if at in later and reason == GapGroup.Reason.NO_PAGE else reason
        question.classes, question.pages = classes[:5], pages[:5]
        question.daily = dict(item.daily)
        rows.append(question)
    vectors, left = _vectors(rows)
    embedded = [i for i, q in enumerate(rows) if q.vector]
    labels = _cluster([rows[i] for i in embedded], vectors[embedded], threshold)
    golden, golden_vectors = _golden_vectors({q.kb for q in rows})
    with transaction.atomic():
        groups = _store(rows, embedded, labels, vectors, golden, golden_vectors, threshold, now, since, before)
    rechecked, closed = gaps_recheck(now=now)
    return GapsRun(questions=len(rows), groups=groups, embedded_left=left, rechecked=rechecked, closed=closed)


def _cluster(questions: list[GapQuestion], vectors: np.ndarray, threshold: float) -> list[int | None]:
    """Cluster the MAX_CLUSTERED most asked; the rest join the nearest group within the threshold, or none."""
    order = sorted(range(len(questions)), key=lambda i: -questions[i].times)
    head, tail = order[:grouping.MAX_CLUSTERED], order[grouping.MAX_CLUSTERED:]
    labels: list[int | None] = [None] * len(questions)
    head_labels = grouping.cluster(vectors[head], threshold=threshold)
    for i, label in zip(head, head_labels):
        labels[i] = label
    if tail and head_labels:
        centroids = grouping.centroids_of(vectors[head], head_labels)
        for i, label in zip(tail, grouping.nearest_groups(vectors[tail], centroids, threshold=threshold)):
            labels[i] = label
    return labels


UPDATED_FIELDS = ("question", "times", "daily", "first_seen", "last_seen", "request_id", "channel", "reason", "classes",
                  "pages", "vector", "model", "group")


def _state(question: GapQuestion) -> tuple:
    return tuple(bytes(question.vector or b"") if name == "vector" else
                 question.group_id if name == "group" else getattr(question, name) for name in UPDATED_FIELDS)


def _store(rows, embedded, labels, vectors, golden, golden_vectors, threshold, now, since, before) -> int:
    members: dict[int, list[int]] = defaultdict(list)
    for i, label in zip(embedded, labels):
        if label is not None:
            members[label].append(i)
    previous = {g.id: g for g in GapGroup.objects.all()}
    taken: set[int] = set()
    new_group_of: dict[int, GapGroup] = {}
    # The biggest clusters choose first: each takes the old group most of its requests were in, if still free.
    for label in sorted(members, key=lambda k: -sum(rows[i].times for i in members[k])):
        votes = Counter()
        for i in members[label]:
            if rows[i].group_id and rows[i].group_id not in taken:
                votes[rows[i].group_id] += rows[i].times
        group = previous[votes.most_common(1)[0][0]] if votes else GapGroup()
        if group.pk:
            taken.add(group.pk)
        new_group_of[label] = group
    golden_matrix = grouping.normalized_rows(golden_vectors) if golden else None
    for label, group in new_group_of.items():
        questions = [rows[i] for i in members[label]]
        _describe(group, questions, now)
        if group.reason == GapGroup.Reason.NO_PAGE and golden_matrix is not None:
            centroid = grouping.centroids_of(vectors[members[label]], [0] * len(questions))[0]
            detail = _golden_match(centroid, {q.kb for q in questions}, golden, golden_matrix, threshold)
            if detail:
                group.reason, group.reason_detail = GapGroup.Reason.MISSED, detail
        if group.status == GapGroup.Status.CLOSED:  # asked again after it closed
            group.status, group.closed_at = GapGroup.Status.OPEN, None
            group.reason_detail = f"Reopened: asked again after it closed. {group.reason_detail}"[:300]
        group.save()
    label_of = dict(zip(embedded, labels))
    for row_index, question in enumerate(rows):
        label = label_of.get(row_index)
        question.group = new_group_of.get(label) if label is not None else None
    GapQuestion.objects.bulk_create([q for q in rows if q.pk is None], batch_size=500)
    # Only the questions that changed (asked again, regrouped, embedded): most stay as they were hour to hour.
    GapQuestion.objects.bulk_update([q for q in rows if q.pk is not None and _state(q) != before.get(q.pk)],
                                    list(UPDATED_FIELDS), batch_size=500)
    # Questions no longer unanswered in the window are forgotten (a closed group's keep its settling date);
    # open groups nobody asks any more go.
    GapQuestion.objects.filter(last_seen__lt=since, settled_at__isnull=True).delete()
    stale = [g for gid, g in previous.items() if gid not in taken and g.status == GapGroup.Status.OPEN]
    GapGroup.objects.filter(pk__in=[g.pk for g in stale]).delete()
    GapGroup.objects.filter(pk__in=[gid for gid in previous if gid not in taken]).exclude(
        status=GapGroup.Status.OPEN).update(size=0, daily={}, questions=0, computed_at=now)
    return len(new_group_of)


def _describe(group: GapGroup, questions: list[GapQuestion], now) -> None:
    questions = sorted(questions, key=lambda q: (-q.times, q.question))
    daily, classes, pages, reasons, kbs = Counter(), Counter(), Counter(), Counter(), Counter()
    for question in questions:
        daily.update(question.daily)
        classes.update({c: question.times for c in question.classes[:3]})
        pages.update({p: question.times for p in question.pages[:3]})
        reasons[question.reason] += question.times
        kbs[question.kb] += question.times
    group.kb = kbs.most_common(1)[0][0]
    group.title = questions[0].question
    group.questions, group.size, group.daily = len(questions), sum(daily.values()), dict(sorted(daily.items()))
    group.first_seen = min(q.first_seen for q in questions)
    group.last_seen = max(q.last_seen for q in questions)
    group.examples = [{"question": q.question, "times": q.times, "request_id": q.request_id, "channel": q.channel,
                       "kb": q.kb} for q in questions[:EXAMPLES]]
    group.classes = [list(c) for c in classes.most_common(5)]
    group.pages = [list(p) for p in pages.most_common(5)]
    group.reason = reasons.most_common(1)[0][0] or GapGroup.Reason.NO_PAGE
    group.reason_detail = ""
    if group.reason == GapGroup.Reason.MISSED:
        group.reason_detail = "A later request with the same question was answered."
    group.computed_at = now


def _golden_match(centroid: np.ndarray, kbs: set[str], golden: list[GoldenItem], matrix: np.ndarray,
                  threshold: float) -> str:
    """The nearest answerable golden question over one of these knowledge bases within the threshold of a group's
    centroid, as a reason's detail: a page answers such a question (the set names the class), so retrieval
    missed it. "" when there is none."""
    similarity = matrix @ centroid
    for index in np.argsort(-similarity):
        if 1 - similarity[index] > threshold:
            break
        item = golden[int(index)]
        if item.kb in kbs:
            return (f"Golden set {item.golden_set.name} ({item.item_id}) expects "
                    f"{', '.join(item.expected_classes)} for a question like it.")[:300]
    return ""


# -- actions from the gaps page ---------------------------------------------------------------------------


def gap_get(group_id) -> GapGroup:
    group = GapGroup.objects.filter(pk=group_id).first() if str(group_id).isdigit() else None
    if group is None:
        raise ServiceError("gap_not_found", "No coverage gap with this number.", status=404)
    return group


def gap_drafts(group: GapGroup) -> tuple[int, int]:
    """Draft a golden case from each of the group's questions (its latest user request), most asked first;
    returns (drafts made or already there, questions whose request is no longer kept)."""
    made = missing = 0
    for question in group.members.order_by("-times", "question")[:DRAFTED_QUESTIONS]:
        try:
            draft_from_request(request_id=question.request_id,
                               reason=f"Coverage gap {group.pk} ({group.get_reason_display()}).")
            made += 1
        except ServiceError:
            missing += 1
    return made, missing


def gap_mark_covered(group: GapGroup, *, user=None) -> GapGroup:
    """The docs now cover this group: wait for the next index of its knowledge base, then re-check."""
    if group.status == GapGroup.Status.CLOSED:
        raise ServiceError("gap_closed", "This gap is already closed.")
    active = KnowledgeBase.objects.filter(slug=group.kb).values_list("active_version__name", flat=True).first()
    group.status = GapGroup.Status.COVERED
    group.covered_at = timezone.now()
    group.covered_by = getattr(user, "username", "")[:150]
    group.covered_version = active or ""
    group.check_result = {}
    group.save(update_fields=["status", "covered_at", "covered_by", "covered_version", "check_result"])
    return group


def _answers_now(question: GapQuestion) -> tuple[bool, str]:
    """Ask the question again (unrecorded, no model): found when evidence comes back answered with more than low
    confidence, and, for an answer that got a thumbs-down, when that evidence holds a chunk the judged answer did
    not (an added or changed section): the same chunks again are the answer its reader already rejected."""
    from rag.services import QuestionRequest, question_answer

    record = RequestRecord.objects.filter(request_id=question.request_id).values(
        "arguments", "adopted", "feedback").first() or {}
    arguments = record.get("arguments") if isinstance(record.get("arguments"), dict) else {}
    sdk_version = arguments.get("sdk_version") or arguments.get("version")
    try:
        outcome = question_answer(QuestionRequest(
            question=question.question, kb=question.kb or None, sdk_version=sdk_version if isinstance(
                sdk_version, str) else None, channel=Channel.EVAL, record=False, no_model="coverage re-check"))
    except ServiceError as exc:
        return False, exc.code
    answer = outcome.answer
    found = bool(outcome.result.hits) and answer.mode != "empty" and answer.confidence != "low"
    detail = f"{len(outcome.result.hits)} chunks, confidence {answer.confidence}"
    if found and record.get("feedback"):
        judged = {a.get("chunk_id") for a in record.get("adopted") or [] if isinstance(a, dict)}
        found = any(h.chunk.chunk_id not in judged for h in outcome.result.hits)
        detail += "" if found else ", the same evidence that got a thumbs-down"
    return found, detail


def gaps_recheck(*, now: datetime.datetime | None = None) -> tuple[int, int]:
    """Ask each covered group's questions again once a newer index serves its knowledge base; close the group
    when every one finds evidence, else reopen it. Returns (groups checked, groups closed)."""
    now = now or timezone.now()
    checked = closed = 0
    for group in GapGroup.objects.filter(status=GapGroup.Status.COVERED):
        active = KnowledgeBase.objects.filter(slug=group.kb).values_list("active_version__name", flat=True).first()
        if not active or active == group.covered_version or active == group.checked_version:
            continue
        questions = list(group.members.order_by("-times", "question")[:RECHECKED_QUESTIONS])
        results = [(q, *_answers_now(q)) for q in questions]
        checked += 1
        answered = all(found for _, found, _ in results)
        group.checked_version = active
        group.check_result = {"version": active, "at": now.isoformat(), "answered": sum(f for _, f, _ in results),
                              "asked": len(results),
                              "questions": [{"question": q.question, "found": f, "detail": d} for q, f, d in results]}
        if answered:
            closed += 1
            group.status, group.closed_at = GapGroup.Status.CLOSED, now
            group.members.update(settled_at=now)
        else:
            group.status = GapGroup.Status.OPEN
            group.reason_detail = (f"Marked covered, but index {active} still leaves "
                                   f"{len(results) - group.check_result['answered']} of {len(results)} unanswered.")
        group.save()
    return checked, closed
