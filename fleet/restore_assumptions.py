"""The restore-time assumptions of the recovery view, and the parser of their override in settings.

Kept apart from ``catalog.recovery`` so that settings can validate ``CKPTFLEET_RESTORE_ASSUMPTIONS``
at start without importing models.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from fleet.choices import Tier

# Per tier: sustained MiB/s of one restore and the delay before the first byte, in seconds, with the basis.
# Sources: AWS S3 documentation on archive retrieval (Glacier Flexible Retrieval standard retrievals finish in
# 3-5 hours, Deep Archive standard retrievals within 12 hours); the throughputs are deliberately modest
# single-client figures for a copy over a data-centre network, to be tuned per fleet.
DEFAULT_ASSUMPTIONS: dict[str, dict] = {
    Tier.NVME: {"mib_per_s": 1500, "delay_s": 0, "basis": "rsync from the GPU host's NVMe over a 25 Gb/s link"},
    Tier.PFS: {"mib_per_s": 1000, "delay_s": 0, "basis": "copy from the parallel file system"},
    Tier.OBJECT_STANDARD: {"mib_per_s": 400, "delay_s": 0, "basis": "parallel GETs (aws s3 cp) from the bucket"},
    Tier.OBJECT_INFREQUENT: {"mib_per_s": 400, "delay_s": 0, "basis": "parallel GETs; retrieval is billed per GiB"},
    Tier.ARCHIVE_INSTANT: {"mib_per_s": 400, "delay_s": 0, "basis": "millisecond retrieval; billed per GiB"},
    Tier.ARCHIVE: {
        "mib_per_s": 400,
        "delay_s": 5 * 3600,
        "basis": "a standard restore (restore-object) takes 3-5 hours before the first byte",
    },
    Tier.DEEP_ARCHIVE: {
        "mib_per_s": 400,
        "delay_s": 12 * 3600,
        "basis": "a standard restore takes up to 12 hours (bulk: up to 48) before the first byte",
    },
}


def parse_assumptions(raw: dict) -> dict[str, dict]:
    """Validate an override mapping {tier: {"mib_per_s": >0, "delay_s": >=0}}; raise ValueError naming the fault."""
    if not isinstance(raw, dict):
        raise ValueError("must be a JSON object of tier -> {mib_per_s, delay_s}")
    result = {}
    for tier, values in raw.items():
        if tier not in Tier.values:
            raise ValueError(f"unknown tier {tier!r}; known: {', '.join(Tier.values)}")
        if not isinstance(values, dict) or not set(values) <= {"mib_per_s", "delay_s", "basis"}:
            raise ValueError(f"{tier}: give mib_per_s and/or delay_s (and optionally basis)")
        for key in ("mib_per_s", "delay_s"):
            if key in values:
                try:
                    number = Decimal(str(values[key]))
                except InvalidOperation:
                    raise ValueError(f"{tier}.{key} must be a number, not {values[key]!r}") from None
                if number < 0 or (key == "mib_per_s" and number == 0):
                    raise ValueError(f"{tier}.{key} must be {'positive' if key == 'mib_per_s' else 'zero or more'}")
        result[tier] = values
    return result
