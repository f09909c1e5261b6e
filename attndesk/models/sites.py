"""Which module is which attention layer: found on a real forward pass, checked, and hooked.

A model's attention modules are the modules that call the attention interface; a short forward
pass at load records them. Each gets a ``Site`` from its dotted name: the layer is the first
number in the path ("model.layers.3.self_attn" -> 3, "decoder.block.1.layer.1.EncDecAttention"
-> 1); in an encoder-decoder, modules under the encoder are "self", cross-attention modules
("encoder_attn", "EncDecAttention", ...) "cross", the rest "decoder". The check refuses a model
whose layers did not all call in: some attention would then bypass attndesk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from torch import nn

from attndesk.errors import ConfigError

from .backend import Capture, Site, active, capturing
from .families import Family

_CROSS_MARKS = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "cross_attention")


def layer_path(name: str) -> tuple[str, int] | None:
    """("model.layers.3", 3) for "model.layers.3.self_attn": the layer module and its index."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1]), int(part)
    return None


def site_of(name: str, family: Family) -> Site | None:
    located = layer_path(name)
    if located is None:
        return None
    layer_name, layer = located
    if family != "encoder-decoder":
        return Site("self", layer)
    lowered = name.lower()
    if any(part.startswith("encoder") for part in layer_name.lower().split(".")[:-1]):
        return Site("self", layer, "encoder")
    if any(mark in lowered for mark in _CROSS_MARKS):
        return Site("cross", layer, "decoder")
    return Site("decoder", layer, "decoder")


def discover(model: nn.Module, family: Family, forward: Callable[[], object]) -> dict[int, tuple[Site, int, int]]:
    """Run ``forward`` once: id(module) -> (Site, query heads, key/value heads) for every module
    that called attndesk's attention."""
    names = {id(m): n for n, m in model.named_modules()}
    capture = Capture(sites=None, keep_weights=False)
    with capturing(capture):
        forward()
    found: dict[int, tuple[Site, int, int]] = {}
    for module, _, heads, kv_heads in capture.calls:
        site = site_of(names.get(id(module), ""), family)
        if site is None:
            raise ConfigError(
                f"an attention module ({type(module).__name__}) sits outside any numbered layer: "
                "attndesk cannot tell which layer it is"
            )
        found[id(module)] = (site, heads, kv_heads)
    return found


def check_layers(model_name: str, sites: dict[int, Site], expected: dict[str, int]) -> None:
    """Every part's layers 0..N-1 called attndesk exactly once each; otherwise say which did not."""
    counts = Counter((s.part, s.layer) for s in sites.values())
    for part, n in expected.items():
        got = sorted(layer for (p, layer) in counts if p == part)
        if got != list(range(n)) or any(counts[(part, layer)] != 1 for layer in got):
            what = {"self": "self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}[part]
            raise ConfigError(
                f"{model_name}: only {len(got)} of {n} {what} layers computed their attention through "
                "transformers' attention interface; attndesk would miss the others, so this model is refused"
            )


def install_hooks(model: nn.Module, sites: dict[int, Site]) -> list:
    """Hooks that tell the active capture where the forward pass is (timing, progress, cancel)
    and what each attention module took in and gave out (the step-through's stages)."""
    modules = dict(model.named_modules())
    handles = []
    layer_sites: dict[str, Site] = {}
    for name, module in modules.items():
        site = sites.get(id(module))
        if site is None:
            continue
        located = layer_path(name)
        assert located is not None, "a site is always inside a numbered layer"
        layer_name, _ = located
        if site.part != "cross":
            layer_sites.setdefault(layer_name, site)
        handles.append(module.register_forward_pre_hook(_io_pre(site), with_kwargs=True))
        handles.append(module.register_forward_hook(_io_post(site)))
    for layer_name, site in layer_sites.items():
        layer = modules[layer_name]
        handles.append(layer.register_forward_pre_hook(lambda m, a, s=site: _call("layer_start", s)))
        handles.append(layer.register_forward_hook(lambda m, a, o, s=site: _call("layer_end", s)))
    return handles


def _call(method: str, site: Site) -> None:
    capture = active()
    if capture is not None and capture.sites is not None:
        getattr(capture, method)(site)


def _io_pre(site: Site):
    def hook(module, args, kwargs):
        capture = active()
        if capture is not None and capture.wants_stages(site):
            capture.attention_io(site, "embeddings", args[0] if args else kwargs.get("hidden_states"))

    return hook


def _io_post(site: Site):
    def hook(module, args, output):
        capture = active()
        if capture is not None and capture.wants_stages(site):
            capture.attention_io(site, "output", output[0] if isinstance(output, tuple) else output)

    return hook


__all__ = ["check_layers", "discover", "install_hooks", "site_of"]
