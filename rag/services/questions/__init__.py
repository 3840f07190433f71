"""The one question path (E12), by concern:

- `request`: what a face hands over (`QuestionRequest`, `Caller`, `LIMITS`) and the validation every face shares;
- `call`: one request on its way through (`QuestionCall`): validation, version, search, its one record;
- `ask`: `question_search` and `question_answer`, with the configured model or without one;
- `choose`: constrained generation (`question_choose`, `question_choose_stream`);
- `events`: what a streaming face receives.

Faces import these names from `rag.services` (the faces' contract), never from the modules here.
"""

from .ask import AnswerOutcome, notes_text, question_answer, question_search
from .call import (BUSY_RETRY_AFTER, CANCELLED, INTERNAL, Kind, QuestionCall, SearchOutcome, held, question_call,
                   question_refused, ranked_candidates, version_of)
from .choose import (NO_STABLE_ARTICLE, NOT_CONFIGURED, RESPONSE_INVALID, UNAVAILABLE, ChoiceOutcome, candidate_of,
                     question_choose, question_choose_stream)
from .events import (AnswerEvent, AnswerReset, ChoiceEvent, ChoiceStreamEvent, FinalEvent, GenerationEvent, Progress,
                     RetrievalEvent, TokenEvent)
from .request import (LIMITS, MAX_CANDIDATES, MAX_CHOICES, MAX_CHUNK_ID_CHARS, MAX_EXCLUDE, MAX_TOP_K, CapacityGate,
                      Caller, Limits, QuestionRequest, TokenMeter, TokenReservation, request_options, validated,
                      validated_question)

__all__ = [
    "AnswerEvent", "AnswerOutcome", "AnswerReset", "BUSY_RETRY_AFTER", "CANCELLED", "CapacityGate", "Caller",
    "ChoiceEvent", "ChoiceOutcome", "ChoiceStreamEvent", "FinalEvent", "GenerationEvent", "INTERNAL", "Kind", "LIMITS",
    "Limits", "MAX_CANDIDATES", "MAX_CHOICES", "MAX_CHUNK_ID_CHARS", "MAX_EXCLUDE", "MAX_TOP_K", "NOT_CONFIGURED",
    "NO_STABLE_ARTICLE", "Progress", "QuestionCall", "QuestionRequest", "RESPONSE_INVALID", "RetrievalEvent",
    "SearchOutcome", "TokenEvent", "TokenMeter", "TokenReservation", "UNAVAILABLE", "candidate_of", "held",
    "notes_text", "question_answer", "question_call", "question_choose", "question_choose_stream",
    "question_refused", "question_search", "ranked_candidates", "request_options", "validated", "validated_question",
    "version_of",
]
