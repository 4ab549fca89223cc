"""Exit 0 when a service answers: `probe.py postgres URL` or `probe.py amqp URL`."""

import sys
from urllib.parse import urlsplit, urlunsplit


def main() -> int:
    kind, url = sys.argv[1], sys.argv[2]
    try:
        if kind == "postgres":
            import psycopg

            # The test database does not exist yet; the server's maintenance database does.
            maintenance = urlunsplit(urlsplit(url)._replace(path="/postgres"))
            with psycopg.connect(maintenance, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        elif kind == "amqp":
            from kombu import Connection

            with Connection(url, connect_timeout=3) as conn:
                conn.ensure_connection(max_retries=1)
        else:
            return 2
    except Exception as exc:  # any failure to connect means "down" for the caller
        print(f"{kind} at {url}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
