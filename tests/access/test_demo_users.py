"""The demo has one person per role, sharing one generated password, and each sees what their role allows."""

from __future__ import annotations

from io import StringIO

from django.contrib.auth import get_user_model

from access.roles import Role, roles_of
from dashboard.management.commands.seed_demo import Command


def test_seed_demo_makes_one_person_per_role_with_the_demo_password(db, settings, tmp_path, client):
    settings.VAR_DIR = tmp_path
    out = StringIO()
    command = Command(stdout=out)
    command._demo_login()
    command._demo_login()  # idempotent
    password = (tmp_path / "demo-password").read_text().strip()
    assert (tmp_path / "demo-password").stat().st_mode & 0o077 == 0
    users = {u.username: u for u in get_user_model().objects.filter(username__startswith="demo")}
    assert set(users) == {"demo", "demo-viewer", "demo-finance", "demo-operator", "demo-approver"}
    assert roles_of(users["demo"]) == set(Role.values)
    for role in ("viewer", "finance", "operator", "approver"):
        person = users[f"demo-{role}"]
        assert person.check_password(password)
        assert not person.is_staff and not person.is_superuser
        assert role in roles_of(person) and Role.ADMIN not in roles_of(person)
    assert "'demo-operator'" in out.getvalue()
    assert client.login(username="demo-viewer", password=password)
    assert client.get("/audit/").status_code == 200
