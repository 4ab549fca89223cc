"""The series a session read sends: bounded, complete when it fits, downsampled like the charts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from console.charts import downsample, series_indices


@given(
    st.lists(st.integers(min_value=0, max_value=10**6), max_size=300),
    st.integers(min_value=0, max_value=80),
    st.lists(st.integers(min_value=-5, max_value=320), max_size=40),
)
def test_never_more_than_the_limit_and_every_point_when_they_fit(values, limit, keep):
    indices = series_indices(values, limit, keep=keep)
    assert len(indices) <= limit
    assert indices == sorted(set(indices))
    assert all(0 <= i < len(values) for i in indices)
    if len(values) <= limit:
        assert indices == list(range(len(values)))
    elif values and limit >= 1:
        # the peak is never dropped (the point of the series)
        assert max(values) in [values[i] for i in indices]


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=5, max_size=300))
def test_when_the_keep_indices_fit_it_is_the_charts_choice(values):
    limit = 4 + 6
    keep = [1, 2, 3]
    if len(values) > limit:
        assert series_indices(values, limit, keep=keep) == downsample(values, limit, keep=keep)


def test_the_latest_keep_indices_win_when_not_all_fit():
    values = list(range(100))
    indices = series_indices(values, 6, keep=[10, 20, 30, 40])
    assert {30, 40} <= set(indices) and not {10, 20} & set(indices)
    assert {0, 99} <= set(indices)


def test_below_four_points_the_peak_then_the_last_then_the_first():
    values = [1, 9, 3, 2, 5]
    assert series_indices(values, 1) == [1]
    assert series_indices(values, 2) == [1, 4]
    assert series_indices(values, 3) == [0, 1, 4]
    assert series_indices(values, 0) == []
