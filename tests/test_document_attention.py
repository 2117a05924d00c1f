"""Document-masked packing (data.cross_document_attention=false): each position of a packed block attends only to
its own document and the block's [CLS], which a loop that runs every document alone behind a [CLS] reproduces."""

import numpy as np
import pytest
import torch

from armlm.datamodules.blocks import PackedBlocks, document_ids
from armlm.models.attention import BIDIRECTIONAL, CAUSAL, Attention, sdpa_arguments
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.ar import next_token_loss
from armlm.objectives.mlm import MaskedLM

EOD = 5  # tests.helpers.configs.make_vocabulary's [EOD]
# Each device masks with its own attention kernels (on CUDA, SDPA picks a masked kernel, not the causal flash one):
# where a GPU is present, the oracle holds there too.
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def block_with_documents(vocab, rows=3, length=30, seed=0):
    """(B, T) blocks: [CLS] then ordinary tokens with [EOD]s at different places in each row (the last row none)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, vocab.size, (rows, length), generator=g)
    ids[:, 0] = vocab.cls_id
    ids[0, [7, 19]] = vocab.eod_id
    ids[1, [3, 4, 25]] = vocab.eod_id  # a one-token document between two [EOD]s
    return ids


def documents_of(ids):
    return torch.from_numpy(np.stack([document_ids(row.numpy(), EOD) for row in ids]))


def model_of(vocab, positions, device="cpu"):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=vocab.size, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=64,
                                   dropout=0.0, positions=positions)).eval().to(device)


def alone(model, ids, documents, attention):
    """(B, T, d): every document run by itself behind the block's [CLS], at the positions it has in its block, the
    [CLS] attending to itself alone (so its states are the same in every document's run): the oracle."""
    out = torch.zeros(*ids.shape, model.config.d_model, device=ids.device)
    for r in range(ids.shape[0]):
        for doc in documents[r].unique():
            where = torch.cat([torch.zeros(1, dtype=torch.long, device=ids.device),
                               (documents[r] == doc).nonzero().squeeze(1)]).unique()
            n = len(where)
            allowed = torch.ones(n, n, dtype=torch.bool, device=ids.device)
            if attention.kind == "causal":
                allowed = allowed.tril()
            allowed[0, 1:] = False  # the [CLS] sees itself alone
            out[r, where] = model(ids[r:r + 1, where], attention=Attention.explicit(allowed[None]),
                                  position_ids=where[None])[0]
    return out


def test_document_ids_count_the_eods_before_each_position(vocab):
    block = np.array([vocab.cls_id, 9, EOD, 8, EOD, EOD, 7, 7])
    assert document_ids(block, EOD).tolist() == [0, 0, 0, 1, 1, 2, 3, 3]  # an [EOD] ends its own document
    assert document_ids(block[:2], EOD).tolist() == [0, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("positions", ["learned", "rope"])
@pytest.mark.parametrize("kind", ["causal", "bidirectional"])
def test_each_document_reads_as_if_it_were_alone(vocab, positions, kind, device):
    model = model_of(vocab, positions, device)
    ids = block_with_documents(vocab).to(device)
    documents = documents_of(ids.cpu()).to(device)
    static = Attention.named(kind)
    with torch.no_grad():
        within = model(ids, attention=static.within(documents))
        oracle = alone(model, ids, documents, static)
        across = model(ids, attention=static)
    assert torch.allclose(within, oracle, atol=1e-5)
    if kind == "causal":  # a row that is one document is unchanged (its [CLS] saw only itself already)
        assert torch.allclose(within[2], across[2], atol=1e-5)
    assert not torch.allclose(within[0], across[0], atol=1e-3)  # the others are not


def test_every_document_attends_to_the_blocks_cls_which_attends_to_itself_alone(vocab):
    ids = block_with_documents(vocab)[:1]
    documents = documents_of(ids)  # row 0: documents 0 (positions 0-7), 1 (8-19), 2 (20-29)
    mask, is_causal = sdpa_arguments(BIDIRECTIONAL.within(documents), None, 1, ids.shape[1], ids.device)
    allowed = mask[0, 0]
    assert not is_causal and allowed[:, 0].all()  # every position sees the [CLS]
    assert allowed[0].tolist() == [True] + [False] * (ids.shape[1] - 1)  # which sees only itself
    same = documents[0][:, None] == documents[0][None, :]
    assert torch.equal(allowed[1:, 1:], same[1:, 1:])  # otherwise its own document, every token of it


def test_ar_losses_equal_the_per_document_loop(vocab):
    model = model_of(vocab, "learned")
    ids = block_with_documents(vocab)
    documents = documents_of(ids)
    with torch.no_grad():
        out = next_token_loss({"input_ids": ids, "document_ids": documents}, model)
        states = alone(model, ids, documents, CAUSAL)
        logp = torch.log_softmax(model.logits(states[:, :-1]), -1).gather(2, ids[:, 1:, None]).squeeze(2)
    assert out.lm_nll_sum.item() == pytest.approx(-logp.sum().item(), rel=1e-5)
    # and document by document: the NLL of the targets read inside each ([EOD] reads the next one's first token)
    with torch.no_grad():
        packed = model(ids, attention=CAUSAL.within(documents))
        packed_logp = torch.log_softmax(model.logits(packed[:, :-1]), -1).gather(2, ids[:, 1:, None]).squeeze(2)
    for doc in documents[0].unique():
        inside = documents[0, :-1] == doc
        assert packed_logp[0][inside].sum().item() == pytest.approx(logp[0][inside].sum().item(), rel=1e-5)


def test_mlm_losses_equal_the_per_document_loop(vocab):
    model = model_of(vocab, "rope")
    objective = MaskedLM()
    objective.set_vocabulary(vocab)
    ids = block_with_documents(vocab)
    documents = documents_of(ids)
    with torch.no_grad():
        out = objective.loss({"input_ids": ids, "document_ids": documents}, model, torch.Generator().manual_seed(3))
        corrupted, labels = objective.corrupt(ids, torch.Generator().manual_seed(3))
        states = alone(model, corrupted, documents, BIDIRECTIONAL)
        selected = labels >= 0
        nll = -torch.log_softmax(model.logits(states[selected]), -1).gather(1, labels[selected][:, None]).sum()
    assert out.lm_nll_sum.item() == pytest.approx(nll.item(), rel=1e-5)


def test_document_masked_flops_count_every_score(vocab):
    """A dense mask makes SDPA compute the blocks above the diagonal too: the count says so."""
    model = model_of(vocab, "learned")
    ids = block_with_documents(vocab)
    plain = model.forward_flops(ids, CAUSAL)
    within = model.forward_flops(ids, CAUSAL.within(documents_of(ids)))
    assert within > plain and within == model.forward_flops(ids, BIDIRECTIONAL)


def test_packed_blocks_carry_document_ids_only_when_asked(vocab):
    tokens = np.array([7, 8, EOD, 9, 9, 9, EOD, 7, 8, 9, 7, 8, EOD, 9, 9, 7], dtype=np.int64)
    plain, split = PackedBlocks(tokens, 8, vocab), PackedBlocks(tokens, 8, vocab, documents=True)
    assert set(plain[0]) == {"input_ids"}
    assert torch.equal(split[0]["input_ids"], plain[0]["input_ids"])  # the same tokens and blocks either way
    assert split[0]["document_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert split[1]["document_ids"].tolist() == [0, 0, 0, 0, 0, 0, 0, 1]


def test_bad_document_ids_are_refused():
    with pytest.raises(ValueError, match="integer document id"):
        BIDIRECTIONAL.within(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="do not fit"):
        Transformer(ModelConfig(vocab_size=10, d_model=8, n_layers=1, n_heads=1, d_ff=8))(
            torch.zeros(1, 4, dtype=torch.long), attention=BIDIRECTIONAL.within(torch.zeros(1, 5, dtype=torch.long)))
