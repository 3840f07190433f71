"""Golden sets (import, export, versions, drafts), evaluation runs (start, execute, cancel, retry, reap) and
the gated reindex. Every write of the evaluation app goes through here; pages, commands and tasks call it."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from evaluation import rules
from evaluation.judge import PROMPT_VERSION, Judge, JudgeError
from evaluation.models import EvalResult, EvalRun, GoldenDraft, GoldenItem, GoldenSet, JudgeVerdict
from rag.engine.metrics import RetrievedChunk, score_question
from rag.errors import ServiceError
from rag.models import Channel, IndexVersion, KnowledgeBase, RequestRecord
from rag.services.generation import chat_client, generation_configured
from rag.services.knowledge import index_activate, index_build, index_version_note
from rag.services.questions import QuestionRequest, question_answer, question_search
from rag.services.release import GateOutcome

log = logging.getLogger(__name__)
LAYERS = ("plain", "colloquial", "member", "typo", "multi", "negative")
NEGATIVE_KINDS = ("chitchat", "out_of_catalog", "no_answer")
FIELDS = {
    "retrieval": ("id", "question", "layer", "answerable", "expected_classes", "expected_members", "negative_kind",
                  "kb", "source"),
    "generation": ("id", "question", "answerable", "expected_classes", "expected_members", "must_mention",
                   "forbidden", "reference", "needs_code", "kb", "source"),
}


# -- golden sets --------------------------------------------------------------------------------------


def _check_item(data, kind: str, line: int) -> dict:
    """One JSON Lines object in the SCHEMA.md shape, or a message naming the line and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"line {line}: not a JSON object")

    def text(name, required=True):
        value = data.get(name, "")
        if not isinstance(value, str) or (required and not value.strip()):
            raise ValueError(f"line {line}: {name} must be a non-empty string")
        return value

    def words(name):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"line {line}: {name} must be a list of strings")
        return value

    answerable = data.get("answerable")
    if not isinstance(answerable, bool):
        raise ValueError(f"line {line}: answerable must be true or false")
    item = {"item_id": text("id"), "question": text("question"), "answerable": answerable,
            "expected_classes": words("expected_classes"), "expected_members": words("expected_members"),
            "kb": text("kb"), "source": text("source", required=False)}
    if len(item["item_id"]) > 64 or len(item["kb"]) > 64:
        raise ValueError(f"line {line}: id and kb are at most 64 characters")
    if answerable and not item["expected_classes"] and kind == "retrieval":
        raise ValueError(f"line {line}: an answerable question needs expected_classes")
    if kind == "retrieval":
        layer = text("layer")
        if layer not in LAYERS:
            raise ValueError(f"line {line}: layer must be one of {', '.join(LAYERS)}")
        negative_kind = data.get("negative_kind", "") or ""
        if not answerable and negative_kind not in NEGATIVE_KINDS:
            raise ValueError(f"line {line}: a negative needs negative_kind ({', '.join(NEGATIVE_KINDS)})")
        item.update(layer=layer, negative_kind=negative_kind)
    else:
        needs_code = data.get("needs_code", False)
        if not isinstance(needs_code, bool):
            raise ValueError(f"line {line}: needs_code must be true or false")
        item.update(layer="" if answerable else "negative", must_mention=words("must_mention"),
                    forbidden=words("forbidden"), reference=text("reference", required=False), needs_code=needs_code)
    return item


def golden_import(*, name: str, kind: str, text: str, user=None, note: str = "") -> GoldenSet:
    """Store JSON Lines as the next version of the set `name`; any bad line refuses the whole file."""
    if kind not in FIELDS:
        raise ServiceError("invalid_kind", "kind must be retrieval or generation.")
    if not name or len(name) > 100:
        raise ServiceError("invalid_name", "Give the golden set a name of at most 100 characters.")
    items, seen = [], set()
    try:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                raise ValueError(f"line {number}: not valid JSON") from None
            item = _check_item(data, kind, number)
            if item["item_id"] in seen:
                raise ValueError(f"line {number}: id {item['item_id']} appears twice")
            seen.add(item["item_id"])
            items.append(item)
    except ValueError as exc:
        raise ServiceError("invalid_golden_set", str(exc)) from None
    if not items:
        raise ServiceError("golden_set_empty", "The file holds no questions.")
    existing = GoldenSet.objects.filter(name=name).order_by("-version").first()
    if existing and existing.kind != kind:
        raise ServiceError("golden_kind_mismatch", f"{name} is a {existing.kind} set.")
    with transaction.atomic():
        golden_set = GoldenSet.objects.create(name=name, kind=kind, version=(existing.version + 1) if existing else 1,
                                              created_by=user, note=note[:300])
        GoldenItem.objects.bulk_create([GoldenItem(golden_set=golden_set, position=n, **item)
                                        for n, item in enumerate(items)])
    return golden_set


