"""The chain is keyed: each event's hash is an HMAC-SHA256 under the audit key, named by its id; events from before
the key still verify, rotated keys verify from the keyring, and a forger without the key is found."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from audit.services import KEYED_PREFIX, UNKEYED, audit_verify, event_fields, event_hash
from ckptfleet.env import audit_key_id, env_keyring
from tests.helpers.audit import record, record_unkeyed, tamper


@pytest.fixture
def rotate(settings):
    """Make a new key current, keeping (or not) the old ones in the keyring, as CKPTFLEET_AUDIT_KEYRING_FILE would."""

    def to(new_key: str, *, keep_old: bool = True) -> str:
        keys = dict(settings.AUDIT_KEYS) if keep_old else {}
        settings.AUDIT_KEY_ID = audit_key_id(new_key)
        settings.AUDIT_KEYS = {**keys, settings.AUDIT_KEY_ID: new_key}
        return settings.AUDIT_KEY_ID

    return to


def test_a_new_event_is_an_hmac_under_the_current_key_named_by_its_id(db, settings):
    event = record(reason="pinned for the paper")
    assert event.alg == f"hmac-sha256:{settings.AUDIT_KEY_ID}"
    body = json.dumps({**event_fields(event), "alg": event.alg}, sort_keys=True, separators=(",", ":"), default=str)
    key = settings.AUDIT_KEYS[settings.AUDIT_KEY_ID].encode()
    assert event.hash == hmac.new(key, f"{event.prev_hash}\n{body}".encode(), hashlib.sha256).hexdigest()
    # The key id is a hash of the key, and nothing of the key itself is stored with the event.
    assert settings.AUDIT_KEYS[settings.AUDIT_KEY_ID] not in event.alg
    assert settings.AUDIT_KEY_ID == audit_key_id(settings.AUDIT_KEYS[settings.AUDIT_KEY_ID])


def test_events_from_before_the_key_still_verify_and_the_chain_continues_keyed(db, capsys):
    old = [record_unkeyed(f"legacy.{i}") for i in range(3)]
    new = [record(f"keyed.{i}") for i in range(2)]
    assert [e.alg for e in old] == [UNKEYED] * 3
    assert all(e.alg.startswith(KEYED_PREFIX) for e in new)
    assert new[0].prev_hash == old[-1].hash
    assert audit_verify() == (5, None, "")
    call_command("verify_audit")
    assert "5 events" in capsys.readouterr().out


def test_a_rotated_key_verifies_old_events_from_the_keyring_and_names_a_missing_one(db, rotate):
    first = record("before.rotation")
    old_id = first.alg.removeprefix(KEYED_PREFIX)
    new_id = rotate(secrets.token_urlsafe(40))
    second = record("after.rotation")
    assert second.alg == f"hmac-sha256:{new_id}" and new_id != old_id
    assert audit_verify() == (2, None, "")

    rotate(secrets.token_urlsafe(40), keep_old=False)  # the keyring lost both older keys
    checked, broken, why = audit_verify()
    assert (checked, broken.pk) == (0, first.pk)
    assert f"audit key {old_id!r}" in why and "keyring" in why


def test_a_forger_without_the_key_is_found_whatever_they_recompute(db):
    events = [record(f"a.{i}", reason="routine") for i in range(3)]
    target = events[1]
    # Recomputed as the unkeyed chain was: relabelled sha256 after keyed events.
    target.reason = "nothing to see"
    forged = event_hash(target.prev_hash, event_fields(target), UNKEYED)
    tamper(
        "UPDATE catalog_auditevent SET reason = %s, alg = %s, hash = %s WHERE id = %s",
        ["nothing to see", UNKEYED, forged, target.pk],
    )
    checked, broken, why = audit_verify()
    assert (checked, broken.pk) == (1, target.pk) and "without the key" in why

    # Recomputed with a key of their own under the real key id: the HMAC does not match.
    guessed = hmac.new(b"guessed" * 8, b"anything", hashlib.sha256).hexdigest()
    tamper("UPDATE catalog_auditevent SET alg = %s, hash = %s WHERE id = %s", [events[0].alg, guessed, target.pk])
    checked, broken, why = audit_verify()
    assert (checked, broken.pk) == (1, target.pk) and "does not match its hash" in why


def test_relabelling_the_whole_chain_as_unkeyed_is_refused_after_the_first_keyed_event(db):
    old = record_unkeyed()
    keyed = record("keyed")
    keyed_fields = event_fields(keyed)
    tamper(
        "UPDATE catalog_auditevent SET alg = %s, hash = %s WHERE id = %s",
        [UNKEYED, event_hash(old.hash, keyed_fields, UNKEYED), keyed.pk],
    )
    # Alone this passes the chain walk (nothing keyed is left): the head and the anchors catch it
    # (tests/audit/test_anchors.py); here the head still names the keyed hash.
    checked, broken, why = audit_verify()
    assert checked == 2 and broken is None and "chain head does not match" in why


def test_the_key_never_appears_in_what_the_verifier_says(db, settings, capsys):
    events = [record(f"a.{i}") for i in range(2)]
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[0].pk])
    with pytest.raises(CommandError) as failed:
        call_command("verify_audit")
    said = str(failed.value) + capsys.readouterr().err
    for key in settings.AUDIT_KEYS.values():
        assert key not in said


def test_the_keyring_file_holds_one_key_a_line_with_comments(tmp_path, monkeypatch):
    ring = tmp_path / "keyring"
    ring.write_text(f"# retired 2026-11\n{'a' * 40}\n\n  {'b' * 32}  \n")
    monkeypatch.setenv("CKPTFLEET_AUDIT_KEYRING_FILE", str(ring))
    assert env_keyring("CKPTFLEET_AUDIT_KEYRING_FILE") == ["a" * 40, "b" * 32]
    ring.write_text("short\n")
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"CKPTFLEET_AUDIT_KEYRING_FILE \(key 1\).*at least 32") as refused:
        env_keyring("CKPTFLEET_AUDIT_KEYRING_FILE")
    assert "short" not in str(refused.value)


def test_existing_rows_are_labelled_unkeyed_by_the_migration(db):
    """audit 0002 adds ``alg`` with "sha256" for the rows already there (tests/audit/test_models_moved.py migrates a
    real pre-key row); the column has no default for new rows, so an event can only be written by audit_record."""
    field = AuditEvent._meta.get_field("alg")
    assert not field.has_default()
