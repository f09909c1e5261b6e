"""The Logit lens tab (pretrained decoders and encoder-decoders): each layer's residual stream put
through the final norm and the unembedding (``attndesk.interp.logit_lens``), a grid of
layers x positions with each cell's top token and its probability.

While the tab is on screen it follows the window's input text (an encoder-decoder's target text
is the decoder's input), model and k: each change is a new side job superseding the one in flight.
"""

from __future__ import annotations

from attndesk.interp import LogitLens, logit_lens
from attndesk.jobs import JobContext
from attndesk.models import LoadedModel

from ...jobs.channels import LOGIT_LENS
from ..interp import InterpPresenter

LOGIT_LENS_TAB = "logit-lens"


def logit_lens_job(model: LoadedModel, text: str, target: str | None, k: int, *, ctx: JobContext) -> LogitLens:
    """Worker: the logit lens of ``text`` (one layer's [L, V] logits at a time in the core)."""
    ctx.progress(0.0, "logit lens: one residual stream at a time")
    return logit_lens(model, text, k=k, target=target if model.family == "encoder-decoder" else None)


class LogitLensTab(InterpPresenter):
    """Binds the ``LogitLensView`` to the state and the compute controller (see the module doc)."""

    CHANNEL = LOGIT_LENS
    WHAT = "the logit lens"
    tab_id = LOGIT_LENS_TAB
    AUTO = True

    def inputs_key(self):
        return self.state.mode, self.state.text, self.state.target_text, self.view.k()

    def request(self):
        if not self.state.text.strip():
            self.view.bar.set_message("type an input text in the Input box", error=True)
            return None
        args = (self.state.text, self.state.target_text or None, self.view.k())
        return logit_lens_job, args, "logit lens"

    def show_result(self, result: LogitLens) -> None:
        self.view.set_lens(result)


__all__ = ["LOGIT_LENS_TAB", "LogitLensTab", "logit_lens_job"]
