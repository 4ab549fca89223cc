"""The console's presentation: what the selectors (`console.selectors`) read, turned into view
rows, labels and chart inputs. No queries here; `console.charts` turns chart inputs into plotly
figures."""
