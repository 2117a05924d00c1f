from pathlib import Path

import pytest

from armlm.datamodules.release_corpora import BrownCorpus, WikiText, brown_to_text, split_wikitext_articles


@pytest.mark.slow
def test_brown_reader_strips_tags_and_keeps_every_word(data_dir):
    corpus = BrownCorpus(str(data_dir / "brown"))
    docs = corpus.read_documents()
    assert len(docs) == 500
    words = sum(len(text.split()) for _, text in docs)
    sentences = sum(len(text.splitlines()) for _, text in docs)
    assert (words, sentences) == (1_161_192, 57_340)  # NLTK's published figures
    assert dict(docs)["ca01"].startswith('The Fulton County Grand Jury said Friday an investigation of')
    splits = corpus.load()
    assert len(splits["validation"]) == 25 and len(splits["train"]) == 475


def test_brown_to_text_keeps_slashes_inside_words():
    assert brown_to_text("\tand/cc 1/2/cd ``/`` hi/uh ''/''\n\n") == 'and 1/2 " hi "'


def test_wikitext_articles_split_on_title_headings(data_dir):
    corpus = WikiText(str(data_dir / "wikitext-2" / "wiki.valid.tokens"), val_fraction=0.1)
    splits = corpus.load()
    articles = splits["train"] + splits["validation"]
    assert len(articles) == 60  # the valid split holds 60 articles
    assert len(splits["validation"]) == 6
    assert any(a.startswith("= Homarus gammarus =") for a in articles)


def test_wikitext_subsections_stay_in_their_article():
    lines = [" = A = ", " text a ", " = = Sub = = ", " more a ", " = B = ", " text b "]
    assert split_wikitext_articles(lines) == ["= A = \n text a \n = = Sub = = \n more a", "= B = \n text b"]


def test_missing_release_files_name_the_setting_to_fix(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="ARMLM_DATA_DIR or data.corpus.path"):
        BrownCorpus(str(tmp_path / "no-brown")).load()
    (tmp_path / "brown").mkdir()
    (tmp_path / "brown" / "README").write_text("not a Brown file")
    with pytest.raises(ValueError, match="no Brown files"):
        BrownCorpus(str(tmp_path / "brown")).load()
    with pytest.raises(FileNotFoundError, match="data.corpus.train_file/valid_file"):
        WikiText(str(tmp_path / "wiki.train.tokens")).load()


def test_wikitext_with_a_valid_file_reads_each_split_from_its_own_file(tmp_path: Path):
    (tmp_path / "train.tokens").write_text(" = A = \n text a \n = B = \n text b \n")
    (tmp_path / "valid.tokens").write_text(" = C = \n text c \n")
    splits = WikiText(str(tmp_path / "train.tokens"), str(tmp_path / "valid.tokens")).load()
    assert splits == {"train": ["= A = \n text a", "= B = \n text b"], "validation": ["= C = \n text c"]}
