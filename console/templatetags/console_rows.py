"""Table rows the console draws in Python (`console.session_rows`): `{% session_row row %}`."""

from __future__ import annotations

from django import template

from console.session_rows import session_row

register = template.Library()
register.simple_tag(session_row)
