"""What to do with one control, chosen by a random generator: ``Hands.operate(control, rng)``.

Each kind of control gets the operations a user has for it (a combo box: its popup, the arrow
keys, the wheel; a spin box: typing a value, the arrows, page keys, garbage text) and values drawn
mostly from the ordinary range with the extremes now and then. Returns a one-line description.
"""

from __future__ import annotations

import math
import random
import re

from PySide6.QtCore import QModelIndex, QPoint, Qt
from PySide6.QtWidgets import QAbstractItemView, QComboBox, QDoubleSpinBox, QLineEdit, QListView, QSpinBox, QTabBar

from . import gestures as g
from .controls import Control
from .sandbox import Sandbox, choose, words

K = Qt.Key
# text typed or pasted into editors: mostly ordinary, sometimes empty, odd or long
TEXTS: list[tuple[str, float, str]] = [
    ("sentence", 4.0, "The cat sat on the mat."),
    ("words-12", 3.0, words(12, 21)),
    ("words-40", 2.0, words(40, 22)),
    ("empty", 1.0, ""),
    ("blank", 0.5, "   \n\t "),
    ("unicode", 1.0, "日本語のテキスト 😀 مرحبا بالعالم e\u0301 ǅ"),
    ("specials", 1.0, "[PAD] [UNK] [CLS] the [SEP] [MASK] [PAD]"),
    ("one-long-word", 0.5, "a" * 500),
    ("markup", 0.5, '<b>bold</b> & "quotes" \\ back `tick` %s {0}'),
    ("words-300", 0.7, words(300, 23)),
    ("words-1500", 0.4, words(1500, 24)),
    ("words-6000", 0.15, words(6000, 25)),
]
TYPED = ["cat", "the mat", " sat", "é", "😀", "123", "[PAD]", "\n", "attention is all", "x" * 30]
SHORT_LINES = ["", "x", "0", "-1", "1e9", "nan", "head 3", "日本", "a" * 200, "../", "  "]


def pick_text(rng: random.Random) -> tuple[str, str]:
    label, _w, text = rng.choices(TEXTS, weights=[w for _, w, _ in TEXTS])[0]
    return label, text


def _typical(lo: float, hi: float, choices) -> list[float]:
    return [v for v in choices if lo <= v <= hi]


