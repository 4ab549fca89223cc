"""Forms of the console. They parse and validate input; the services do the writing."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django import forms
from django.utils import timezone

from console.list_filters import parse_list_filters
from console.periods import DEFAULT_ZONE, PRESETS, parse_period
from console.selectors.relief import RELIEF_FILTER_LABELS
from console.selectors.session_list import DEFAULT_SORT, SORTS, SessionFilters
from telemetry.band_sql import BANDS
from telemetry.errors import FieldError
from telemetry.models import AgentProfile, CatalogueModel
from telemetry.policy_rules import POLICY_FIELDS, PolicyValues
from telemetry.windows import parse_window_overrides

# --- sessions list -----------------------------------------------------------------------------

MAX_FILTER_VALUES = 20  # values kept per repeatable filter (?user=a&user=b...)


class SessionFilterForm(forms.Form):
    """The sessions list's query, read the same for the page and its exports; the tag and range
    filters through `console.list_filters`, the one parser the read API uses too."""

    list_errors: dict[str, str]

    q = forms.CharField(required=False, max_length=200, label="Search id")
    profile = forms.CharField(required=False, max_length=63)
    model = forms.CharField(required=False, max_length=200)
    band = forms.ChoiceField(
        required=False, choices=[("", "any pressure")] + [(b, b) for b in BANDS]
    )
    active = forms.BooleanField(required=False, label="active in the last hour")
    relief = forms.ChoiceField(
        required=False, choices=[("", "any relief state"), *RELIEF_FILTER_LABELS]
    )
    seen = forms.ChoiceField(required=False, choices=[("", "any time")] + [(r, r) for r in PRESETS])
    sort = forms.CharField(required=False, max_length=20)
    page = forms.IntegerField(required=False, min_value=1)

    def filters(self, zone: str = DEFAULT_ZONE) -> SessionFilters:
        """The valid filters; anything malformed falls back to its default (a list never 400s;
        the page checks a period first, `console.period_request`). The tag and range filters'
        messages, per parameter, are `list_errors` after. `from`/`to` (in `tz`, else `zone`):
        the sessions active in that period."""
        data: dict[str, Any] = self.cleaned_data if self.is_valid() else {}
        getlist = getattr(self.data, "getlist", None)
        listed, self.list_errors = parse_list_filters(getlist or (lambda name: []))
        active_from, active_to = self._period(zone)
        sort = data.get("sort") or DEFAULT_SORT
        if sort.lstrip("-") not in SORTS:
            sort = DEFAULT_SORT
        return SessionFilters(
            q=(data.get("q") or "").strip(),
            profile=data.get("profile") or "",
            model=data.get("model") or "",
            band=data.get("band") or "",
            active=bool(data.get("active")),
            relief=data.get("relief") or "",
            seen=data.get("seen") or "",
            active_from=active_from,
            active_to=active_to,
            sort=sort,
            page=data.get("page") or 1,
            user=self._many("user"),
            repository=self._many("repository"),
            branch=self._many("branch"),
            agent=self._many("agent"),
            tags=listed.tags,
            bounds=listed.bounds,
        )

    def _period(self, zone: str) -> tuple[datetime | None, datetime | None]:
        """The bounds of `?from=&to=` (with `?tz=`), or none when absent or malformed."""
        if not (self.data.get("from") or self.data.get("to")):
            return None, None
        params = {name: str(self.data.get(name) or "") for name in ("from", "to", "tz")}
        try:
            period = parse_period(params, now=timezone.now(), zone=zone)
        except FieldError:
            return None, None
        return period.start, period.end

    def _many(self, name: str) -> tuple[str, ...]:
        """A repeatable filter's values (?user=a&user=b): the first few, each cut to a column."""
        getlist = getattr(self.data, "getlist", None)
        values = getlist(name) if getlist is not None else []
        kept = [v.strip()[:200] for v in values if isinstance(v, str) and v.strip()]
        return tuple(dict.fromkeys(kept))[:MAX_FILTER_VALUES]


# --- policy ------------------------------------------------------------------------------------

