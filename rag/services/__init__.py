"""The faces' one contract with rag: what a face (web, MCP, CLI, CG_RAG, the retrieval APIs, eval runs) imports to
ask a question, and nothing else. A face parses its request into a `QuestionRequest` (or a `RetrievalRequest`),
calls one `question_*` function, and shapes the outcome; `LIMITS` is what the service accepts, for its schema.

The names are read from their modules on first use, so importing one service module does not import them all.
"""

from __future__ import annotations

import importlib

_CONTRACT = {
    "rag.services.questions": (
        "LIMITS", "Limits", "Caller", "QuestionRequest", "QuestionCall", "SearchOutcome", "AnswerOutcome",
        "ChoiceOutcome", "RetrievalEvent", "TokenEvent", "FinalEvent", "GenerationEvent", "ChoiceEvent", "Progress",
        "AnswerReset", "question_search", "question_answer", "question_choose", "question_choose_stream",
        "question_call", "question_refused", "candidate_of"),
    "rag.services.retrieval": ("RetrievalRequest", "RetrievalOutcome", "question_retrieve"),
    "rag.engine.types": ("Usage",),  # what a model call cost, as outcomes carry it
    "rag.engine.constrained": ("Candidate",),  # what constrained generation chooses among
    "rag.models": ("Channel",),
    "infra.errors": ("ServiceError",),
}
_HOME = {name: module for module, names in _CONTRACT.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'rag.services' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
