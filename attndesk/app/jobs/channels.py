"""Every background job channel of the window, declared once (``attndesk.jobs.executor.Channel``).

A channel's jobs run one at a time, the newest replacing a queued one. Channels take the side
jobs' one turn unless declared ``takes_turn=False``: the run and presenting it (nothing may stall
what is on screen), small chores, and jobs of minutes that would hold the turn for as long (the
corpus pass and its store queries, training). ``WINDOW`` holds the channels of the window and its
modes; a tab's channels are listed on its ``TabSpec`` (``tabs/registry.py``), and
``tests/app/jobs/test_channels.py`` checks every channel here is listed exactly once.
"""

from __future__ import annotations

from attndesk.jobs.executor import Channel

# the window and its modes
RUN = Channel("run", takes_turn=False)  # the current mode's run (ComputeController)
PRESENT = Channel("present", takes_turn=False)  # another view of the run on screen
MEMORY = Channel("memory", takes_turn=False)  # handing freed memory back to the system
MODELS = Channel("models", takes_turn=False)  # forgetting cached models the ledger let go of
HUB_CACHE = Channel("hub-cache", takes_turn=False)  # listing the local Hugging Face cache
ZOOM = Channel("zoom")  # a long run's zoomed-in detail
EXPORT = Channel("export")  # the export dialog's figures (``Background``): it takes the turn, as side jobs do
FILES = Channel("files", takes_turn=False)  # a widget's file work (``Background``): bundles, exports of one view
WINDOW = (RUN, PRESENT, MEMORY, MODELS, HUB_CACHE, ZOOM, EXPORT, FILES)

# the tabs' (each listed on its TabSpec)
GRID = Channel("grid")  # the All layers tab's thumbnails, painted for the pretrained mode
DERIVED = Channel("derived", takes_turn=False)  # the heatmaps' derived source (``Background``)
IMAGE_OPEN = Channel("image-open")
# the sample list, a chore beside the tab's pictures (reading the digits imports scikit-learn)
IMAGE_SAMPLES = Channel("image-samples", takes_turn=False)
IMAGE_OVERLAYS = Channel("image-overlays")
IMAGE_MAP = Channel("image-map")
STAGES = Channel("stages")
PRETRAINED_STAGES = Channel("pretrained-stages")
POSITIONS = Channel("positions")
STATISTICS = Channel("statistics")
COMPARE = Channel("compare")
TEACHING = Channel("teaching")
ROLLOUT = Channel("rollout")
FLOW = Channel("flow")
ONLINE = Channel("online")
ONLINE_STEP = Channel("online-step")
CORPUS = Channel("corpus", takes_turn=False)
CORPUS_QUERY = Channel("corpus-query", takes_turn=False)
TRAIN = Channel("train", takes_turn=False)
CHECKPOINTS = Channel("checkpoints", takes_turn=False)  # the Train tab's runs and checkpoints (``Background``)
KVLAB = Channel("kvlab")
GENERATE = Channel("generate")
PATCHING = Channel("patching")
ATTRIBUTION = Channel("attribution")
LOGIT_LENS = Channel("logit-lens")
CIRCUIT = Channel("circuit")
CIRCUIT_TERMS = Channel("circuit-terms")
CIRCUIT_HEAD = Channel("circuit-head")
IMPLEMENTATIONS = Channel("implementations")
