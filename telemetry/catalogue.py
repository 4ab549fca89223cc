"""The model catalogue in the database, as the pure `telemetry.pricing` types."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Final

from telemetry.errors import FieldError
from telemetry.models import CatalogueModel
from telemetry.policy_effects import CatalogueWindow
from telemetry.pricing import SEED_CATALOGUE, IntegerPricer, ModelPrice, Rates, find_price
from telemetry.recent import Recent

# Each process remembers the catalogue an agent key's requests price with this long (beside the
# key check, `telemetry.keys`): ingest prices calls without a query per request, and a price
# changed anywhere applies within this long on every process (at once in the process that
# changed it: saving or deleting a CatalogueModel row calls `forget_catalogue`). A key seen for
# the first time reads it afresh.
CATALOGUE_CACHE_SECONDS: Final = 1.0


class OnceCatalogue:
    """The model catalogue, read at most once, with prices and pricers memoised by model.

    Made per submission (`OnceCatalogue()` reads when first asked), or shared by the submissions
    of one agent key in this process while the rows are remembered (`key_prices`): resolving a
    model id and building its integer pricer was ~6% of a single-record ingest's CPU when done
    per request, twice (make bench P2). Safe across threads as used: the rows never change once
    read, and two threads memoising the same model store equal values.
    """

    def __init__(
        self,
        load: Callable[[], list[ModelPrice]] | None = None,
        rows: tuple[ModelPrice, ...] | None = None,
    ) -> None:
        self._load = load or load_catalogue
        self._rows = rows
        self._prices: dict[str, ModelPrice | None] = {}
        self._pricers: dict[str, IntegerPricer | None] = {}

    def get(self) -> tuple[ModelPrice, ...]:
        if self._rows is None:
            self._rows = tuple(self._load())
        return self._rows

    def price(self, model: str) -> ModelPrice | None:
        """`model`'s catalogue row as `telemetry.pricing.resolve_model` finds it (None: unknown)."""
        if model not in self._prices:
            self._prices[model] = find_price(model, self.get())
        return self._prices[model]

    def pricer(self, model: str) -> IntegerPricer | None:
        """The integer pricer of `model`'s price (None: unpriced), built once."""
        if model not in self._pricers:
            price = self.price(model)
            self._pricers[model] = None if price is None else IntegerPricer(price)
        return self._pricers[model]


_by_key: Recent[int, OnceCatalogue] = Recent(CATALOGUE_CACHE_SECONDS, entries=1_000)


def forget_catalogue() -> None:
    """Drop this process's remembered catalogue (a row changed; tests)."""
    _by_key.clear()


# A row's rates, each its column of the same name, its long-context rate the column `lc_<name>`.
RATE_NAMES: Final = tuple(f.name for f in fields(Rates))


def price_of(row: CatalogueModel) -> ModelPrice:
    long_context = None
    if row.long_context_threshold is not None and row.lc_input is not None:
        long_context = Rates(**{name: getattr(row, f"lc_{name}") for name in RATE_NAMES})
    return ModelPrice(
        model=row.model,
        provider=row.provider,  # type: ignore[arg-type]
        family=row.family,
        window_tokens=row.window_tokens,
        max_window_tokens=row.max_window_tokens,
        **{name: getattr(row, name) for name in RATE_NAMES},
        long_context_threshold=row.long_context_threshold if long_context else None,
        long_context=long_context,
    )


# What an admin may set on a catalogue row: every stored field but the key.
EDITABLE_FIELDS: Final = frozenset(
    field.name for field in CatalogueModel._meta.concrete_fields if not field.primary_key
)


def save_price(*, row: CatalogueModel | None, values: Mapping[str, object]) -> CatalogueModel:
    """Add a model's window and prices (`row` None) or change `row`'s: the one write path of
    catalogue rows outside the seed.

    `values` are checked by the caller (the console's form says what is wrong with each field).
    Saving the row makes every process forget its remembered catalogue (`telemetry.signals`), so
    the prices apply to calls reported from now on.
    """
    unknown = sorted(set(values) - EDITABLE_FIELDS)
    if unknown:
        raise FieldError(unknown[0], "is not a catalogue field")
    target = CatalogueModel() if row is None else row
    for name, value in values.items():
        setattr(target, name, value)
    target.save()
    return target


def load_catalogue() -> list[ModelPrice]:
    return [price_of(row) for row in CatalogueModel.objects.all()]


def key_prices(key_id: int, *, clock: Callable[[], float] = time.monotonic) -> OnceCatalogue:
    """The catalogue the requests of agent key `key_id` price with, read afresh at most every
    `CATALOGUE_CACHE_SECONDS` per process, with its memoised prices (shared: ModelPrice and
    IntegerPricer are immutable)."""
    now = clock()
    remembered = _by_key.get(key_id, now)
    if remembered is None:
        remembered = OnceCatalogue(rows=tuple(load_catalogue()))
        _by_key.put(key_id, remembered, now)
    return remembered


def key_catalogue(key_id: int, *, clock: Callable[[], float] = time.monotonic) -> list[ModelPrice]:
    """`load_catalogue()` for the requests of agent key `key_id`, remembered as `key_prices`
    (each caller gets its own list)."""
    return list(key_prices(key_id, clock=clock).get())


class CatalogueWindows:
    """Models' catalogue family and standard window (what the window in force reads), from one
    catalogue load, memoised per model."""

    def __init__(self) -> None:
        self._catalogue = load_catalogue()
        self._found: dict[str, CatalogueWindow] = {}

    def of(self, model: str) -> CatalogueWindow:
        if model not in self._found:
            price = find_price(model, self._catalogue) if model else None
            self._found[model] = (
                CatalogueWindow(price.family, price.window_tokens)
                if price is not None
                else CatalogueWindow(None, None)
            )
        return self._found[model]

    def known(self) -> Mapping[str, CatalogueWindow]:
        return self._found


def seed_catalogue() -> int:
    """Insert the seed rows that are missing (admins' edits are kept). Returns rows added.

    The migrations do not call this (they write out their rows, frozen); a change to
    `telemetry.pricing.SEED_CATALOGUE` needs a data migration too, or a fresh database differs
    from this (`tests/db/test_migrations.py` says so)."""
    existing = set(CatalogueModel.objects.values_list("model", flat=True))
    rows = []
    for price in SEED_CATALOGUE:
        if price.model in existing:
            continue
        lc = price.long_context
        rows.append(
            CatalogueModel(
                model=price.model,
                provider=price.provider,
                family=price.family,
                window_tokens=price.window_tokens,
                max_window_tokens=price.max_window_tokens,
                long_context_threshold=price.long_context_threshold,
                **{name: getattr(price, name) for name in RATE_NAMES},
                **{f"lc_{name}": getattr(lc, name) if lc else None for name in RATE_NAMES},
            )
        )
    CatalogueModel.objects.bulk_create(rows)
    return len(rows)
