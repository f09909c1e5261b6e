"""Vision checkpoints of every family (random weights, tiny configs) run by transformers with
attndesk's attention: every layer's weights equal transformers' eager attention, the logits (or the
pooled output) too; the tokens are named, the grid is the image's; non-square grids, interpolated
position embeddings, Swin's windows; and the refusals of bad input, one line each."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from pretrained_models import VISION_CONFIGS, build, build_two_tower, build_vision

from attndesk.errors import ConfigError
from attndesk.models import VisionResult, clear_cache, load_pretrained, run_pretrained
from attndesk.models.loader import transformers_offline
from attndesk.models.vision import pixel_values, read_image, swin_partition

WEIGHT_TOL = 1e-6
LOGIT_TOL = 1e-5


def eager_layers(reference, pixels: torch.Tensor, **kwargs) -> tuple[list[np.ndarray], object]:
    """Every attention layer's weights under transformers' eager attention, in call order (Swin's
    returned attentions hold one block per stage, so every attention module is hooked)."""
    found: list[np.ndarray] = []
    handles = [
        module.register_forward_hook(lambda m, a, out: found.append(out[1].detach().numpy()))
        for module in reference.modules()
        if (type(module).__name__.endswith("Attention") and hasattr(module, "q_proj"))
        or type(module).__name__.endswith("SelfAttention")
    ]
    try:
        with torch.inference_mode():
            out = reference(pixel_values=pixels, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return found, out


def assert_matches_eager(model, reference, result: VisionResult, pixels: torch.Tensor, **kwargs) -> None:
    layers, out = eager_layers(reference, pixels, **kwargs)
    ours = result.window_weights if result.window_weights is not None else list(result.weights[:, None])
    assert len(layers) == len(ours) == model.num_layers
    for n, (mine, theirs) in enumerate(zip(ours, layers, strict=True)):
        assert mine.shape == theirs.shape, f"layer {n}"
        np.testing.assert_allclose(mine, theirs, atol=WEIGHT_TOL, rtol=0, err_msg=f"layer {n}")
    logits = getattr(out, "logits", None)
    if logits is not None:
        np.testing.assert_allclose(result.logits, logits[0].numpy(), atol=LOGIT_TOL, rtol=0)
    else:
        np.testing.assert_allclose(result.pooled, out.pooler_output[0].numpy(), atol=LOGIT_TOL, rtol=0)


SPECIALS = {
    "vit": ["[CLS]"],
    "deit": ["[CLS]", "[DIST]"],
    "dinov2": ["[CLS]"],
    "dinov2_with_registers": ["[CLS]", "[REG0]", "[REG1]"],
    "clip_vision_model": ["[CLS]"],
    "siglip_vision_model": [],
    "swin": [],
}


@pytest.mark.parametrize("name", list(VISION_CONFIGS))
def test_every_layer_equals_transformers_eager(vision, image, name):
    model, reference, _ = vision(name)
    result = run_pretrained(model, image)
    assert isinstance(result, VisionResult) and result.weights.dtype == np.float32
    pixels = pixel_values(model, read_image(image))
    assert_matches_eager(model, reference, result, pixels)
    patch = 4 if name == "swin" else 8
    assert result.grid == (32 // patch, 32 // patch)
    specials = SPECIALS[name]
    rows, cols = result.grid
    assert result.tokens == specials + [f"({r},{c})" for r in range(rows) for c in range(cols)]
    assert result.weights.shape[-1] == result.weights.shape[-2] == len(result.tokens)
    assert result.special.tolist() == [True] * len(specials) + [False] * (rows * cols)
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    assert result.image is not None and result.image.shape == (32, 32, 3) and result.image.dtype == np.uint8


@pytest.mark.parametrize("name", ["vit", "deit", "dinov2", "clip_vision_model", "siglip_vision_model", "swin"])
def test_non_square_grid_interpolates_positions(vision, image, name):
    model, reference, _ = vision(name, side=(32, 48))
    result = run_pretrained(model, image)
    patch = 4 if name == "swin" else 8
    assert result.grid == (32 // patch, 48 // patch)
    pixels = pixel_values(model, read_image(image))
    assert tuple(pixels.shape[-2:]) == (32, 48)
    extra = (
        {"interpolate_pos_encoding": True}
        if name in ("vit", "deit", "clip_vision_model", "siglip_vision_model")
        else {}
    )
    assert_matches_eager(model, reference, result, pixels, **extra)
    rows, cols = result.grid
    assert result.tokens[-1] == f"({rows - 1},{cols - 1})"
    assert result.query_maps(0, 0).shape == (model.num_heads, rows, cols)


def test_swin_windows_partition_the_grid(vision, image):
    model, _, _ = vision("swin")
    result = run_pretrained(model, image)
    assert result.layer_grids == [(8, 8), (8, 8), (4, 4), (4, 4)] and result.shifts == [0, 1, 0, 1]
    for layer in range(2):
        rows, cols = result.layer_grids[layer]
        ids = np.arange(rows * cols).reshape(rows, cols)
        shift, w = result.shifts[layer], result.window_sizes[layer]
        rolled = np.roll(ids, (-shift, -shift), axis=(0, 1))  # what Swin's cyclic shift does
        windows = rolled.reshape(rows // w, w, cols // w, w).transpose(0, 2, 1, 3).reshape(-1, w * w)
        np.testing.assert_array_equal(result.partitions[layer], windows)
        dense = result.dense_layer(layer)
        np.testing.assert_array_equal(dense, result.weights[layer])
        same = result.window_map(layer).ravel()
        # weight only inside a window; rows of an unshifted layer sum to 1; a shifted layer's
        # windows that straddle the wrap-around keep their own regions apart (mask -100)
        outside = same[:, None] != same[None, :]
        assert np.all(dense[:, outside] == 0)
        if shift == 0:
            np.testing.assert_allclose(dense.sum(-1), 1.0, atol=1e-5)
    assert swin_partition(3, 3, 2, 0).tolist() == [[0, 1, 3, 4], [2, -1, 5, -1], [6, 7, -1, -1], [8, -1, -1, -1]]


def test_inputs_path_pil_and_array_agree(vision, image, tmp_path):
    model, _, _ = vision("vit")
    path = tmp_path / "picture.png"
    Image.fromarray(image).save(path)
    results = [run_pretrained(model, x) for x in (image, Image.fromarray(image), path, str(path))]
    for other in results[1:]:
        np.testing.assert_array_equal(other.weights, results[0].weights)


def test_bad_input_gets_one_line(vision, tmp_path):
    model, _, _ = vision("vit")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    cases = {
        "cannot be read as an image": broken,
        "does not exist": tmp_path / "missing.jpg",
        "50,000 x 1 pixels": np.zeros((1, 50_000, 3), np.uint8),
        "HxWx3 uint8": np.zeros((4, 4), np.uint8),
        "give it an image": "a cat on a mat",
    }
    for words, given in cases.items():
        with pytest.raises(ConfigError, match=words) as caught:
            run_pretrained(model, given)
        assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"2 layers x 4 heads x 17\u00b2 tokens .* over the memory budget"):
        run_pretrained(model, np.zeros((8, 8, 3), np.uint8), memory_budget=4 * 2 * 4 * 17 * 17 - 1)
    tiny = run_pretrained(model, np.zeros((1, 1, 3), np.uint8))  # one pixel: the processor resizes it
    assert tiny.grid == (4, 4)
    without = tmp_path / "no-processor"
    build_vision("vit", without, processor=False)
    with pytest.raises(ConfigError, match=r"preprocessor_config\.json missing"):
        load_pretrained(without)


def test_text_model_refuses_an_image(tmp_path, image):
    transformers_offline()
    folder = build("bert", tmp_path / "bert")
    try:
        with pytest.raises(ConfigError, match="is a text model: it reads text, not an image"):
            run_pretrained(load_pretrained(folder), image)
    finally:
        clear_cache(folder)


@pytest.mark.parametrize(("model_type", "tower"), [("clip", "CLIPVisionModel"), ("siglip", "SiglipVisionModel")])
def test_two_tower_checkpoint_runs_its_vision_tower(tmp_path, image, model_type, tower):
    import transformers

    transformers_offline()
    folder = build_two_tower(model_type, tmp_path / model_type)
    try:
        model = load_pretrained(folder)
        assert type(model.model).__name__ == tower and model.spec.family == "vision"
        result = run_pretrained(model, image)
        reference = getattr(transformers, tower).from_pretrained(folder, attn_implementation="eager").eval()
        whole = transformers.AutoModel.from_pretrained(folder).eval()
        patch = [  # the tower's weights are the checkpoint's, not fresh ones
            next(p for n, p in m.named_parameters() if n.endswith("patch_embedding.weight")).detach().numpy()
            for m in (model.model, whole)
        ]
        np.testing.assert_array_equal(*patch)
        assert_matches_eager(model, reference, result, pixel_values(model, read_image(image)))
    finally:
        clear_cache(folder)
