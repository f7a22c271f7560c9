"""Units for people: byte counts in binary units, always with the unit. Pages, the admin and commands share it."""

from __future__ import annotations

_IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_TIB = 4


def bytes_iec(value) -> str:
    """Bytes in binary units, the unit always shown: "0 B", "1.5 KiB", "12.3 GiB", "4.00 TiB".

    TiB and above keep two decimals: at fleet scale 0.01 TiB is still 10 GiB of somebody's budget.
    """
    if value is None or value == "":
        return "—"
    try:
        n = int(value)
    except (TypeError, ValueError):
        return str(value)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{n} B"
    size = float(n)
    unit = 0
    while size >= 1024 and unit < len(_IEC_UNITS) - 1:
        size /= 1024
        unit += 1
    decimals = 2 if unit >= _TIB else 1
    text = f"{size:.{decimals}f}"
    if float(text) >= 1024 and unit < len(_IEC_UNITS) - 1:
        # 1023.96 KiB rounds to "1024.0 KiB"; say "1.0 MiB" instead.
        unit += 1
        text = f"{size / 1024:.{2 if unit >= _TIB else 1}f}"
    return f"{sign}{text} {_IEC_UNITS[unit]}"
