"""The production shape in docker-compose.yml and the Dockerfile, checked without a Docker engine.

Each structural test runs twice: on the file as YAML reads it, and on the configuration that
docker-compose itself resolves (`docker-compose config`). The second needs Debian's docker-compose;
without it that half is skipped, unless REQUIRE_SERVICES=1, where it fails instead.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from tests.conftest import need_service

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

SERVICES = {"postgres", "redis", "s3", "web", "worker", "beat"}
APP_SERVICES = {"web", "worker", "beat"}
MEDIA_ROOT = "/var/lib/ckptfleet/media"
# An environment variable whose name says it holds a secret must come as NAME_FILE instead.
SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|ACCESS_KEY|PRIVATE_KEY")


@functools.cache
def _docker_compose_config() -> dict:
    exe = shutil.which("docker-compose")
    need_service("docker-compose", exe is not None, "Debian: apt-get install docker-compose")
    result = subprocess.run(
        [exe, "-f", str(COMPOSE_FILE), "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"docker-compose config rejected the file:\n{result.stderr}"
    return yaml.safe_load(result.stdout)


@pytest.fixture(params=["file", "docker-compose"])
def compose(request) -> dict:
    if request.param == "file":
        return yaml.safe_load(COMPOSE_FILE.read_text())
    return _docker_compose_config()


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _secret_names(service: dict) -> set[str]:
    return {item if isinstance(item, str) else item["source"] for item in service.get("secrets", [])}


def _long_running(compose: dict) -> dict[str, dict]:
    return {name: svc for name, svc in compose["services"].items() if svc.get("restart") != "no"}


def _words(command) -> list[str]:
    return command.split() if isinstance(command, str) else [str(word) for word in command]


def test_it_has_the_six_services(compose):
    assert set(compose["services"]) >= SERVICES
    # Only a one-shot service (restart: "no", like migrate) may go without a health check; none of
    # the six is one.
    assert set(_long_running(compose)) >= SERVICES


def test_every_long_running_service_has_a_health_check(compose):
    for name, service in _long_running(compose).items():
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable"), f"{name} disables its healthcheck"
        assert check.get("test"), f"{name} has a healthcheck without a test"


def test_the_app_waits_for_healthy_services(compose):
    for name in APP_SERVICES:
        depends = compose["services"][name].get("depends_on")
        assert isinstance(depends, dict), f"{name}: depends_on must give a condition for each service"
        for backing in ("postgres", "redis"):
            assert depends[backing]["condition"] == "service_healthy", f"{name} does not wait for {backing}"
        for dependency, spec in depends.items():
            assert spec.get("condition") in {"service_healthy", "service_completed_successfully"}, (
                f"{name} starts when {dependency} merely started"
            )


def test_the_processes_are_gunicorn_and_celery(compose):
    services = compose["services"]
    web = _words(services["web"]["command"])
    assert web[0] == "gunicorn"
    assert "ckptfleet.wsgi:application" in web
    assert _words(services["worker"]["command"])[:4] == ["celery", "-A", "ckptfleet", "worker"]
    assert _words(services["beat"]["command"])[:4] == ["celery", "-A", "ckptfleet", "beat"]
    migrate = [service for service in services.values() if "migrate" in _words(service.get("command", []))]
    assert migrate, "nothing runs manage.py migrate"


def test_the_app_is_configured_from_the_environment(compose):
    for name in APP_SERVICES:
        service = compose["services"][name]
        env = _environment(service)
        assert "build" in service, f"{name} is not built from our Dockerfile"
        assert env["CKPTFLEET_DEBUG"] == "0"
        assert urlsplit(env["DATABASE_URL"]).scheme in {"postgres", "postgresql"}
        assert urlsplit(env["REDIS_URL"]).scheme == "redis"
        assert env["ALLOWED_HOSTS"]
        assert env["DJANGO_SECRET_KEY_FILE"].startswith("/run/secrets/")
        assert PurePosixPath(env["DJANGO_SECRET_KEY_FILE"]).name in _secret_names(service)


def test_web_and_worker_share_the_media_volume(compose):
    mounts = {}
    for name in ("web", "worker"):
        service = compose["services"][name]
        assert _environment(service).get("MEDIA_ROOT") == MEDIA_ROOT
        volumes = service.get("volumes", [])
        sources = [
            volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            for volume in volumes
            if (volume["target"] if isinstance(volume, dict) else volume.split(":")[1]) == MEDIA_ROOT
        ]
        assert sources, f"{name} mounts nothing at {MEDIA_ROOT}"
        mounts[name] = sources[0]
    assert mounts["web"] == mounts["worker"]
    assert mounts["web"] in compose.get("volumes", {}), "the media volume is not a named volume"


def test_no_secret_value_is_written_inline(compose):
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if key.endswith("_FILE"):
                assert value.startswith("/run/secrets/") or "/" not in value, f"{name}: {key}={value}"
                continue
            assert not SECRET_NAME.search(key), f"{name} sets {key} inline: use {key}_FILE and a secret"
            if "://" in value:
                assert urlsplit(value).password is None, f"{name}: {key} carries a password inline"
    declared = compose.get("secrets", {})
    assert "django_secret_key" in declared
    for secret, spec in declared.items():
        assert set(spec) == {"file"}, f"secret {secret} must come from a file"
        path = PurePosixPath(spec["file"])
        assert path.parent.name == "secrets", f"secret {secret} must live in ./secrets/ (gitignored)"


def test_the_dockerfile_builds_a_non_root_image_without_secrets():
    assert DOCKERFILE.is_file()
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0].startswith("FROM python:3.11-slim")
    for line in instructions:
        word = line.split()[0].upper()
        if word in {"COPY", "ADD"}:
            assert "secret" not in line.lower(), f"the image must not carry secrets: {line}"
        if word in {"ENV", "ARG"}:
            assert "DJANGO_SECRET_KEY" not in line, f"no secret key in the image's environment: {line}"
    users = [line.split()[1] for line in instructions if line.split()[0].upper() == "USER"]
    assert users and users[-1] not in {"root", "0"}, "the image must run as a non-root user"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "secrets" in ignored, "the build context must leave ./secrets out"


def test_the_worker_comes_back_and_the_broker_keeps_its_queues(compose):
    # The worker reconnects after a Redis restart (tests/reliability/test_broker_restart.py); should it exit
    # anyway Compose starts it again, and Redis keeps the queues and unacknowledged messages across a restart.
    services = compose["services"]
    assert services["worker"]["restart"] == "unless-stopped"
    assert services["redis"]["restart"] == "unless-stopped"
    redis_command = _words(services["redis"]["command"])
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    targets = [
        volume["target"] if isinstance(volume, dict) else volume.split(":")[1]
        for volume in services["redis"]["volumes"]
    ]
    assert "/data" in targets  # a named volume: the data outlives the container
