"""The one small protocol every mode implements, and what the window hands a mode at assembly.

A mode is a way of computing attention (the toy model, a real model) or of working with it
(long documents). It supplies:

- ``choices()``: its entries in the Mode combo (``ModeChoice``: a typed ``ModeId`` and a label);
  a helper mode (long documents) offers none and never computes;
- ``request(state)``: the job for the current state, as a ``Request`` whose ``key`` says which
  inputs the run depends on (the controller runs only when the key changes); raises
  ``ConfigError`` (shown next to the controls) or ``InputProblem`` (shown in the status line);
- ``present_key(state)`` / ``present(shown, key)``: another view of the same run without a new
  run (e.g. another layer), built by a side job (thread-safe, from the key alone); the job itself
  returns the first ``Shown``, with its ``AttentionMap`` and heatmap source built in the worker;
- ``panel(state)``: how the parameters panel shows the config while the mode is on (fixed
  values of a pretrained architecture, which mask choices act);
- ``install(ui)``: its widgets and actions, handed to the window through ``Assembly``; after
  that it talks to the window only through the state, the compute controller, the status
  model and the menus.

Adding a mode (e.g. decoders): a ``ModeId.kind``, a module here implementing ``Mode``, and one
line in ``main_window.MODES``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from attndesk.session.results import Request, Shown
from attndesk.session.state import AppState, ModeChoice, ModeId, PanelView

if TYPE_CHECKING:  # annotations only
    from attndesk.session.status import StatusModel

    from ..jobs.compute import ComputeController
    from ..widgets.menus import MenuRegistry


class Assembly(Protocol):
    """What the window offers a mode at assembly (``install``)."""

    state: AppState
    compute: ComputeController
    status: StatusModel
    menus: MenuRegistry

    def add_toolbar_widget(self, widget: QWidget) -> None: ...
    def add_header_widget(self, widget: QWidget) -> None: ...
    def add_status_widget(self, widget: QWidget) -> None: ...
    def add_action(self, action: QAction) -> None: ...
    def drop_targets(self) -> list[tuple[QWidget, str]]: ...  # (widget, "text" or "keys")
    def refresh_choices(self) -> None: ...  # the mode's ``choices()`` changed (e.g. a model folder opened)
    def heatmaps(self) -> Any: ...  # the heatmap panel's public API (zoom pictures attach to its cells)
    def tab_widget(self, tab_id: str) -> QWidget: ...  # a tab's view (app/tabs/registry.py), for its public API


class Mode(Protocol):
    kind: str

    def choices(self) -> list[ModeChoice]: ...
    def request(self, state: AppState) -> Request: ...
    def present_key(self, state: AppState) -> Hashable: ...
    def present(self, shown: Shown, key: Hashable) -> Shown: ...
    def panel(self, state: AppState) -> PanelView: ...
    def admit(self, mode: ModeId) -> ModeId: ...
    def install(self, ui: Assembly) -> None: ...
    def shutdown(self) -> None: ...


class ModeBase:
    """Defaults for the optional parts of ``Mode`` (a mode overrides what it has)."""

    kind = ""
    _assembly: Assembly | None = None  # the window's parts, handed over by install()

    @property
    def _ui(self) -> Assembly:
        assert self._assembly is not None, "used before install()"
        return self._assembly

    def choices(self) -> list[ModeChoice]:
        return []

    def present_key(self, state: AppState) -> Hashable:
        return None

    def present(self, shown: Shown, key: Hashable) -> Shown:
        return shown

    def panel(self, state: AppState) -> PanelView:
        return PanelView()

    def admit(self, mode: ModeId) -> ModeId:
        """The mode as this window can use it (e.g. a session's model folder, checked again);
        ConfigError when it cannot be."""
        return mode

    def install(self, ui: Assembly) -> None:
        pass

    def shutdown(self) -> None:
        pass


__all__ = ["Assembly", "Mode", "ModeBase", "ModeChoice", "PanelView"]