def golden_matches(golden_set: GoldenSet, text: str) -> bool:
    """Whether a JSON Lines file holds exactly the set's questions (so importing it again would change nothing)."""
    try:
        parsed = [_check_item(json.loads(line), golden_set.kind, n)
                  for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    except ValueError:
        return False
    stored = [{name: getattr(item, name) for name in parsed[0]} for item in golden_set.items.all()] if parsed else []
    return parsed == stored


def golden_export(golden_set: GoldenSet) -> str:
    """The set's items as JSON Lines in the SCHEMA.md shape of its kind."""
    lines = []
    for item in golden_set.items.all():
        row = {"id": item.item_id}
        for name in FIELDS[golden_set.kind][1:]:
            row[name] = getattr(item, name)
        if golden_set.kind == "retrieval" and item.answerable:
            row.pop("negative_kind")
        lines.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(lines) + "\n"


@transaction.atomic
def golden_new_version(golden_set: GoldenSet, *, user=None, note: str = "") -> GoldenSet:
    """Copy a set's items into its next version, which may be edited (the old one stays as runs saw it)."""
    latest = GoldenSet.objects.filter(name=golden_set.name).aggregate(v=Max("version"))["v"]
    copy = GoldenSet.objects.create(name=golden_set.name, kind=golden_set.kind, version=latest + 1, created_by=user,
                                    note=note or f"edited copy of v{golden_set.version}")
    items = list(golden_set.items.all())
    for item in items:
        item.pk = None
        item.golden_set = copy
    GoldenItem.objects.bulk_create(items)
    return copy


def golden_set_latest(name: str) -> GoldenSet:
    golden_set = GoldenSet.objects.filter(name=name).order_by("-version").first()
    if golden_set is None:
        raise ServiceError("golden_set_not_found", f"No golden set named {name}.", status=404)
    return golden_set


def draft_from_request(*, request_id: str, reason: str = "") -> GoldenDraft:
    """Turn a thumbs-down answer (web or MCP) into a draft golden item with its question and evidence."""
    record = RequestRecord.objects.filter(request_id=request_id).exclude(channel=Channel.EVAL).first()
    if record is None:
        raise ServiceError("request_not_found", "No user request with this id.", status=404)
    existing = GoldenDraft.objects.filter(request_id=request_id).first()
    if existing:
        return existing
    evidence = [{"chunk_id": a.get("chunk_id"), "class_name": a.get("class_name"), "member": a.get("member"),
                 "source": a.get("source")} for a in record.adopted]
    classes = list(dict.fromkeys(a["class_name"] for a in evidence if a.get("class_name")))
    try:
        return GoldenDraft.objects.create(
            request_id=request_id, channel=record.channel, kb=record.kb, question=record.question,
            answer=record.answer, evidence=evidence, feedback_reason=reason[:2000],
            expected_classes=classes[:1], layer="plain")
    except IntegrityError:
        return GoldenDraft.objects.get(request_id=request_id)


@transaction.atomic
def draft_add(draft: GoldenDraft, *, user=None) -> GoldenItem:
    """Add a completed draft to a new version of its target set."""
    if draft.status != GoldenDraft.Status.OPEN:
        raise ServiceError("draft_closed", "This draft was already added or dismissed.")
    if draft.target_set is None:
        raise ServiceError("draft_incomplete", "Choose the golden set this question goes to.")
    if draft.answerable and not draft.expected_classes:
        raise ServiceError("draft_incomplete", "An answerable question needs its expected classes.")
    latest = golden_set_latest(draft.target_set.name)
    target = golden_new_version(latest, user=user, note=f"added {draft.request_id}")
    item_id = f"fb-{draft.pk}"
    item = GoldenItem.objects.create(
        golden_set=target, item_id=item_id, position=target.items.count(), question=draft.question,
        layer=draft.layer if target.kind == "retrieval" else ("" if draft.answerable else "negative"),
        answerable=draft.answerable, expected_classes=draft.expected_classes, expected_members=draft.expected_members,
        negative_kind=draft.negative_kind, kb=draft.kb, must_mention=draft.must_mention, forbidden=draft.forbidden,
        reference=draft.reference, needs_code=draft.needs_code)
    draft.status = GoldenDraft.Status.ADDED
    draft.added_item = item
    draft.save(update_fields=["status", "added_item"])
    return item


# -- runs ---------------------------------------------------------------------------------------------


def current_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=settings.BASE_DIR, capture_output=True,
                             text=True, timeout=5, check=False)
        return out.stdout.strip()[:40]
    except OSError:
        return ""


