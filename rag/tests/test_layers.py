"""The layers (STYLE.md §1): apps → rag → rag.engine, and everything → infra (the platform), never the reverse;
only `rag` writes `rag` rows.

Read from the source with `ast`, so a new import or write anywhere in the code fails here at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("assistant", "apikeys", "evaluation", "opsboard", "cgrag", "retrieval")
RAG_MODELS = {"KnowledgeBase", "Document", "IndexVersion", "ClassAlias", "RequestRecord"}
WRITES = {"create", "update", "delete", "bulk_create", "bulk_update", "get_or_create", "update_or_create", "save"}


def modules(package: str, *, skip=("tests", "migrations")):
    for path in sorted((ROOT / package).rglob("*.py")):
        if not set(path.relative_to(ROOT).parts) & set(skip):
            yield path


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def rag_model_writes(path: Path, root: Path = ROOT) -> list[str]:
    """Calls like `IndexVersion.objects.filter(...).update(...)`: a write whose chain starts at a rag model."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            receiver = node.func.value
            while isinstance(receiver, ast.Call | ast.Attribute):
                receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value
            if isinstance(receiver, ast.Name) and receiver.id in RAG_MODELS:
                found.append(f"{path.relative_to(root)}:{node.lineno} {receiver.id}….{node.func.attr}()")
    return found


@pytest.mark.parametrize("app", APPS)
def test_an_app_reaches_the_engine_only_through_rag(app):
    leaks = {f"{path.relative_to(ROOT)}: {name}" for path in modules(app) for name in imports_of(path)
             if name == "rag.engine" or name.startswith("rag.engine.") or name == "rag.pipeline"}

    assert not leaks, "apps call rag.services, never the engine: " + ", ".join(sorted(leaks))


def contract_names_imported_around(path: Path) -> set[str]:
    """Names of the faces' contract (rag.services.__all__) imported from a rag.services module, not the contract."""
    import rag.services

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rag.services."):
            found.update(f"{node.module}.{a.name}" for a in node.names if a.name in rag.services.__all__)
    return found


@pytest.mark.parametrize("app", APPS)
def test_an_app_asks_through_the_faces_contract(app):
    leaks = {f"{path.relative_to(ROOT)}: {name}" for path in modules(app) for name in imports_of(path)
             if name == "rag.services.questions" or name.startswith("rag.services.questions.")}
    leaks |= {f"{path.relative_to(ROOT)}: {name}" for path in modules(app)
              for name in contract_names_imported_around(path)}

    assert not leaks, "apps import the question path from rag.services (its contract): " + ", ".join(sorted(leaks))


def test_rag_imports_no_app():
    leaks = {f"{path.relative_to(ROOT)}: {name}" for path in modules("rag") for name in imports_of(path)
             if name.split(".")[0] in APPS}

    assert not leaks, "rag is the base app and imports no app above it: " + ", ".join(sorted(leaks))


def test_the_platform_imports_neither_rag_nor_an_app():
    leaks = {f"{path.relative_to(ROOT)}: {name}" for path in modules("infra") for name in imports_of(path)
             if name.split(".")[0] in ("rag", "ragsite", *APPS)}

    assert not leaks, "infra is the platform under rag and the apps: " + ", ".join(sorted(leaks))


def test_the_engine_imports_neither_django_nor_the_rest_of_rag():
    leaks = {f"{path.relative_to(ROOT)}: {name}" for path in modules("rag/engine") for name in imports_of(path)
             if name.split(".")[0] in ("django", "infra", *APPS)
             or (name.startswith("rag.") and not name.startswith("rag.engine"))}

    assert not leaks, "the engine is plain Python: " + ", ".join(sorted(leaks))


@pytest.mark.parametrize("app", APPS)
def test_an_app_writes_no_rag_rows(app):
    writes = [w for path in modules(app) for w in rag_model_writes(path)]

    assert not writes, "only rag's services write its rows: " + ", ".join(writes)


def test_the_checks_see_a_leak_when_there_is_one(tmp_path):
    leaky = tmp_path / "leaky.py"
    leaky.write_text("from rag.engine.search import Searcher\nimport rag.engine.index\n"
                     "IndexVersion.objects.filter(pk=1).update(error='x')\nRequestRecord.objects.create()\n")

    assert imports_of(leaky) == {"rag.engine.search", "rag.engine.index"}
    assert [w.split(" ")[1] for w in rag_model_writes(leaky, root=tmp_path)] == ["IndexVersion….update()",
                                                                                 "RequestRecord….create()"]


def test_the_contract_check_sees_a_question_name_imported_around_it(tmp_path):
    face = tmp_path / "face.py"
    face.write_text("from rag.services import QuestionRequest\nfrom rag.services.retrieval import question_retrieve\n"
                    "from rag.services.knowledge import kb_get\n")

    assert contract_names_imported_around(face) == {"rag.services.retrieval.question_retrieve"}
