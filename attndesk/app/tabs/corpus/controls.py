"""The Corpus tab's run controls: the texts (or images) and the store, the tokens each text keeps,
Start / Cancel, the progress, the model line and the error line."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import ERROR_STYLE

SOURCE_FILTER = "Texts (*.txt *.jsonl *.csv *.parquet);;All files (*)"
TEXT_PLACEHOLDER = "a .txt / .jsonl / .csv / .parquet file or a folder of .txt files"


def fit_width(*labels: QLabel) -> None:
    """Lines naming a store's path or a model: wrapped or cut at the page's width, never widening it."""
    for label in labels:
        label.setWordWrap(True)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)


class CorpusControls(QWidget):
    """The controls above the Corpus tab's results; their signals are the view's (it forwards them)."""

    startRequested = Signal()
    cancelRequested = Signal()
    sampleRequested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("corpusControls")
        grid = QGridLayout(self)  # widgets are owned by a widget as they are added
        grid.setContentsMargins(0, 0, 0, 0)
        self.sourceEdit = named(QLineEdit(), "corpusSource", placeholderText=TEXT_PLACEHOLDER)
        self.sourceLabel = named(QLabel("Texts"), "corpusSourceLabel")
        self.sourceFileButton = named(QPushButton("File…"), "corpusSourceFile")
        self.sourceFolderButton = named(QPushButton("Folder…"), "corpusSourceFolder")
        self.sampleButton = named(QPushButton("Sample"), "corpusSample")
        self.sampleButton.setToolTip("the sample corpus written for attndesk (324 sentences, a third with repeats)")
        self.storeEdit = named(QLineEdit(), "corpusStore")
        self.storeEdit.setToolTip("the store folder: a rerun with the same texts, model and tokens resumes it")
        self.storeButton = named(QPushButton("…"), "corpusStoreBrowse")
        self.tokensSpin = named(QSpinBox(), "corpusMaxTokens", minimum=2, maximum=4096, value=64, prefix="tokens ")
        self.tokensSpin.setToolTip("tokens each text keeps (special tokens included; at most the model's)")
        self.startButton = named(QPushButton("Start"), "corpusStart")
        self.cancelButton = named(QPushButton("Cancel"), "corpusCancel", enabled=False)
        self.progressBar = named(QProgressBar(), "corpusProgress", minimum=0, maximum=1000, textVisible=False)
        self.progressLabel = named(QLabel(""), "corpusProgressLabel")
        self.modelLabel = named(QLabel(""), "corpusModel", wordWrap=True)
        fit_width(self.progressLabel, self.modelLabel)
        self.errorLabel = named(QLabel(""), "corpusError", wordWrap=True)
        self.errorLabel.setStyleSheet(ERROR_STYLE)
        for col, widget in enumerate(
            (self.sourceLabel, self.sourceEdit, self.sourceFileButton, self.sourceFolderButton, self.sampleButton)
        ):
            grid.addWidget(widget, 0, col)
        for col, widget in enumerate((QLabel("Store"), self.storeEdit, self.storeButton, self.tokensSpin)):
            grid.addWidget(widget, 1, col)
        row = QHBoxLayout()
        grid.addLayout(row, 2, 0, 1, 5)
        for widget in (self.startButton, self.cancelButton, self.progressBar):
            row.addWidget(widget)
        row.addWidget(self.progressLabel, 1)
        grid.addWidget(self.modelLabel, 3, 0, 1, 5)
        grid.addWidget(self.errorLabel, 4, 0, 1, 5)
        grid.setColumnStretch(1, 1)
        self.sourceFileButton.clicked.connect(self._choose_file)
        self.sourceFolderButton.clicked.connect(self._choose_folder)
        self.storeButton.clicked.connect(self._choose_store)
        self.sampleButton.clicked.connect(self.sampleRequested)
        self.startButton.clicked.connect(self.startRequested)
        self.cancelButton.clicked.connect(self.cancelRequested)

    # -- controls -------------------------------------------------------------------------------
    def _choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Corpus texts", "", SOURCE_FILTER)
        if path:
            self.sourceEdit.setText(path)

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, f"A folder of {self.sourceLabel.text().lower()}")
        if path:
            self.sourceEdit.setText(path)

    def _choose_store(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Store folder (new, empty, or an earlier run's)")
        if path:
            self.storeEdit.setText(path)

    def show_error(self, message: str) -> None:
        """One line next to the controls ("" clears it)."""
        self.errorLabel.setText(message)
        self.errorLabel.setToolTip(message)

    def set_running(self, running: bool, resumable: bool = False) -> None:
        self.startButton.setEnabled(not running)
        self.cancelButton.setEnabled(running)
        self.startButton.setText("Resume" if resumable else "Start")
        for widget in (
            self.sourceEdit,
            self.storeEdit,
            self.tokensSpin,
            self.sourceFileButton,
            self.sourceFolderButton,
            self.sampleButton,
            self.storeButton,
        ):
            widget.setEnabled(not running)

    def show_progress(self, fraction: float, message: str) -> None:
        value = round(max(0.0, min(1.0, fraction)) * 1000)
        if self.progressBar.value() != value:
            self.progressBar.setValue(value)
        self.progressLabel.setText(message)
