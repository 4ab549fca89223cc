"""The zone every time on a page is shown in is named by one line: the foot of `_base.html`
("Times in Asia/Tokyo"). A page saying it again ("· times in UTC" under the alerts' picker, the
sessions list's head) repeated it on screen; the picker, and the sessions list's "Active
between" filter, show the zone where it is chosen, not as a note. (Templates read as text.)"""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
# the note's wording followed by a zone (markup or a variable), whatever the case
ZONE_NOTE = re.compile(r"times in\s*(?:<|\{\{)", re.IGNORECASE)


def test_only_the_page_foot_says_which_zone_the_times_are_in() -> None:
    said = {
        str(path.relative_to(TEMPLATES)): len(ZONE_NOTE.findall(path.read_text(encoding="utf-8")))
        for path in sorted(TEMPLATES.rglob("*.html"))
    }
    assert {name: count for name, count in said.items() if count} == {"_base.html": 1}
