"""Colours: every text colour reaches WCAG AA (4.5:1) on its background, in both themes."""

from __future__ import annotations

import pytest

from app.ui.theme import DARK, LIGHT, TEXT_PAIRS, contrast_ratio


def test_contrast_ratio_matches_wcag_reference_values():
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast_ratio("#ffffff", "#ffffff") == pytest.approx(1.0)
    assert contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)


@pytest.mark.parametrize("colors", [LIGHT, DARK], ids=["light", "dark"])
def test_every_text_pair_reaches_4_5_to_1(colors):
    low = {
        (fg, bg): round(contrast_ratio(getattr(colors, fg), getattr(colors, bg)), 2)
        for fg, bg in TEXT_PAIRS
        if contrast_ratio(getattr(colors, fg), getattr(colors, bg)) < 4.5
    }
    assert low == {}
    assert len(TEXT_PAIRS) >= 12