def eval_run_create(*, golden_set: GoldenSet, kb: str = "", index_version: str = "", user=None) -> EvalRun:
    """A queued run of a golden set over the active versions (or one named version of `kb`)."""
    items = golden_set.items.all()
    if kb:
        items = items.filter(kb=kb)
    kbs = sorted(set(items.values_list("kb", flat=True)))
    if not kbs:
        raise ServiceError("golden_set_empty", "The golden set has no questions for this knowledge base.")
    if index_version and not kb:
        raise ServiceError("kb_required", "Name the knowledge base whose version to evaluate.")
    versions, candidate = {}, False
    for slug in kbs:
        base = KnowledgeBase.objects.select_related("active_version").filter(slug=slug).first()
        if base is None:
            raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404)
        if index_version:
            row = base.versions.filter(name=index_version, status=IndexVersion.Status.READY).first()
            if row is None:
                raise ServiceError("version_not_found", f"Version {index_version} of {slug} is not ready.", status=404)
            versions[slug] = row.name
            candidate = base.active_version_id != row.pk
        elif base.active_version is None:
            raise ServiceError("no_active_version", f"{slug} has no index yet.", status=409)
        else:
            versions[slug] = base.active_version.name
    return EvalRun.objects.create(golden_set=golden_set, kb=kb, index_versions=versions, candidate=candidate,
                                  total=items.count(), started_by=user, commit=current_commit())


def eval_run_start(*, golden_set: GoldenSet, kb: str = "", index_version: str = "", user=None) -> EvalRun:
    """Create a run and queue it on Celery once the row is committed."""
    from evaluation.tasks import eval_run_execute_task

    with transaction.atomic():
        run = eval_run_create(golden_set=golden_set, kb=kb, index_version=index_version, user=user)
        transaction.on_commit(lambda: eval_run_execute_task.delay(run.pk))
    return run


def eval_run_cancel(run: EvalRun) -> EvalRun:
    if run.status == EvalRun.Status.QUEUED:
        EvalRun.objects.filter(pk=run.pk, status=EvalRun.Status.QUEUED).update(
            status=EvalRun.Status.CANCELLED, finished_at=timezone.now())
    elif run.status == EvalRun.Status.RUNNING:
        EvalRun.objects.filter(pk=run.pk).update(cancel_requested=True)  # the worker stops after this question
    else:
        raise ServiceError("run_finished", f"Run #{run.pk} is already {run.status}.", status=409)
    run.refresh_from_db()
    return run


def eval_run_retry(run: EvalRun) -> EvalRun:
    """Queue a failed or cancelled run again; questions it already scored are kept, not scored twice."""
    from evaluation.tasks import eval_run_execute_task

    if run.status not in (EvalRun.Status.FAILED, EvalRun.Status.CANCELLED):
        raise ServiceError("run_not_retryable", f"Run #{run.pk} is {run.status}.", status=409)
    EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.QUEUED, cancel_requested=False, error="",
                                             verdict="", finished_at=None)
    transaction.on_commit(lambda: eval_run_execute_task.delay(run.pk))
    run.refresh_from_db()
    return run


def eval_runs_reap() -> int:
    """Mark running runs whose worker stopped beating as failed (a crashed worker never leaves one running)."""
    cutoff = timezone.now() - timezone.timedelta(seconds=settings.RAG_EVAL_STALE_SECONDS)
    return EvalRun.objects.filter(status=EvalRun.Status.RUNNING, heartbeat_at__lt=cutoff).update(
        status=EvalRun.Status.FAILED, finished_at=timezone.now(),
        error="the worker stopped reporting progress (it crashed or was killed); retry to resume")


