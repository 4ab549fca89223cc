"""Client for the context lifecycle console: report usage, append the transcript, use the
surface, recover from overflow. Adapters: `context_console.anthropic`, `context_console.openai`,
`context_console.langchain`."""

from context_console.client import (
    AppendResult,
    AsyncConsole,
    AsyncSession,
    CompactionBusy,
    Console,
    ConsoleError,
    ConsoleUnavailable,
    OverflowResult,
    OverflowUnrecoverable,
    Session,
    Surface,
)
from context_console.records import build_record
from context_console.reporting import ReportingOptions, ReportingStats

__all__ = [
    "AppendResult",
    "AsyncConsole",
    "AsyncSession",
    "CompactionBusy",
    "Console",
    "ConsoleError",
    "ConsoleUnavailable",
    "OverflowResult",
    "OverflowUnrecoverable",
    "ReportingOptions",
    "ReportingStats",
    "Session",
    "Surface",
    "build_record",
]
__version__ = "0.1.0"
