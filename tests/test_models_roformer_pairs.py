"""roformer's CAIL-like pairs with planted similarity, and the similarity head fitted to them."""

from __future__ import annotations

import numpy as np

import models
from models import roformer, text
from models.seeds import EVAL_SEED

VOCAB = text.Vocabulary.for_model(50000, **text.ROFORMER_VOCAB)


def _texts(ids, segments, mask):
    """The two texts of a row [CLS] a [SEP] b [SEP] (the final [SEP] of a cut row may be missing)."""
    a = ids[(segments == 0) & (mask == 1)][1:-1]
    b = ids[(segments == 1) & (mask == 1)]
    return a, b[:-1] if b.size and b[-1] == VOCAB.sep else b


def test_pairs_plant_the_shared_topic_in_a_and_the_similar_text():
    inputs, similar = text.cail_examples(40, 3, 1024, VOCAB)
    ids, segments, mask = inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"]
    shared, other = text.topic_words(VOCAB)
    assert shared.size == other.size == text.CAIL_TOPIC_WORDS and not set(shared) & set(other)
    assert shared.min() > VOCAB.first_word and other.max() < text.answer_words(VOCAB)[0].min()
    assert np.all(similar[0::2] != similar[1::2]), "exactly one similar row per triplet"
    assert 5 <= similar[0::2].sum() <= 15, "the similar one is B or C at random"
    for row in range(len(ids)):
        a, b = _texts(ids[row], segments[row], mask[row])
        own, foreign = (shared, other) if similar[row] else (other, shared)
        assert not np.isin(a, other).any() and not np.isin(b, foreign).any()
        assert not np.isin(ids[row], text.answer_words(VOCAB)).any()
        for words, keywords in ((a, shared), (b, own)):
            share = np.isin(words, keywords).mean()
            assert abs(share - text.CAIL_TOPIC_FRACTION) < 0.1, (row, share)
        if row ^ 1 < len(ids):  # the same text A in both rows of the triplet, cut to different lengths
            partner = _texts(ids[row ^ 1], segments[row ^ 1], mask[row ^ 1])[0]
            shorter = min(a.size, partner.size)
            np.testing.assert_array_equal(a[:shorter], partner[:shorter])


def test_pairs_keep_the_lengths_and_the_cut_of_cail():
    """Text lengths are the first draws of each text's stream, ~N(680, 180) and at least 64; a row longer than the
    sequence is cut by dropping tokens from the end of the longer text."""
    seed, seq_len, batch = 2, 1024, 30
    inputs = text.cail_examples(batch, seed, seq_len, VOCAB)[0]
    for row in range(batch):
        triplet, second = divmod(row, 2)
        draw = [max(int(round(np.random.default_rng([seed, triplet, s]).normal(680.0, 180.0))), 64)
                for s in (0, 1 + second)]
        len_a, len_b = draw
        while len_a + len_b + 3 > seq_len:
            len_a, len_b = (len_a - 1, len_b) if len_a > len_b else (len_a, len_b - 1)
        a, b = _texts(inputs["input_ids"][row], inputs["token_type_ids"][row], inputs["attention_mask"][row])
        assert (a.size, b.size) == (len_a, len_b)
        assert inputs["attention_mask"][row].sum() == min(sum(draw) + 3, seq_len)
        assert inputs["input_ids"][row, 0] == VOCAB.cls and inputs["input_ids"][row, len_a + 1] == VOCAB.sep


def test_first_pairs_do_not_depend_on_the_batch_size():
    small, labels = text.cail_examples(5, 4, 256, VOCAB)
    large, more_labels = text.cail_examples(12, 4, 256, VOCAB)
    for key in small:
        np.testing.assert_array_equal(small[key], large[key][:5])
    np.testing.assert_array_equal(labels, more_labels[:5])
    np.testing.assert_array_equal(text.cail_like_pairs(5, 4, 256, VOCAB)["input_ids"], small["input_ids"])


def test_fit_pair_head_separates_and_centres():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=12)
    similar = np.arange(40) % 2 == 0
    features = rng.normal(size=(40, 12)) + np.where(similar, 1.5, -1.5)[:, None] * direction
    weight, bias = roformer.fit_pair_head(features, similar)
    scores = features @ weight[0].astype(np.float64) + bias[0]
    assert weight.shape == (1, 12) and bias.shape == (1,)
    assert abs(scores[similar].mean() - scores[~similar].mean() - roformer.PAIR_MARGIN) < 1e-3
    assert abs(scores.mean()) < 1e-3
    assert np.corrcoef(weight[0], direction)[0, 1] > 0.9


def test_fitted_head_scores_the_similar_text_above_the_other():
    """On a small encoder and held-out rows (the evaluation seed, not the fitting seed), every FP32 pair decision is
    the planted one, by a clear margin."""
    model = models.load_model("roformer", num_hidden_layers=2, seq_len=128)
    inputs, similar = model.sample_examples(16, EVAL_SEED)
    scores = model(inputs)["logits"].ravel().astype(np.float64)
    margins = np.where(similar[0::2], scores[0::2] - scores[1::2], scores[1::2] - scores[0::2])
    assert margins.min() > 0.1 * roformer.PAIR_MARGIN, margins
    assert margins.mean() > 0.25 * roformer.PAIR_MARGIN, margins
    seeded = dict(model.params)
    models.load_model("roformer", num_hidden_layers=2, seq_len=128)  # the fit is deterministic
    again = models.load_model("roformer", num_hidden_layers=2, seq_len=128)
    np.testing.assert_array_equal(again.params["classifier.out_proj.weight"], seeded["classifier.out_proj.weight"])
