import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from armlm.datamodules.conll import IGNORE_INDEX, subword_labels, word_predictions, word_subwords
from armlm.datamodules.tokenizer import TokenizerSettings, train_tokenizer
from armlm.finetune.metrics import EntityF1, entity_counts, entity_scores, task_metrics
from tests.helpers.configs import task_config
from tests.helpers.tasks import task_info

rng = np.random.default_rng(0)


def glue_metrics(task_name: str):
    """The metrics configs/task/<task_name>.yaml declares, built as a fine-tuning run builds them."""
    return task_metrics(task_info(task_config(task_name)))


def classify(task_name: str, n: int = 500, noise: float = 0.3):
    n_classes = len(task_info(task_config(task_name)).labels)
    gold = rng.integers(0, n_classes, n)
    predicted = np.where(rng.random(n) < noise, rng.integers(0, n_classes, n), gold)
    metrics = glue_metrics(task_name)
    metrics.update(torch.tensor(predicted), torch.tensor(gold))
    return {k: float(v) for k, v in metrics.compute().items()}, gold, predicted


def test_cola_matthews_matches_sklearn():
    scores, gold, predicted = classify("cola")
    assert scores == {"mcc": pytest.approx(matthews_corrcoef(gold, predicted), abs=1e-6)}


@pytest.mark.parametrize("constant", [0, 1])
def test_cola_matthews_of_a_constant_predictor_is_zero_as_in_sklearn(constant):
    gold = torch.tensor([1] * 721 + [0] * 322)  # CoLA dev's label counts
    metrics = glue_metrics("cola")
    metrics.update(torch.full_like(gold, constant), gold)
    assert float(metrics.compute()["mcc"]) == matthews_corrcoef(gold, torch.full_like(gold, constant)) == 0.0


@pytest.mark.parametrize("task", ["mrpc", "qqp"])
def test_f1_and_accuracy_match_sklearn(task):
    scores, gold, predicted = classify(task)
    assert scores["f1"] == pytest.approx(f1_score(gold, predicted), abs=1e-6)
    assert scores["accuracy"] == pytest.approx(accuracy_score(gold, predicted), abs=1e-6)


@pytest.mark.parametrize("task", ["sst2", "qnli", "rte", "wnli", "mnli"])
def test_accuracy_matches_sklearn(task):
    scores, gold, predicted = classify(task)
    assert scores == {"accuracy": pytest.approx(accuracy_score(gold, predicted), abs=1e-6)}


def test_stsb_correlations_match_scipy():
    gold = rng.uniform(0, 5, 300)
    predicted = gold + rng.normal(0, 1.0, 300)
    metrics = glue_metrics("stsb")
    metrics.update(torch.tensor(predicted, dtype=torch.float32), torch.tensor(gold, dtype=torch.float32))
    scores = {k: float(v) for k, v in metrics.compute().items()}
    assert scores["pearson"] == pytest.approx(pearsonr(predicted, gold)[0], abs=1e-4)
    assert scores["spearman"] == pytest.approx(spearmanr(predicted, gold)[0], abs=1e-4)


def test_entity_scores_count_whole_entities():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O"]]
    scores = entity_scores(gold, predicted)
    assert scores["precision"] == 1.0 and scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(0.8)
    assert scores["f1_PER"] == 1.0 and scores["f1_ORG"] == 1.0 and scores["f1_LOC"] == 0.0
    partial = entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])  # a truncated span is a miss
    assert partial["f1"] == 0.0
    with pytest.raises(ValueError, match="same sentences"):
        entity_scores([["O"]], [["O", "O"]])


def random_tags(n_sentences: int, types=("PER", "LOC", "ORG")) -> list[list[str]]:
    tags = ["O", *(f"{p}-{t}" for t in types for p in "BI")]  # stray I- tags too: seqeval starts an entity there
    return [[tags[i] for i in rng.integers(0, len(tags), rng.integers(1, 9))] for _ in range(n_sentences)]


