from app.units import format_bytes, format_parameters


def test_bytes_are_shown_in_decimal_units():
    assert format_bytes(None) == "?"
    assert format_bytes(999) == "999 bytes"
    assert format_bytes(1_000) == "1.0 KB"
    assert format_bytes(1_234_567) == "1.2 MB"
    assert format_bytes(161_000_000) == "161.0 MB"
    assert format_bytes(4_500_000_000) == "4.5 GB"
    assert format_bytes(3e15) == "3000.0 TB"


def test_parameter_counts_read_like_model_cards():
    assert format_parameters(8_030_261_248) == "8B parameters"
    assert format_parameters(1_543_714_304) == "1.5B parameters"
    assert format_parameters(134_515_008) == "135M parameters"
    assert format_parameters(1_000) == "1K parameters"
    assert format_parameters(999) == "999 parameters"
