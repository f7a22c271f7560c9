"""The API's JSON parser: DRF's, reading through ``ckptfleet.jsonsafe`` so that deep nesting or a NUL
character is a 400 "parse_error", never a RecursionError (500) or a PostgreSQL DataError (500)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from ckptfleet import jsonsafe


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read() if stream is not None else b""
        try:
            return jsonsafe.loads(raw.decode(encoding), refuse_nul=True)
        except (ValueError, UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
