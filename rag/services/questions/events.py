"""What a streaming face receives, in order, from every streaming question path: the chat answer
(`question_answer(stream=True)`), constrained generation (`question_choose_stream`) and CG_RAG's vision routes
(`rag.services.vision`). One set of event types, so a face's stream writer matches on these and nothing else.

The engine's own stream pieces (`rag.engine.types.Token`, `Reset`) are the model's; these are the face's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ask import AnswerOutcome
    from .call import SearchOutcome
    from .choose import ChoiceOutcome


@dataclass(frozen=True, slots=True)
class RetrievalEvent:
    """The evidence was found; the answer is being written next."""

    search: SearchOutcome


@dataclass(frozen=True, slots=True)
class GenerationEvent:
    """The candidates are found; the model is choosing among them next."""


@dataclass(frozen=True, slots=True)
class Progress:
    """A stage of a multi-step answer (vision's) started or finished."""

    stage: str  # "generation" or "retrieval"
    label: str
    status: str  # "running" or "done"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A piece of the answer's text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class AnswerReset:
    """The model's stream broke after text was shown and is asked again: the reader discards the text so far."""

    reason: str


@dataclass(frozen=True, slots=True)
class FinalEvent:
    outcome: AnswerOutcome


@dataclass(frozen=True, slots=True)
class ChoiceEvent:
    outcome: ChoiceOutcome


AnswerEvent = RetrievalEvent | TokenEvent | FinalEvent
ChoiceStreamEvent = RetrievalEvent | GenerationEvent | TokenEvent | ChoiceEvent
