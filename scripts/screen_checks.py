"""The picture review's checks, on plain records of what a tab shows (no Qt here).

``scripts/screens.py`` (``make screens``) reads each tab of the real window into ``Widget``,
``Axis`` and ``Status`` records and passes them here; the perf-tier test does the same. Each check
returns ``Problem``s that name the tab, the widget (objectName or class) and what is wrong:

- ``clipped``: a visible widget reaching outside its parent's visible area, unless it lies inside
  a scroll area (where being partly out of view is the point);
- ``missing_tokens``: where a tab lists the input's tokens (most of them are named by some text on
  screen), every one of them must be named;
- ``si_prefixed``: an axis without a unit whose numbers pyqtgraph scaled by an SI prefix
  ("layer (x0.001)": a count read as thousandths);
- ``stale_status``: a status-bar message that an action on another tab wrote, still shown;
- ``hidden_tabs``: the tab bar's scroll arrows on screen (some tab titles are out of sight);
- ``sideways``: a tab's page scrolling sideways (its form wider than the window gives it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# marks a tokenizer puts on a token's text: byte-level BPE's leading space, SentencePiece's, WordPiece's
# continuation, and the visible marks a view may draw for them
TOKEN_MARKS = ("Ġ", "▁", "␣", "##", "Ċ", "·")
LISTS_TOKENS = 0.6  # a tab names at least this share of the input's distinct tokens: it lists them
TOLERANCE = 1.0  # px: rounding of fractional layouts


@dataclass(frozen=True)
class Box:
    """A rectangle in window coordinates."""

    x: float
    y: float
    w: float
    h: float

    @property
    def empty(self) -> bool:
        return self.w <= 0 or self.h <= 0

    def intersect(self, other: Box) -> Box:
        x, y = max(self.x, other.x), max(self.y, other.y)
        right, bottom = min(self.x + self.w, other.x + other.w), min(self.y + self.h, other.y + other.h)
        return Box(x, y, max(0.0, right - x), max(0.0, bottom - y))

    def contains(self, other: Box, tol: float = TOLERANCE) -> bool:
        return (
            other.x >= self.x - tol
            and other.y >= self.y - tol
            and other.x + other.w <= self.x + self.w + tol
            and other.y + other.h <= self.y + self.h + tol
        )

    def __str__(self) -> str:
        return f"{self.w:g}x{self.h:g}+{self.x:g}+{self.y:g}"


@dataclass(frozen=True)
class Widget:
    """One visible widget: its name, its rectangle, its parent's index in the list (-1: the window),
    whether a scroll area holds it, and the texts it shows (label, button, table cells, axis ticks)."""

    name: str
    box: Box
    parent: int
    scrolled: bool = False
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Axis:
    """A plot axis on screen: its label as drawn, its unit, and the SI scale pyqtgraph applied."""

    name: str
    label: str
    units: str
    si_scale: float


@dataclass(frozen=True)
class Status:
    """The status-bar message on screen and the tab whose action wrote it ("" for the window's own)."""

    message: str
    written_by: str = ""


@dataclass(frozen=True)
class Problem:
    tab: str
    widget: str
    what: str

    def __str__(self) -> str:
        return f"{self.tab}: {self.widget}: {self.what}"


def visible_boxes(widgets: Sequence[Widget]) -> list[Box]:
    """Each widget's visible area: its box cut by every ancestor's (parents come before children)."""
    out: list[Box] = []
    for w in widgets:
        out.append(w.box if w.parent < 0 else w.box.intersect(out[w.parent]))
    return out


def clipped(tab: str, widgets: Sequence[Widget]) -> list[Problem]:
    """Widgets cut by their parent's visible area, outside scroll areas; only the outermost of a
    clipped family is named (its children are cut with it)."""
    seen = visible_boxes(widgets)
    cut: set[int] = set()
    problems = []
    for i, w in enumerate(widgets):
        if w.parent < 0 or w.scrolled or w.parent in cut:
            if w.parent in cut:
                cut.add(i)
            continue
        area = seen[w.parent]
        if not area.contains(w.box):
            cut.add(i)
            shown = w.box.intersect(area)
            lost = 1.0 - (shown.w * shown.h) / max(w.box.w * w.box.h, 1e-9)
            problems.append(
                Problem(
                    tab,
                    w.name,
                    f"{w.box} is cut by its parent {widgets[w.parent].name}'s visible {area} ({lost:.0%} hidden)",
                )
            )
    return problems


def token_text(token: str) -> str:
    """A token as compared with what is on screen: its tokenizer's marks and spaces left out."""
    for mark in TOKEN_MARKS:
        token = token.replace(mark, "")
    return token.strip().lower()


def missing_tokens(tab: str, tokens: Sequence[str], widgets: Sequence[Widget]) -> list[Problem]:
    """Where most of the input's distinct tokens are named on screen (a text equal to the token,
    in a widget with some of its area visible), all of them must be."""
    wanted = {token_text(t) for t in tokens} - {""}
    if not wanted:
        return []
    seen = visible_boxes(widgets)
    named: dict[str, str] = {}
    for w, area in zip(widgets, seen, strict=True):
        if area.empty:
            continue
        for text in w.texts:
            named.setdefault(token_text(text), w.name)
    found = wanted & named.keys()
    if len(found) < LISTS_TOKENS * len(wanted) or found == wanted:
        return []
    where = sorted({named[t] for t in found})
    missing = [t for t in dict.fromkeys(token_text(t) for t in tokens) if t in wanted - found]
    return [
        Problem(
            tab,
            ", ".join(where[:3]) + ("…" if len(where) > 3 else ""),
            f"lists {len(found)} of the input's {len(wanted)} distinct tokens; not on screen: {missing}",
        )
    ]


def si_prefixed(tab: str, axes: Iterable[Axis]) -> list[Problem]:
    """Axes without a unit that pyqtgraph scaled by an SI prefix."""
    return [
        Problem(tab, a.name, f"label {a.label!r} carries an SI prefix (scale {a.si_scale:g}) on a unitless axis")
        for a in axes
        if a.si_scale != 1.0 and not a.units
    ]


def stale_status(tab: str, status: Status) -> list[Problem]:
    """A message another tab's action wrote, still on the status bar."""
    if status.written_by and status.written_by != tab:
        return [Problem(tab, "statusLabel", f"shows {status.message!r}, written on the {status.written_by} tab")]
    return []


TAB_ARROWS = ("ScrollLeftButton", "ScrollRightButton")  # Qt's names for a QTabBar's scroll buttons
PAGE_SCROLL = "ViewScroll"  # the window's scroll area around a tab's large form: <view>Scroll
H_SCROLLBAR = "qt_scrollarea_hcontainer"  # Qt's holder of a scroll area's horizontal bar


def hidden_tabs(tab: str, widgets: Sequence[Widget]) -> list[Problem]:
    """The tab bar shows scroll arrows: some titles are off screen until a person scrolls the bar."""
    for w in widgets:
        if w.name in TAB_ARROWS and w.parent >= 0:
            bar = widgets[w.parent].name
            return [Problem(tab, bar, "the tab bar scrolls: some tabs are hidden behind its arrows")]
    return []


def sideways(tab: str, widgets: Sequence[Widget]) -> list[Problem]:
    """A tab's page (the scroll area around a large form) shows a horizontal scroll bar."""
    return [
        Problem(tab, widgets[w.parent].name, f"the page scrolls sideways: {w.box} holds its horizontal scroll bar")
        for w in widgets
        if w.name == H_SCROLLBAR and w.parent >= 0 and widgets[w.parent].name.endswith(PAGE_SCROLL)
    ]


def review(
    tab: str,
    widgets: Sequence[Widget],
    axes: Iterable[Axis],
    status: Status,
    tokens: Sequence[str],
    page: Sequence[Widget] | None = None,
) -> list[Problem]:
    """Every check on one picture: ``widgets`` are the window's, ``page`` the tab's own (where its
    tokens are looked for; default ``widgets``)."""
    return [
        *clipped(tab, widgets),
        *missing_tokens(tab, tokens, widgets if page is None else page),
        *si_prefixed(tab, axes),
        *stale_status(tab, status),
        *hidden_tabs(tab, widgets),
        *sideways(tab, widgets),
    ]


__all__ = [
    "Axis",
    "Box",
    "Problem",
    "Status",
    "Widget",
    "clipped",
    "hidden_tabs",
    "missing_tokens",
    "review",
    "si_prefixed",
    "sideways",
    "stale_status",
    "token_text",
    "visible_boxes",
]
