from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        import telemetry.lookups  # noqa: F401  (registers `__any_of`)
        from telemetry.keys import forget_key_checks
        from telemetry.models import AgentKey, AgentProfile

        # Remembered key checks carry the key's profile: a change to either is seen at once here.
        for model in (AgentKey, AgentProfile):
            post_save.connect(
                forget_key_checks, sender=model, dispatch_uid=f"keys-{model.__name__}"
            )
            post_delete.connect(
                forget_key_checks, sender=model, dispatch_uid=f"keys-del-{model.__name__}"
            )

        from telemetry.signals import connect_cache_invalidation

        connect_cache_invalidation()
