"""``PretrainedControls`` (objectName ``pretrainedControls``), the pretrained mode's controls:
``layerSpin`` (its suffix marks a local or global layer), ``allLayersCheck``, ``hideSpecialCheck``,
an encoder-decoder's ``partCombo`` (encoder / decoder self-attention / cross-attention) and
``targetEdit`` (the target text, on its own ``targetRow``), the sink-aware ``logScaleCheck`` and
``hideFirstCheck``, ``clearAblationButton`` and the ``pretrainedSummary`` label (``describe_run``).
The widget only shows what it is given; it never runs the model.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox, QWidget

from attndesk.app.widgets.named import named

from .ablation import ablation_effect
from .painting import PARTS


def describe_run(result) -> str:
    """One status line for a pretrained run: model, tokens, what was altered, cosine, notices."""
    size = f"{result.length} tokens"
    if result.target_tokens is not None:
        size = f"{result.length} source + {len(result.target_tokens)} target tokens"
    heads = f"{result.num_heads} heads" + (
        f" ({result.kv_heads} K/V)" if result.kv_heads and result.kv_heads < result.num_heads else ""
    )
    parts = [f"{result.model_name}: {size}, {result.num_layers} layers x {heads}, {result.total_seconds * 1000:.0f} ms"]
    changes = []
    if not result.scaled:
        changes.append("unscaled")
    if result.causal:
        changes.append("causal mask")
    if result.ablate:
        changes.append(f"{len(result.ablate)} head{'s' if len(result.ablate) != 1 else ''} ablated")
    effect = ablation_effect(result)  # family-aware: embedding cosine, or next-token KL and top 5
    if changes and effect is not None:
        parts.append(f"altered ({', '.join(changes)}): {effect}")
    parts += list(result.notices)
    return " · ".join(parts)


class PretrainedControls(QWidget):
    """Layer selector, "all layers" (the grid), hide special tokens, an encoder-decoder's part and
    target text, the sink-aware colour options, clear ablations, summary. The widgets only say
    what the user did (signals); the owner writes it into the state and sets them back."""

    layerChanged = Signal(int)
    allLayersToggled = Signal(bool)
    hideSpecialToggled = Signal(bool)
    clearAblationRequested = Signal()
    partChanged = Signal(str)  # "self", "decoder" or "cross"
    targetEdited = Signal(str)
    logScaleToggled = Signal(bool)
    hideFirstToggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pretrainedControls")
        self._kinds: list[str] = []
        self._windows: list[int | None] = []
        self._build()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (
            self.part_combo,
            self.layer_spin,
            self.all_layers_check,
            self.hide_special_check,
            self.log_check,
            self.hide_first_check,
        ):
            row.addWidget(w)
        # clear_button is not in this row either: the owner puts it next to the grid, where heads are ablated
        self.layer_spin.valueChanged.connect(self._on_layer)
        self.all_layers_check.toggled.connect(self._on_all_layers)
        self.hide_special_check.toggled.connect(self.hideSpecialToggled)
        self.clear_button.clicked.connect(self.clearAblationRequested)
        self.part_combo.activated.connect(lambda i: self.partChanged.emit(self.part_combo.itemData(i)))
        self.target_edit.textEdited.connect(self.targetEdited)
        self.log_check.toggled.connect(self.logScaleToggled)
        self.hide_first_check.toggled.connect(self.hideFirstToggled)
        self.set_family("encoder")

    def _build(self) -> None:
        self.layer_spin = named(QSpinBox(), "layerSpin")
        self.layer_spin.setRange(0, 0)
        self.layer_spin.setPrefix("layer ")
        self.layer_spin.setToolTip("which layer's attention the heatmaps show (0 = first)")
        self.all_layers_check = named(QCheckBox("all layers"), "allLayersCheck")
        self.all_layers_check.setToolTip("show every layer x head as thumbnails; click one to open it")
        self.hide_special_check = named(QCheckBox("hide special tokens"), "hideSpecialCheck")
        self.hide_special_check.setToolTip(
            "leave special tokens ([CLS]/[SEP], <s>/</s>, ...) out of the heatmaps; rows are NOT re-normalised, "
            "so they sum to less than 1"
        )
        self.part_combo = named(QComboBox(), "partCombo")
        for part, label in PARTS:
            self.part_combo.addItem(label, part)
        self.part_combo.setToolTip(
            "an encoder-decoder has three attentions: the encoder's over the source, the "
            "decoder's over the target (causal), and cross-attention: target rows, source columns"
        )
        self.log_check = named(QCheckBox("log colours"), "logScaleCheck")
        self.log_check.setToolTip(
            "sink-aware: colour log10 of the weights, so the small weights stay visible next to "
            "the first token, which takes most of a decoder's rows"
        )
        self.hide_first_check = named(QCheckBox("hide first token (renormalised)"), "hideFirstCheck")
        self.hide_first_check.setToolTip(
            "leave out key 0 (a decoder's attention sink) and renormalise each row over the "
            "other keys: the weights shown are then NOT the model's (the badge says so)"
        )
        self.clear_button = named(QPushButton("clear ablations"), "clearAblationButton")
        self.clear_button.setToolTip("Ctrl+click a thumbnail in the grid to ablate a head; this restores all")
        self.clear_button.setEnabled(False)
        self.target_edit = named(QLineEdit(), "targetEdit")
        self.target_edit.setPlaceholderText(
            "the decoder's input, e.g. a translation of the source text (empty: the decoder's start token alone)"
        )
        self.target_edit.setToolTip(
            "encoder-decoders (T5, BART, Marian): the target text the decoder reads; its "
            "tokens are the rows of the decoder and cross-attention views"
        )
        self.target_edit.setClearButtonEnabled(True)
        # the target line and the summary are separate rows: the owner places them
        self.target_row = named(QWidget(), "targetRow")
        line = QHBoxLayout(self.target_row)
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(QLabel("Target text:"))
        line.addWidget(self.target_edit, 1)
        self.summary = named(QLabel(), "pretrainedSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def set_family(self, family: str) -> None:
        """Show the controls a family has: the part and target for encoder-decoders only."""
        seq2seq = family == "encoder-decoder"
        self.part_combo.setVisible(seq2seq)
        self.target_row.setVisible(seq2seq)

    def set_num_layers(self, n: int) -> None:
        self.layer_spin.setRange(0, max(0, int(n) - 1))

    def set_layer_kinds(self, kinds: list[str] | None, windows: list[int | None] | None) -> None:
        """Per layer "local"/"global" and window: the spin box names the shown layer's kind."""
        self._kinds, self._windows = list(kinds or []), list(windows or [])
        self._update_suffix()

    def kind_text(self, layer: int) -> str:
        if not any(k == "local" for k in self._kinds) or not 0 <= layer < len(self._kinds):
            return ""
        window = self._windows[layer] if layer < len(self._windows) else None
        return f"local, window {window}" if self._kinds[layer] == "local" and window else self._kinds[layer]

    def refresh_layer_label(self) -> None:
        """The spin box's kind suffix for the layer it shows (after a value set with signals blocked)."""
        self._update_suffix()

    def _update_suffix(self) -> None:
        kind = self.kind_text(self.layer_spin.value())
        self.layer_spin.setSuffix(f" ({kind})" if kind else "")

    def _on_layer(self, layer: int) -> None:
        self._update_suffix()
        self.layerChanged.emit(layer)

    def set_result(self, result) -> None:
        self.set_num_layers(result.num_layers)
        self.clear_button.setEnabled(bool(result.ablate))
        self.summary.setText(describe_run(result))

    def layer(self) -> int:
        return self.layer_spin.value()

    def all_layers(self) -> bool:
        return self.all_layers_check.isChecked()

    def hide_special(self) -> bool:
        return self.hide_special_check.isChecked()

    def _on_all_layers(self, on: bool) -> None:
        self.layer_spin.setEnabled(not on)
        self.allLayersToggled.emit(on)
