"""Score one golden question: ask it through the one question path (`rag.services`) as eval
traffic on the run's version, apply the rules, ask the judge (generation), attribute a failure, and return
the fields of its `EvalResult`."""

from __future__ import annotations

from django.conf import settings

from evaluation import rules
from evaluation.judge import PROMPT_VERSION, Judge, JudgeError
from evaluation.models import GoldenItem, JudgeVerdict
from rag.metrics import RetrievedChunk, score_question
from rag.models import Channel
from rag.services.generation import chat_client
from rag.services import QuestionRequest, question_answer, question_search


def golden_item_score(item: GoldenItem, *, kind: str, version: str, judge: Judge | None = None,
                      sdk_version: str | None = None) -> dict:
    """Ask one golden question on `version` (of `sdk_version` for an SDK's question) as eval traffic and score it:
    the fields of its `EvalResult`."""
    if kind == "retrieval":
        return _score_retrieval(item, version, sdk_version)
    return _score_generation(item, version, judge, sdk_version)


def make_judge() -> Judge | None:
    """Build the judge from `settings.RAG_JUDGE`, its verdicts cached in the database; None without a model."""
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


def _score_retrieval(item: GoldenItem, version: str, sdk_version: str | None = None) -> dict:
    outcome = question_search(QuestionRequest(question=item.question, kb=item.kb, version=version,
                                              sdk_version=sdk_version, channel=Channel.EVAL))
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


def _score_generation(item: GoldenItem, version: str, judge: Judge | None, sdk_version: str | None = None) -> dict:
    outcome = question_answer(QuestionRequest(question=item.question, kb=item.kb, version=version,
                                              sdk_version=sdk_version, channel=Channel.EVAL))
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
