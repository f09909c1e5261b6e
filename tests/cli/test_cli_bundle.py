"""``attndesk bundle`` and ``attndesk reproduce``: one zip that recomputes to the same weights,
and one clear line for a bundle that cannot be reproduced here."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from attndesk import __version__
from attndesk.cli import main
from attndesk.core import AttentionConfig, run_attention
from attndesk.session.bundle import BUNDLE_VERSION, read_bundle
from attndesk.session.file import session_from_json
from tests.cli.cli_models import tiny_model


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture(scope="module")
def toy_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "cat.zip"
    assert (
        main(
            [
                "bundle",
                "--text",
                "the cat sat on the mat",
                "--heads",
                "4",
                "--embed-dim",
                "16",
                "--mask",
                "causal",
                "--position",
                "rope",
                "--seed",
                "7",
                "--out",
                str(path),
            ]
        )
        == 0
    )
    return path


def test_toy_bundle_holds_session_texts_versions_weights_and_figures(qapp, toy_bundle):
    bundle = read_bundle(toy_bundle)
    state = session_from_json(bundle.session).state
    assert (state.config.num_heads, state.config.mask, state.config.position, state.config.seed) == (
        4,
        "causal",
        "rope",
        7,
    )
    assert bundle.texts == {"text": "the cat sat on the mat"} and state.text == "the cat sat on the mat"
    env = bundle.manifest["environment"]
    assert env["attndesk"] == __version__ and env["torch"]
    expected = run_attention(
        AttentionConfig(num_heads=4, embed_dim=16, mask="causal", position="rope", seed=7), "the cat sat on the mat"
    )
    np.testing.assert_array_equal(bundle.weights["weights/attention.npy"], expected.weights)
    assert {Path(f).suffix for f in bundle.figures} == {".png", ".html"}
    with zipfile.ZipFile(toy_bundle) as zf:
        assert zf.read(bundle.figures[-1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_reproduce_finds_no_difference_here_and_reports_a_changed_weight(qapp, capsys, toy_bundle, tmp_path):
    code, out, err = run_cli(capsys, "reproduce", str(toy_bundle))
    assert code == 0, err
    assert out[-1] == "largest difference from the bundled weights: 0"
    tampered = _rewrite(toy_bundle, tmp_path / "tampered.zip", weights=lambda w: w + np.float32(0.25))
    code, out, err = run_cli(capsys, "reproduce", str(tampered))
    assert code == 1 and out[-1] == "largest difference from the bundled weights: 0.25"
    assert len(err) == 1 and "over the tolerance 0" in err[0]


def test_newer_bundles_and_non_bundles_are_one_line(qapp, capsys, toy_bundle, tmp_path):
    newer_format = _rewrite(toy_bundle, tmp_path / "f.zip", manifest=lambda m: {**m, "version": BUNDLE_VERSION + 1})
    newer_app = _rewrite(
        toy_bundle,
        tmp_path / "a.zip",
        manifest=lambda m: {**m, "environment": {**m["environment"], "attndesk": "99.0"}},
    )
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    for path, words in (
        (newer_format, "update attndesk"),
        (newer_app, "newer than this attndesk"),
        (junk, "not a zip"),
        (tmp_path / "none.zip", "does not exist"),
    ):
        code, out, err = run_cli(capsys, "reproduce", str(path))
        assert code == 2 and out == [] and len(err) == 1 and words in err[0], err


def test_a_bundle_that_cannot_be_written_writes_nothing(qapp, capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    # root writes through file modes: a folder of /proc takes no new file for anyone
    unwritable = Path("/proc/attndesk-test.zip") if os.geteuid() == 0 else locked / "b.zip"
    cases = (
        (tmp_path / "missing" / "b.zip", "does not exist"),
        (tmp_path / "b.txt", "ends in .zip"),
        (unwritable, "cannot write"),
    )
    try:
        for out, words in cases:
            code, lines, err = run_cli(
                capsys, "bundle", "--text", "a b", "--heads", "2", "--embed-dim", "8", "--out", str(out)
            )
            assert code == 2 and lines == [] and len(err) == 1 and words in err[0], err
    finally:
        locked.chmod(0o700)
    assert [p.name for p in tmp_path.iterdir()] == ["locked"] and list(locked.iterdir()) == []


def test_model_bundle_names_a_missing_model_and_reproduces_from_its_new_place(qapp, capsys, tmp_path):
    folder = Path(shutil.copytree(tiny_model("llama"), tmp_path / "llama"))
    bundle = tmp_path / "llama.zip"
    code, _, err = run_cli(capsys, "bundle", "--model", str(folder), "--text", "the cat sat", "--out", str(bundle))
    assert code == 0, err
    model = read_bundle(bundle).manifest["model"]
    assert model["path"] == str(folder.resolve()) and model["config"]["model_type"] == "llama"
    assert len(model["weights_sha256"]) == 64
    assert sorted(read_bundle(bundle).weights) == ["weights/self_layer0.npy", "weights/self_layer1.npy"]
    moved = tmp_path / "elsewhere"
    shutil.move(folder, moved)
    code, out, err = run_cli(capsys, "reproduce", str(bundle))
    assert code == 2 and len(err) == 1 and str(folder) in err[0] and "--model" in err[0]
    code, out, err = run_cli(capsys, "reproduce", str(bundle), "--model", str(tmp_path))  # not a model folder
    assert code == 2 and len(err) == 1 and str(tmp_path) in err[0] and "holds no config.json" in err[0]
    assert "--model" not in err[0]  # the place was given with --model: no advice to give it
    code, out, err = run_cli(capsys, "reproduce", str(bundle), "--model", str(moved))
    assert code == 0 and out[-1] == "largest difference from the bundled weights: 0", err
    other = Path(shutil.copytree(moved, tmp_path / "other"))
    with open(other / "model.safetensors", "r+b") as fh:  # one weight byte changed
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    code, out, err = run_cli(capsys, "reproduce", str(bundle), "--model", str(other))
    assert code == 2 and "not the bundle's" in err[0]


def _rewrite(source: Path, target: Path, *, manifest=None, weights=None) -> Path:
    """A copy of a bundle with its manifest or its arrays changed."""
    import io

    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "manifest.json" and manifest:
                data = json.dumps(manifest(json.loads(data))).encode()
            elif info.filename.endswith(".npy") and weights:
                buffer = io.BytesIO()
                np.save(buffer, weights(np.load(io.BytesIO(data))))
                data = buffer.getvalue()
            zout.writestr(info, data)
    return target


def test_the_windows_save_bundle_reproduces_a_cross_attention_and_an_encoder_decoder(qapp, capsys, tmp_path):
    from attndesk.models import load_pretrained, run_pretrained
    from attndesk.render.bundle import save_bundle
    from attndesk.session.bundle import BundleError
    from attndesk.session.state import AppState, ModeId

    toy = AppState(text="the cat sat", key_text="le chat dort", cross=True)
    toy.set_config(num_heads=2, embed_dim=8)
    result = run_attention(toy.config, toy.text, key_text=toy.keys_text())
    path = save_bundle(toy, result, tmp_path / "cross.zip", colormap="CET-L1")
    assert read_bundle(path).texts == {"text": "the cat sat", "key_text": "le chat dort"}
    assert run_cli(capsys, "reproduce", str(path))[0] == 0
    folder = tiny_model("t5")
    t5 = AppState(text="the cat sat", target_text="le chat", mode=ModeId(kind="pretrained", path=str(folder)))
    t5.pretrained.ablate = ((1, 2),)
    run = run_pretrained(load_pretrained(folder), t5.text, target="le chat", ablate=((1, 2),))
    path = save_bundle(t5, run, tmp_path / "t5.zip")
    assert len(read_bundle(path).weights) == 6  # encoder, decoder and cross, 2 layers each
    code, out, err = run_cli(capsys, "reproduce", str(path))
    assert code == 0 and out[-1].endswith(": 0"), err
    with pytest.raises(BundleError, match="not the current mode"):
        save_bundle(t5, result, tmp_path / "mixed.zip")


def test_a_bundle_of_the_train_tabs_model_carries_it_and_an_older_one_says_why_not(qapp, capsys, tmp_path):
    from attndesk.app.modes.toy import preset_run, trained_toy_run
    from attndesk.render.bundle import save_bundle
    from attndesk.session.bundle import BundleError
    from attndesk.session.state import AppState
    from attndesk.train.stages import initial_run

    run = preset_run("previous-token")  # as the Train tab hands a model over: not by a preset's name
    state = AppState()
    state.set_config(weights_from="trained")
    result = trained_toy_run("trained", run, "my-run").toy.result
    path = save_bundle(state, result, tmp_path / "mine.zip", trained=run)
    bundle = read_bundle(path)
    assert sorted(bundle.model_files) == ["config.json", "history.json", "model.safetensors"]
    assert bundle.texts == {"text": " ".join(result.tokens)}
    code, out, err = run_cli(capsys, "reproduce", str(path))
    assert code == 0 and out[-1] == "largest difference from the bundled weights: 0", err
    # another model than the one that computed the result on screen is refused, nothing written
    with pytest.raises(BundleError, match="changed since"):
        save_bundle(state, result, tmp_path / "other.zip", trained=initial_run(run))
    with pytest.raises(BundleError, match="no longer open"):
        save_bundle(state, result, tmp_path / "other.zip")
    assert not (tmp_path / "other.zip").exists()
    # a bundle without its model (as older versions wrote them): one line, exit 2
    older = tmp_path / "older.zip"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(older, "w") as zout:
        for info in zin.infolist():
            if info.filename == "manifest.json":
                manifest = json.loads(zin.read(info))
                del manifest["model"]["trained"], manifest["model_files"]
                zout.writestr(info, json.dumps(manifest))
            elif not info.filename.startswith("model/"):
                zout.writestr(info, zin.read(info))
    code, out, err = run_cli(capsys, "reproduce", str(older))
    assert code == 2 and out == [] and len(err) == 1 and "save the bundle again" in err[0], err
