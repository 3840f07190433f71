"""Knowledge bases, their documents, index versions, the editable alias table and the request records."""

from django.core.validators import RegexValidator
from django.db import models


class Channel(models.TextChoices):
    """The face a request came through. Every face asks through `rag.services.questions`; eval traffic
    (runs and replays) is kept apart from what users asked."""

    WEB = "web", "web assistant"
    MCP = "mcp", "MCP"
    CLI = "cli", "command line"
    CGRAG = "cgrag", "CG_RAG API"
    RETRIEVAL_API = "retrieval_api", "retrieval API"
    RAGFLOW = "ragflow", "RAGFlow API"
    DIFY = "dify", "Dify API"
    SEARCH_R1 = "search_r1", "Search-R1 retrieval"
    EVAL = "eval", "evaluation"

    @classmethod
    def user_channels(cls) -> tuple["Channel", ...]:
        """Every channel but evaluation: the traffic whose quality the ops site reports."""
        return tuple(c for c in cls if c != cls.EVAL)


class KnowledgeBase(models.Model):
    # A slug, or an SDK version's `<sdk>@<version>` (rag.services.sdk).
    slug = models.CharField(max_length=64, unique=True, validators=[RegexValidator(
        r"^[-a-zA-Z0-9_]+(@[A-Za-z0-9][A-Za-z0-9._-]*)?$", "A slug, or an SDK version's <sdk>@<version>.")])
    name = models.CharField(max_length=200, blank=True)
    language = models.CharField(max_length=16, default="zh", help_text="zh, en, or mixed")
    source_dir = models.CharField(max_length=1000, help_text="Folder of Markdown/HTML pages on the server")
    source_url = models.CharField(
        max_length=1000, blank=True,
        help_text="A git repository synced before each build: git+file:///…, git+https://… or git+ssh://…, with "
                  "@ref (branch, tag or commit) and #path=folder; its URL must start with a RAG_SOURCE_ROOTS prefix. "
                  "Empty: the pages are read from the source folder.")
    source_revision = models.CharField(max_length=64, blank=True, help_text="The git commit last synced")
    source_synced_at = models.DateTimeField(null=True, blank=True, help_text="When the source was last synced")
    sync_interval_minutes = models.PositiveIntegerField(
        default=0, help_text="Sync the source and rebuild when it changed every this many minutes (Celery beat); "
                             "0: only when asked")
    sync_error = models.CharField(max_length=500, blank=True, help_text="Why the last scheduled sync failed, if it did")
    sync_checked_at = models.DateTimeField(null=True, blank=True, help_text="When a scheduled sync last ran")
    base_url = models.CharField(max_length=500, blank=True,
                                help_text="Where the pages are published, e.g. https://docs.example.com/api/ : a "
                                          "document's url is this plus its path, unless its front matter names one")
    active_version = models.ForeignKey(
        "IndexVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="active_for"
    )
    # SDK versions (issue 32): one version of an SDK's docs is a knowledge base of its own (its source, builds,
    # gate and rollback), named `<sdk>@<version>` and tied to the SDK's knowledge base here.
    sdk = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="sdk_versions",
                            help_text="The SDK this knowledge base is one version of; empty for an SDK itself")
    sdk_version = models.CharField(max_length=32, blank=True,
                                   help_text="The version as the SDK writes it (1.4, 2.0.0-beta.3, r160), never "
                                             "rewritten")
    sdk_aliases = models.JSONField(default=list, blank=True,
                                   help_text='Other names this version answers to, e.g. ["stable", "lts"]; '
                                             '"latest" here takes it from the newest release')
    sdk_order = models.IntegerField(default=0, help_text="The version's place among its SDK's versions when their "
                                                         "names are not release numbers (r160, a codename)")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [models.UniqueConstraint(fields=["sdk", "sdk_version"], condition=models.Q(sdk__isnull=False),
                                               name="kb_sdk_version_unique")]

    def __str__(self) -> str:
        return self.slug


class Label(models.Model):
    """A kind of tag documents carry, e.g. "level" or "product"; its values are `LabelValue`s."""

    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LabelValue(models.Model):
    """One value of a label ("level: beginner"); the retrieval APIs filter documents by these ids
    (`label_value_ids`: any value of one label, every label named)."""

    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="values")
    value = models.CharField(max_length=200)

    class Meta:
        ordering = ["label__name", "value"]
        constraints = [models.UniqueConstraint(fields=["label", "value"], name="label_value_unique")]

    def __str__(self) -> str:
        return f"{self.label.name}: {self.value}"


