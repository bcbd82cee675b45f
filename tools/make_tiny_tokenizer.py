"""Train the tiny offline WordPiece tokenizer (assets/tiny-wordpiece) on the sample bank.

python tools/make_tiny_tokenizer.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def texts() -> list[str]:
    bank = json.loads((ROOT / "tools" / "sample_bank.json").read_text(encoding="utf-8"))
    return [value for lang, facts in bank.items() if not lang.startswith("_") for fact in facts for value in fact.values()]


def main() -> None:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=1024, special_tokens=SPECIALS, min_frequency=1)
    tok.train_from_iterator(texts(), trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    fast = BertTokenizerFast(tokenizer_object=tok, do_lower_case=False, model_max_length=512)
    out = ROOT / "assets" / "tiny-wordpiece"
    fast.save_pretrained(out)
    print(f"vocab {tok.get_vocab_size()} -> {out}")


if __name__ == "__main__":
    main()
