"""The OpenAPI description of seed 002's `POST /api/v1/retrieval` (raw JSON schemas for drf-spectacular)."""

from __future__ import annotations

from rag.services.retrieval import MAX_KBS, MAX_TOP_K, MAX_TOP_N
from drf_spectacular.openapi import AutoSchema

from rag.services.filters import MAX_ID
from rag.services import LIMITS
from rag.services.records import QUESTION_REGEX

_ID = {"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_ID},
                 {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^(?![0-9]+$)|^[1-9][0-9]{0,17}$"}]}
_INT_ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
_IDS = {"type": "array", "items": _ID, "maxItems": MAX_KBS}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1}

RAG_SETTING = {
    "type": "object",
    "description": "Retrieval settings; each field left out takes the app's default, then this product's.",
    "properties": {
        "similarity_threshold": {**_UNIT, "description": "Keep chunks whose fused similarity is at least this "
                                 "(default 0.2)."},
        "dense_weight": {**_UNIT, "description": "w in similarity = w·vector_similarity + (1−w)·term_similarity "
                         "(default 0.5; 1: vector only, 0: keywords only)."},
        "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "Candidates (default 30)."},
        "top_n": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_N, "description": "Chunks returned (default 30)."},
        "enable_rerank": {"type": "boolean", "description": "Rerank by the configured rerank API (1401 when none)."},
        "enable_llm_rerank": {"type": "boolean", "description": "Rerank by the generation model (1402 when none)."},
        "rank_score_threshold": {**_UNIT, "description": "After a rerank, keep chunks whose rank_score is at least "
                                 "this (default 0)."},
        "label_value_ids": {"type": "array", "items": _INT_ID, "maxItems": 1000,
                            "description": "Documents with these label values: any value of a label, every label."},
        "enable_agent_enhance_search": {"type": "boolean", "description": "The model adds search keywords and "
                                        "writes `summary` (1402 when no model)."},
        "enable_kb_priority": {"type": "boolean", "description": "Fill top_n from kb_priority's p0 first, then p1, p2."},
        "kb_priority": {"type": "object", "properties": {name: _IDS for name in ("p0", "p1", "p2")},
                        "additionalProperties": False},
        "extra": {"type": "object", "description": "Passed through and echoed in every chunk's `extra`."},
    },
}

SEED_REQUEST = {
    "type": "object",
    "required": ["question", "rag_setting", "kb_ids"],
    "anyOf": [{"required": ["dialog_id"]}, {"required": ["app_id"]}],
    "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": LIMITS.question_chars, "pattern": QUESTION_REGEX},
        "dialog_id": {**_INT_ID, "description": "The retrieval app the key is bound to."},
        "app_id": {**_INT_ID, "description": "The same as dialog_id; wins when both are given."},
        "kb_ids": {**_IDS, "minItems": 1, "description": "Knowledge base ids (or slugs), all of the app's."},
        "doc_ids": {"type": "array", "items": _INT_ID, "maxItems": 1000,
                    "description": "Only these documents; empty: every document."},
        "graph_ids": {"type": "array", "items": {}, "description": "Reserved."},
        "ontology_ids": {"type": "array", "items": {}, "description": "Reserved."},
        "rag_setting": RAG_SETTING,
        "metadata": {"type": "object", "properties": {
            "rag_setting": {**RAG_SETTING, "description": "Overrides rag_setting field by field."},
            "metadata_condition": {"type": "object", "description": "RAGFlow's {logic, conditions: [{name, "
                                   "comparison_operator, value}]} over document fields, labels and front matter."}}},
    },
}

_CHUNK = {"type": "object", "properties": {name: {"type": kind} for name, kind in {
    "chunk_id": "string", "content_with_weight": "string", "doc_id": "string", "docnm_kwd": "string",
    "kb_ids": "array", "important_kwd": "array", "image_id": "string", "similarity": "number",
    "vector_similarity": "number", "term_similarity": "number", "content_ltks": "string", "highlight": "string",
    "question": "string", "extra": "object", "rank_score": "number", "source": "string", "character_count": "integer",
    "duration": "string", "url": "string", "title": "string"}.items()}}
_DOC_AGG = {"type": "object", "properties": {name: {"type": kind} for name, kind in {
    "doc_id": "string", "doc_name": "string", "count": "integer", "avg_score": "number", "semantic_score": "number",
    "labels": "array", "create_time": "string", "text": "string"}.items()}}

SEED_SUCCESS = {
    "type": "object",
    "required": ["code", "msg", "message", "data"],
    "properties": {
        "code": {"type": "integer", "enum": [0]},
        "msg": {"type": "string"}, "message": {"type": "string"}, "request_id": {"type": "string"},
        "data": {"type": "object", "required": ["total", "chunks", "doc_aggs", "summary"], "properties": {
            "total": {"type": "integer"}, "chunks": {"type": "array", "items": _CHUNK},
            "doc_aggs": {"type": "array", "items": _DOC_AGG}, "summary": {"type": "string"}}},
    },
}
SEED_FAILURE = {
    "type": "object",
    "required": ["code", "msg", "message"],
    "properties": {"code": {"type": "integer"}, "msg": {"type": "string"}, "message": {"type": "string"},
                   "error": {"type": "string"}, "request_id": {"type": "string"}, "data": {"nullable": True}},
}
SEED_FAILURES = {
    400: "1101 app_id_required, 1102 invalid_app_id, 1201 invalid_request, 1202 invalid_question, 1203 "
         "question_too_long, 1204 rag_setting_required, 1205 invalid_rag_setting, 1206 invalid_kb_ids, 1207 "
         "kb_ids_required, 1208 invalid_doc_ids, 1209 invalid_metadata_condition.",
    401: "1001 missing_api_key / invalid_api_key.",
    403: "1103 key_not_bound, 1104 app_mismatch, 1105 app_not_published, 1302 kb_not_allowed.",
    404: "1301 kb_not_found, 1303 label_value_not_found.",
    405: "1210 method_not_allowed: use POST.",
    409: "1401 rerank_not_configured, 1402 generation_not_configured (the option needs a model this server lacks), 1502 "
         "no_active_version.",
    429: "1002 too_many_failed_attempts, 1003 rate_limited, 1004 quota_exceeded.",
    500: "1500 internal_error.",
    502: "1403 rerank_failed, 1404 enhance_failed.",
    503: "1501 index_building.",
}
SEED_EXAMPLE = {
    "dialog_id": 1, "question": "How do I add a mesh to a scene?", "kb_ids": [1, 2],
    "rag_setting": {"similarity_threshold": 0.2, "dense_weight": 0.5, "top_k": 30, "top_n": 5},
    "metadata": {"rag_setting": {"top_n": 3}},
}


class RequiredBody(AutoSchema):
    """drf-spectacular marks a raw request schema optional: this body is required (no body is 1201)."""

    def _get_request_body(self, direction="request"):
        body = super()._get_request_body(direction)
        if body is not None:
            body["required"] = True
        return body
