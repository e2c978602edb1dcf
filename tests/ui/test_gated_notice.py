"""The gated-model notice: shown for gated catalog entries with the licence link and a token
button whose signal the dialog's owner connects to the settings window."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.models.catalog import load_catalog
from app.ui.gated_notice import TOKEN_BUTTON_TEXT, GatedNotice


def test_notice_shows_the_licence_link_for_a_gated_entry_and_emits_the_token_request(qtbot):
    catalog = load_catalog()
    gated = next(e for e in catalog if e.gated)
    open_entry = next(e for e in catalog if not e.gated)
    notice = GatedNotice()
    qtbot.addWidget(notice)
    notice.show_for(gated)
    assert not notice.isHidden()
    text = notice.message.text()
    assert f'href="{gated.license_url}"' in text and gated.name in text
    assert f'href="https://huggingface.co/{gated.repo}"' in text
    assert "Settings ▸ Models" in text and notice.message.openExternalLinks()
    assert notice.token_button.text() == TOKEN_BUTTON_TEXT
    with qtbot.waitSignal(notice.token_requested, timeout=1000):
        qtbot.mouseClick(notice.token_button, Qt.MouseButton.LeftButton)

    notice.show_for(open_entry)
    assert notice.isHidden() and notice.entry is None and notice.message.text() == ""
    notice.show_for(None)
    assert notice.isHidden()


def test_notice_renders_as_real_pixels(qtbot):
    notice = GatedNotice()
    qtbot.addWidget(notice)
    notice.show_for(next(e for e in load_catalog() if e.gated))
    notice.resize(600, 60)
    image = notice.grab().toImage()
    assert image.width() == 600 and not image.isNull()
