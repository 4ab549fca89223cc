"""This stage runs alone: the live server it starts speaks plain HTTP on loopback.

The session-scoped live server builds its middleware once, before any function-scoped settings
fixture could run, so the override is made here at collection time.
"""

from django.conf import settings

settings.SECURE_SSL_REDIRECT = False
settings.API_RATE_LIMIT_PER_MINUTE = 10**9
