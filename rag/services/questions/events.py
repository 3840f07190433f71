"""What a streaming face receives, in order, from every streaming question path: the chat answer
(`question_answer(stream=True)`), constrained generation (`question_choose_stream`) and CG_RAG's vision routes
(`rag.services.vision`). One set of event types, so a face's stream writer matches on these and nothing else.

A piece of the answer's text (`TokenEvent`) and a restarted model stream (`AnswerReset`: the reader discards the
text so far) are the engine's own stream pieces (`rag.engine.types.Token`, `Reset`), passed through as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag.engine.types import Reset as AnswerReset
from rag.engine.types import Token as TokenEvent

__all__ = ["AnswerEvent", "AnswerReset", "ChoiceEvent", "ChoiceStreamEvent", "FinalEvent", "GenerationEvent",
           "Progress", "RetrievalEvent", "TokenEvent"]

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
class FinalEvent:
    outcome: AnswerOutcome


@dataclass(frozen=True, slots=True)
class ChoiceEvent:
    outcome: ChoiceOutcome


AnswerEvent = RetrievalEvent | TokenEvent | FinalEvent
ChoiceStreamEvent = RetrievalEvent | GenerationEvent | TokenEvent | ChoiceEvent
