"""Deterministic text-like inputs for the transformer encoders: token ids, segment ids and attention masks.

No real data set can be downloaded here, so the generators imitate the statistics that matter to the numerics: how often each
token id occurs (Zipf's law), how long the sequences are and how much of each row is padding, and the segment layout.
Every sample draws from its own random stream keyed by ``(seed, sample index)``, so the first ``n`` samples of a batch do not
depend on the batch size.

SQuAD-like rows carry a planted answer (:func:`squad_examples`) so that the seeded QA heads can be fitted to find it, as a
trained model finds its answers (see :func:`models.encoder.fit_span_head`). CAIL-like pairs carry a planted similarity
(:func:`cail_examples`: keywords shared with A) so that roformer's seeded similarity head can be fitted to it, which
puts its FP32 pair margins well clear of FP8 rounding noise (measured in :mod:`models.roformer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# SQuAD v1.1 with max_seq 384 (the seed benchmark's BERT/ALBERT setting): the ByteMLPerf/Graphcore synthetic packed runs draw
# sequence lengths from N(172, 172) clipped to [1, 384]; questions are ~11 words (~13 word pieces), at most 64 (max_query).
SQUAD_LENGTH_MEAN = 172.0
SQUAD_LENGTH_STD = 172.0
SQUAD_QUESTION_MEAN = 13.0
SQUAD_QUESTION_STD = 4.0
SQUAD_MAX_QUERY = 64
# Planted answers: SQuAD v1.1 answers are short (~3 words, most under 10 word pieces); each opens and closes with one of
# at most SQUAD_ANSWER_WORDS reserved words (see squad_examples).
SQUAD_ANSWER_MIN = 2
SQUAD_ANSWER_MAX = 8
SQUAD_ANSWER_WORDS = 1

# CAIL2019-SCM fact descriptions are a few hundred to a thousand characters (one token per Chinese character); a pair
# [CLS] A [SEP] B [SEP] is truncated to the sequence length by dropping tokens from the end of the longer text.
CAIL_TEXT_MEAN = 680.0
CAIL_TEXT_STD = 180.0
CAIL_TEXT_MIN = 64
# Planted similarity (see cail_examples): the fraction of a text's tokens that are its topic's keywords, and how many
# keyword ids each of the two topics has at most.
CAIL_TOPIC_FRACTION = 0.5
CAIL_TOPIC_WORDS = 4

# Zipf-Mandelbrot law over word ranks: p(rank r) ~ 1 / (r + ZIPF_SHIFT) ** ZIPF_EXPONENT (natural-language fit).
ZIPF_EXPONENT = 1.05
ZIPF_SHIFT = 2.7


@dataclass(frozen=True)
class Vocabulary:
    """Where the special tokens and the ordinary word pieces sit in a vocabulary of ``size`` ids."""

    size: int
    pad: int
    cls: int
    sep: int
    first_word: int

    @staticmethod
    def for_model(size: int, pad: int, cls: int, sep: int, first_word: int) -> "Vocabulary":
        """The real layout when it fits; vocabularies too small for it (test configs) put [PAD], [CLS], [SEP] at 0, 1, 2."""
        if size >= first_word + 64:
            return Vocabulary(size, pad, cls, sep, first_word)
        if size < 8:
            raise ValueError(f"vocab_size {size} is too small for text samples (need at least 8 ids)")
        return Vocabulary(size, 0, 1, 2, 3)


# bert-base-uncased: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, word pieces from id 999 on.
BERT_VOCAB = dict(pad=0, cls=101, sep=102, first_word=999)
# albert-base-v2 (SentencePiece): <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4, pieces from 5 on.
ALBERT_VOCAB = dict(pad=0, cls=2, sep=3, first_word=5)
# roformer_chinese_base (BERT-style Chinese vocab): [PAD]=0, [CLS]=101, [SEP]=102, characters from 106 on.
ROFORMER_VOCAB = dict(pad=0, cls=101, sep=102, first_word=106)


@lru_cache(maxsize=8)
def _zipf_cdf(num_words: int) -> np.ndarray:
    ranks = np.arange(num_words, dtype=np.float64)
    weights = (ranks + ZIPF_SHIFT) ** -ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def zipf_words(rng: np.random.Generator, vocab: Vocabulary, count: int) -> np.ndarray:
    """``count`` word ids, the word of rank r (id ``first_word + r``) drawn with Zipf-Mandelbrot probability."""
    cdf = _zipf_cdf(vocab.size - vocab.first_word)
    ranks = np.searchsorted(cdf, rng.random(count), side="right")
    return (vocab.first_word + np.minimum(ranks, cdf.size - 1)).astype(np.int64)


def _pair_row(rng, vocab: Vocabulary, len_a: int, len_b: int, seq_len: int, words_a=None, words_b=None):
    """One row [CLS] a [SEP] b [SEP] with segment ids 0/1, padded with [PAD] (mask 0) and cut to ``seq_len``; the texts
    are ``words_a`` / ``words_b`` where given, else Zipf words drawn from ``rng``."""
    a = zipf_words(rng, vocab, len_a) if words_a is None else words_a
    b = zipf_words(rng, vocab, len_b) if words_b is None else words_b
    ids = np.concatenate([[vocab.cls], a, [vocab.sep], b, [vocab.sep]])[:seq_len]
    segments = np.concatenate([np.zeros(len_a + 2, np.int64), np.ones(len_b + 1, np.int64)])[:seq_len]
    row_ids = np.full(seq_len, vocab.pad, np.int64)
    row_segments = np.zeros(seq_len, np.int64)
    row_mask = np.zeros(seq_len, np.int64)
    row_ids[: ids.size] = ids
    row_segments[: ids.size] = segments
    row_mask[: ids.size] = 1
    return row_ids, row_segments, row_mask


def answer_words(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """The word ids that open and that close a planted answer: the rarest ranks of the vocabulary (its last ids), up to
    SQUAD_ANSWER_WORDS of each, so the Zipf statistics of everything else barely change."""
    count = int(np.clip((vocab.size - vocab.first_word) // 8, 1, SQUAD_ANSWER_WORDS))
    closing = np.arange(vocab.size - count, vocab.size)
    return closing - count, closing


def squad_examples(batch_size: int, seed: int, seq_len: int, vocab: Vocabulary) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """SQuAD-like question/context rows and their answers: total length ~N(172, 172) clipped to [1, seq_len], a question
    of ~13 word pieces (at most 64) then the context; rows shorter than the structure keep a prefix of
    [CLS] question [SEP] context [SEP].

    Each context of at least SQUAD_ANSWER_MIN tokens holds one answer span of SQUAD_ANSWER_MIN..SQUAD_ANSWER_MAX tokens at
    a random place, entity-like: it opens with a word of :func:`answer_words`' opening set and closes with one of its
    closing set, words that occur nowhere else in the row. Returns the inputs and the answers (batch, 2) as inclusive
    (start, end) positions, (-1, -1) for rows without one."""
    opening, closing = answer_words(vocab)
    reserved = opening[0]
    rows, answers = [], np.full((batch_size, 2), -1, np.int64)
    for index in range(batch_size):
        rng = np.random.default_rng([seed, index])
        length = int(np.clip(round(rng.normal(SQUAD_LENGTH_MEAN, SQUAD_LENGTH_STD)), 1, seq_len))
        question = int(np.clip(round(rng.normal(SQUAD_QUESTION_MEAN, SQUAD_QUESTION_STD)), 1, SQUAD_MAX_QUERY))
        question = min(question, max(length - 2, 0))
        context = max(length - question - 3, 0)
        ids, segments, mask = _pair_row(rng, vocab, question, context, seq_len)
        ids[length:], segments[length:], mask[length:] = vocab.pad, 0, 0
        ids[ids >= reserved] -= 2 * opening.size  # the rare Zipf draws of answer words become ordinary words
        if context >= SQUAD_ANSWER_MIN:
            span = int(rng.integers(SQUAD_ANSWER_MIN, min(SQUAD_ANSWER_MAX, context) + 1))
            start = question + 2 + int(rng.integers(0, context - span + 1))
            end = start + span - 1
            ids[start], ids[end] = rng.choice(opening), rng.choice(closing)
            answers[index] = start, end
        rows.append((ids, segments, mask))
    return _stack(rows, ("input_ids", "token_type_ids", "attention_mask")), answers


def squad_like(batch_size: int, seed: int, seq_len: int, vocab: Vocabulary) -> dict[str, np.ndarray]:
    """The inputs of :func:`squad_examples` (without the answers)."""
    return squad_examples(batch_size, seed, seq_len, vocab)[0]


def topic_words(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """The shared topic's keyword ids and the other topic's: two sets of up to CAIL_TOPIC_WORDS ids just below
    :func:`answer_words`' (the rarest ranks but those), so the Zipf statistics of everything else barely change."""
    count = int(np.clip((vocab.size - vocab.first_word) // 16, 1, CAIL_TOPIC_WORDS))
    end = answer_words(vocab)[0][0]  # the first answer word
    other = np.arange(end - count, end)
    return other - count, other


def cail_examples(batch_size: int, seed: int, seq_len: int,
                  vocab: Vocabulary) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """CAIL2019-SCM-like case pairs and which row of each pair is the similar one: triplet t gives samples 2t = (A, B)
    and 2t+1 = (A, C), the same text A first, so ``score[0::2] > score[1::2]`` is the seed benchmark's metric. Texts
    ~N(680, 180) tokens (at least 64), ``[CLS] A [SEP] B [SEP]`` cut to ``seq_len`` by dropping tokens from the end
    of the longer text.

    Similarity is planted in the content, as two cases about the same kind of dispute share its terms: A and exactly one
    of B, C (which one drawn from the triplet's own stream) draw CAIL_TOPIC_FRACTION of their tokens from the shared
    topic's keywords (:func:`topic_words`), the other text as many from the other topic's keywords; all other tokens are
    Zipf words, in which the keyword ids do not occur. Returns the inputs and, per row, whether it is the similar one
    (exactly one of rows 2t, 2t+1; the last triplet of an odd batch keeps only its row 2t)."""
    shared, other = topic_words(vocab)
    reserved = shared[0]
    rows, similar = [], np.zeros(batch_size, bool)
    for index in range(batch_size):
        triplet, second = divmod(index, 2)
        rng_a = np.random.default_rng([seed, triplet, 0])
        rng_b = np.random.default_rng([seed, triplet, 1 + second])
        len_a = max(int(round(rng_a.normal(CAIL_TEXT_MEAN, CAIL_TEXT_STD))), CAIL_TEXT_MIN)
        len_b = max(int(round(rng_b.normal(CAIL_TEXT_MEAN, CAIL_TEXT_STD))), CAIL_TEXT_MIN)
        words_a = _with_keywords(rng_a, vocab, zipf_words(rng_a, vocab, len_a), shared, reserved)
        similar[index] = second == rng_a.integers(2)
        words_b = _with_keywords(rng_b, vocab, zipf_words(rng_b, vocab, len_b), shared if similar[index] else other,
                                 reserved)
        while len_a + len_b + 3 > seq_len and len_a + len_b > 0:
            if len_a > len_b:
                len_a -= 1
            else:
                len_b -= 1
        rows.append(_pair_row(rng_b, vocab, len_a, len_b, seq_len, words_a=words_a[:len_a], words_b=words_b[:len_b]))
    return _stack(rows, ("input_ids", "token_type_ids", "attention_mask")), similar


def _with_keywords(rng, vocab: Vocabulary, words: np.ndarray, keywords: np.ndarray, reserved: int) -> np.ndarray:
    """``words`` with the Zipf draws of reserved ids (``reserved`` on) made ordinary words and CAIL_TOPIC_FRACTION of
    the positions (drawn from ``rng``) replaced by random ``keywords``."""
    words = np.where(words >= reserved, vocab.first_word + (words - reserved) % (reserved - vocab.first_word), words)
    count = int(round(CAIL_TOPIC_FRACTION * words.size))
    places = rng.choice(words.size, size=count, replace=False)
    words[places] = rng.choice(keywords, size=count)
    return words


def cail_like_pairs(batch_size: int, seed: int, seq_len: int, vocab: Vocabulary) -> dict[str, np.ndarray]:
    """The inputs of :func:`cail_examples` (without which row is the similar one)."""
    return cail_examples(batch_size, seed, seq_len, vocab)[0]


def _stack(rows, names) -> dict[str, np.ndarray]:
    return {name: np.stack([row[i] for row in rows]) for i, name in enumerate(names)}