POLICY_HELP: dict[str, str] = {
    "cache_ttl": "prompt-cache tier: 1h pays when gaps between requests fall between 5 and 60 min",
    "prune_threshold": "pressure, in % of the usable window (window − reserved output), at which tool results are pruned",
    "summarize_threshold": "pressure in % at which an older span is summarized (≥ prune threshold)",
    "relief_hysteresis": "automatic relief aims this far (in %) below the prune threshold, so a session is not relieved again every few rounds",
    "keep_rounds": "recent rounds whose tool results are never pruned",
    "keep_rounds_verbatim": "recent rounds never summarized",
    "stub_head_chars": "characters kept at the head of a pruned result",
    "stub_tail_chars": "characters kept at the tail of a pruned result",
    "max_result_chars": "tool results are bounded to this size at write time",
    "prune_min_free_tokens": "a prune must free at least this many tokens",
    "prune_exclude_tools": "tool names never pruned, comma-separated",
    "summary_max_tokens": "size of a summary message",
    "reserved_output_tokens": "window kept free for the reply",
    "round_soft_limit": "rounds in one turn before the re-grounding nudge",
    "nudge_text": "the nudge returned to the agent at the soft limit",
    "round_hard_cap": "rounds in one turn before the agent is told to stop",
    "archive_retention_days": "days archived transcripts are kept",
    "call_retention_days": "days raw calls and turns are kept (0: forever); rollups, session totals and compaction history stay",
    "log_retention_days": "days a transcript message's text is kept (0: forever); only text the surface no longer shows goes, once an archive holds it (the archive is then kept)",
}
_FLOAT_FIELDS = ("prune_threshold", "summarize_threshold", "relief_hysteresis")
# Percent fields where a value in (0, 1] can only be a share typed by mistake (no band starts at
# 1 % of the window); relief_hysteresis may honestly be small, so it is not among them.
_SHARE_LOOKALIKES = ("prune_threshold", "summarize_threshold")


def _as_percent(share: object) -> object:
    """0.6 → 60 (a float without a spurious .0000001 from the multiplication)."""
    if isinstance(share, int | float) and not isinstance(share, bool):
        value = round(float(share) * 100, 4)
        return int(value) if value.is_integer() else value
    return share


