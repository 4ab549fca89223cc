from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    verbose_name = "Compaction"
    default_auto_field = "django.db.models.BigAutoField"