class Hands:
    """Operates controls. ``sandbox`` answers path fields (an export file name, never a home path)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def operate(self, control: Control, rng: random.Random) -> str:
        return getattr(self, "_" + control.kind)(control.widget, rng)

    # -- buttons, tabs ----------------------------------------------------------------------------
    def _button(self, w, rng) -> str:
        if rng.random() < 0.05:
            g.double_click(w, g.center(w))
            return f"double-click {w.text()!r}"
        g.click(w)
        return f"click {w.text()!r}"

    def _check(self, w, rng) -> str:
        g.click(w)
        return f"toggle {w.text()!r} -> {w.isChecked()}"

    def _tabs(self, bar: QTabBar, rng) -> str:
        tabs = [i for i in range(bar.count()) if bar.isTabEnabled(i) and bar.isTabVisible(i)]
        if not tabs:
            return "no enabled tab"
        others = [i for i in tabs if i != bar.currentIndex()] or tabs
        i = rng.choice(others)
        rect = bar.tabRect(i)
        if bar.rect().contains(rect.center()):
            g.click(bar, rect.center())
        else:
            bar.setCurrentIndex(i)  # scrolled out of sight: as the scroll arrows would
        return f"tab {bar.tabText(i)!r}"

    # -- choices --------------------------------------------------------------------------------
    def _combo(self, w: QComboBox, rng) -> str:
        model = w.model()
        enabled = [
            i for i in range(w.count()) if model.flags(model.index(i, w.modelColumn())) & Qt.ItemFlag.ItemIsEnabled
        ]
        op = rng.choices(["popup", "key", "wheel", "type"], weights=[6, 2, 1, 1 if w.isEditable() else 0])[0]
        if op == "popup" and enabled:
            i = rng.choice(enabled)
            w.showPopup()
            w.view().setCurrentIndex(model.index(i, w.modelColumn()))
            g.key(w.view(), K.Key_Return)
            return f"choose {w.itemText(i)!r} (#{i})"
        if op == "type":
            text = rng.choice(SHORT_LINES)
            g.paste(w.lineEdit(), text)
            g.key(w.lineEdit(), K.Key_Return)
            return f"type {text!r}"
        if op == "wheel":
            g.wheel(w, g.center(w), rng.choice([-120, 120]))
        else:
            w.setFocus()
            g.key(w, rng.choice([K.Key_Down, K.Key_Up, K.Key_Home, K.Key_End]))
        return f"{op} -> {w.currentText()!r}"

    def _spin(self, w, rng) -> str:
        op = rng.choices(["value", "step", "page", "garbage", "wheel"], weights=[6, 2, 1, 1, 1])[0]
        # keys go to the spin box, which hands editing keys to its line edit (as from a keyboard)
        if op == "value" and isinstance(w, (QSpinBox, QDoubleSpinBox)):
            value = self._spin_value(w, rng)
            g.paste(w, str(value))
            g.key(w, rng.choice([K.Key_Return, K.Key_Tab]))
            return f"set {value} -> {w.text()!r}"
        if op == "garbage":
            text = rng.choice(SHORT_LINES)
            g.paste(w, text)
            g.key(w, K.Key_Return)
            return f"type {text!r} -> {w.text()!r}"
        if op == "wheel":
            g.wheel(w, g.center(w), rng.choice([-240, -120, 120, 240]))
        else:
            keys = [K.Key_Up, K.Key_Down] if op == "step" else [K.Key_PageUp, K.Key_PageDown]
            w.setFocus()
            k = rng.choice(keys)
            for _ in range(rng.randint(1, 4)):
                g.key(w, k)
        return f"{op} -> {w.text()!r}"

    @staticmethod
    def _spin_value(w, rng):
        lo, hi = w.minimum(), w.maximum()
        r = rng.random()
        if isinstance(w, QDoubleSpinBox):
            pool = _typical(lo, hi, (0.0, 0.05, 0.1, 0.25, 0.5, 0.9, 1.0, 2.0))
            return round(rng.choice(pool) if pool and r < 0.7 else rng.uniform(lo, hi), w.decimals())
        pool = _typical(lo, hi, (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512))
        if pool and r < 0.6:
            return rng.choice(pool)
        if r < 0.75:
            return rng.choice([lo, hi])
        top = max(1, hi - lo)  # log-uniform: mostly moderate, now and then big
        return int(lo + min(top, math.exp(rng.uniform(0, math.log(top + 1))) - 1))

    def _slider(self, w, rng) -> str:
        op = rng.choice(["page", "end", "wheel"])
        if op == "wheel":
            g.wheel(w, g.center(w), rng.choice([-360, -120, 120, 360]))
        else:
            w.setFocus()
            keys = [K.Key_PageUp, K.Key_PageDown] if op == "page" else [K.Key_Home, K.Key_End]
            g.key(w, rng.choice(keys))
        return f"{op} -> {w.value()}"

    # -- text -------------------------------------------------------------------------------------
    def _line(self, w: QLineEdit, rng) -> str:
        if w.isReadOnly():
            g.key(w, K.Key_A, g.CTRL)
            g.key(w, K.Key_C, g.CTRL)
            return "select and copy"
        current = w.text()
        if "/" in current or "\\" in current:  # a file name: answer from the pool, never a free path
            ext = re.search(r"\.(\w+)$", current)
            answer = choose(rng, self.sandbox.save_choices("", f"*.{ext.group(1) if ext else 'txt'}"))
            g.paste(w, answer.path)
            return f"path {answer.label} ({self.sandbox.relative(answer.path)})"
        text = rng.choice(SHORT_LINES + TYPED)
        g.paste(w, text)
        if rng.random() < 0.5:
            g.key(w, K.Key_Return)
        return f"type {text[:40]!r}"

    def _text(self, w, rng) -> str:
        if w.isReadOnly():
            g.wheel(g.surface(w), g.center(g.surface(w)), rng.choice([-240, 240]))
            return "scroll"
        op = rng.choices(["type", "paste", "clear", "undo", "backspace"], weights=[4, 5, 1, 1, 1])[0]
        if op == "type":
            text = rng.choice(TYPED)
            w.moveCursor(w.textCursor().MoveOperation.End)
            g.type_text(w, text)
            return f"type {text[:30]!r}"
        if op == "paste":
            label, text = pick_text(rng)
            g.paste(w, text, replace=rng.random() < 0.8)
            return f"paste {label} ({len(text)} chars)"
        w.setFocus()
        if op == "clear":
            g.key(w, K.Key_A, g.CTRL)
            g.key(w, K.Key_Delete)
        elif op == "undo":
            g.key(w, K.Key_Z, g.CTRL)
        else:
            for _ in range(rng.randint(1, 6)):
                g.key(w, K.Key_Backspace)
        return op

    # -- views ------------------------------------------------------------------------------------
    def _table(self, w: QAbstractItemView, rng) -> str:
        model = w.model()
        root = QModelIndex()  # a list model (QListWidget's) takes its parent explicitly in PySide
        if model is None:
            rows, cols = 0, 0
        else:  # a list view's model has one column (QListWidget's hides columnCount from Python)
            rows, cols = model.rowCount(root), 1 if isinstance(w, QListView) else model.columnCount(root)
        op = rng.choices(["click", "double", "ctrl-click", "header", "key", "wheel"], weights=[5, 2, 1, 1, 2, 1])[0]
        vp = w.viewport()
        if op in ("click", "double", "ctrl-click") and rows and cols:
            index = model.index(rng.randrange(rows), rng.randrange(cols))
            w.scrollTo(index)
            point = w.visualRect(index).center()
            if op == "double":
                g.double_click(vp, point)
            else:
                g.click(vp, point, modifiers=g.CTRL if op == "ctrl-click" else g.NONE)
            return f"{op} cell ({index.row()}, {index.column()})"
        header = getattr(w, "horizontalHeader", lambda: None)()
        if op == "header" and header is not None and header.isVisible() and cols:
            section = rng.randrange(cols)
            g.click(header.viewport(), QPoint(header.sectionViewportPosition(section) + 3, header.height() // 2))
            return f"header {section}"
        if op == "wheel":
            g.wheel(vp, g.center(vp), rng.choice([-360, 120, 360]))
            return "wheel"
        w.setFocus()
        k = rng.choice([K.Key_Down, K.Key_Up, K.Key_Home, K.Key_End, K.Key_Return, K.Key_Space, K.Key_PageDown])
        g.key(w, k)
        return f"key {k.name}"

    def _graphics(self, w, rng) -> str:
        """Heatmaps and plots: hover, clicks, double clicks, the wheel and drags at random points."""
        vp = w.viewport()
        ops = ["hover", "click", "ctrl-click", "double", "wheel", "drag", "drag-right", "drag-middle", "right-click"]
        op = rng.choices(ops, weights=[4, 4, 1, 2, 3, 2, 1, 1, 1])[0]
        p = g.random_point(rng, vp)
        if op == "hover":
            g.hover(vp, [g.random_point(rng, vp) for _ in range(rng.randint(2, 6))])
        elif op in ("click", "ctrl-click", "right-click"):
            button = g.RIGHT if op == "right-click" else g.LEFT
            g.click(vp, p, button, g.CTRL if op == "ctrl-click" else g.NONE)
        elif op == "double":
            g.double_click(vp, p)
        elif op == "wheel":
            g.wheel(vp, p, rng.choice([-360, -120, 120, 360]))
        else:
            button = {"drag": g.LEFT, "drag-right": g.RIGHT, "drag-middle": g.MIDDLE}[op]
            g.drag(vp, p, g.random_point(rng, vp), button)
        return f"{op} at ({p.x()}, {p.y()}) of {vp.width()}x{vp.height()}"

    def _splitter(self, w, rng) -> str:
        delta = rng.choice([-200, -60, -15, 15, 60, 200])
        start = g.center(w)
        horizontal = w.orientation() == Qt.Orientation.Horizontal
        end = QPoint(start.x() + (delta if horizontal else 0), start.y() + (0 if horizontal else delta))
        g.drag(w, start, end)
        return f"drag handle by {delta}"