class PolicyForm(forms.Form):
    """Every policy field. On a profile form a blank field inherits the global value."""

    def __init__(
        self,
        *args: Any,
        inherited: PolicyValues | None = None,
        current: dict[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        """`inherited`: the global policy, for a profile form (None: the global form itself).
        `current`: the stored values to start from."""
        super().__init__(*args, **kwargs)
        self.for_profile = inherited is not None
        self.inherited = inherited
        current = current or {}
        for name in POLICY_FIELDS:
            field = self._field(name)
            field.required = False
            field.help_text = POLICY_HELP.get(name, "")
            if inherited is not None:
                shown = getattr(inherited, name)
                if isinstance(shown, tuple):
                    shown = ", ".join(shown) or "none"
                elif name in _FLOAT_FIELDS:
                    shown = _as_percent(shown)
                field.widget.attrs["placeholder"] = f"inherit: {shown}"
            value = current.get(name)
            if isinstance(value, list | tuple):
                value = ", ".join(str(v) for v in value)
            elif name in _FLOAT_FIELDS and isinstance(value, int | float):
                value = _as_percent(value)
            field.initial = value
            self.fields[name] = field

    def _field(self, name: str) -> forms.Field:
        label = "cache TTL" if name == "cache_ttl" else name.replace("_", " ")
        if name == "cache_ttl":
            choices = [("5m", "5 minutes"), ("1h", "1 hour")]
            if self.inherited is not None:
                choices = [("", f"inherit: {self.inherited.cache_ttl}"), *choices]
            return forms.ChoiceField(choices=choices, label=label)
        if name in _FLOAT_FIELDS:
            # typed as the pages show them: percent of the usable window (stored as a share)
            return forms.FloatField(
                label=f"{label} (%)",
                min_value=0,
                max_value=100,
                widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
            )
        if name == "nudge_text":
            return forms.CharField(label=label, widget=forms.Textarea(attrs={"rows": 3}))
        if name == "prune_exclude_tools":
            return forms.CharField(label=label)
        return forms.IntegerField(label=label)

    def clean(self) -> dict[str, Any]:
        """A threshold of 0.3 is 0.3 %, not 30 %: a share typed into a percent field (any
        value above 0 and at most 1) is refused, saying what to type instead."""
        data = super().clean() or {}
        for name in _SHARE_LOOKALIKES:
            value = data.get(name)
            if isinstance(value, int | float) and 0 < value <= 1:
                self.add_error(
                    name,
                    f"{value:g} here means {value:g} % of the usable window; the form takes "
                    f"percent: type {value * 100:g} for {value * 100:g} %.",
                )
        return data

    def initial_values(self) -> dict[str, object]:
        """The values the form starts from, as `values()` would give them (for a preview)."""
        self.cleaned_data = {name: self.fields[name].initial for name in POLICY_FIELDS}
        for name in _FLOAT_FIELDS:
            value = self.cleaned_data[name]
            self.cleaned_data[name] = value if isinstance(value, int | float) else None
        return self.values()

    def values(self) -> dict[str, object]:
        """What to hand to `update_policy`: blank is None (inherit on a profile; refused, naming
        the field, on the global policy)."""
        values: dict[str, object] = {}
        for name in POLICY_FIELDS:
            value = self.cleaned_data.get(name)
            if name == "prune_exclude_tools":
                text = (value or "").strip()
                if not text:
                    value = None if self.for_profile else []
                else:
                    value = [part.strip() for part in text.split(",") if part.strip()]
            elif value == "":
                value = None
            elif name in _FLOAT_FIELDS and isinstance(value, int | float):
                value = round(value / 100, 6)
            values[name] = value
        return values


class WindowOverridesForm(forms.Form):
    """A profile's windows, one `model = tokens` per line, `* = tokens` for its default."""

    windows = forms.CharField(
        required=False,
        label="Windows in force",
        widget=forms.Textarea(attrs={"rows": 6, "class": "mono"}),
        help_text=(
            "one `model = tokens` per line (a model id or catalogue family); `* = tokens` is "
            "the profile's default. A record's own window_tokens still wins; unset models use "
            "the catalogue's standard window."
        ),
    )

    def overrides(self) -> dict[str, int]:
        try:
            return parse_window_overrides(self.cleaned_data.get("windows") or "")
        except FieldError as exc:
            self.add_error("windows", f"{exc.field}: {exc.message}")
            raise


class ProfileCreateForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="lowercase letters, digits, - and _")
    description = forms.CharField(max_length=500, required=False)


# --- catalogue ---------------------------------------------------------------------------------

PRICE_FIELDS = (
    "input",
    "output",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "lc_input",
    "lc_output",
    "lc_cache_read",
    "lc_cache_write_5m",
    "lc_cache_write_1h",
)


class CatalogueForm(forms.ModelForm[CatalogueModel]):
    """A model's window and prices ($ per million tokens)."""

    class Meta:
        model = CatalogueModel
        fields = (
            "model",
            "provider",
            "family",
            "window_tokens",
            "max_window_tokens",
            *PRICE_FIELDS[:5],
            "long_context_threshold",
            *PRICE_FIELDS[5:],
        )
        # $ per million tokens; "long context" rates apply above long_context_threshold
        labels = {
            "window_tokens": "Context window (tokens)",
            "input": "Input ($/MTok)",
            "output": "Output ($/MTok)",
            "cache_read": "Cache read ($/MTok)",
            "cache_write_5m": "5-minute cache write ($/MTok)",
            "cache_write_1h": "1-hour cache write ($/MTok)",
            "long_context_threshold": "Long-context threshold (input tokens)",
            "lc_input": "Long-context input ($/MTok)",
            "lc_output": "Long-context output ($/MTok)",
            "lc_cache_read": "Long-context cache read ($/MTok)",
            "lc_cache_write_5m": "Long-context 5-minute cache write ($/MTok)",
            "lc_cache_write_1h": "Long-context 1-hour cache write ($/MTok)",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in PRICE_FIELDS:
            value = data.get(name)
            if isinstance(value, Decimal) and value < 0:
                self.add_error(name, "A price must not be negative.")
        window = data.get("window_tokens")
        if window is not None and window <= 0:
            self.add_error("window_tokens", "The window must be greater than 0 tokens.")
        maximum = data.get("max_window_tokens")
        if maximum is not None and window is not None and maximum < window:
            self.add_error("max_window_tokens", "The opt-in maximum must be at least the window.")
        threshold = data.get("long_context_threshold")
        if threshold is not None and threshold <= 0:
            self.add_error("long_context_threshold", "Must be greater than 0 tokens.")
        lc_required = ("lc_input", "lc_output", "lc_cache_read")
        if threshold is not None:
            for name in lc_required:
                if data.get(name) is None:
                    self.add_error(name, "Needed when a long-context threshold is set.")
        elif any(data.get(name) is not None for name in PRICE_FIELDS[5:]):
            self.add_error(
                "long_context_threshold", "Set the threshold the long-context prices apply above."
            )
        return data


# --- agent keys --------------------------------------------------------------------------------


class KeyCreateForm(forms.Form):
    profile = forms.ModelChoiceField(
        queryset=AgentProfile.objects.order_by("name"), to_field_name="name", empty_label=None
    )
    name = forms.CharField(max_length=200, required=False, help_text="who or what uses it")
    compact = forms.BooleanField(required=False, label="may also compact (scope compact)")