def make_judge() -> Judge | None:
    config = settings.RAG_JUDGE
    if not config["BASE_URL"]:
        return None
    client = chat_client(base_url=config["BASE_URL"], model=config["MODEL"], api_key=config["API_KEY"],
                         read_timeout=config["READ_TIMEOUT"], temperature=0.0, max_tokens=400, seed=config["SEED"])

    def cache_get(key: str):
        return JudgeVerdict.objects.filter(key=key).values_list("verdict", flat=True).first()

    def cache_put(key: str, verdict: dict) -> None:
        JudgeVerdict.objects.get_or_create(key=key, defaults={"model": client.model, "verdict": verdict,
                                                              "prompt_version": PROMPT_VERSION})

    return Judge(client=client, repeats=config["REPEATS"], cache_get=cache_get, cache_put=cache_put)


def eval_run_execute(run_id: int, *, progress=None) -> EvalRun:
    """Score every question of a run not scored yet, then its metrics, gates, baseline and report.

    Safe to call twice: a finished or failed run returns at once, and results are keyed by (run, item).
    """
    eval_runs_reap()
    claimed = EvalRun.objects.filter(pk=run_id, status=EvalRun.Status.QUEUED).update(
        status=EvalRun.Status.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now())
    run = EvalRun.objects.select_related("golden_set").get(pk=run_id)
    if not claimed:
        return run  # running elsewhere, finished, failed or cancelled
    try:
        return _execute(run, progress)
    except Exception as exc:
        log.exception("eval run %s failed", run_id)
        EvalRun.objects.filter(pk=run_id).update(status=EvalRun.Status.FAILED, finished_at=timezone.now(),
                                                 error=f"{type(exc).__name__}: {exc}"[:2000])
        raise


def _execute(run: EvalRun, progress) -> EvalRun:
    kind = run.golden_set.kind
    items = run.golden_set.items.all()
    if run.kb:
        items = items.filter(kb=run.kb)
    items = list(items)
    done_ids = set(run.results.values_list("item_id", flat=True))
    judge = make_judge() if kind == "generation" else None
    if judge:
        EvalRun.objects.filter(pk=run.pk).update(judge=judge.describe())
    for position, item in enumerate(items):
        if item.pk in done_ids:
            continue
        run.refresh_from_db(fields=["cancel_requested"])
        if run.cancel_requested:
            EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.CANCELLED, finished_at=timezone.now(),
                                                     current_question="")
            run.refresh_from_db()
            return run
        EvalRun.objects.filter(pk=run.pk).update(current_question=item.question[:300], heartbeat_at=timezone.now())
        version = run.index_versions[item.kb]
        fields = (_score_retrieval if kind == "retrieval" else _score_generation)(item, version, judge)
        EvalResult.objects.update_or_create(run=run, item=item, defaults={"position": position, **fields})
        done_ids.add(item.pk)
        done = len(done_ids)
        EvalRun.objects.filter(pk=run.pk).update(done=done, heartbeat_at=timezone.now())
        if progress:
            progress(done, len(items), item)
    _finish(run, judge)
    run.refresh_from_db()
    return run


def _chunks(hits) -> list[RetrievedChunk]:
    return [RetrievedChunk(h.chunk.class_name, h.chunk.member, h.chunk.source) for h in hits]


def _ranked(result) -> list:
    """Every chunk any route found, best fused rank first (the fused list, then route-only leftovers)."""
    seen, ranked = set(), []
    for hit in [*result.fused, *[h for r in result.rankings for h in r.hits]]:
        if hit.chunk.chunk_id not in seen:
            seen.add(hit.chunk.chunk_id)
            ranked.append(hit)
    return ranked


def _retrieved_rows(result) -> list[dict]:
    adopted = {h.chunk.chunk_id for h in result.hits}
    rows = [{"rank": n, "chunk_id": h.chunk.chunk_id, "class_name": h.chunk.class_name, "member": h.chunk.member,
             "source": h.chunk.source, "score": round(h.score, 6), "adopted": True}
            for n, h in enumerate(result.hits, start=1)]
    rows += [{"rank": None, "chunk_id": h.chunk.chunk_id, "class_name": h.chunk.class_name, "member": h.chunk.member,
              "source": h.chunk.source, "score": round(h.score, 6), "adopted": False}
             for h in _ranked(result)[:20] if h.chunk.chunk_id not in adopted]
    return rows


