"""A model built from shapes (a resumed run) checks ``model.init_from`` from the safetensors headers
alone, and reaches the same verdict as the full load: the same absent optional tensors (they decide
the LR groups), and the same refusal of missing, unexpected or mis-shaped tensors."""

from __future__ import annotations

import numpy as np
import pytest

from omnidistill.config import ModelConfig
from omnidistill.models.hf_io import read_hf_tensor_shapes, read_hf_tensors
from omnidistill.models.loader import load_model
from omnidistill.models.weights import WeightMismatchError
from tests.models.hf_fixtures import save_tiny_bert

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")


def edit_tensors(folder, edit) -> None:
    path = str(folder / "model.safetensors")
    tensors = dict(safetensors_numpy.load_file(path))
    edit(tensors)
    safetensors_numpy.save_file(tensors, path)


def drop_pooler(t):
    for key in [k for k in t if k.startswith("pooler.")]:
        del t[key]


def drop_encoder_tensor(t):
    del t["encoder.layer.1.output.dense.bias"]


def add_stray_tensor(t):
    t["encoder.layer.0.attention.self.extra.weight"] = np.zeros((2, 2), np.float32)


def transpose_intermediate(t):
    key = "encoder.layer.0.intermediate.dense.weight"
    t[key] = np.ascontiguousarray(t[key].T)  # 37x32 saved as 32x37


@pytest.mark.parametrize("edit", [None, drop_pooler, drop_encoder_tensor, add_stray_tensor, transpose_intermediate])
def test_shapes_only_load_checks_init_from_as_the_full_load(tmp_path, tiny_tokenizer_dir, monkeypatch, edit):
    folder = save_tiny_bert(tmp_path / "bert", vocab_size=1024)
    if edit is not None:
        edit_tensors(folder, edit)
    cfg = ModelConfig(family="bert", pooling="cls", init_from=str(folder), tokenizer=str(tiny_tokenizer_dir))

    def verdict(shapes_only: bool):
        try:
            return load_model(cfg, shapes_only=shapes_only).pretrained_pooler
        except WeightMismatchError as err:
            return f"refused: {err}"

    full = verdict(False)
    import safetensors.numpy

    def no_values(*_a, **_k):
        raise AssertionError("a shapes-only load read tensor values")

    monkeypatch.setattr(safetensors.numpy, "load_file", no_values)
    assert verdict(True) == full
    if edit in (None, drop_pooler):
        assert full is (edit is None)  # the checkpoint's pooler is pretrained unless dropped
    else:
        assert full.startswith("refused: ")


def test_tensor_shapes_of_sharded_and_bin_checkpoints(tmp_path):
    """The shapes equal the tensors' for a single file, a sharded safetensors checkpoint and a ``.bin``."""
    import transformers

    from tests.models.hf_fixtures import TINY_BERT

    model = transformers.BertModel(transformers.BertConfig(**TINY_BERT))
    model.save_pretrained(tmp_path / "single")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    (tmp_path / "bin").mkdir()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")  # transformers v5 writes safetensors only
    for name in ("single", "sharded", "bin"):
        folder = tmp_path / name
        shapes = read_hf_tensor_shapes(folder)
        assert shapes == {k: v.shape for k, v in read_hf_tensors(folder).items()}
        assert shapes["encoder.layer.0.intermediate.dense.weight"] == (37, 32)


def test_a_name_that_is_neither_a_folder_nor_on_the_hub_says_where_it_was_looked_for(tmp_path, monkeypatch, repo_root):
    """A config's relative ``model.tokenizer`` run from another directory is taken for a Hub id; the
    error said only that the Hub could not be reached."""
    from omnidistill.cli import main
    from omnidistill.models.hf_io import resolve_hf_dir

    monkeypatch.chdir(tmp_path)  # the tiny config's tokenizer, assets/tiny-wordpiece, is not here
    where = rf"assets/tiny-wordpiece: not a local folder .*current directory, {tmp_path}\), nor a model"
    with pytest.raises(FileNotFoundError, match=where):
        resolve_hf_dir("assets/tiny-wordpiece")
    assert main(["train", str(repo_root / "configs" / "tiny.yaml"), f"train.output_dir={tmp_path / 'run'}"]) == 2
    assert not (tmp_path / "run").exists()


def test_a_model_folder_without_tokenizer_files_is_refused_by_name(tmp_path, tiny_tokenizer_dir):
    """Weights copied without their tokenizer: import and score failed with transformers' advice to
    install sentencepiece or tiktoken to convert a slow tokenizer."""
    import shutil

    from omnidistill.cli import main
    from omnidistill.models.loader import load_tokenizer

    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(FileNotFoundError, match=r"weights: no tokenizer files \(tokenizer\.json, .*\); it holds \['config\.json'\]"):
        load_tokenizer(str(folder))
    assert main(["import", str(folder), str(tmp_path / "run")]) == 2 and not (tmp_path / "run").exists()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"]) + "\n")
    assert load_tokenizer(str(folder))("hello")["input_ids"] == [2, 5, 3]  # a WordPiece vocabulary is a tokenizer
    only = tmp_path / "fast"
    shutil.copytree(tiny_tokenizer_dir, only)
    assert len(load_tokenizer(str(only))) > 0


def test_an_omniscore_folder_loads_its_tokenizer_without_transformers_model_type_warning(tmp_path, tiny_tokenizer_dir):
    """Scoring an export in the omniscore format printed transformers' warning about instantiating a
    model of type `omniscore` as another, on every run. A fresh process, as `omnidistill score` runs:
    in the test workers the imported omniscore package has registered the type, hiding the warning.
    The token ids are still those of transformers' own AutoTokenizer (what the package loads)."""
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "export"
    shutil.copytree(tiny_tokenizer_dir, folder)
    (folder / "config.json").write_text('{"model_type": "omniscore", "backbone_config": {"model_type": "bert"}}')
    code = (
        "import sys; from transformers import AutoTokenizer; from omnidistill.models.loader import load_tokenizer\n"
        "ours = load_tokenizer(sys.argv[1])('a small test')['input_ids']\n"
        "print('---', file=sys.stderr, flush=True)\n"
        "assert ours == AutoTokenizer.from_pretrained(sys.argv[1])('a small test')['input_ids']\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ours, _, theirs = done.stderr.partition("---\n")
    assert "model of type `omniscore`" not in ours, ours
    assert "model of type `omniscore`" in theirs  # the plain call still warns: the check can see it
