"""The console's reads: database reads that return plain data (rows, figures, pages).

Nothing here writes or formats for a page: views call a selector, then a presenter
(`console.presenters`) turns what it read into view rows, labels and chart inputs. Query counts
are constant: a page of sessions costs the same whatever the number of sessions, and a
session's series costs one query whatever its number of turns.
"""
