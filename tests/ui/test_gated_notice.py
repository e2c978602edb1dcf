"""The gated-model notice: shown for gated catalog entries with the licence link and a token
button whose signal the dialog's owner connects to the settings window."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt

from app.models.catalog import load_catalog
from app.ui.gated_notice import TOKEN_BUTTON_TEXT, GatedNotice, GatedRefusal


def gated_entry():
    """A catalog entry as a really gated one reads (the catalog's mirrors are not gated)."""
    entry = load_catalog().get("llama-3.2-1b-instruct")
    return replace(entry, repo="meta-llama/Llama-3.2-1B-Instruct", gated=True)


def test_notice_shows_the_licence_link_for_a_gated_entry_and_emits_the_token_request(qtbot):
    catalog = load_catalog()
    gated = gated_entry()
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
    notice.show_for(gated_entry())
    notice.resize(600, 60)
    image = notice.grab().toImage()
    assert image.width() == 600 and not image.isNull()


def test_a_refused_download_explains_the_licence_links_it_and_asks_for_a_token(qtbot):
    notice = GatedNotice()
    qtbot.addWidget(notice)
    notice.show_for(None)
    notice.show_refused(GatedRefusal("Llama 3.2 1B", "meta-llama/Llama-3.2-1B-Instruct", 403,
                                     "llama3.2", "https://www.llama.com/llama3_2/license/"))
    assert not notice.isHidden()
    text = notice.message.text()
    assert "HTTP 403" in text and "gated" in text
    assert 'href="https://www.llama.com/llama3_2/license/"' in text and "llama3.2" in text
    assert 'href="https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct"' in text
    assert "access token" in text and "Settings ▸ Models" in text
    with qtbot.waitSignal(notice.token_requested, timeout=1000):
        qtbot.mouseClick(notice.token_button, Qt.MouseButton.LeftButton)