class Document(models.Model):
    """One page of a knowledge base. Its id is stable for as long as its path stays (ingest updates the row in
    place); `first_seen_at` is its create_time."""

    kb = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    path = models.CharField(max_length=1000, help_text="Relative to the knowledge base's source folder")
    title = models.CharField(max_length=500)
    url = models.CharField(max_length=1000, blank=True, help_text="From the page's front matter; empty: the base URL "
                                                                   "of its knowledge base plus its path")
    metadata = models.JSONField(default=dict, blank=True, help_text="The page's front matter fields, as written")
    labels = models.ManyToManyField(LabelValue, through="DocumentLabel", related_name="documents", blank=True)
    content_hash = models.CharField(max_length=40)
    size = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    changed_at = models.DateTimeField(help_text="When its content last changed on ingest")

    class Meta:
        ordering = ["kb", "path"]
        constraints = [models.UniqueConstraint(fields=["kb", "path"], name="document_unique_path")]

    def __str__(self) -> str:
        return f"{self.kb.slug}:{self.path}"


class DocumentLabel(models.Model):
    """A label value on a document: from the page's front matter (`from_source`, replaced on each ingest) or
    given in the admin (kept across ingests)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="document_labels")
    value = models.ForeignKey(LabelValue, on_delete=models.CASCADE, related_name="document_labels")
    from_source = models.BooleanField(default=False, help_text="Set by the page's front matter `labels:`")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["document", "value"], name="document_label_unique")]

    def __str__(self) -> str:
        return f"{self.document} [{self.value}]"


class RetrievalApp(models.Model):
    """A retrieval application of the open retrieval API (seed 002's `dialog_id`/`app_id`): the knowledge bases
    its keys may search and its default `rag_setting`. Only a published app answers."""

    name = models.CharField(max_length=100)
    published = models.BooleanField(default=False)
    knowledge_bases = models.ManyToManyField(KnowledgeBase, related_name="retrieval_apps", blank=True)
    rag_setting = models.JSONField(default=dict, blank=True,
                                   help_text="Default retrieval settings (similarity_threshold, dense_weight, top_k, "
                                             "top_n, …); a request's rag_setting overrides them field by field")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.pk}: {self.name}"


class IndexVersion(models.Model):
    class Status(models.TextChoices):
        BUILDING = "building"
        READY = "ready"
        FAILED = "failed"
        DELETED = "deleted"

    kb = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="versions")
    name = models.CharField(max_length=64, help_text="Version label, unique per knowledge base")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.BUILDING)
    model_id = models.CharField(max_length=200, help_text="Embedding model identity")
    dimension = models.PositiveIntegerField(default=0)
    document_count = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    chunks_embedded = models.PositiveIntegerField(default=0)
    chunks_reused = models.PositiveIntegerField(default=0)
    progress_done = models.PositiveIntegerField(default=0, help_text="Chunks embedded so far by a running build")
    progress_total = models.PositiveIntegerField(default=0, help_text="Chunks a running build has to embed")
    corpus_hash = models.CharField(max_length=40, blank=True, help_text="Hash of every document hash")
    document_hashes = models.JSONField(default=dict, blank=True, help_text="path -> content hash at build time")
    source_revision = models.CharField(max_length=64, blank=True, help_text="The git commit the pages came from")
    page_changes = models.JSONField(default=dict, blank=True,
                                    help_text="Pages added, changed, removed, renamed and unchanged since the "
                                              "version active when the build started")
    timings = models.JSONField(default=dict, blank=True)
    pages_skipped = models.JSONField(default=list, blank=True,
                                     help_text="Pages that yielded nothing to index: [{path, reason}]")
    api_catalog = models.JSONField(default=dict, blank=True,
                                   help_text="The classes and members this build documents, with each member's "
                                             "signature and description hash: what SDK versions are compared by")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life of a running build")
    built_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True, help_text="Last asked for by name (an eval run, a replay): "
                                   "pruning keeps a version asked for recently")
    builder = models.CharField(max_length=300, blank=True, help_text="host:pid of the process running the build")

    class Meta:
        ordering = ["kb", "-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["kb", "name"], name="index_version_unique_name"),
            # One build per knowledge base at a time, across every process and machine: the database refuses a
            # second "building" row, so two workers that both find none cannot both start one.
            models.UniqueConstraint(fields=["kb"], condition=models.Q(status="building"), name="index_version_one_build"),
        ]
        indexes = [models.Index(fields=["kb", "status"])]

    def __str__(self) -> str:
        return f"{self.kb.slug}@{self.name}"


class ClassAlias(models.Model):
    """An extra name for a catalog class, e.g. 相机 -> PerspectiveCamera; blank kb applies to every base."""

    kb = models.ForeignKey(KnowledgeBase, null=True, blank=True, on_delete=models.CASCADE, related_name="aliases")
    alias = models.CharField(max_length=100)
    class_name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["alias"]
        constraints = [models.UniqueConstraint(fields=["kb", "alias"], name="class_alias_unique")]
        verbose_name_plural = "class aliases"

    def __str__(self) -> str:
        return f"{self.alias} -> {self.class_name}"


class EverydayWord(models.Model):
    """Everyday words users write for what the docs name otherwise, e.g. 发糊 -> setPixelRatio devicePixelRatio: a
    question with the phrase is planned and searched with the terms too. `source` is the docs page the terms
    come from (its path or URL), so every entry traces to the docs. Blank kb applies to every base."""

    kb = models.ForeignKey(KnowledgeBase, null=True, blank=True, on_delete=models.CASCADE,
                           related_name="everyday_words")
    phrase = models.CharField(max_length=100, help_text="As users write it; matched ignoring case and spacing "
                              "(Latin phrases as whole words).")
    terms = models.CharField(max_length=300, help_text="The docs' own words for it: member or class names, "
                             "words of the page, separated by spaces.")
    source = models.CharField(max_length=500, help_text="The docs page these terms come from: its path in the "
                              "knowledge base or its URL.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["phrase"]
        constraints = [models.UniqueConstraint(fields=["kb", "phrase"], name="everyday_word_unique")]

    def __str__(self) -> str:
        return f"{self.phrase} -> {self.terms}"


class RequestRecord(models.Model):
    """One search or answer, whatever the channel (see `Channel`): what was asked, how it
    was planned, which chunks were found and adopted, what was answered, and what it cost."""

    Channel = Channel

    class Kind(models.TextChoices):
        SEARCH = "search"
        CHAT = "chat"

    class Outcome(models.TextChoices):
        """How a request ended, decided once by the question service (`rag.services.records.outcome_of`)."""

        OK = "ok", "answered"
        LOW = "low", "low confidence"
        DEGRADED = "degraded", "degraded"
        EMPTY = "empty", "nothing found"
        CHITCHAT = "chitchat", "chitchat reply"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled by the reader"
        NOT_READY = "not_ready", "index not built yet"  # 503 index_building: the service is starting, not failing

    request_id = models.CharField(max_length=64, unique=True)
    channel = models.CharField(max_length=16, choices=Channel.choices, db_index=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.OK)
    kb = models.CharField(max_length=64, blank=True)
    index_version = models.CharField(max_length=64, blank=True)
    question = models.TextField()
    plan = models.JSONField(default=dict, blank=True)
    retrieved = models.JSONField(default=dict, blank=True, help_text="route -> [[chunk_id, score], …]")
    adopted = models.JSONField(default=list, blank=True)
    excluded = models.JSONField(default=list, blank=True)
    answer = models.TextField(blank=True)
    citations = models.JSONField(default=list, blank=True)
    confidence = models.CharField(max_length=8, blank=True)
    mode = models.CharField(max_length=16, blank=True)
    degraded = models.BooleanField(default=False)
    reason = models.CharField(max_length=64, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0)
    hit_count = models.PositiveSmallIntegerField(default=0, help_text="Chunks adopted; 0 with no error: an empty result")
    timings = models.JSONField(default=dict, blank=True)
    # Who called, through what: the key's public prefix (never the key), the tool, its arguments, the MCP
    # session, the transport (http or stdio) and the retrieval app.
    api_key_prefix = models.CharField(max_length=16, blank=True)
    tool = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    session_id = models.CharField(max_length=64, blank=True)
    transport = models.CharField(max_length=8, blank=True)
    app = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["channel", "created_at"]),
                   models.Index(fields=["api_key_prefix", "created_at"]),
                   models.Index(fields=["error_code", "created_at"]),
                   models.Index(fields=["outcome", "created_at"])]

    def __str__(self) -> str:
        return f"{self.channel}:{self.request_id}"
