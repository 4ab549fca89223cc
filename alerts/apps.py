from django.apps import AppConfig


class AlertsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "alerts"
    verbose_name = "Alerts"

    def ready(self) -> None:
        from alerts.metrics import AlertCollector
        from alerts.nudge import connect_ingest_nudge
        from compaction.metrics import EXTRA_COLLECTORS

        connect_ingest_nudge()
        if AlertCollector not in EXTRA_COLLECTORS:
            EXTRA_COLLECTORS.append(AlertCollector)
