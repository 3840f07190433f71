"""The MCP Inspector's own CLI (npm `@modelcontextprotocol/inspector`, installed by `make install`) against
`manage.py mcp_stdio`: the tools, resources and prompts as a third-party client lists, reads and calls them (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rag.tests.conftest import make_built_kb
from rag.tests.live import ROOT, project_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

INSPECTOR = ROOT / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture
def kb(corpus_copy):
    return make_built_kb(corpus_copy)


def inspect(corpus, *arguments: str) -> dict:
    """One Inspector CLI call against a fresh stdio server; its JSON output. The Inspector starts the server with a
    minimal environment of its own, so the settings that point it at this test's data go by `-e`."""
    env = project_env(RAG_SOURCE_ROOTS=str(corpus))
    passed = [f"{name}={env[name]}" for name in ("DJANGO_SETTINGS_MODULE", "RAG_DATA_DIR", "DATABASE_URL",
                                                  "RAG_DEFAULT_KB", "DJANGO_DEBUG", "RAG_SOURCE_ROOTS") if env.get(name)]
    done = subprocess.run([str(INSPECTOR), "--cli", "--cwd", str(ROOT), *[x for p in passed for x in ("-e", p)],
                           sys.executable, "manage.py", "mcp_stdio", *arguments],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    return json.loads(done.stdout)


def test_the_inspector_lists_and_reads_tools_resources_and_prompts(kb, corpus_copy):
    def inspect_here(*arguments: str) -> dict:
        return inspect(corpus_copy, *arguments)

    tools = inspect_here("--method", "tools/list")
    resources = inspect_here("--method", "resources/list")
    templates = inspect_here("--method", "resources/templates/list")
    page = inspect_here("--method", "resources/read", "--uri", "docs://sdk/pages/Fog.md")
    prompts = inspect_here("--method", "prompts/list")
    prompt = inspect_here("--method", "prompts/get", "--prompt-name", "explain_api", "--prompt-args", "name=Fog.color")
    search = inspect_here("--method", "tools/call", "--tool-name", "search_sdk_docs", "--tool-arg",
                     "question=Fog 的颜色怎么设置？", "max_tokens=300")

    assert {t["name"] for t in tools["tools"]} == {"search_sdk_docs", "ask_sdk_docs", "read_sdk_docs",
                                                   "list_sdk_versions"}
    assert [r["uri"] for r in resources["resources"]] == ["docs://knowledge-bases"]
    assert {t["uriTemplate"] for t in templates["resourceTemplates"]} == {"docs://{kb}/pages",
                                                                          "docs://{kb}/pages/{+path}"}
    assert page["contents"][0]["text"].startswith("# ") and "Fog" in page["contents"][0]["text"]
    assert {p["name"] for p in prompts["prompts"]} == {"explain_api", "migrate_versions"}
    assert "`Fog.color`" in prompt["messages"][0]["content"]["text"]
    data = search["structuredContent"]
    assert data["tokens"] <= 300 and data["max_tokens"] == 300 and data["results"][0]["class_name"] == "Fog"
