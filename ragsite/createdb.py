"""`python -m ragsite.createdb`: create DATABASE_URL's PostgreSQL database when it does not exist yet (`make prod`
on a fresh machine); nothing to do for SQLite or an existing database."""

from __future__ import annotations

import os
import sys


def main() -> int:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return 0
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    name = params.get("dbname") or "postgres"
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
