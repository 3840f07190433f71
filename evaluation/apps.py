from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate


class EvaluationConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'evaluation'

    def ready(self):
        from rag.services.release import release_gate_register
        from rag.services.retention import version_holder_register

        def gate(kb, **options):
            # Imported on use: the evaluation services are not needed to start a process.
            from evaluation.services.reindex import index_build_gated

            return index_build_gated(kb, **options)

        release_gate_register(gate)
        version_holder_register(_versions_of_live_runs)
        post_migrate.connect(_import_shipped_golden_sets, sender=self)


def _versions_of_live_runs(kb: str) -> set[str]:
    """Pruning keeps the versions queued and running eval runs evaluate (rag.services.retention)."""
    from evaluation.services.runs import eval_run_versions_in_use

    return eval_run_versions_in_use(kb)


def _import_shipped_golden_sets(sender, using="default", **kwargs):
    """After `migrate`: the golden sets shipped about the bundled docs are there on a fresh install, so the
    eval center and `rag reindex --gate` work at once (RAG_SHIPPED_GOLDEN_SETS=false turns it off)."""
    if not getattr(settings, "RAG_SHIPPED_GOLDEN_SETS", True) or using != "default":
        return
    from evaluation.services.golden import golden_import_shipped

    stdout = kwargs.get("stdout")
    for golden_set in golden_import_shipped():
        if stdout is not None and kwargs.get("verbosity", 1) >= 1:
            stdout.write(f"  Imported the shipped golden set {golden_set}: {golden_set.items.count()} questions\n")
