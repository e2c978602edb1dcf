from app.units import format_bytes


def test_bytes_are_shown_in_decimal_units():
    assert format_bytes(None) == "?"
    assert format_bytes(999) == "999 bytes"
    assert format_bytes(1_000) == "1.0 KB"
    assert format_bytes(1_234_567) == "1.2 MB"
    assert format_bytes(161_000_000) == "161.0 MB"
    assert format_bytes(4_500_000_000) == "4.5 GB"
    assert format_bytes(3e15) == "3000.0 TB"