def _excluded_chunks(result) -> list[RetrievedChunk]:
    excluded = set(result.excluded)
    return _chunks([h for h in _ranked(result) if h.chunk.chunk_id in excluded])


def _score_retrieval(item: GoldenItem, version: str, judge) -> dict:
    outcome = question_search(QuestionRequest(question=item.question, kb=item.kb, version=version,
                                              channel=Channel.EVAL))
    request_id, result = outcome.request_id, outcome.result
    golden = _as_golden(item)
    score = score_question(golden, _chunks(result.hits))
    passed = _retrieval_passed(score)
    attribution = rules.Attribution("")
    if not passed:
        attribution = rules.attribute_retrieval(golden, score, result.plan.as_dict(), _chunks(_ranked(result)),
                                                _chunks(result.hits), _excluded_chunks(result))
    return {"passed": passed, "attribution": attribution.code, "attribution_detail": attribution.detail[:300],
            "request_id": request_id, "scores": _score_dict(score),
            "detail": {"plan": result.plan.as_dict(), "retrieved": _retrieved_rows(result),
                       "excluded": list(result.excluded)}}


def _retrieval_passed(score) -> bool:
    if not score.answerable:
        return score.empty if score.negative_kind in ("chitchat", "out_of_catalog") else True
    return score.class_hit and score.member_hit is not False


def _score_dict(score) -> dict:
    return {k: getattr(score, k) for k in ("layer", "answerable", "empty", "class_hit", "strict_class_hit",
                                           "hit_at_1", "hit_at_3", "member_hit", "member_first", "member_rr",
                                           "negative_kind", "window")}


def _as_golden(item: GoldenItem) -> dict:
    return {"id": item.item_id, "layer": item.layer or ("plain" if item.answerable else "negative"),
            "answerable": item.answerable, "expected_classes": item.expected_classes,
            "expected_members": item.expected_members, "negative_kind": item.negative_kind,
            "must_mention": item.must_mention, "forbidden": item.forbidden, "needs_code": item.needs_code}


def _score_generation(item: GoldenItem, version: str, judge: Judge | None) -> dict:
    outcome = question_answer(QuestionRequest(question=item.question, kb=item.kb, version=version,
                                              channel=Channel.EVAL))
    request_id, result, answer = outcome.request_id, outcome.result, outcome.answer
    adopted_ids = {h.chunk.chunk_id for h in result.hits}
    discarded = [h for h in _ranked(result)[:20] if h.chunk.chunk_id not in adopted_ids]
    gen = rules.GenerationOutcome(
        text=answer.text, confidence=answer.confidence, mode=answer.mode,
        citations=tuple(c.chunk_id for c in answer.citations), invalid_citations=len(answer.invalid_citations),
        evidence=tuple(_chunks(result.hits)), evidence_ids=tuple(h.chunk.chunk_id for h in result.hits),
        discarded=tuple(_chunks(discarded)), model_called=answer.model_called, degraded=answer.degraded)
    golden = _as_golden(item)
    score = rules.score_generation(golden, gen)
    retrieval_score = score_question(golden, _chunks(result.hits))
    retrieval_attribution = None
    if item.answerable and not retrieval_score.class_hit:
        retrieval_attribution = rules.attribute_retrieval(golden, retrieval_score, result.plan.as_dict(),
                                                          _chunks(_ranked(result)), _chunks(result.hits),
                                                          _excluded_chunks(result))
    verdict = None
    if judge is not None and item.answerable and answer.text and answer.confidence != "none":
        evidence = [{"source": h.chunk.source, "heading_path": " > ".join(h.chunk.heading_path[1:]),
                     "text": h.chunk.text} for h in result.hits]
        try:
            verdict = judge.run(question=item.question, answer=answer.text, evidence=evidence,
                                reference=item.reference).as_dict()
        except JudgeError as exc:
            verdict = {"error": exc.code, "notes": str(exc)}
    judged_ok = verdict is None or "error" in verdict or verdict.get("flaky") or verdict["passed"]
    passed = score.rules_passed and judged_ok
    attribution = rules.Attribution("")
    if not passed:
        attribution = rules.attribute_generation(golden, score, gen, retrieval_attribution,
                                                 verdict if verdict and "error" not in verdict else None)
    return {"passed": passed, "attribution": attribution.code, "attribution_detail": attribution.detail[:300],
            "request_id": request_id,
            "scores": {"rules": score.rules, "unexpected_degraded": answer.degraded,
                       "low_confidence_model_call": answer.model_called and answer.confidence in ("low", "none")},
            "detail": {"plan": result.plan.as_dict(), "retrieved": _retrieved_rows(result),
                       "excluded": list(result.excluded), "answer": answer.text, "confidence": answer.confidence,
                       "mode": answer.mode,
                       "citations": [{"number": c.number, "chunk_id": c.chunk_id, "source": c.source}
                                     for c in answer.citations],
                       "judge": verdict}}


