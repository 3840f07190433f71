"""`manage.py mcp_stdio`: the MCP server over stdin/stdout, for an IDE on the same machine.

The same tools as /mcp; calls are recorded with channel `mcp` and transport `stdio`, without a key
(whoever can start this command can read the database anyway). Nothing but protocol goes to stdout.
"""

from __future__ import annotations

import anyio
from django.core.management.base import BaseCommand

from apikeys.mcp.server import build_server


class Command(BaseCommand):
    help = "Serve the MCP tools over stdio (configure your IDE to start this command)."

    def handle(self, *args, **options):
        server = build_server(transport="stdio")
        anyio.run(server.run_stdio_async)
