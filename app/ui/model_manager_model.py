"""Table models behind the model-manager panel: catalog, Hub search results, installed models.

Each is a flat table of plain rows replaced on the UI thread (``set_rows``); a row's object
is available through ``RowRole`` and its key (model id or repo id) through ``KeyRole``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from app.models.catalog import CatalogEntry, FitReport, Variant
from app.models.installed import InstalledModel
from app.units import format_bytes

if TYPE_CHECKING:  # huggingface_hub: loaded when the Hub is first searched
    from app.models.hub import HubModel

RowRole = Qt.ItemDataRole.UserRole + 1
KeyRole = Qt.ItemDataRole.UserRole + 2
_Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Column:
    title: str
    text: Callable[[Any], str]
    tooltip: Callable[[Any], str] | None = None


class RowTableModel(QAbstractTableModel):
    """A read-only table of rows; subclasses give the columns and the key of a row."""

    columns: tuple[Column, ...] = ()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[Any] = []

    def key(self, row: Any) -> str:
        raise NotImplementedError

    def set_rows(self, rows: Sequence[Any]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def rows(self) -> list[Any]:
        return list(self._rows)

    def row_of(self, key: str) -> int:
        return next((i for i, r in enumerate(self._rows) if self.key(r) == key), -1)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        column = self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return column.text(row)
        if role == Qt.ItemDataRole.ToolTipRole and column.tooltip is not None:
            return column.tooltip(row) or None
        if role == RowRole:
            return row
        if role == KeyRole:
            return self.key(row)
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if (
            orientation == Qt.Orientation.Horizontal
            and role == Qt.ItemDataRole.DisplayRole
            and 0 <= section < len(self.columns)
        ):
            return self.columns[section].title
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable


# -- catalog ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogRow:
    """A catalog entry as the panel shows it: the variant chosen for this machine, the fit
    hint for it, and whether it is installed."""

    entry: CatalogEntry
    variant: Variant
    fit: FitReport
    installed: bool

    @property
    def status(self) -> str:
        if self.installed:
            return "Installed"
        return {"ok": "Fits this machine", "tight": "Tight fit", "no": "Too big"}[self.fit.level]

    def variants_text(self) -> str:
        return ", ".join(
            f"{v.name} ({v.provider}, {format_bytes(v.size_bytes)})" for v in self.entry.variants
        )


def _catalog_name(row: CatalogRow) -> str:
    """The entry's name, marked when it is installed ("✓ Qwen3 0.6B · installed")."""
    return f"✓ {row.entry.name} · installed" if row.installed else row.entry.name


def _catalog_tip(row: CatalogRow) -> str:
    installed = "Installed: pick it in the Model menu or on the Installed tab.\n"
    return (installed if row.installed else "") + row.entry.description


class CatalogModel(RowTableModel):
    columns = (
        Column("Model", _catalog_name, _catalog_tip),
        Column("Variant", lambda r: r.variant.name, CatalogRow.variants_text),
        Column("Size", lambda r: format_bytes(r.variant.size_bytes)),
        Column("License", lambda r: r.entry.license),
        Column("Fits", lambda r: r.status, lambda r: "; ".join(r.fit.reasons)),
    )

    def key(self, row: CatalogRow) -> str:
        return row.entry.id


# -- Hub search -------------------------------------------------------------------------


def _runs_here(model: HubModel) -> str:
    """"Yes", or why Hearth cannot run the repo here (the search's reason)."""
    if model.reason is None:
        return "Yes (gated: accept the licence first)" if model.gated else "Yes"
    return f"No: {model.reason}"


class HubResultsModel(RowTableModel):
    """Hub search results; the "Runs here" column says why a result cannot run."""

    columns = (
        Column("Repository", lambda m: m.id, lambda m: m.pipeline_tag or ""),
        Column("Size", lambda m: format_bytes(m.size_bytes)),
        Column("License", lambda m: m.license or "unknown"),
        Column("Downloads", lambda m: "" if m.downloads is None else f"{m.downloads:,}"),
        Column("Runs here", _runs_here, _runs_here),
    )

    def key(self, row: HubModel) -> str:
        return row.id


# -- installed --------------------------------------------------------------------------


def _source_text(model: InstalledModel) -> str:
    source = model.source
    kind = source.get("kind", "local")
    if kind == "hub":
        return f"{source.get('repo')} ({source.get('variant')})"
    if kind == "local":
        return f"linked: {source.get('path')}"
    return f"{kind}: {source.get('path')}"


class InstalledModelsModel(RowTableModel):
    """Installed models; ``loaded_path`` marks the one the engine has loaded."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.loaded_path: str | None = None
        self.columns = (
            Column("Model", self._name, lambda m: str(m.path)),
            Column("Size on disk", lambda m: format_bytes(m.size_on_disk)),
            Column("Source", _source_text),
        )

    def _name(self, model: InstalledModel) -> str:
        return f"{model.name} (in use)" if self.is_loaded(model) else model.name

    def is_loaded(self, model: InstalledModel) -> bool:
        return self.loaded_path is not None and str(model.path) == self.loaded_path

    def set_loaded_path(self, path: str | None) -> None:
        self.loaded_path = path
        if self._rows:
            self.dataChanged.emit(
                self.index(0, 0), self.index(len(self._rows) - 1, 0), [Qt.ItemDataRole.DisplayRole]
            )

    def key(self, row: InstalledModel) -> str:
        return row.id
