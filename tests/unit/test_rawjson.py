import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.rawjson import array_elements, object_members

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


def test_member_text_is_the_exact_source_including_escapes_and_spacing():
    text = '{ "format" : "openai",\n "messages": [ {"seq":0, "content":"a\\u0000b"} ,{"seq" :1} ] }'
    members = object_members(text)
    assert members["format"].value == "openai"
    spans = array_elements(members["messages"].text)
    assert [s.text for s in spans] == ['{"seq":0, "content":"a\\u0000b"}', '{"seq" :1}']
    assert spans[0].value["content"] == "a\x00b"


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.sampled_from([None, 2]))
def test_members_decode_to_what_json_loads_gives(document, indent):
    text = json.dumps(document, indent=indent)
    members = object_members(text)
    assert {k: v.value for k, v in members.items()} == json.loads(text)
    for span in members.values():
        assert json.loads(span.text) == span.value
        assert span.text in text


@given(st.lists(json_values, max_size=8))
def test_elements_are_exact_slices(items):
    text = json.dumps(items, indent=1)
    spans = array_elements(text)
    assert [s.value for s in spans] == items
    assert all(s.text in text for s in spans)


@pytest.mark.parametrize("bad", ["", "[]", '{"a":1', '{"a":1}x', "{a:1}", '{"a" 1}'])
def test_malformed_documents_raise_json_errors(bad):
    with pytest.raises(json.JSONDecodeError):
        object_members(bad)