def _finish(run: EvalRun, judge: Judge | None) -> None:
    results = list(run.results.select_related("item").order_by("position"))
    if run.golden_set.kind == "retrieval":
        from rag.engine.metrics import QuestionScore

        scores = [QuestionScore(id=r.item.item_id, **{k: v for k, v in r.scores.items()}) for r in results]
        metrics, counts, gates = rules.retrieval_gates(scores)
        layers = _retrieval_layers(scores)
    else:
        scores = [rules.GenerationScore(id=r.item.item_id, answerable=r.item.answerable, rules=r.scores["rules"])
                  for r in results]
        verdicts = [r.detail.get("judge") for r in results]
        summary = None
        if judge is not None:
            good = [v for v in verdicts if v and "error" not in v and not v.get("flaky")]
            summary = rules.JudgeSummary(
                judged=len(good), passed=sum(v["passed"] for v in good),
                hallucinations=sum(v["hallucination"] for v in good), correct=sum(v["correct"] for v in good),
                flaky=sum(1 for v in verdicts if v and v.get("flaky")),
                errors=sum(1 for v in verdicts if v and "error" in v))
        extras = {"unexpected_degraded_count": sum(bool(r.scores.get("unexpected_degraded")) for r in results),
                  "low_confidence_model_call_count": sum(bool(r.scores.get("low_confidence_model_call"))
                                                         for r in results)}
        metrics, counts = rules.generation_metrics(scores, summary, extras)
        gates = rules.generation_gates(metrics, judge_configured=judge is not None)
        layers = _generation_layers(scores)
    baseline, diff = _baseline_of(run, results)
    gates.append(rules.baseline_gate(len(diff["newly_failing"]) if baseline else None,
                                     settings.RAG_EVAL_MAX_NEWLY_FAILING))
    EvalRun.objects.filter(pk=run.pk).update(
        status=EvalRun.Status.DONE, verdict=rules.verdict_of(gates), metrics=metrics, counts=counts, gates=gates,
        layers=layers, baseline=baseline, baseline_diff=diff, finished_at=timezone.now(), current_question="",
        done=len(results))
    run.refresh_from_db()
    write_report(run)


def _retrieval_layers(scores) -> list[dict]:
    rows = []
    for layer in LAYERS:
        group = [s for s in scores if s.layer == layer]
        if not group:
            continue
        answerable = [s for s in group if s.answerable]
        members = [s for s in answerable if s.member_hit is not None]
        rows.append({"layer": layer, "questions": len(group), "metrics": {
            "class_hit": rules.rate([s.class_hit for s in answerable]),
            "member_hit": rules.rate([s.member_hit for s in members]),
            "hit_at_1": rules.rate([s.hit_at_1 for s in answerable]),
            "hit_at_3": rules.rate([s.hit_at_3 for s in answerable]),
            "empty": rules.rate([s.empty for s in group])}})
    return rows


def _generation_layers(scores) -> list[dict]:
    rows = []
    for label, group in (("answerable", [s for s in scores if s.answerable]),
                         ("negative", [s for s in scores if not s.answerable])):
        if not group:
            continue
        names = sorted({name for s in group for name, v in s.rules.items() if v is not None})
        rows.append({"layer": label, "questions": len(group), "metrics": {
            name: rules.rate([s.rules.get(name) for s in group]) for name in names}})
    return rows


def _baseline_of(run: EvalRun, results) -> tuple[EvalRun | None, dict]:
    """The last finished run of the same set over the active versions; which questions flipped since."""
    active = {slug: name for slug, name in KnowledgeBase.objects.filter(slug__in=list(run.index_versions))
              .values_list("slug", "active_version__name")}
    candidates = (EvalRun.objects.filter(golden_set__name=run.golden_set.name, status=EvalRun.Status.DONE,
                                         candidate=False).exclude(pk=run.pk).order_by("-finished_at")[:50])
    baseline = next((c for c in candidates if all(c.index_versions.get(k) == v for k, v in active.items())), None)
    if baseline is None:
        return None, {"newly_failing": [], "newly_passing": []}
    before = dict(EvalResult.objects.filter(run=baseline).values_list("item__item_id", "passed"))
    now = {r.item.item_id: r.passed for r in results}
    return baseline, {
        "newly_failing": [i for i, ok in now.items() if not ok and before.get(i) is True],
        "newly_passing": [i for i, ok in now.items() if ok and before.get(i) is False],
    }


