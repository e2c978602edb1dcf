"""Help ▸ About Hearth: the version, where the data lives, and the licences of what Hearth
bundles (the starter model, the icon font, the libraries), read from the installed packages
where they say."""

from __future__ import annotations

import html
from importlib import metadata
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

#: the libraries a Hearth install carries (distribution names), in the order shown
LIBRARIES = (
    "onnxruntime", "onnx", "PySide6-Essentials", "tokenizers", "numpy", "jinja2",
    "huggingface-hub", "gguf", "markdown-it-py", "pygments", "httpx2", "starlette",
    "uvicorn", "qtawesome", "keyring", "psutil", "platformdirs", "filelock",
)
#: what Hearth ships besides code: (what, licence)
BUNDLED = (
    ("SmolLM2 135M Instruct, the starter model (Hugging Face TB)", "Apache-2.0"),
    ("Material Design Icons 6.9.96 (Pictogrammers), through qtawesome", "Apache-2.0"),
)


def package_licence(name: str) -> tuple[str, str] | None:
    """(version, licence) of an installed distribution; None when it is not installed."""
    try:
        meta = metadata.metadata(name)
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    licence = meta.get("License-Expression") or ""
    if not licence:
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or ()
                       if c.startswith("License ::")]
        first_line = (meta.get("License") or "").strip().split("\n", 1)[0]
        licence = ", ".join(classifiers) or first_line[:60]
    return version, licence or "see the package"


def about_html(version: str, data_folder: Path, hearth_licence: str = "Apache-2.0") -> str:
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(found[0])}</td>"
        f"<td>{html.escape(found[1])}</td></tr>"
        for name in LIBRARIES if (found := package_licence(name)) is not None
    )
    bundled = "".join(f"<li>{html.escape(what)} — {html.escape(lic)}</li>"
                      for what, lic in BUNDLED)
    folder = html.escape(str(data_folder))
    url = QUrl.fromLocalFile(str(data_folder)).toString()
    return (
        f"<h2>Hearth {html.escape(version)}</h2>"
        "<p>Private, offline chat with language models that run on this computer with "
        "ONNX Runtime. Your chats and models stay on this disk.</p>"
        f"<p><b>Licence:</b> {html.escape(hearth_licence)}</p>"
        f"<p><b>Data folder</b> (chats, settings, models): <a href=\"{url}\">{folder}</a></p>"
        f"<p><b>Bundled</b></p><ul>{bundled}</ul>"
        "<p><b>Libraries</b></p>"
        "<table cellspacing='0' cellpadding='3'><tr><th align='left'>Library</th>"
        f"<th align='left'>Version</th><th align='left'>Licence</th></tr>{rows}</table>"
        "<p>Models you download keep their own licences, shown in the model manager.</p>"
    )


class AboutDialog(QDialog):
    def __init__(self, version: str, data_folder: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Hearth")
        self.setAccessibleName("About Hearth")
        self.text = QTextBrowser(self)
        self.text.setOpenLinks(False)
        self.text.anchorClicked.connect(QDesktopServices.openUrl)
        self.text.setHtml(about_html(version, data_folder))
        self.text.setAccessibleName("About Hearth")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
        self.resize(560, 520)
