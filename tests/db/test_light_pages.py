"""Light pages (issue 39, item 5): pages, htmx fragments and API answers go out gzip-compressed
above a size, and the session page's live poll sends only the parts that changed."""

from __future__ import annotations

import gzip
import re
from typing import Any

import pytest
from django.urls import reverse

from console.session_context import LIVE_PARTS
from tests.db.test_console_views import (
    call,
    htmx,
    key,
    make_session,
    report,
    worked_session,
)

pytestmark = pytest.mark.django_db
__all__ = ["key"]  # a fixture this module uses

GZIP = {"Accept-Encoding": "gzip, deflate, br"}


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    """Templates resolve {% static %} without a collectstatic manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def _unzipped(response: Any) -> bytes:
    assert response["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in response["Vary"]
    body = gzip.decompress(response.content)
    assert len(response.content) < len(body)
    return body


def test_pages_and_fragments_are_gzipped_for_a_client_that_accepts_it(client_as, key) -> None:
    session = make_session(key, "zipped", turns=3)
    client = client_as("viewer")
    page_url = reverse("session", args=[session.pk])
    page = client.get(page_url, headers=GZIP)
    assert page.status_code == 200
    html = _unzipped(page).decode()
    assert "<html" in html and session.external_id in html
    # the same page without Accept-Encoding: plain, and the same document
    plain = client.get(page_url)
    assert "Content-Encoding" not in plain and b"<html" in plain.content
    # htmx fragments: the live poll and the surface
    live = client.get(
        reverse("session_live", args=[session.pk]), headers=GZIP | {"HX-Request": "true"}
    )
    assert live.status_code == 200 and 'id="poller"' in _unzipped(live).decode()
    # its ETag turns weak once compressed, and the poller's If-None-Match still matches it
    assert live["ETag"].startswith('W/"')
    again = client.get(
        reverse("session_live", args=[session.pk]),
        headers=GZIP | {"HX-Request": "true", "If-None-Match": live["ETag"][2:]},
    )
    assert again.status_code == 304
    overview = client.get(reverse("overview"), headers=GZIP)
    assert overview.status_code == 200 and b"<html" in _unzipped(overview)


def test_bodies_below_the_size_go_out_plain(client_as, key, settings) -> None:
    client = client_as("viewer")
    # the login page is a few KB: compressed by default, plain under a higher floor
    assert client.get(reverse("overview"), headers=GZIP)["Content-Encoding"] == "gzip"
    settings.COMPRESS_MIN_BYTES = 10_000_000
    response = client.get(reverse("overview"), headers=GZIP)
    assert response.status_code == 200 and "Content-Encoding" not in response
    assert b"<html" in response.content
    # a tiny body (a 304-less small answer) is never compressed
    settings.COMPRESS_MIN_BYTES = 1024
    small = client.get("/healthz", headers=GZIP)
    assert len(small.content) < 1024 and "Content-Encoding" not in small


def test_the_compression_pads_each_body_at_random_against_breach(client_as, key) -> None:
    """Django's GZipMiddleware (since 4.2) adds up to 100 random bytes to each compressed body:
    the same page twice does not give the same length every time."""
    make_session(key, "padded", turns=2)
    client = client_as("viewer")
    sizes = {len(client.get(reverse("sessions"), headers=GZIP).content) for _ in range(8)}
    assert len(sizes) > 1


def _keys(html: str) -> list[str]:
    return re.findall(r'class="part-key" name="have" value="([^"]+)"', html)


def test_the_live_poll_sends_only_the_parts_that_changed(client_as, key) -> None:
    session = make_session(key, "partly", turns=3)
    client = client_as("viewer")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    held = _keys(page)
    assert sorted(k.split(":")[0] for k in held) == sorted(LIVE_PARTS)
    url = reverse("session_live", args=[session.pk])
    # the browser holds every part as it is: a poll after a change the parts do not show sends
    # the poller alone (a first poll without If-None-Match answers 200)
    same = client.get(url, {"have": held}, headers={"HX-Request": "true"})
    assert same.status_code == 200 and same["HX-Trigger"] == "session-changed"
    body = same.content.decode()
    assert 'id="poller"' in body and _keys(body) == []
    assert len(body) < 1_000
    # a new call changes the figures, the charts and the turns, never the archives or the runs
    report(key, [call("partly", 3)])
    changed = client.get(url, {"have": held}, headers={"HX-Request": "true"})
    body = changed.content.decode()
    sent = {k.split(":")[0] for k in _keys(body)}
    assert {"live", "charts", "turns"} <= sent and not sent & {"runs", "archives"}
    assert re.search(r">3(</a>)?</td>", body)  # the new turn's row
    # without the keys (an old page), every part comes as before
    everything = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert {k.split(":")[0] for k in _keys(everything)} == set(LIVE_PARTS)
    # and a key the poll sent is what the page drawn now holds
    fresh = _keys(client.get(reverse("session", args=[session.pk])).content.decode())
    assert set(_keys(body)) <= set(fresh)


def test_a_fragment_the_page_reloads_answers_304_while_unchanged(client_as, key) -> None:
    session = make_session(key, "plan", turns=3)
    client = client_as("viewer")
    for name in ("session_cache", "session_plan"):
        url = reverse(name, args=[session.pk])
        first = client.get(url, headers={"HX-Request": "true"})
        assert first.status_code == 200 and first["ETag"]
        assert "no-cache" in first["Cache-Control"]
        again = client.get(url, headers={"HX-Request": "true", "If-None-Match": first["ETag"]})
        assert again.status_code == 304 and again.content == b"", name
    # the panels reload on the live poll's event
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert (
        "session-changed from:body"
        in client.get(
            reverse("session_plan", args=[session.pk]), headers={"HX-Request": "true"}
        ).content.decode()
    )
    assert 'id="compact-plan"' in page
    misses = client.get(
        reverse("session_cache", args=[session.pk]), headers={"HX-Request": "true"}
    ).content.decode()
    assert 'hx-trigger="session-changed from:body"' in misses


def test_a_new_turn_sends_the_surfaces_turn_picker_not_the_transcript(client_as, key) -> None:
    """The surface's turn picker offers the session's turns, so its bounds move with every new
    turn; the transcript does not. The poll sends the picker alone, and the surface fragment the
    page loads answers 304 while it is unchanged."""
    session = worked_session(key, "picked", compact=False)
    client = client_as("viewer")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert "?surface=fragment" in page  # the deferred surface's own URL
    url = reverse("session", args=[session.pk])
    fragment = client.get(url, {"surface": "fragment"}, headers=htmx("surface"))
    assert fragment.status_code == 200 and "no-cache" in fragment["Cache-Control"]
    assert "HX-Target" in fragment["Vary"]
    again = client.get(
        url,
        {"surface": "fragment"},
        headers=htmx("surface") | {"If-None-Match": fragment["ETag"]},
    )
    assert again.status_code == 304 and again.content == b""
    surface = fragment.content.decode()
    held = _keys(page) + _keys(surface)
    assert sorted(k.split(":")[0] for k in _keys(surface)) == ["surface", "surface_picker"]
    assert 'max="1"' in surface
    report(key, [call("picked", 2, surface_version=1)])
    live = reverse("session_live", args=[session.pk])
    poll = client.get(live, {"have": held, "surface_now": "1"}, headers={"HX-Request": "true"})
    body = poll.content.decode()
    sent = {k.split(":")[0] for k in _keys(body)}
    assert "surface_picker" in sent and "surface" not in sent, sent
    assert '<div id="surface-picker" hx-swap-oob="true">' in body and 'max="2"' in body
    assert 'class="msg' not in body  # none of the transcript
    # the picker the poll sent is the one the fragment holds now
    now = client.get(url, {"surface": "fragment"}, headers=htmx("surface")).content.decode()
    assert set(_keys(body)) <= set(_keys(now) + _keys(client.get(url).content.decode()))
    # the transcript changes: the surface comes whole, its picker inside it
    report(key, [call("picked", 3, surface_version=1)])
    from compaction.services import compact_session

    compact_session(session_id=session.pk, mode="manual", trigger="test", requested_by="test")
    poll = client.get(live, {"have": held, "surface_now": "1"}, headers={"HX-Request": "true"})
    body = poll.content.decode()
    assert 'id="surface" class="panel" hx-swap-oob="true"' in body
    assert body.count('id="surface-picker"') == 1