def test_sentence_counts_give_seqeval_micro_f1_on_any_subset_of_sentences():
    """Brute-force oracle: seqeval rescoring the chosen sentences themselves."""
    gold = random_tags(300)
    predicted = [[t if rng.random() < 0.7 else random_tags(1)[0][0] for t in g] for g in gold]
    counts = np.asarray(entity_counts(gold, predicted))
    for _ in range(5):
        chosen = rng.integers(0, len(gold), len(gold))  # a bootstrap draw, repeats included
        tp, fp, fn = counts[chosen].sum(axis=0)
        expected = entity_scores([gold[i] for i in chosen], [predicted[i] for i in chosen])["f1"]
        assert 2 * tp / (2 * tp + fp + fn) == pytest.approx(expected, abs=1e-12)


def test_the_metric_gives_its_sentences_counts_in_dev_order():
    tags = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
    metric = EntityF1(tags)
    gold = torch.tensor([[1, 2, 0, IGNORE_INDEX], [3, 0, 0, 0]])
    predicted = torch.tensor([[1, 2, 0, 0], [0, 0, 3, 4]])
    metric.update(predicted, gold)
    assert metric.item_counts() == [[1, 0, 0], [0, 1, 1]]


def split_sentence():
    words = "Unbelievably , Johannesburg hosted the championships".split()
    # A vocabulary barely larger than the alphabet: every letter is known, long words split into pieces.
    tokenizer = train_tokenizer([" ".join(words) * 5], TokenizerSettings(vocab_size=64, min_frequency=1))
    encoding = tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False)
    assert len(encoding.ids) > len(words) and 1 not in encoding.ids  # words split into subwords, none unknown
    return words, encoding.word_ids


def test_first_subword_alignment_round_trips_word_labels():
    words, word_ids = split_sentence()
    word_labels = [3, 0, 1, 0, 0, 2]
    labels = subword_labels(word_ids, word_labels)
    starts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
    assert [labels[i] for i in starts] == word_labels
    assert all(label == IGNORE_INDEX for i, label in enumerate(labels) if i not in starts)
    assert word_predictions(word_ids, labels, len(words)) == word_labels
    cut = len(starts) - 1  # the length limit cuts the last word off
    assert word_predictions(word_ids[: starts[-1]], labels[: starts[-1]], len(words))[cut:] == [None]


@pytest.mark.parametrize("special_ends", [False, True])
def test_last_subword_labels_sit_where_each_word_ends(special_ends):
    words, word_ids = split_sentence()
    word_ids = [None, *word_ids, None] if special_ends else list(word_ids)  # [CLS] ... [SEP], as encode_words
    # Brute force: a word ends where the next token belongs to another word (or nothing follows).
    ends = [i for i, w in enumerate(word_ids) if w is not None and (i + 1 == len(word_ids) or word_ids[i + 1] != w)]
    assert len(ends) == len(words) and any(
        sum(w == k for w in word_ids) > 1 for k in range(len(words)))  # some word has several subwords
    word_labels = [3, 0, 1, 0, 0, 2]
    labels = subword_labels(word_ids, word_labels, "last")
    assert [labels[i] for i in ends] == word_labels
    assert all(label == IGNORE_INDEX for i, label in enumerate(labels) if i not in ends)
    assert word_predictions(word_ids, labels, len(words), "last") == word_labels
    assert [p for p, _ in word_subwords(word_ids, "last")] != [p for p, _ in word_subwords(word_ids, "first")]
    # A word the length limit cuts inside is read at its last kept subword: both readings score the same words.
    long_word = max(range(len(words)), key=lambda k: sum(w == k for w in word_ids))
    inside = word_ids.index(long_word) + 1
    kept = word_ids[:inside]
    assert [w for _, w in word_subwords(kept, "last")] == [w for _, w in word_subwords(kept, "first")]
    assert word_subwords(kept, "last")[-1] == (inside - 1, long_word)
    with pytest.raises(ValueError, match="word_subword='middle'"):
        word_subwords(word_ids, "middle")


