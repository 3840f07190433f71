"""The retrieval faces (R1 to R5): seed 002's open retrieval API, RAGFlow's retrieval API and Dify's external
knowledge API. Each parses its own request into a `RetrievalRequest`, asks `question_retrieve` (channels
`retrieval_api`, `ragflow`, `dify`), and shapes the outcome and its errors its own way.
"""

from __future__ import annotations

import json
import logging

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import APIView

from apikeys.api import is_bearer
from apikeys.services import api_key_admit_call
from infra.errors import ServiceError
from rag.models import Channel, KnowledgeBase
from rag.services import RetrievalRequest, question_retrieve
from rag.services.filters import condition_of, filter_of
from rag.services.retrieval import knowledge_bases_of, retrieval_app_check
from retrieval import schema as openapi
from retrieval.keys import caller_of, key_call, key_of
from retrieval.shapes import dify_record, ragflow_data, seed_data

log = logging.getLogger(__name__)

# Seed 002's numeric `code` for each failure (0 is success); the HTTP status is the failure's own.
SEED_CODES = {
    "missing_api_key": 1001, "invalid_api_key": 1001, "too_many_failed_attempts": 1002, "rate_limited": 1003,
    "quota_exceeded": 1004,
    "app_id_required": 1101, "invalid_app_id": 1102, "key_not_bound": 1103, "app_mismatch": 1104,
    "app_not_published": 1105,
    "invalid_request": 1201, "invalid_question": 1202, "question_too_long": 1203, "rag_setting_required": 1204,
    "invalid_rag_setting": 1205, "invalid_kb_ids": 1206, "kb_ids_required": 1207, "invalid_doc_ids": 1208,
    "invalid_metadata_condition": 1209,
    "kb_not_found": 1301, "kb_not_allowed": 1302, "label_value_not_found": 1303,
    "rerank_not_configured": 1401, "generation_not_configured": 1402, "rerank_failed": 1403, "enhance_failed": 1404,
    "index_building": 1501, "no_active_version": 1502, "method_not_allowed": 1210,
    "internal_error": 1500,
}
INTERNAL = ServiceError("internal_error", "The retrieval failed on the server.", status=500)
METHOD_NOT_ALLOWED = ServiceError("method_not_allowed", "Use POST.", status=405, headers={"Allow": "POST"})


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python's json reads them, JSON (and the database) not


LONE_SURROGATE = "The body holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text."


