"""The heatmap panel's derived sources: what the display options (the first key hidden, ALiBi's
bias) ask to draw instead of the run's own source, built here when small and in a pool thread
when large, and held in the window's memory ledger (a copy of the run's weights, protected while
drawn). When the ledger lets the copy go, the panel draws the run's own source again."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from attndesk.session.ledger import Holding, MemoryLedger, arrays_of

from ...jobs.background import Background
from ...jobs.channels import DERIVED
from ...sources.heatmap_source import ALIBI_BIAS, WEIGHTS, HeatmapSource
from ...sources.long_source import source_for_map

# Deriving a source (hiding the first key) above this many cells runs in a pool thread.
SYNC_CELLS = 1_000_000
SOURCE_DEPTH = 3  # source -> its arrays (and a pyramid's levels)


class DerivedSources:
    """Derives and holds the source the options ask for. ``show(source)`` draws one, ``say(line)``
    puts a line in the panel's note, ``let_go(why)`` is called when the ledger releases the copy;
    ``ledger()`` and ``budget()`` answer the window's ledger and memory budget."""

    def __init__(
        self,
        owner: QObject,
        show: Callable[[HeatmapSource], None],
        say: Callable[[str], None],
        let_go: Callable[[str], None],
        ledger: Callable[[], MemoryLedger],
        budget: Callable[[], int | None],
    ) -> None:
        self._show, self._say, self._let_go = show, say, let_go
        self._ledger, self._budget = ledger, budget
        self.hide_first = self.bias = False
        self._held: Holding | None = None
        self._derivation = Background(owner, DERIVED)  # a derived source built off the GUI thread, newest only

    def wanted(self, source: HeatmapSource) -> tuple[bool, bool]:
        """(hide the first key, show the ALiBi bias) as the options ask and the map allows."""
        base = source.base_map
        bias = self.bias and base.alibi_slopes is not None
        hide = self.hide_first and not bias and base.pyramid is None and base.shape[1] > 1
        return hide, bias

    def is_wanted(self, source: HeatmapSource) -> bool:
        """Whether ``source`` is what the options ask for (nothing to derive)."""
        return self.wanted(source) == (source.key_offset > 0, source.value_name == "bias")

    def forget(self) -> None:
        """Drop a derivation still running for an older source."""
        self._derivation.forget()

    def derive(self, source: HeatmapSource, drawn: HeatmapSource | None) -> None:
        """Build the source the options ask for from ``source``'s map: here when small, else in a
        pool thread (the picture ``drawn`` stays until it is ready; ``source`` when none is)."""
        hide, bias = self.wanted(source)
        base = source.base_map
        show = ALIBI_BIAS if bias else WEIGHTS
        budget = self._budget()
        build = lambda: source_for_map(base, hide_first_key=hide, show=show, budget=budget)  # noqa: E731
        h, (lq, lk) = base.num_heads, base.shape
        if bias or h * lq * lk <= SYNC_CELLS:
            try:
                self._show(build())
            except ValueError as exc:
                self._show(source)
                self._say(f"{exc}")
            return
        if drawn is None:
            self._show(source)
        self._say("hiding the first token (renormalising the rows)…")
        # ValueError, MemoryError: reported in the note; the base source stays
        self._derivation.start(
            build, done=self._show, failed=lambda exc: self._say(str(exc)), expected=(ValueError, MemoryError)
        )

    def hold(self, source: HeatmapSource | None, base: HeatmapSource | None) -> None:
        """Let go of the copy held, then hold ``source`` when it is derived (not ``base`` itself)."""
        held, self._held = self._held, None
        if held is not None:
            held.release()
        if source is None or source is base or base is None:
            return
        cell: list[Holding] = []

        def release(why: str) -> None:
            if cell and cell[0] is self._held:
                self._held = None
                self._let_go(why)

        arrays = arrays_of(source, SOURCE_DEPTH)
        cell.append(
            self._ledger().hold("heatmaps", "the heatmaps' derived copy", arrays, release, protected=True, strict=False)
        )
        self._held = cell[0]
