"""The three tokenizer kinds of the supported backbones, built locally (no downloads) from the sample data:

- ``wordpiece``: BERT/mBERT (the shipped ``assets/tiny-wordpiece``);
- ``bpe``: byte-level BPE with [CLS]/[SEP] added by a template, as ModernBERT and Ettin tokenizers are;
- ``unigram``: SentencePiece Unigram with the metaspace pre-tokenizer, as DeBERTa-v3 tokenizers are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KINDS = ("wordpiece", "bpe", "unigram")


def sample_texts(sample_dir: Path) -> list[str]:
    texts = []
    for split in ("train", "dev", "test"):
        for line in (sample_dir / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            texts += [v for k, v in item.items() if isinstance(v, str) and k not in ("id", "task", "lang")]
    return texts


def build_tokenizer(kind: str, folder: Path, sample_dir: Path, wordpiece_dir: Path) -> Path:
    """Save a tokenizer of ``kind`` to ``folder`` (trained on the sample texts; vocabulary <= 1024)."""
    if kind == "wordpiece":
        shutil.copytree(wordpiece_dir, folder, dirs_exist_ok=True)
        return folder
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=900, special_tokens=SPECIALS, unk_token="[UNK]")
    else:
        raise ValueError(kind)
    tok.train_from_iterator(sample_texts(sample_dir), trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]"
    )
    fast.save_pretrained(folder)
    return folder
