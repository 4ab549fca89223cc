from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    verbose_name = "Compaction"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The one runtime link from telemetry to compaction, made here and nowhere else: the
        # projection (D6) asks the transcript log what was appended after a call's reply.
        # telemetry declares the port (`LogAppendedTokens`); compaction plugs into it.
        from compaction.transcripts import tokens_appended_after_reply
        from telemetry.session_state import register_log_appended_tokens

        register_log_appended_tokens(tokens_appended_after_reply)
