from collections import Counter

import pytest
from seqeval.metrics.sequence_labeling import get_entities

from armlm.datamodules.conll import iob1_to_iob2, read_conll

# shared/data/README.md: documents, sentences, tokens (DOCSTART lines excluded).
DOCUMENTED = {"eng.train": (946, 14041, 203621), "eng.testa": (216, 3250, 51362), "eng.testb": (231, 3453, 46435)}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_files_parse_to_the_documented_counts(data_dir, name):
    sentences = read_conll(data_dir / "conll2003" / name)
    docs, n_sentences, tokens = DOCUMENTED[name]
    assert len(sentences) == n_sentences
    assert sum(len(s.words) for s in sentences) == tokens
    assert len({s.document for s in sentences}) == docs


@pytest.mark.slow
def test_converted_tags_are_valid_iob2_and_keep_every_entity(data_dir):
    sentences = read_conll(data_dir / "conll2003" / "eng.train")
    iob1 = []
    with open(data_dir / "conll2003" / "eng.train", encoding="utf-8") as f:
        sentence = []
        for line in f:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if sentence:
                    iob1.append(sentence)
                sentence = []
            else:
                sentence.append(fields[-1])
    for original, parsed in zip(iob1, sentences, strict=True):
        tags = list(parsed.tags)
        for prev, tag in zip(["O"] + tags, tags):
            assert not tag.startswith("I-") or prev[2:] == tag[2:]  # every I- continues its entity
        assert get_entities(original) == get_entities(tags)
    entity_starts = Counter(t[2:] for s in sentences for t in s.tags if t.startswith("B-"))
    assert sum(entity_starts.values()) == len([e for s in sentences for e in get_entities(list(s.tags))])


def test_iob1_to_iob2_examples():
    assert iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]) == \
        ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG"]


def test_malformed_lines_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP\n")
    with pytest.raises(ValueError, match=r"bad.txt:4: expected 4 columns"):
        read_conll(bad)
    bad.write_text("EU NNP I-NP ORG\n")
    with pytest.raises(ValueError, match=r"bad.txt:1: .*NER tag"):
        read_conll(bad)
    with pytest.raises(FileNotFoundError, match="eng.train"):
        read_conll(tmp_path / "missing")
