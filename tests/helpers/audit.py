"""The audit chain in the tests: change or remove events behind the product's back, as an intruder with SQL would."""

from __future__ import annotations

from django.db import connection

from tests.conftest import is_postgres


def tamper(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        if is_postgres():
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE catalog_auditevent DISABLE TRIGGER USER")
        cursor.execute(sql, params)
        if is_postgres():
            cursor.execute("ALTER TABLE catalog_auditevent ENABLE TRIGGER USER")
