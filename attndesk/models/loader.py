"""``load_pretrained``: a local folder -> a transformers model whose attention is attndesk's.

Offline always (the hub's offline switches are set and every read is ``local_files_only``), never
remote code, float32 weights. A folder is checked before its weights are read (``read_spec``:
files, architecture, remote code, size against the memory budget); after loading, the weights
are checked for NaN/inf and a short forward pass checks that every layer's attention reaches
attndesk. Loaded models are cached per folder and device for the session.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import huggingface_hub.constants as hub_constants
import psutil
import torch
from torch import nn

from attndesk.checks import check_finite_tensors
from attndesk.errors import NO_LM_HEAD, ConfigError
from attndesk.jobs import JobContext, ProgressFn, job_context
from attndesk.system.devices import resolve_device
from attndesk.system.free_memory import format_bytes
from attndesk.system.process import freeze_long_lived

from .backend import IMPLEMENTATION, Capture, Site, capturing, patch_rotary, register
from .checkpoint import PACKAGED_NAME, ModelSpec, packaged_model_dir, read_config, read_spec
from .families import VISION, VisionInfo
from .sites import check_layers, discover, install_hooks, layer_path

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_serials = itertools.count()  # LoadedModel.serial: unlike id(), never handed to a later model
_UNUSED_PREFIXES = ("pooler.",)  # encoder poolers: attndesk mean-pools and never reads them


def default_model_budget() -> int:
    """Bytes a loaded model's float32 weights may take: half the machine's RAM."""
    try:
        return int(psutil.virtual_memory().total // 2)
    except Exception:  # psutil missing or sandboxed: assume a small machine
        return 4 * 2**30


@dataclass(eq=False)
class LoadedModel:
    """A checkpoint loaded with attndesk's attention: the transformers module, its tokenizer, and
    where its attention layers are (``sites``: id(module) -> Site; ``layers``: count per part)."""

    name: str
    path: Path
    spec: ModelSpec
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    sites: dict[int, Site]
    layers: dict[str, int]
    num_heads: int
    kv_heads: int
    linear_params: dict[str, int]  # per stack: weights of the layers' matrix products (FLOPs estimate)
    head_params: int  # the LM head's (0 for encoders and headless checkpoints)
    load_seconds: float
    notices: list[str] = field(default_factory=list)
    headless: bool = False  # a decoder / encoder-decoder saved without its LM head: no next-token features
    serial: int = field(default_factory=lambda: next(_serials))  # this load, for caches (id() is reused)
    processor: Any = None  # a vision model's image processor (its ``tokenizer`` is None)
    vision: VisionInfo | None = None  # what a vision model's tokens are (None: a text model)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _hooks: list = field(default_factory=list, repr=False)

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def num_layers(self) -> int:
        return self.layers["self"]

    @property
    def is_vision(self) -> bool:
        return self.vision is not None

    @property
    def max_tokens(self) -> int | None:
        """Tokens a text may have (its positions), or None where the model has no limit."""
        limits = []
        if self.spec.max_positions:
            limits.append(self.spec.max_positions - self.spec.position_offset)  # RoBERTa's 514 rows hold 512 tokens
        tokenizer_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tokenizer_max, int) and 0 < tokenizer_max < 10**7:
            limits.append(tokenizer_max)
        return min(limits) if limits else None


_models: dict[tuple[str, str], LoadedModel] = {}
_models_lock = threading.Lock()  # held while loading: a second caller waits and gets the cached model


def _folder_and_key(path: str | Path | None, device: str) -> tuple[Path, torch.device, tuple[str, str]]:
    folder = packaged_model_dir() if path is None else Path(path).expanduser()
    torch_device = resolve_device(device)
    return folder, torch_device, (str(folder.resolve()) if folder.exists() else str(folder), str(torch_device))


def is_loaded(path: str | Path | None = None, *, device: str = "cpu") -> bool:
    """Whether ``load_pretrained(path)`` would answer from the cache (no progress to show)."""
    try:
        key = _folder_and_key(path, device)[2]
    except ConfigError:
        return False
    # no lock: it is held for the whole of a load (seconds), and the window asks from the GUI
    # thread; one dict look-up is atomic, and a load in progress answers False, as it should
    return key in _models


def loaded_model(path: str | Path | None = None, *, device: str = "cpu") -> LoadedModel | None:
    """The model ``load_pretrained(path)`` would hand back from the cache, or None (never loads,
    never waits for a load in progress: a window may ask from its GUI thread)."""
    try:
        key = _folder_and_key(path, device)[2]
    except ConfigError:
        return None
    return _models.get(key)


def clear_cache(path: str | Path | None = None, *, everything: bool = True) -> None:
    """Forget loaded models: all, all but the packaged one (``everything=False``), or folder ``path``'s."""
    with _models_lock:
        if path is not None:
            folder = str(Path(path).expanduser().resolve())
            doomed = [k for k in _models if k[0] == folder]
        elif everything:
            doomed = list(_models)
        else:
            doomed = [k for k, m in _models.items() if m.name != PACKAGED_NAME]
        for key in doomed:
            for handle in _models.pop(key)._hooks:
                handle.remove()


