"""The default price book: public list prices per GiB-month, in force from 2000-01-01.

Sources and assumptions are in docs/pricing.md. Every price is editable by adding a newer point.
"""

from datetime import date
from decimal import Decimal

from django.db import migrations

SINCE = date(2000, 1, 1)
AWS_S3 = "AWS {cls} list price, us-east-1, first 50 TB (AWS's GB is 2^30 bytes: per GiB)"
DEFAULTS = [
    # tier, storage class ("" = any class of the tier), price per GiB-month in USD, source
    (
        "nvme",
        "",
        "0.08",
        "Google Cloud Local SSD list price, us-central1, on demand: NVMe attached to a server, rented. "
        "Price owned hosts by their drives (docs/pricing.md).",
    ),
    (
        "pfs",
        "",
        "0.145",
        "Amazon FSx for Lustre list price, us-east-1, persistent SSD, 125 MB/s/TiB (GB taken as GiB).",
    ),
    ("object_standard", "", "0.023", AWS_S3.format(cls="S3 Standard")),
    ("object_infrequent", "", "0.0125", AWS_S3.format(cls="S3 Standard-IA")),
    ("object_infrequent", "ONEZONE_IA", "0.01", AWS_S3.format(cls="S3 One Zone-IA")),
    ("archive_instant", "", "0.004", AWS_S3.format(cls="S3 Glacier Instant Retrieval")),
    ("archive", "", "0.0036", AWS_S3.format(cls="S3 Glacier Flexible Retrieval")),
    ("deep_archive", "", "0.00099", AWS_S3.format(cls="S3 Glacier Deep Archive")),
]


def add_defaults(apps, schema_editor):
    PricePoint = apps.get_model("fleet", "PricePoint")
    PricePoint.objects.bulk_create(
        PricePoint(
            kind="",
            tier=tier,
            storage_class=storage_class,
            price_per_gib_month=Decimal(price),
            entered_price=Decimal(price),
            basis="gib_month",
            currency="USD",
            effective_from=SINCE,
            source=source,
            created_by="default price book",
        )
        for tier, storage_class, price, source in DEFAULTS
    )


class Migration(migrations.Migration):
    dependencies = [("fleet", "0004_pricepoint")]

    operations = [migrations.RunPython(add_defaults, migrations.RunPython.noop)]
