"""``antre config [--json]``: every setting's effective value, secrets masked, and where it
came from (default, environment, the ``ANTRE_CONFIG`` file); a bad value is one line on stderr
and exit code 2, before any command runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from antre import settings

SECRET = "s3cret-session-key-" + "x" * 20


def antre(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANTRE_")}
    return subprocess.run([sys.executable, "-m", "antre_cli", *args], capture_output=True,
                          text=True, timeout=60, env={**clean, **env}, stdin=subprocess.DEVNULL,
                          check=False)


def test_config_lists_every_setting_with_its_value_and_where_it_came_from(redis_url, tmp_path):
    file = tmp_path / "antre.toml"
    file.write_text('log_level = "warning"\npartitions = 3\nredis_url = "redis://file:1/0"\n')
    done = antre("config", env={"ANTRE_REDIS_URL": redis_url, "ANTRE_CONFIG": str(file),
                                "ANTRE_SECRET_KEY": SECRET,
                                "ANTRE_DATABASE_URL": "postgresql+psycopg://u:pw@db/antre"})
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines()}
    assert set(lines) == set(settings.ALL)
    assert lines["ANTRE_REDIS_URL"][1:] == [redis_url, "environment"]  # the environment wins
    assert lines["ANTRE_LOG_LEVEL"][1:] == ["WARNING", str(file)]
    assert lines["ANTRE_PARTITIONS"][1:] == ["3", str(file)]
    assert lines["ANTRE_LOG_FORMAT"][1:] == ["json", "default"]
    assert lines["ANTRE_SECRET_KEY"][1:] == ["***", "environment"]
    assert lines["ANTRE_DATABASE_URL"][1] == "postgresql+psycopg://u:***@db/antre"
    assert SECRET not in done.stdout and "pw@" not in done.stdout
    assert done.stderr == ""


def test_config_names_an_antre_variable_that_is_no_setting(redis_url):
    done = antre("config", env={"ANTRE_REDIS_URL": redis_url, "ANTRE_REDIS_ULR": "redis://x"})
    assert done.returncode == 0
    assert done.stderr == "warning: ANTRE_REDIS_ULR is set but is no setting of Antre (a typo?)\n"
    done = antre("config", "--json", env={"ANTRE_REDIS_URL": redis_url,
                                          "ANTRE_REDIS_ULR": "redis://x"})
    assert json.loads(done.stdout)["unknown"] == ["ANTRE_REDIS_ULR"]


def test_config_json_is_one_document(redis_url, tmp_path):
    file = tmp_path / "antre.toml"
    file.write_text("secure_cookies = true\n")
    done = antre("config", "--json", env={"ANTRE_REDIS_URL": redis_url,
                                          "ANTRE_CONFIG": str(file),
                                          "ANTRE_PAYLOAD_KEYS": "v1:" + "A" * 44})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["file"] == str(file)
    rows = {row["name"]: row for row in doc["settings"]}
    assert rows["ANTRE_REDIS_URL"] == {"name": "ANTRE_REDIS_URL", "value": redis_url,
                                       "source": "environment", "secret": False}
    assert rows["ANTRE_SECURE_COOKIES"]["value"] is True
    assert rows["ANTRE_SECURE_COOKIES"]["source"] == str(file)
    assert rows["ANTRE_PAYLOAD_KEYS"] == {"name": "ANTRE_PAYLOAD_KEYS", "value": "***",
                                          "source": "environment", "secret": True}
    assert rows["ANTRE_MAX_SNOOZES"] == {"name": "ANTRE_MAX_SNOOZES", "value": 1000,
                                         "source": "default", "secret": False}


def test_a_bad_value_is_one_line_and_exit_2(redis_url):
    done = antre("config", env={"ANTRE_REDIS_URL": redis_url, "ANTRE_LOG_FLUSH_MS": "-5"})
    assert done.returncode == 2
    assert done.stderr == ("error: ANTRE_LOG_FLUSH_MS='-5' (from the environment) is refused: "
                           "ANTRE_LOG_FLUSH_MS takes a whole number from 0 up (milliseconds)\n")
    assert done.stdout == ""


def test_every_command_refuses_a_bad_value_at_start(redis_url, tmp_path: Path):
    file = tmp_path / "antre.toml"
    file.write_text("secure_cookies = 'maybe'\n")
    for args in (("status",), ("worker", "tests.apps.nothing:app", "--burst")):
        done = antre(*args, env={"ANTRE_REDIS_URL": redis_url, "ANTRE_CONFIG": str(file)})
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr == (f"error: ANTRE_SECURE_COOKIES='maybe' (from {file}) is refused: "
                               "ANTRE_SECURE_COOKIES takes a flag: 1, true, yes or 0, false, "
                               "no\n")
        assert "Traceback" not in done.stderr


def test_a_typo_in_the_file_is_refused(redis_url, tmp_path: Path):
    file = tmp_path / "antre.toml"
    file.write_text('redis_ulr = "redis://x"\n')
    done = antre("config", env={"ANTRE_REDIS_URL": redis_url, "ANTRE_CONFIG": str(file)})
    assert done.returncode == 2
    assert "'redis_ulr' is not one" in done.stderr and done.stderr.count("\n") == 1
