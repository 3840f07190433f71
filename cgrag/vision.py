"""CG_RAG's vision routes (seed 004's vision/*): placeholder until the vision upstream lands; every route
answers 503 vision_not_configured."""

from __future__ import annotations

from django.conf import settings
from urllib.parse import urlsplit

from cgrag.http import route
from rag.errors import ServiceError


def vision_health() -> dict:
    config = settings.RAG_VISION
    return {"configured": bool(config["BASE_URL"] and config["MODEL"]), "endpoint_configured": bool(config["BASE_URL"]),
            "endpoint_host": urlsplit(config["BASE_URL"]).hostname or "" if config["BASE_URL"] else "",
            "model": config["MODEL"], "enable_thinking": config["THINKING"], "streaming": True,
            "max_images": config["MAX_IMAGES"], "max_image_bytes": config["MAX_IMAGE_BYTES"],
            "max_tokens": config["MAX_TOKENS"], "agentic_max_search_rounds": config["AGENTIC_MAX_SEARCH_ROUNDS"],
            "agentic_retrieval_topk": config["AGENTIC_RETRIEVAL_TOPK"]}


def _not_configured(request, request_id):
    raise ServiceError("vision_not_configured", "视觉接口未配置多模态上游（CG_RAG_VISION_* 或 RAG_VISION_*）。",
                       status=503)


answer = route("POST")(_not_configured)
answer_stream = route("POST")(_not_configured)
observe = route("POST")(_not_configured)
agentic = route("POST")(_not_configured)
agentic_stream = route("POST")(_not_configured)
