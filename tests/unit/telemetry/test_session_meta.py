"""Session metadata and titles (`telemetry.session_meta`): each door's extraction, the merge
rule (first writer wins unless the door is more specific) and the title's trimming."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from compaction.imports.claude_code import ClaudeCodeParser
from compaction.imports.codex import CodexParser
from compaction.imports.records import SessionMeta
from telemetry.session_meta import (
    TITLE_CHARS,
    columns,
    from_claude_code_line,
    from_codex_meta,
    from_otlp,
    from_record,
    merge,
    metadata_problem,
    trim_title,
)
from tests.unit.imports import fixtures as fx


def _records(parser, text):
    out = []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        out.extend(parser.feed(number, line))
    return out


def _meta(records):
    merged: dict[str, dict[str, str]] = {}
    for r in records:
        if isinstance(r, SessionMeta):
            merged.setdefault(r.session, {})
            for key, value in r.metadata.items():
                if key == "title":
                    merged[r.session][key] = value  # a rename replaces the title
                else:
                    merged[r.session].setdefault(key, value)  # the first writer wins
    return merged


def test_a_title_is_one_trimmed_line():
    assert trim_title("  fix\n the   build\t now ") == "fix the build now"
    long = trim_title("word " * 40)
    assert len(long) == TITLE_CHARS and long.endswith("…")
    assert trim_title("<command-name>/init</command-name> set up") == "/init set up"


@given(st.text())
def test_a_trimmed_title_is_short_single_line_and_stable(text):
    title = trim_title(text)
    assert len(title) <= TITLE_CHARS
    assert "\n" not in title and title == title.strip()
    assert trim_title(title) == title


def test_claude_code_lines_give_cwd_branch_version_entrypoint_and_the_custom_title():
    line = json.loads(fx.claude_code_named_session().splitlines()[0])
    assert from_claude_code_line(line) == {
        "cwd": "/home/dev/src/shop",
        "branch": "feature/checkout",
        "agent_version": "2.0.31",
        "entrypoint": "cli",
        "agent": "claude-code",
    }
    assert from_claude_code_line({"type": "custom-title", "customTitle": " Coupons "}) == {
        "title": "Coupons"
    }
    assert from_claude_code_line({"type": "summary", "summary": "Fix the build"}) == {
        "title": "Fix the build"
    }


def test_the_claude_code_parser_reports_the_first_prompt_the_title_and_the_first_branch():
    records = _records(
        ClaudeCodeParser(session_hint=fx.NAMED_SESSION), fx.claude_code_named_session()
    )
    found = _meta(records)[fx.NAMED_SESSION]
    assert found["first_prompt"].startswith("Add a coupon field to the checkout form")
    assert len(found["first_prompt"]) == TITLE_CHARS
    assert found["title"] == "Checkout coupons"
    assert found["branch"] == "feature/checkout"  # the first seen: "main" comes later
    assert columns(found)["title"] == "Checkout coupons"
    # each key is said once per value, not on every line
    said = [r for r in records if isinstance(r, SessionMeta)]
    assert len(said) == 4  # the context, the first prompt, the title, the new branch


def test_a_summary_line_names_the_session_it_opens():
    records = _records(ClaudeCodeParser(session_hint=fx.SESSION), fx.claude_code_session())
    found = _meta(records)[fx.SESSION]
    assert found["title"] == "Fix the build"
    assert found["first_prompt"] == "Why does the build fail?"


def test_a_codex_rollout_gives_its_session_meta_and_first_prompt():
    records = _records(CodexParser(session_hint="hint"), fx.codex_rollout())
    found = _meta(records)[fx.CODEX_SESSION]
    assert found == {
        "cwd": "/work/app",
        "agent_version": "0.63.0",
        "originator": "codex_cli_rs",
        "branch": "fix/tests",
        "repository": "git@github.com:acme/app.git",
        "commit": "4f1c2e9a0b7d3e5f6a8b9c0d1e2f3a4b5c6d7e8f",
        "agent": "codex",
        "first_prompt": "fix the tests",
    }
    assert from_codex_meta({"git": "not an object"}) == {"agent": "codex"}


def test_otlp_reads_span_attributes_before_the_resource():
    resource = {
        "service.name": "claude-code",
        "service.version": "2.0.31",
        "user.id": "resource-user",
        "vcs.repository.url.full": "https://github.com/acme/shop",
        "vcs.ref.head.name": "main",
    }
    assert from_otlp(resource, {"user.id": "span-user", "user.email": "a@b.c"}) == {
        "user": "span-user",
        "agent": "claude-code",
        "agent_version": "2.0.31",
        "repository": "https://github.com/acme/shop",
        "branch": "main",
    }
    assert from_otlp({}, {"user.id": True, "service.name": {"x": 1}}) == {}


def test_a_record_metadata_object_is_checked_and_trimmed():
    assert metadata_problem({"title": "x", "ticket": 42}) is None
    assert "string or a number" in (metadata_problem({"tags": ["a"]}) or "")
    assert "letters" in (metadata_problem({"bad key": "x"}) or "")
    assert "at most 50 keys" in (metadata_problem({f"k{i}": "v" for i in range(51)}) or "")
    assert from_record({"title": "a\nb", "ticket": 42}) == {"title": "a b", "ticket": "42"}


def test_first_writer_wins_unless_the_door_is_more_specific():
    values, doors = merge({}, {}, {"branch": "a", "user": "u"}, "otlp") or ({}, {})
    assert values == {"branch": "a", "user": "u"}
    # the same door later: first writer wins, nothing changes
    assert merge(values, doors, {"branch": "b"}, "otlp") is None
    # a transcript is more specific than OTLP; a record's own metadata more than both
    values, doors = merge(values, doors, {"branch": "b"}, "import") or ({}, {})
    assert values["branch"] == "b" and doors["branch"] == "import"
    assert merge(values, doors, {"branch": "c"}, "otlp") is None
    values, doors = merge(values, doors, {"branch": "d"}, "record") or ({}, {})
    assert values["branch"] == "d"
    # a title from the same door replaces the title (a rename)
    values, doors = merge(values, doors, {"title": "one"}, "import") or ({}, {})
    values, doors = merge(values, doors, {"title": "two"}, "import") or ({}, {})
    assert values["title"] == "two"


@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["user", "branch", "title"]), st.text(min_size=1)),
            st.sampled_from(["otlp", "import", "record"]),
        )
    )
)
def test_a_key_is_held_by_the_most_specific_door_that_sent_it(writes):
    values: dict[str, str] = {}
    doors: dict[str, str] = {}
    rank = {"otlp": 1, "import": 2, "record": 3}
    for incoming, door in writes:
        merged = merge(values, doors, incoming, door)
        if merged is not None:
            values, doors = merged
    for key in values:
        sent = [rank[d] for inc, d in writes if key in inc]
        assert rank[doors[key]] == max(sent)


def test_columns_fall_back_from_the_title_to_the_prompt_and_from_the_repository_to_cwd():
    assert columns({"first_prompt": "hi", "cwd": "/x"})["title"] == "hi"
    assert columns({"first_prompt": "hi", "cwd": "/x"})["repository"] == "/x"
    assert columns({"title": "T", "first_prompt": "hi", "repository": "r", "cwd": "/x"}) == {
        "title": "T",
        "meta_user": "",
        "repository": "r",
        "git_branch": "",
        "agent_name": "",
        "agent_version": "",
    }
