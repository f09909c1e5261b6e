"""The pretrained mode's models: the packaged one and every model folder opened (File > Open model
folder…, File > Local models…), each with its ``ModelSpec`` read once from config.json and the
weights' headers (milliseconds, in the GUI thread), and the mode-combo entries they make
(``ModelFolders``); the folder dialog and the Local models dialog's choice (``FolderBrowser``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from attndesk.errors import ConfigError
from attndesk.models import PACKAGED_NAME, ModelSpec, packaged_model_dir, read_spec
from attndesk.session.state import PACKAGED, ModeChoice, ModeId

from ..base import Assembly
from .local_models import LocalModelsDialog


def folder_mode(path: str | Path) -> ModeId:
    return ModeId(kind="pretrained", path=str(Path(path).expanduser().resolve()))


class ModelFolders:
    """The models the mode offers; ``listed()`` is called when a folder is added to them."""

    def __init__(self, listed: Callable[[], None]) -> None:
        self._specs: dict[ModeId, ModelSpec] = {}  # mode -> what config.json says (read once)
        self._folders: list[ModeId] = []  # opened folders, in the order they were opened
        self._listed = listed

    def choices(self) -> list[ModeChoice]:
        packaged = ModeChoice(
            PACKAGED, f"Pretrained: {PACKAGED_NAME}", "the real all-MiniLM-L6-v2 encoder (6 layers x 12 heads), offline"
        )
        return [packaged] + [ModeChoice(m, f"Pretrained: {self._label(m)}", self._tip(m)) for m in self._folders]

    def _label(self, mode: ModeId) -> str:
        """ "org/name" of a hub snapshot (not its hash), the folder's name otherwise."""
        spec = self._specs.get(mode)
        assert mode.path is not None, "a folder's mode"
        return Path(mode.path).name if spec is None else spec.name

    def _tip(self, mode: ModeId) -> str:
        spec = self._specs.get(mode)
        assert mode.path is not None, "a folder's mode"
        return mode.path if spec is None else f"{spec.family_name} {spec.family} · {mode.path}"

    def spec_for(self, mode: ModeId) -> ModelSpec:
        """The mode's ModelSpec (config.json, read once); ConfigError says what is wrong."""
        if mode not in self._specs:
            self._specs[mode] = read_spec(packaged_model_dir() if mode.path is None else mode.path)
        return self._specs[mode]

    def add_folder(self, path: str | Path) -> ModeId:
        """Check a model folder (config.json and the files' presence) and list it as a mode; returns
        the mode. Raises ConfigError (nothing changes)."""
        folder = Path(path).expanduser()
        spec = read_spec(folder)
        try:
            if folder.resolve() == packaged_model_dir().resolve():
                return PACKAGED
        except ConfigError:
            pass
        mode = folder_mode(folder)
        self._specs[mode] = spec
        if mode not in self._folders:
            self._folders.append(mode)
            self._listed()
        return mode

    def admit(self, mode: ModeId) -> ModeId:
        """A session's mode: its folder is checked again (and listed), the packaged model must exist."""
        if mode.path is not None:
            return self.add_folder(mode.path)
        self.spec_for(mode)
        return mode


class FolderBrowser:
    """File > Open model folder… and the Local models dialog's choice: a folder is checked and
    listed in ``folders``, then the window switches to it; a bad one is one status line. ``ui()``
    is the window's assembly, ``parent()`` the dialogs' parent."""

    def __init__(self, folders: ModelFolders, ui: Callable[[], Assembly], parent: Callable[[], QWidget | None]) -> None:
        self._folders, self._ui, self._parent = folders, ui, parent
        self._local: LocalModelsDialog | None = None

    def open_folder(self, path: str | Path) -> bool:
        """On success switch to the folder's model; on failure one status line."""
        ui = self._ui()
        try:
            mode = self._folders.add_folder(path)
        except ConfigError as exc:
            ui.status.fail(f"not a usable model folder: {exc}")
            return False
        ui.state.mode = mode
        ui.status.say(f"model folder {Path(path).name}: loading in the background…")
        return True

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(
            self._parent(),
            "Open a model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer)",
        )
        if path:
            self.open_folder(path)

    def local_models_dialog(self) -> LocalModelsDialog:
        """The Local models dialog, shown busy until its list comes (``set_models``)."""
        if self._local is None:
            self._local = LocalModelsDialog(self._parent())
            self._local.modelChosen.connect(self._open_local)
        self._local.set_busy()
        self._local.show()
        self._local.raise_()
        return self._local

    def _open_local(self, path: str) -> None:
        local = self._local
        assert local is not None, "the dialog asked"
        if self.open_folder(path):
            local.accept()
        else:
            local.show_error(self._ui().status.message)
