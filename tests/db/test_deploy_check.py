import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(env_overrides: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "prod-Kq8v2Zr5Tn1Wm4Yx7Bc0Df3Gh6Jk9Lp2Qs5Uv8Xz1Ae4Ri7Oy0Ew3Tb6Nm9Hc2Vf5Jd8Sg",
    "DJANGO_ALLOWED_HOSTS": "console.example.com",
    "METRICS_TOKEN": "scrape-token-0123456789",
}


def test_deploy_check_passes_with_production_settings():
    result = _run(PRODUCTION, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


def test_deploy_check_fails_when_debug_is_on():
    result = _run(
        PRODUCTION | {"DJANGO_DEBUG": "true"}, "check", "--deploy", "--fail-level", "WARNING"
    )
    assert result.returncode != 0
    assert "DEBUG" in result.stdout + result.stderr


def test_a_malformed_boolean_setting_stops_start_up_naming_the_variable():
    result = _run(PRODUCTION | {"DJANGO_DEBUG": "ture"}, "check")
    assert result.returncode != 0
    assert "DJANGO_DEBUG" in result.stderr


def test_a_short_secret_key_is_refused():
    result = _run(PRODUCTION | {"DJANGO_SECRET_KEY": "short"}, "check")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_an_unsupported_database_url_is_refused():
    result = _run(PRODUCTION | {"DATABASE_URL": "mysql://root@localhost/x"}, "check")
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_deploy_check_says_loudly_that_metrics_are_open_without_a_token():
    production = {k: v for k, v in PRODUCTION.items() if k != "METRICS_TOKEN"}
    result = _run(production, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "console.W001" in result.stdout + result.stderr
