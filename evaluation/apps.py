from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'evaluation'

    def ready(self):
        from rag.services.release import release_gate_register

        def gate(kb, **options):
            # Imported on use: the evaluation services are not needed to start a process.
            from evaluation.services.reindex import index_build_gated

            return index_build_gated(kb, **options)

        release_gate_register(gate)
