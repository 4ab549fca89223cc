"""Django admin for profiles, keys and policy. Writes go through the services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from telemetry.errors import FieldError
from telemetry.keys import create_agent_key, normalize_scopes, revoke_agent_key
from telemetry.models import AgentKey, AgentProfile, Policy
from telemetry.policy_rules import POLICY_FIELDS
from telemetry.policy_store import update_policy


@admin.register(AgentProfile)
class AgentProfileAdmin(admin.ModelAdmin[AgentProfile]):
    list_display = ("name", "description", "created_at")
    search_fields = ("name",)


class AgentKeyForm(forms.ModelForm[AgentKey]):
    profile_name = forms.CharField(help_text="created if it does not exist")
    compact = forms.BooleanField(required=False, help_text="also allow manual compaction")

    class Meta:
        model = AgentKey
        fields = ("name",)


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin[AgentKey]):
    list_display = ("prefix", "name", "profile", "scopes", "created_at", "revoked_at")
    list_filter = ("profile", "revoked_at")
    readonly_fields = ("prefix", "profile", "scopes", "created_at", "revoked_at", "last_used_at")
    # Only a SHA-256 of a key is stored, and not even that is shown (nor editable)
    exclude = ("key_hash",)
    actions = ["revoke"]

    def get_form(
        self, request: HttpRequest, obj: AgentKey | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = AgentKeyForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: AgentKey | None = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: AgentKey, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["name"])  # a save: the audit trail records the rename
            return
        issued = create_agent_key(
            profile_name=form.cleaned_data["profile_name"],
            scopes=normalize_scopes(["compact"] if form.cleaned_data["compact"] else []),
            name=obj.name,
        )
        obj.pk = issued.key.pk
        messages.warning(request, f"New key (shown only once): {issued.plaintext}")

    def has_delete_permission(self, request: HttpRequest, obj: AgentKey | None = None) -> bool:
        return False  # revoke instead: the row documents who had access

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentKey]) -> None:
        for key in queryset:
            revoke_agent_key(key_id=key.pk)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin[Policy]):
    list_display = ("__str__", "cache_ttl", "prune_threshold", "summarize_threshold", "updated_at")
    readonly_fields = ("is_global", "profile")

    def save_model(self, request: HttpRequest, obj: Policy, form: Any, change: bool) -> None:
        values = {
            name: form.cleaned_data.get(name) for name in POLICY_FIELDS if name in form.changed_data
        }
        try:
            update_policy(profile=None if obj.is_global else obj.profile, values=values)
        except FieldError as exc:
            messages.error(request, f"Not saved: {exc}")
            request.policy_refused = True  # type: ignore[attr-defined]

    def response_change(self, request: HttpRequest, obj: Policy) -> HttpResponse:
        # A refused save stays on the form with its error, never with Django's "changed
        # successfully" message.
        if getattr(request, "policy_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