# -- reports ------------------------------------------------------------------------------------------


def reports_dir() -> Path:
    folder = Path(settings.DATA_DIR) / "eval" / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_report(run: EvalRun) -> Path:
    from evaluation.report import render_report
    from evaluation.selectors import run_as_report

    path = reports_dir() / f"run-{run.pk}.html"
    path.write_text(render_report(run_as_report(run)), encoding="utf-8")
    EvalRun.objects.filter(pk=run.pk).update(report_path=str(path))
    return path


# -- the gated reindex --------------------------------------------------------------------------------


def gate_sets_for(kb: str) -> list[GoldenSet]:
    """The latest version of every golden set with questions for `kb`; generation sets only with a model."""
    names = GoldenSet.objects.filter(items__kb=kb).values_list("name", flat=True).distinct()
    sets = [golden_set_latest(name) for name in sorted(set(names))]
    sets = [s for s in sets if s.items.filter(kb=kb).exists()]
    if not generation_configured():
        sets = [s for s in sets if s.kind == "retrieval"]
    return sets


def _has_baseline(golden_set: GoldenSet, kb: KnowledgeBase) -> bool:
    active = KnowledgeBase.objects.filter(pk=kb.pk).values_list("active_version__name", flat=True).first()
    runs = EvalRun.objects.filter(golden_set__name=golden_set.name, status=EvalRun.Status.DONE, candidate=False)
    return any(r.index_versions.get(kb.slug) == active for r in runs.order_by("-finished_at")[:50])


def gated_reindex_start(*, kb: KnowledgeBase, user=None) -> None:
    """Queue a gated reindex of `kb` on Celery (the eval center's button)."""
    from evaluation.tasks import gated_reindex_task

    if not gate_sets_for(kb.slug):
        raise ServiceError("no_gate_sets", f"No golden set has questions for {kb.slug}.", status=409)
    user_id = user.pk if user else None
    transaction.on_commit(lambda: gated_reindex_task.delay(kb.pk, user_id))


def index_build_gated(kb: KnowledgeBase, *, progress=None, run_progress=None, user=None) -> GateOutcome:
    """Build a candidate version, run the gating golden sets against it, and activate it only if all pass.

    A failing candidate stays ready but inactive (its `error` says why), and the previous version keeps
    serving. Installed as the release gate of `rag reindex --gate` (see `EvaluationConfig.ready`).
    """
    sets = gate_sets_for(kb.slug)
    if not sets:
        raise ServiceError("no_gate_sets", f"No golden set has questions for {kb.slug}; import one first "
                                           "(`manage.py eval import`).", status=409)
    if kb.active_version_id:  # the candidate is judged against the active version's run, so make sure there is one
        for golden_set in sets:
            if not _has_baseline(golden_set, kb):
                eval_run_execute(eval_run_create(golden_set=golden_set, kb=kb.slug, user=user).pk)
    version = index_build(kb, progress=progress, activate=False)
    runs, failed = [], []
    for golden_set in sets:
        run = eval_run_create(golden_set=golden_set, kb=kb.slug, index_version=version.name, user=user)
        run = eval_run_execute(run.pk, progress=run_progress)
        runs.append(run)
        failed += [{"golden_set": str(golden_set), **g} for g in run.gates if g["status"] != "pass"
                   and g["status"] != "skipped"]
    activated = not failed and all(r.verdict == "pass" for r in runs)
    if activated:
        index_activate(version)
    else:
        summary = "; ".join(f"{f['metric']} {f['status']}" for f in failed) or "a run did not finish"
        index_version_note(version, f"not activated: {summary}")
    version.refresh_from_db()
    return GateOutcome(version=version, activated=activated, failed_gates=failed,
                       runs=[{"id": r.pk, "golden_set": str(r.golden_set), "verdict": r.verdict,
                              "report": r.report_path} for r in runs])