def _is_text(value) -> bool:
    """Whether every string of a JSON value (keys too) is Unicode text: `"\\ud800"` reads as a lone surrogate,
    which no later step (the database, the reply) can encode."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _list_or_none(body: dict, name: str):
    value = body.get(name)
    if value is not None and not isinstance(value, list):
        raise ServiceError("invalid_request", f"{name} must be a list.")
    return value


def _object_or_none(body: dict, name: str):
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise ServiceError("invalid_request", f"{name} must be an object.")
    return value


def _conditions(metadata_condition, *, logic_key: str, null_conditions_filter: bool = True):
    """A RAGFlow or Dify `metadata_condition` as (logic, conditions); ("and", None) when there is none. An object
    without conditions matches nothing, as RAGFlow's does; Dify sends `conditions: null` for no filter
    (`null_conditions_filter=False`)."""
    if metadata_condition is None:
        return "and", None
    if not isinstance(metadata_condition, dict):
        raise ServiceError("invalid_metadata_condition", "metadata_condition must be an object.")
    logic = metadata_condition.get(logic_key) or metadata_condition.get("logic") or "and"
    raw = metadata_condition.get("conditions")
    if raw is None and not null_conditions_filter:
        return "and", None
    raw = raw or []
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise ServiceError("invalid_metadata_condition", "metadata_condition.conditions must be a list of objects.")
    return (logic.lower() if isinstance(logic, str) else logic,
            [condition_of(c.get("name"), c.get("comparison_operator"), c.get("value")) for c in raw])


# -- seed 002: POST /api/v1/retrieval --------------------------------------------------------------------


def _error_of(exc: Exception, face: str) -> ServiceError:
    """A failure as the ServiceError a face shapes: an unexpected one is logged and shown as internal_error."""
    if isinstance(exc, ServiceError):
        return exc
    log.exception("%s retrieval request failed", face)
    return INTERNAL


def _with_headers(response, headers: dict[str, str], *, skip: tuple[str, ...] = ()):
    for name, value in headers.items():
        if name.lower() not in skip:
            response[name] = value
    return response


def freshness_of(outcome) -> dict[str, str]:
    """Which docs answered, in a header the RAGFlow, Dify and seed clients ignore (their bodies keep their shapes):
    `X-Docs-Freshness: <kb>@<version> built <ISO time>[ rev <git commit or crawl>]`, one per base, comma-separated."""
    return {"X-Docs-Freshness": ", ".join(outcome.freshness)} if outcome.freshness else {}


def seed_failure(exc: Exception) -> Response:
    error = _error_of(exc, "open")
    body = {"code": SEED_CODES.get(error.code, SEED_CODES["internal_error"]), "msg": error.message,
            "message": error.message, "error": error.code, "data": None}
    if error.request_id:
        body["request_id"] = error.request_id
    return Response(body, status=error.status, headers=error.headers)


class ChunkRetrieveApi(APIView):
    """Seed 002's open retrieval call: ranked chunks of an app's knowledge bases, no generation."""

    authentication_classes: list = []
    permission_classes: list = []
    schema = openapi.RequiredBody()

    def handle_exception(self, exc):
        if isinstance(exc, drf_exceptions.ParseError | drf_exceptions.UnsupportedMediaType):
            exc = ServiceError("invalid_request", "The body must be a JSON object (Content-Type: application/json).")
        elif isinstance(exc, drf_exceptions.MethodNotAllowed):
            exc = METHOD_NOT_ALLOWED
        return seed_failure(exc)

    @extend_schema(summary="Retrieve ranked chunks (seed 002)", auth=[{"ApiKey": []}], request={"application/json": openapi.SEED_REQUEST},
                   responses={200: OpenApiResponse(openapi.SEED_SUCCESS, "code 0 and the chunks."),
                              **{status: OpenApiResponse(openapi.SEED_FAILURE, codes)
                                 for status, codes in openapi.SEED_FAILURES.items()}},
                   examples=[OpenApiExample("open call", request_only=True, value=openapi.SEED_EXAMPLE)])
    def post(self, request):
        key = key_of(request)
        body = request.data
        if not isinstance(body, dict):
            raise ServiceError("invalid_request", "The body must be a JSON object.")
        if not _is_text(body):
            raise ServiceError("invalid_request", LONE_SURROGATE)
        caller = caller_of(key, Channel.RETRIEVAL_API, body)
        with key_call(key, caller, body.get("question")) as call:
            app_id = body.get("app_id") if body.get("app_id") is not None else body.get("dialog_id")
            app = retrieval_app_check(key_app=key.app, app_id=app_id)
            rag_setting = _object_or_none(body, "rag_setting")
            if rag_setting is None:
                raise ServiceError("rag_setting_required", "rag_setting is required for an open call (it may be {}).")
            metadata = _object_or_none(body, "metadata") or {}
            overrides = metadata.get("rag_setting")
            if overrides is not None and not isinstance(overrides, dict):
                raise ServiceError("invalid_rag_setting", "metadata.rag_setting must be an object.")
            for reserved in ("graph_ids", "ontology_ids"):
                _list_or_none(body, reserved)
            logic, conditions = _conditions(metadata.get("metadata_condition"), logic_key="logic")
            document_filter = filter_of(doc_ids=_list_or_none(body, "doc_ids"), conditions=conditions, logic=logic)
            kb_ids = body.get("kb_ids")
            outcome = question_retrieve(RetrievalRequest(
                question=body.get("question"), channel=Channel.RETRIEVAL_API, kb_ids=kb_ids, app=app,
                settings=(rag_setting, overrides), filter=document_filter, caller=caller))
            call.spent(outcome.usage)
        return Response({"code": 0, "msg": "success", "message": "success", "data": seed_data(outcome),
                         "request_id": outcome.request_id}, headers={**call.headers, **freshness_of(outcome)})


# -- RAGFlow: POST /ragflow/api/v1/retrieval ------------------------------------------------------------

# RAGFlow's RetCode values (common/constants.py): 101 argument error, 102 data error, 103 operating error,
# 109 authentication error, 100 exception; HTTP 200 except for a refused key (401) and a spent limit (429).
RAGFLOW_CODES = {"missing_api_key": 109, "invalid_api_key": 109, "too_many_failed_attempts": 109,
                 "kb_not_found": 102, "kb_not_allowed": 102, "label_value_not_found": 102, "kb_ids_required": 102,
                 "index_building": 103, "no_active_version": 102, "rerank_not_configured": 103,
                 "generation_not_configured": 103, "rerank_failed": 103, "enhance_failed": 103,
                 "rate_limited": 103, "quota_exceeded": 103, "capacity.exceeded": 103, "internal_error": 100}
RAGFLOW_PAGE_SIZE = 30
RAGFLOW_DEFAULTS = {"dense_weight": 0.3, "top_k": 1024}  # RAGFlow's own (vector_similarity_weight, top_k)
RAGFLOW_MAX_PAGE_SIZE = 1024


def _json_object(request: HttpRequest, *, when_empty: dict | None = None) -> dict:
    """The request's JSON object; an empty body is `when_empty`, or refused when that is None."""
    if not request.body.strip():
        if when_empty is None:
            raise ServiceError("invalid_request", "The request has no body; send a JSON object.")
        return when_empty
    try:
        body = json.loads(request.body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise ServiceError("invalid_request", "The body must be JSON.") from None
    if not isinstance(body, dict):
        raise ServiceError("invalid_request", "The body must be a JSON object.")
    if not _is_text(body):
        raise ServiceError("invalid_request", LONE_SURROGATE)
    return body


def _ragflow_failure(exc: Exception) -> JsonResponse:
    error = _error_of(exc, "RAGFlow")
    status = error.status if error.status in (401, 405, 429) else 200
    return _with_headers(JsonResponse({"code": RAGFLOW_CODES.get(error.code, 101), "message": error.message,
                                       "error": error.code}, status=status), error.headers)


def _integer_or(value, default: int, name: str, low: int, high: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServiceError("invalid_request", f"{name} must be an integer from {low} to {high}.")
    return value


@csrf_exempt
def ragflow_retrieval(request: HttpRequest) -> JsonResponse:
    """RAGFlow's `POST /api/v1/retrieval`, so `ragflow_sdk.RAGFlow(key, base_url=".../ragflow").retrieve()` works."""
    if request.method != "POST":
        return _ragflow_failure(METHOD_NOT_ALLOWED)
    try:
        key = key_of(request)
        body = _json_object(request, when_empty={})
        caller = caller_of(key, Channel.RAGFLOW, body)
        with key_call(key, caller, body.get("question")) as call:
            page = _integer_or(body.get("page"), 1, "page", 1, 100_000)
            page_size = _integer_or(body.get("page_size"), RAGFLOW_PAGE_SIZE, "page_size", 1, RAGFLOW_MAX_PAGE_SIZE)
            setting = {"similarity_threshold": body.get("similarity_threshold"),
                       "dense_weight": body.get("vector_similarity_weight"), "top_k": body.get("top_k"),
                       "top_n": page_size}
            if body.get("rerank_id"):
                setting["enable_rerank"] = True
            keyword = body.get("keyword")
            if keyword is not None and not isinstance(keyword, bool):
                raise ServiceError("invalid_request", "keyword must be true or false.")
            if keyword:
                setting["enable_agent_enhance_search"] = True
            top_k = setting["top_k"]
            if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 1024:
                setting["top_k"] = 1024  # RAGFlow takes any positive top_k; the candidates stop at 1024 here
            logic, conditions = _conditions(body.get("metadata_condition"), logic_key="logic")
            document_filter = filter_of(doc_ids=_list_or_none(body, "document_ids"), conditions=conditions,
                                        logic=logic)
            question = body.get("question")
            outcome = question_retrieve(RetrievalRequest(
                question=question, channel=Channel.RAGFLOW, kb_ids=body.get("dataset_ids"), app=key.app,
                defaults=RAGFLOW_DEFAULTS, settings=(setting,), filter=document_filter, offset=(page - 1) * page_size,
                caller=caller, summary=False))
            call.spent(outcome.usage)
    except Exception as exc:  # noqa: BLE001 - every failure becomes RAGFlow's {code, message}
        return _ragflow_failure(exc)
    highlight = body.get("highlight") is True
    return _with_headers(JsonResponse({"code": 0, "data": ragflow_data(outcome, with_highlight=highlight)}),
                         {**call.headers, **freshness_of(outcome)})


# -- RAGFlow: the dataset listings a client calls before it retrieves, and RAGFlow's envelope everywhere -------

# RAGFlow's list_datasets / list_documents orderings (create_time by default) and its RetCode.NOT_FOUND.
RAGFLOW_ORDERINGS = {"create_time": "created_at", "update_time": "updated_at"}
RAGFLOW_DOCUMENT_ORDERINGS = {"create_time": "first_seen_at", "update_time": "changed_at"}
RAGFLOW_NOT_FOUND = 404


def _query_integer(request: HttpRequest, name: str, default: int, high: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= high:
        raise ServiceError("invalid_request", f"{name} must be an integer from 1 to {high}.")
    return int(raw)


def _page_of(request: HttpRequest, rows: list) -> list:
    page = _query_integer(request, "page", 1, 100_000)
    page_size = _query_integer(request, "page_size", RAGFLOW_PAGE_SIZE, RAGFLOW_MAX_PAGE_SIZE)
    return rows[(page - 1) * page_size:page * page_size]


def _ordered(request: HttpRequest, rows: list, fields: dict[str, str]) -> list:
    field = fields.get(request.GET.get("orderby") or "create_time", fields["create_time"])
    descending = (request.GET.get("desc") or "true").lower() not in ("false", "0")
    return sorted(rows, key=lambda row: (getattr(row, field), row.pk), reverse=descending)


def _milliseconds(moment) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def _ragflow_keyed(request: HttpRequest):
    """The caller's key, admitted as one call of the RAGFlow face: (key, its RateLimit-* headers)."""
    key = key_of(request)
    return key, api_key_admit_call(key=key, tool=Channel.RAGFLOW.value).headers


def _ragflow_dataset(kb) -> dict:
    documents = list(kb.documents.all())
    version = kb.active_version
    return {"id": str(kb.pk), "name": kb.slug, "avatar": "", "description": kb.name, "tenant_id": "",
            "embedding_model": version.model_id if version is not None else "", "language": kb.language,
            "permission": "me", "document_count": len(documents),
            "chunk_count": sum(document.chunk_count for document in documents), "chunk_method": "naive",
            "parser_config": {}, "pagerank": 0, "status": "1" if version is not None else "0",
            "create_time": _milliseconds(kb.created_at), "update_time": _milliseconds(kb.updated_at)}


def _ragflow_document(document) -> dict:
    return {"id": str(document.pk), "name": document.path, "location": document.path,
            "dataset_id": str(document.kb_id), "knowledge_id": str(document.kb_id), "thumbnail": None,
            "type": "doc", "source_type": "local", "chunk_method": "naive", "parser_config": {},
            "size": document.size, "token_count": 0, "chunk_count": document.chunk_count, "progress": 1.0,
            "progress_msg": "", "process_begin_at": None, "process_duration": 0.0, "run": "DONE", "status": "1",
            "meta_fields": document.metadata if isinstance(document.metadata, dict) else {}, "created_by": "",
            "create_time": _milliseconds(document.first_seen_at), "update_time": _milliseconds(document.changed_at)}


@csrf_exempt
def ragflow_datasets(request: HttpRequest) -> JsonResponse:
    """RAGFlow's `GET /api/v1/datasets` (ragflow_sdk's `list_datasets()`): the knowledge bases the key may search,
    its app's when it is bound to one; `id` and `name` narrow it, and one that names none is code 102."""
    if request.method != "GET":
        return _ragflow_failure(ServiceError("method_not_allowed", "Use GET.", status=405, headers={"Allow": "GET"}))
    try:
        key, headers = _ragflow_keyed(request)
        kbs = key.app.knowledge_bases.all() if key.app is not None else KnowledgeBase.objects.all()
        kbs = kbs.select_related("active_version")
        wanted_id, wanted_name = request.GET.get("id"), request.GET.get("name")
        if wanted_id:
            kbs = kbs.filter(pk=int(wanted_id)) if wanted_id.isdigit() else kbs.none()
        if wanted_name:
            kbs = kbs.filter(slug=wanted_name)
        rows = _ordered(request, list(kbs), RAGFLOW_ORDERINGS)
        if (wanted_id or wanted_name) and not rows:
            raise ServiceError("kb_not_found", f"You don't own the dataset {wanted_id or wanted_name}.", status=404)
        data = [_ragflow_dataset(kb) for kb in _page_of(request, rows)]
    except Exception as exc:  # noqa: BLE001 - every failure becomes RAGFlow's {code, message}
        return _ragflow_failure(exc)
    return _with_headers(JsonResponse({"code": 0, "data": data}), headers)


@csrf_exempt
def ragflow_documents(request: HttpRequest, dataset_id: str) -> JsonResponse:
    """RAGFlow's `GET /api/v1/datasets/<id>/documents` (a dataset's `list_documents()`): its pages, as
    `{docs, total}`; `id`, `name` and `keywords` (in the name) narrow them."""
    if request.method != "GET":
        return _ragflow_failure(ServiceError("method_not_allowed", "Use GET.", status=405, headers={"Allow": "GET"}))
    try:
        key, headers = _ragflow_keyed(request)
        [kb] = knowledge_bases_of([dataset_id], key.app)
        documents = kb.documents.all()
        wanted_id, name, keywords = request.GET.get("id"), request.GET.get("name"), request.GET.get("keywords")
        if wanted_id:
            documents = documents.filter(pk=int(wanted_id)) if wanted_id.isdigit() else documents.none()
        if name:
            documents = documents.filter(path=name)
        if keywords:
            documents = documents.filter(path__icontains=keywords)
        rows = _ordered(request, list(documents), RAGFLOW_DOCUMENT_ORDERINGS)
        if (wanted_id or name) and not rows:
            raise ServiceError("kb_not_found", f"You don't own the document {wanted_id or name}.", status=404)
        data = {"docs": [_ragflow_document(document) for document in _page_of(request, rows)], "total": len(rows)}
    except Exception as exc:  # noqa: BLE001 - every failure becomes RAGFlow's {code, message}
        return _ragflow_failure(exc)
    return _with_headers(JsonResponse({"code": 0, "data": data}), headers)


@csrf_exempt
def ragflow_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Every other route under /ragflow/: RAGFlow's envelope with its NOT_FOUND code, never an HTML page."""
    return JsonResponse({"code": RAGFLOW_NOT_FOUND, "message": f"{request.method} {request.path} is not served here; "
                         "this server answers RAGFlow's retrieval, dataset and document listing calls.",
                         "error": "not_found"}, status=404)


# -- Dify: POST /dify/retrieval -----------------------------------------------------------------------

DIFY_ERRORS = {"missing_api_key": (1001, 403), "invalid_api_key": (1002, 403), "too_many_failed_attempts": (1002, 403),
               "kb_not_found": (2001, 404), "kb_not_allowed": (2001, 404), "app_not_published": (1002, 403)}


def _dify_failure(exc: Exception, *, malformed_header: bool = False) -> JsonResponse:
    error = _error_of(exc, "Dify")
    code, status = DIFY_ERRORS.get(error.code, (None, error.status))
    if malformed_header:
        code = 1001  # the Authorization header is not `Bearer <key>`: its format, not the key
    return _with_headers(JsonResponse({"error_code": code if code is not None else error.status,
                                       "error_msg": error.message, "error": error.code}, status=status),
                         error.headers, skip=("www-authenticate",))


@csrf_exempt
def dify_retrieval(request: HttpRequest) -> JsonResponse:
    """Dify's external knowledge API: `{knowledge_id, query, retrieval_setting, metadata_condition?}` → records.
    Dify checks a new connection by posting here with its key and no body: the key is checked first (403 when
    bad), then the missing body answers 400."""
    if request.method != "POST":
        return _dify_failure(METHOD_NOT_ALLOWED)
    try:
        key = key_of(request)
        body = _json_object(request)  # Dify's registration check sends none: 400 (it fails only on 403, 404, 502)
        caller = caller_of(key, Channel.DIFY, body)
        with key_call(key, caller, body.get("query")) as call:
            knowledge_id = body.get("knowledge_id")
            if not isinstance(knowledge_id, str | int) or isinstance(knowledge_id, bool) or knowledge_id == "":
                raise ServiceError("invalid_request", "knowledge_id must be a knowledge base id.")
            retrieval_setting = body.get("retrieval_setting") or {}
            if not isinstance(retrieval_setting, dict):
                raise ServiceError("invalid_request", "retrieval_setting must be an object.")
            top_k = retrieval_setting.get("top_k")
            setting = {"top_k": top_k, "top_n": top_k, "similarity_threshold": retrieval_setting.get("score_threshold")}
            logic, conditions = _conditions(body.get("metadata_condition"), logic_key="logical_operator",
                                            null_conditions_filter=False)
            outcome = question_retrieve(RetrievalRequest(
                question=body.get("query"), channel=Channel.DIFY, kb_ids=[knowledge_id], app=key.app,
                settings=(setting,), filter=filter_of(conditions=conditions, logic=logic), caller=caller))
            call.spent(outcome.usage)
    except Exception as exc:  # noqa: BLE001 - every failure becomes Dify's {error_code, error_msg}
        header = request.headers.get("Authorization", "")
        return _dify_failure(exc, malformed_header=bool(header) and not is_bearer(header))
    return _with_headers(JsonResponse({"records": [dify_record(c) for c in outcome.chunks]}),
                         {**call.headers, **freshness_of(outcome)})