def loaded_models() -> list[LoadedModel]:
    """The models kept now, least recently used first (no lock: a load holds it for seconds, and a
    copy of the values is one atomic step)."""
    return list(_models.values())


def forget_models(models: list[LoadedModel]) -> None:
    """Stop keeping these models (a run that needs one again loads it anew)."""
    doomed = {id(m) for m in models}
    with _models_lock:
        for key in [k for k, m in _models.items() if id(m) in doomed]:
            for handle in _models.pop(key)._hooks:
                handle.remove()


def transformers_offline():
    """Import transformers with the hub offline and attndesk's attention registered."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    first = "transformers" not in sys.modules
    import transformers

    hub_constants.HF_HUB_OFFLINE = True  # in case the hub was imported before the variable was set
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    register()
    if first:
        freeze_long_lived()  # the import's ~150k long-lived objects (once: not a model loaded later)
    return transformers


def load_pretrained(
    path: str | Path | None = None,
    progress: ProgressFn | None = None,
    *,
    memory_budget: int | None = None,
    device: str = "cpu",
    ctx: JobContext | None = None,
) -> LoadedModel:
    """The model in folder ``path`` (None = the packaged all-MiniLM-L6-v2), loaded once per session.

    Raises ``ConfigError`` (one line) for a folder without config / weights / tokenizer, an
    architecture transformers does not know or that bypasses its attention interface, remote
    code, a model over ``memory_budget`` bytes as float32 (default: half the RAM), weights
    that do not fit the config, or NaN/inf weights.
    """
    folder, torch_device, key = _folder_and_key(path, device)
    report = job_context(ctx, progress=progress).progress
    with _models_lock:
        cached = _models.pop(key, None)
        if cached is not None:
            _models[key] = cached  # the most recently used is last: evicted last
            report(1.0, f"{cached.name} (cached)")
            return cached
        start = time.perf_counter()
        report(0.0, "checking the folder")
        spec = read_spec(folder, name=PACKAGED_NAME if path is None or _is_packaged(folder) else None)
        budget = default_model_budget() if memory_budget is None else int(memory_budget)
        _check_budget(spec, budget)
        report(0.05, "importing transformers")
        transformers = transformers_offline()
        if spec.family == "vision":
            report(0.3, "reading the image processor and the weights")
            loaded = _vision_model(transformers, spec, torch_device)
            loaded.load_seconds = time.perf_counter() - start
            _models[key] = loaded
            _evict_to(budget)
            report(1.0, f"loaded {spec.name}")
            return loaded
        report(0.3, "reading the tokenizer")
        tokenizer = _tokenizer(transformers, spec)
        report(0.4, f"reading {spec.num_layers}-layer weights")
        model, headless = _weights(transformers, spec)
        model = model.to(torch_device).eval()
        report(0.8, "checking the weights for NaN and inf")
        check_finite_tensors(dict(model.named_parameters()), spec.name)
        report(0.9, "checking that every attention layer runs through attndesk")
        loaded = _assemble(spec, model, tokenizer, torch_device, headless)
        loaded.load_seconds = time.perf_counter() - start
        _models[key] = loaded
        _evict_to(budget)
        report(1.0, f"loaded {spec.name}")
        return loaded


def _evict_to(budget: int) -> None:
    """Forget the least recently used models until those kept fit ``budget`` together (the newest
    always stays). A model still in use elsewhere lives on until its user lets it go; its hooks
    stay, so a run in flight on it is not disturbed."""
    while len(_models) > 1 and sum(m.spec.float32_bytes for m in _models.values()) > budget:
        del _models[next(iter(_models))]


def _is_packaged(folder: Path) -> bool:
    try:
        return folder.resolve() == packaged_model_dir().resolve()
    except ConfigError:
        return False


def _check_budget(spec: ModelSpec, budget: int) -> None:
    if spec.float32_bytes > budget:
        count = (
            f"{spec.parameters / 1e6:,.0f} M parameters"
            if spec.parameters
            else f"{format_bytes(spec.disk_bytes)} of weights"
        )
        raise ConfigError(
            f"{spec.name} is too large: {count} take {format_bytes(spec.float32_bytes)} as float32, over the "
            f"memory budget of {format_bytes(budget)}; choose a smaller model or raise the budget"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _tokenizer(transformers, spec: ModelSpec):
    try:
        return transformers.AutoTokenizer.from_pretrained(
            str(spec.path), local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # tokenizers and sentencepiece raise their own (and plain) exceptions
        raise ConfigError(f"{spec.name}: the tokenizer cannot be read: {_first_line(exc)}") from None


def _weights(transformers, spec: ModelSpec) -> tuple[PreTrainedModel, bool]:
    """(the model, whether its LM head was missing): a checkpoint saved without its head (a bare
    ``LlamaModel``, an embedding model built on a decoder) runs as its base model; any other
    missing weight is refused."""
    auto = {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[spec.family]
    try:
        model, info = auto.from_pretrained(
            str(spec.path),
            attn_implementation=IMPLEMENTATION,
            dtype=torch.float32,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as exc:  # safetensors, torch.load and transformers raise many kinds
        raise ConfigError(f"{spec.name}: the weights cannot be loaded: {_first_line(exc)}") from None
    missing = [k for k in info.get("missing_keys", ()) if not k.startswith(_UNUSED_PREFIXES)]
    mismatched = list(info.get("mismatched_keys", ()))
    if mismatched:
        raise ConfigError(f"{spec.name}: weight {mismatched[0][0]} has a shape config.json does not imply")
    head = _head_names(model) if spec.family != "encoder" else ()
    body = [k for k in missing if not k.startswith(head)]
    if body:
        raise ConfigError(
            f"{spec.name}: weight {sorted(body)[0]} is missing from the checkpoint "
            f"({len(body)} tensors missing): it would run with random values"
        )
    if not missing:
        return model, False
    base = getattr(model, "base_model", model)
    return (base if base is not model else model), True  # the random head is dropped (or never read)


def token_embeddings(model: PreTrainedModel) -> nn.Embedding:
    """The input token table (transformers' get_input_embeddings): an Embedding in every family attndesk opens."""
    return cast(nn.Embedding, model.get_input_embeddings())


def output_embeddings(model: nn.Module) -> nn.Module | None:
    """The LM head (transformers' get_output_embeddings), or None for a model without one."""
    get = getattr(model, "get_output_embeddings", None)
    return get() if get is not None else None


def _head_names(model: nn.Module) -> tuple[str, ...]:
    """Prefixes of the LM head's tensors in ``model``'s state dict (the output embedding, BART's logit bias)."""
    head = output_embeddings(model)
    names = [f"{name}." for name, module in model.named_modules() if head is not None and module is head]
    return (*names, "final_logits_bias")


def _probe(spec: ModelSpec, module: nn.Module, tokenizer, device) -> Callable[[], object]:
    """A forward pass on one short word (and the decoder's start token)."""
    ids = tokenizer("attention", return_tensors="pt")["input_ids"][:, :8].to(device)
    extra = {}
    if spec.family == "encoder-decoder":
        start = getattr(module.config, "decoder_start_token_id", None)
        extra["decoder_input_ids"] = torch.tensor([[0 if start is None else int(start)]], device=device)

    def forward():
        with torch.inference_mode():
            return module(input_ids=ids, **extra)

    return forward


def _assemble(
    spec: ModelSpec, model: PreTrainedModel, tokenizer, device: torch.device, headless: bool = False
) -> LoadedModel:
    found = discover(model, spec.family, _probe(spec, model, tokenizer, device))
    sites = {key: site for key, (site, _, _) in found.items()}
    layers = {"self": spec.num_layers}
    if spec.family == "encoder-decoder":
        layers.update(decoder=spec.decoder_layers, cross=spec.decoder_layers)
    check_layers(spec.name, sites, layers)
    _, heads, kv_heads = next(v for v in found.values() if v[0].part == "self" and v[0].layer == 0)
    for module in model.modules():
        if id(module) in sites:
            patch_rotary(type(module))
    notices = (
        []
        if spec.tested
        else [
            f"{spec.family_name} ({spec.model_type}) is not among the families attndesk was checked against; "
            "its attention runs through attndesk (checked at load)"
        ]
    )
    if headless:
        notices.append(
            f"{NO_LM_HEAD}: every attention view works; generation, next-token bars and "
            "the ablation's KL divergence are off"
        )
    loaded = LoadedModel(
        name=spec.name,
        path=spec.path,
        spec=spec,
        model=model,
        tokenizer=tokenizer,
        device=device,
        sites=sites,
        layers=layers,
        num_heads=heads,
        kv_heads=kv_heads,
        linear_params=_linear_params(model, sites),
        head_params=0 if headless else _head_params(model),
        load_seconds=0.0,
        notices=notices,
        headless=headless,
    )
    loaded._hooks = install_hooks(model, sites)
    return loaded


def _image_processor(transformers, spec: ModelSpec):
    try:
        return transformers.AutoImageProcessor.from_pretrained(
            str(spec.path), local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # the processor classes raise their own kinds
        raise ConfigError(f"{spec.name}: the image processor cannot be read: {_first_line(exc)}") from None


def _vision_class(transformers, spec: ModelSpec, info: VisionInfo):
    """The class config.json's architectures name when the family accepts it, else the bare tower."""
    named = [a for a in read_config(spec.path).get("architectures") or [] if a in info.classes]
    return getattr(transformers, named[0] if named else info.classes[0])


def _check_vision_loading(spec: ModelSpec, loading: dict) -> None:
    """Refuse a vision checkpoint whose weights do not match config.json's shapes, or that lacks
    weights the model uses (it would run with random values)."""
    missing = [k for k in loading.get("missing_keys", ()) if not k.startswith(_UNUSED_PREFIXES)]
    if loading.get("mismatched_keys"):
        raise ConfigError(
            f"{spec.name}: weight {loading['mismatched_keys'][0][0]} has a shape config.json does not imply"
        )
    if missing:
        raise ConfigError(
            f"{spec.name}: weight {sorted(missing)[0]} is missing from the checkpoint "
            f"({len(missing)} tensors missing): it would run with random values"
        )


def _vision_model(transformers, spec: ModelSpec, device: torch.device) -> LoadedModel:
    """A vision checkpoint with its image processor; every attention layer checked to reach attndesk
    on a forward pass over a blank image of the configured size."""
    info = VISION[spec.model_type]
    processor = _image_processor(transformers, spec)
    cls = _vision_class(transformers, spec, info)
    try:
        model, loading = cls.from_pretrained(
            str(spec.path),
            attn_implementation=IMPLEMENTATION,
            dtype=torch.float32,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as exc:  # safetensors and transformers raise many kinds
        raise ConfigError(f"{spec.name}: the weights cannot be loaded: {_first_line(exc)}") from None
    _check_vision_loading(spec, loading)
    model = model.to(device).eval()
    check_finite_tensors(dict(model.named_parameters()), spec.name)
    size = getattr(model.config, "image_size", 224)
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    channels = int(getattr(model.config, "num_channels", 3))
    blank = torch.zeros(1, channels, height, width, device=device)
    capture = Capture(sites=None, keep_weights=False)
    with capturing(capture), torch.inference_mode():
        model(pixel_values=blank)
    order = list(dict.fromkeys(module for module, _, _, _ in capture.calls))
    heads = {id(module): h for module, _, h, _ in capture.calls}
    if len(order) != spec.num_layers:
        raise ConfigError(
            f"{spec.name}: {len(order)} of {spec.num_layers} attention layers computed their attention through "
            "transformers' attention interface; attndesk would miss the others, so this model is refused"
        )
    sites = {id(module): Site("self", n) for n, module in enumerate(order)}
    return LoadedModel(
        name=spec.name,
        path=spec.path,
        spec=spec,
        model=model,
        tokenizer=cast(Any, None),
        device=device,
        sites=sites,
        layers={"self": spec.num_layers},
        num_heads=heads[id(order[0])],
        kv_heads=heads[id(order[0])],
        linear_params=_linear_params(model, sites),
        head_params=0,
        load_seconds=0.0,
        processor=processor,
        vision=info,
    )


def _linear_params(model: nn.Module, sites: dict[int, Site]) -> dict[str, int]:
    """Per stack, the weights of every matrix product in its layers (2-D weights, embeddings aside)."""
    stacks: dict[str, str] = {}  # layer module name -> stack
    for name, module in model.named_modules():
        site, located = sites.get(id(module)), layer_path(name)
        if site is not None and located is not None:  # a site is always inside a numbered layer
            stacks[located[0]] = site.stack
    modules = dict(model.named_modules())
    out: dict[str, int] = {}
    for layer_name, stack in stacks.items():
        total = sum(
            p.numel()
            for m in modules[layer_name].modules()
            if not isinstance(m, nn.Embedding)
            for p in m.parameters(recurse=False)
            if p.dim() == 2
        )
        out[stack] = out.get(stack, 0) + total
    return out


def _head_params(model: nn.Module) -> int:
    head = output_embeddings(model)
    weight = getattr(head, "weight", None)
    return int(weight.numel()) if weight is not None else 0


__all__ = [
    "LoadedModel",
    "clear_cache",
    "default_model_budget",
    "forget_models",
    "is_loaded",
    "load_pretrained",
    "loaded_model",
    "loaded_models",
    "transformers_offline",
]
