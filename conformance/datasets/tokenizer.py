"""The checkpoint's tokenizer, for the data sets whose inputs are text (SQuAD for bert-base/albert, CAIL2019-SCM for
roformer).

Read from the checkpoint directory (``--checkpoint MODEL=DIR``): ``tokenizer.json`` (a ``tokenizers`` Tokenizer, what
save_pretrained of a fast tokenizer writes), or else ``vocab.txt`` (BERT WordPiece, lowercasing as
``tokenizer_config.json``'s ``do_lower_case`` says, True when it is absent). Texts are encoded without special tokens,
truncation or padding: the data set modules lay out ``[CLS] ... [SEP] ... [SEP]`` and the padding themselves. The
special tokens are those ``tokenizer_config.json`` names (``cls_token``, ``sep_token``, ``pad_token``), else
``[CLS]``, ``[SEP]`` and the tokenizer's padding token (``[PAD]`` or ``<pad>``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from boundedio import JSON_CONFIG_LIMIT, MIB, load_json, read_bytes
from conformance.datasets.base import DatasetError

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
CONFIG_FILE = "tokenizer_config.json"
MAX_TOKENIZER_BYTES = 256 * MIB  # the largest published tokenizer.json files are a few tens of MB
DEFAULT_SPECIAL_TOKENS = {"cls_token": ("[CLS]",), "sep_token": ("[SEP]",), "pad_token": ("[PAD]", "<pad>")}


@dataclass(frozen=True)
class TextTokenizer:
    """A checkpoint's tokenizer: ``tokenizer`` (a ``tokenizers.Tokenizer`` or ``BertWordPieceTokenizer``), the file it
    was read from and its SHA-256, and the ids of the special tokens."""

    tokenizer: Any
    path: Path
    sha256: str
    cls_id: int
    sep_id: int
    pad_id: int

    def encode(self, texts) -> list:
        """The ``tokenizers.Encoding`` of each text (ids, and character offsets into the text), no special tokens."""
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=False)

    def check_ids(self, input_ids: np.ndarray, vocab_size: int, model_name: str) -> None:
        """A DatasetError naming the tokenizer file when it gives ids the model's embedding table does not have."""
        top = int(input_ids.max(initial=0))
        if top >= vocab_size:
            token = self.tokenizer.id_to_token(top)
            raise DatasetError(f"tokenizer {str(self.path)!r} gives token id {top} ({token!r}), beyond the "
                               f"{model_name} model's vocab_size {vocab_size}: the tokenizer does not belong to the "
                               "checkpoint")

    def provenance(self) -> dict[str, str]:
        return {"tokenizer": self.path.name, "tokenizer_sha256": self.sha256}


def load_tokenizer(checkpoint, dataset: str) -> TextTokenizer:
    """The tokenizer of the checkpoint directory ``checkpoint``; a DatasetError saying what ``dataset`` (the data set's
    description, e.g. "SQuAD v1.1 'dev.json'") needs when there is none."""
    needs = (f"the {dataset} data set needs the checkpoint's tokenizer: pass --checkpoint MODEL=DIR with a directory "
             f"holding {' or '.join(TOKENIZER_FILES)}")
    if checkpoint is None:
        raise DatasetError(f"{needs} (no checkpoint given)")
    directory = Path(checkpoint)
    found = [directory / name for name in TOKENIZER_FILES if (directory / name).exists()]
    if not found:
        raise DatasetError(f"{needs} (checkpoint {str(directory)!r} holds neither)")
    path = found[0]
    config = _tokenizer_config(directory)
    data = read_bytes(path, f"a tokenizer file ({path.name})", MAX_TOKENIZER_BYTES, DatasetError)  # regular, bounded
    tokenizer = _read_tokenizer(path, data, config)
    padding = tokenizer.padding  # before no_padding: the pad token a tokenizer.json may declare
    tokenizer.no_truncation()
    tokenizer.no_padding()
    ids = {role: _special_id(tokenizer, path, config, role, padding) for role in DEFAULT_SPECIAL_TOKENS}
    sha256 = hashlib.sha256(data).hexdigest()
    return TextTokenizer(tokenizer, path, sha256, ids["cls_token"], ids["sep_token"], ids["pad_token"])


def _tokenizer_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.exists():
        return {}
    config = load_json(path, f"a {CONFIG_FILE}", JSON_CONFIG_LIMIT, DatasetError)
    if not isinstance(config, dict):
        raise DatasetError(f"{str(path)!r} is not a JSON object (it holds a {type(config).__name__})")
    return config


def _read_tokenizer(path: Path, data: bytes, config: dict[str, Any]):
    """The tokenizer of the file ``path``, whose bytes ``data`` were read bounded (a tokenizer.json is built from them;
    a vocab.txt is read by the tokenizers library from the regular file just checked)."""
    try:
        import tokenizers
    except ImportError:
        raise DatasetError(f"reading {str(path)!r} needs the tokenizers package (pip install tokenizers)") from None
    if path.name == "tokenizer.json":
        try:
            return tokenizers.Tokenizer.from_buffer(data)
        except Exception as exc:  # tokenizers raises a bare Exception for unreadable files
            raise DatasetError(f"{str(path)!r} is not a tokenizers tokenizer file: {exc}") from None
    lowercase = config.get("do_lower_case", True)
    if not isinstance(lowercase, bool):
        raise DatasetError(f"{str(path.parent / CONFIG_FILE)!r}: do_lower_case is {json.dumps(lowercase)}, "
                           "expected true or false")
    try:
        return tokenizers.BertWordPieceTokenizer(str(path), lowercase=lowercase)
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a WordPiece vocabulary (one token per line): {exc}") from None


def _special_id(tokenizer, path: Path, config: dict[str, Any], role: str, padding) -> int:
    """The id of the ``role`` token (cls_token, sep_token, pad_token)."""
    named = config.get(role)
    if isinstance(named, dict):  # an AddedToken written out: {"content": "[CLS]", ...}
        named = named.get("content")
    if named is not None:
        candidates = (str(named),)
    elif role == "pad_token" and padding is not None:
        return int(padding["pad_id"])
    else:
        candidates = DEFAULT_SPECIAL_TOKENS[role]
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return int(token_id)
    source = f" (named in {CONFIG_FILE})" if named is not None else ""
    raise DatasetError(f"tokenizer {str(path)!r} has no {role} {' or '.join(map(repr, candidates))}{source}")
