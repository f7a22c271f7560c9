"""Names a person types (hosts, storage locations, teams) are printable single lines: one rule, ckptfleet.rules."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["", "  ", " gpu-a01", "gpu\x00a01", "gpu\na01", "x" * 254])
def test_a_host_or_location_name_that_is_not_a_printable_line_is_refused_and_nothing_changes(bad):
    from audit.actor import Actor
    from ckptfleet.errors import DomainError
    from fleet.models import Host, StorageLocation
    from fleet.services import host_register, location_add

    with pytest.raises(DomainError, match="name"):
        host_register(name=bad, actor=Actor.command())
    with pytest.raises(DomainError, match="name"):
        location_add(
            host=None, name=bad, kind="bucket", tier="object_standard", root_path="s3://b/", actor=Actor.command()
        )
    assert not Host.objects.exists() and not StorageLocation.objects.exists()
