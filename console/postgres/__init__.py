"""Django's PostgreSQL backend with a health check that costs no round trip (`base`).

`DATABASES["default"]["ENGINE"]` is `console.postgres` for every PostgreSQL URL (`console.settings`).
"""
