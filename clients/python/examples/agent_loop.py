"""An agent loop that runs offline: the real `anthropic` SDK talks to a local fake provider (a
small HTTP server started here), the console is your `make run` demo console.

    make run                                   # in the repository, prints nothing you need here
    KEY=$(.venv/bin/python manage.py create_agent_key --profile default | tail -1)
    CONTEXT_CONSOLE_URL=http://127.0.0.1:8000 CONTEXT_CONSOLE_KEY=$KEY \\
        python clients/python/examples/agent_loop.py --rounds 40

Each round the "model" calls a tool that returns a few kilobytes of log; the adapter appends it
to the console's log, sends the console's surface (use_surface=True) with cache breakpoints, and
reports the usage. Once the session passes the prune threshold, the console's worker prunes old
tool results and the request stays small; at round --overflow-at the fake provider says "prompt
is too long" once and the adapter recovers through /overflow. Open the session in the console
to see pressure, cache hits and the compactions.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anthropic

from context_console import Console, ReportingOptions
from context_console.anthropic import wrap
from context_console.fake_provider import FakeProvider

SYSTEM = "You are a build engineer. Read the logs one file at a time and find the failure."
TOOLS = [
    {
        "name": "read_log",
        "description": "Read the next build log file.",
        "input_schema": {"type": "object", "properties": {"round": {"type": "integer"}}},
    }
]


def read_log(round_number: int, size: int) -> str:
    lines = [
        f"[{round_number:03d}:{i:04d}] compiling module_{i % 17}.c ... ok"
        for i in range(size // 40)
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--session", default=f"example-{int(time.time())}")
    parser.add_argument("--window", type=int, default=60_000, help="the fake model's window")
    parser.add_argument("--result-chars", type=int, default=6_000)
    parser.add_argument("--overflow-at", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between rounds")
    args = parser.parse_args()

    console = Console.from_env(reporting=ReportingOptions(synchronous=True))
    with FakeProvider(window_tokens=args.window) as provider:
        client = wrap(
            anthropic.Anthropic(base_url=provider.url, api_key="offline", max_retries=0),
            console.session(args.session),
            use_surface=True,
            window_tokens=args.window,
        )
        history: list[dict[str, Any]] = [{"role": "user", "content": "The nightly build fails."}]
        print(f"session {args.session}: {args.rounds} rounds, window {args.window:,} tokens")
        print("round  sent_tokens  cache_read  surface  signal")
        for round_number in range(1, args.rounds + 1):
            if round_number == args.overflow_at:
                provider.inject_overflow(1)
            reply = client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=1024,
                system=SYSTEM,
                tools=TOOLS,
                messages=history,
            )
            history.append({"role": "assistant", "content": reply.content})
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": read_log(round_number, args.result_chars),
                }
                for block in reply.content
                if block.type == "tool_use"
            ]
            history.append({"role": "user", "content": results})
            sent = provider.accepted()[-1]
            print(
                f"{round_number:5d}  {sent.prompt_tokens:11,d}  {reply.usage.cache_read_input_tokens or 0:10,d}"
                f"  {client.context.last_surface_version!s:>7}  {client.context.signal.state}"
            )
            time.sleep(args.pause)
        full = sum(len(str(m)) for m in history) // 4
        print(
            f"done: the full history is ~{full:,} tokens, the last request {provider.accepted()[-1].prompt_tokens:,};"
            f" overflows recovered: {client.context.overflows_recovered};"
            f" records dropped: {console.dropped}"
        )
    console.close()


if __name__ == "__main__":
    main()
