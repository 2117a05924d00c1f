from functools import partial

import pytest
import torch
import torch.nn.functional as F

from armlm.diagnostics.likelihood import exact_chain_rule_nll
from armlm.diagnostics.scoring import Scorer
from armlm.models.attention import CAUSAL
from armlm.models.backbone import ModelConfig, Transformer
from armlm.objectives.plm import PermutationLM, TwoStreamInputs

V, MASK = 30, 4


def model(positions="rope"):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=V, max_len=32, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                   dropout=0.0, positions=positions)).eval()


def blocks(rows=3, length=10, seed=1):
    ids = torch.randint(6, V, (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = 2  # [CLS]
    return ids


class IdentityOrder(PermutationLM):
    def ranks(self, batch, generator=None):
        return self.identity_order(batch["input_ids"])


def plm(cls=PermutationLM, **kw):
    """Strict order and uniformly random targets unless asked otherwise: what the order oracles below are about."""
    kw = {"targets": "tokens", "non_targets": "ordered", **kw}
    objective = cls(**kw)
    objective.start_id = MASK
    return objective


def other_token(ids, row, position):
    changed = ids.clone()
    changed[row, position] = (changed[row, position] - 5) % (V - 6) + 6
    return changed


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_the_content_stream_in_the_identity_order_is_the_causal_backbone(positions):
    m, ids = model(positions), blocks()
    ranks = PermutationLM.identity_order(ids)
    streams = TwoStreamInputs(ids, ranks, ranks >= 1, MASK)
    every_row = m(streams.input_ids, attention=streams.attention, position_ids=streams.position_ids)
    torch.testing.assert_close(every_row[:, :ids.shape[1]], m(ids, attention=CAUSAL))


def test_identity_order_with_k_1_predicts_every_next_token_as_the_left_to_right_scores_do():
    """With the identity order and K = 1 the query stream is a left-to-right factorisation over AR's targets:
    the loss is the mean of -log p(x_t | x_<t) read from `next_token_states` (the diagnostics' and sampler's
    path). It is not AR's number on the same weights: AR predicts x_t+1 from x_t's state, XLNet from a query
    row that holds only the position."""
    m, ids = model(), blocks()
    out = plm(IdentityOrder, partial_k=1).loss({"input_ids": ids}, m)
    assert int(out.predicted_tokens) == ids.numel() - ids.shape[0]
    logits = m.logits(PermutationLM.next_token_states(m, ids, MASK)[:, :-1]).float()
    logits[..., MASK] = float("-inf")  # the start vector's token is out of the support
    torch.testing.assert_close(out.loss, F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1)))


def test_the_diagnostics_exact_nll_of_a_plm_is_its_identity_order_loss():
    """`armlm evaluate`'s chain-rule NLL (a PLM's query stream, [MASK] out of the support as in training) is the loss
    the objective computes in the identity order at K = 1, and [MASK] gets no probability from the scorer."""
    m, ids = model(), blocks(rows=4, length=10)
    result = exact_chain_rule_nll(m, ids, eod_id=3, next_states=partial(PermutationLM.next_token_states, m,
                                                                         mask_id=MASK), excluded=MASK)
    loss = plm(IdentityOrder, partial_k=1).loss({"input_ids": ids}, m).loss
    assert result.nll_per_token == pytest.approx(float(loss.detach()), rel=1e-5)
    scorer = Scorer(m, next_states=partial(PermutationLM.next_token_states, m, mask_id=MASK), excluded=MASK)
    log_probs = scorer.next_token_logits(ids[0])
    assert bool(torch.isneginf(log_probs[:, MASK]).all())
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(ids.shape[1]))


def test_no_query_sees_its_own_token_or_later_ones_and_no_content_sees_later_ones():
    m, ids = model(), blocks(rows=1, length=12)
    objective = plm(partial_k=1)
    ranks = objective.ranks({"input_ids": ids}, torch.Generator().manual_seed(4))
    streams = TwoStreamInputs(ids, ranks, objective.predicted({"input_ids": ids}, ranks), MASK)
    base = m(streams.input_ids, attention=streams.attention, position_ids=streams.position_ids)[0]
    t = ids.shape[1]
    query_of = {int(z): t + k for k, z in enumerate(streams.query_positions[0])}
    for changed_pos in range(1, t):
        changed = other_token(ids, 0, changed_pos)
        again = TwoStreamInputs(changed, ranks, streams.valid.new_ones(1, t) & (ranks >= 1), MASK)
        out = m(again.input_ids, attention=again.attention, position_ids=again.position_ids)[0]
        rank = int(ranks[0, changed_pos])
        for z, row in query_of.items():
            if int(ranks[0, z]) <= rank:  # its own token, or one later in its order: no dependence
                torch.testing.assert_close(out[row], base[row])
            else:  # an earlier token of its order is seen
                assert not torch.allclose(out[row], base[row])
        for i in range(t):
            if int(ranks[0, i]) < rank:
                torch.testing.assert_close(out[i], base[i])
            elif i == changed_pos:
                assert not torch.allclose(out[i], base[i])


def two_stream_oracle(m: Transformer, ids: torch.Tensor, ranks: torch.Tensor, z: int) -> torch.Tensor:
    """XLNet's equations written out for one row (pre-LN blocks): the content stream h runs alone, and at each
    layer the query state g of target z attends with its own query to the keys and values of the previous
    layer's content states of positions earlier in the order, g(0) = w + (z's position)."""
    t = ids.shape[1]
    content_mask = ranks[0][None, :] <= ranks[0][:, None]
    h = m.token_embedding(ids) + m.type_embedding.weight[0]
    g = m.token_embedding.weight[MASK] + m.type_embedding.weight[0]
    if m.position_embedding is not None:
        h, g = h + m.position_embedding.weight[:t], g + m.position_embedding.weight[z]
    g = g[None, None]  # (1, 1, d)
    sees = (ranks[0] < ranks[0, z])[None, None, None]  # (1, 1, 1, T): keys before z in the order
    heads = m.config.n_heads
    for block in m.blocks:
        attn = block.attn
        normed_h, normed_g = block.norm1(h), block.norm1(g)
        _, k, v = attn.qkv(normed_h).view(1, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
        q = attn.qkv(normed_g).view(1, 1, 3, heads, -1).permute(2, 0, 3, 1, 4)[0]
        if attn.rotary is not None:
            k = attn.rotary(k)
            q = attn.rotary(q, torch.tensor([[z]]))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=sees)
        g = g + attn.proj(y.transpose(1, 2).reshape(1, 1, -1))
        g = g + block.mlp(block.norm2(g))
        h = block(h, mask=content_mask[None, None], is_causal=False)
    return m.final_norm(g)[0, 0]


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_the_query_stream_is_xlnets_two_stream_attention(positions):
    """Oracle: each predicted position's state against the per-layer equations above (its position, its start
    vector and the previous layer's content states all enter, so an off-by-one in any of them fails)."""
    m, ids = model(positions), blocks(rows=1, length=12)
    objective = plm(partial_k=2)
    ranks = objective.ranks({"input_ids": ids}, torch.Generator().manual_seed(7))
    streams = TwoStreamInputs(ids, ranks, objective.predicted({"input_ids": ids}, ranks), MASK)
    with torch.no_grad():
        states = streams.run(m)
        expected = torch.stack([two_stream_oracle(m, ids, ranks, int(z)) for z in streams.query_positions[0]])
    torch.testing.assert_close(states, expected)


def test_query_rows_do_not_interact():
    """Oracle: each predicted position's query state equals a run with that query row alone."""
    m, ids = model(), blocks(rows=2, length=12)
    objective = plm(partial_k=3)
    ranks = objective.ranks({"input_ids": ids}, torch.Generator().manual_seed(2))
    predicted = objective.predicted({"input_ids": ids}, ranks)
    together = TwoStreamInputs(ids, ranks, predicted, MASK).run(m)
    alone = []
    for row in range(ids.shape[0]):
        for z in torch.nonzero(predicted[row]).flatten().tolist():
            only = torch.zeros_like(predicted[row:row + 1])
            only[0, z] = True
            alone.append(TwoStreamInputs(ids[row:row + 1], ranks[row:row + 1], only, MASK).run(m))
    torch.testing.assert_close(together, torch.cat(alone))


def test_orders_put_cls_first_padding_last_and_predict_the_last_share():
    ids = blocks(rows=500, length=20)
    mask = torch.ones_like(ids)
    mask[:250, 15:] = 0  # 14 targets in half the rows, 19 in the others
    batch = {"input_ids": ids, "attention_mask": mask}
    objective = plm(partial_k=6)
    ranks = objective.ranks(batch, torch.Generator().manual_seed(0))
    assert torch.equal(ranks.sort(1).values, torch.arange(20).expand(500, 20))  # a permutation per row
    assert bool((ranks[:, 0] == 0).all()) and bool((ranks[:250, 15:] >= 15).all())
    predicted = objective.predicted(batch, ranks)
    assert predicted[:250].sum(1).tolist() == [2] * 250 and predicted[250:].sum(1).tolist() == [3] * 250
    assert not predicted[:250, 15:].any() and not predicted[:, 0].any()
    assert bool((ranks[250:][predicted[250:]] >= 17).all())  # the last three of 19
    # every target position is predicted about equally often (the orders are uniform)
    share = predicted[250:, 1:].float().mean(0)
    assert float(share.min()) > 0.08 and float(share.max()) < 0.25


@pytest.mark.parametrize("kw,match", [({"partial_k": 0}, "partial_k"), ({"targets": "words"}, "targets"),
                                      ({"non_targets": "causal"}, "non_targets"), ({"max_span": 0}, "max_span")])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        PermutationLM(**kw)


def released(**kw):
    return plm(targets="spans", non_targets="bidirectional", **kw)


def test_released_xlnet_predicts_spans_of_one_to_five_with_weights_one_over_n():
    ids = blocks(rows=3000, length=64)
    objective = released(partial_k=6)
    ranks, predicted = objective.orders({"input_ids": ids}, torch.Generator().manual_seed(0))
    assert predicted.sum(1).tolist() == [11] * 3000 and not predicted[:, 0].any()  # floor(63 / 6 + 0.5)
    lengths = []
    for row in predicted[:400].tolist():
        run = 0
        for hit in [*row, False]:
            if hit:
                run += 1
            elif run:
                lengths.append(run)
                run = 0
    counts = torch.bincount(torch.tensor(lengths), minlength=6)[1:6].float()
    # 1/n weights, cut where the row's count runs out, then topped up with single tokens: the shares fall with n
    assert bool((counts[:-1] > counts[1:]).all()), counts
    assert float(counts[2] / counts[0]) < 0.5 and int(counts[4]) > 0
    # the predicted positions come after every other, in a random order among themselves; the others share rank 0
    assert bool((ranks[~predicted] == 0).all())
    target_ranks = ranks[predicted].view(3000, -1).sort(1).values
    assert bool((target_ranks > 0).all()) and bool((target_ranks.diff(dim=1) == 1).all())


def test_released_non_targets_see_each_other_and_never_a_target():
    """Change one position; a non-target's content state changes iff the position is another non-target (or
    itself); a target's query never depends on its own token or on a later target."""
    m, ids = model(), blocks(rows=1, length=14)
    objective = released(partial_k=3)
    ranks, predicted = objective.orders({"input_ids": ids}, torch.Generator().manual_seed(5))
    streams = TwoStreamInputs(ids, ranks, predicted, MASK)
    base = m(streams.input_ids, attention=streams.attention, position_ids=streams.position_ids)[0]
    t = ids.shape[1]
    query_of = {int(z): t + k for k, z in enumerate(streams.query_positions[0])}
    for changed_pos in range(1, t):
        changed = other_token(ids, 0, changed_pos)
        again = TwoStreamInputs(changed, ranks, predicted, MASK)
        out = m(again.input_ids, attention=again.attention, position_ids=again.position_ids)[0]
        for i in range(1, t):
            if not predicted[0, i]:  # a non-target sees every non-target and no target
                if predicted[0, changed_pos]:
                    torch.testing.assert_close(out[i], base[i])
                else:
                    assert not torch.allclose(out[i], base[i])
        for z, row in query_of.items():
            later_or_own = predicted[0, changed_pos] and int(ranks[0, changed_pos]) >= int(ranks[0, z])
            if later_or_own:
                torch.testing.assert_close(out[row], base[row])
            else:
                assert not torch.allclose(out[row], base[row])


def test_the_released_query_stream_is_xlnets_two_stream_attention():
    """The two-stream oracle with released orders (ties at rank 0 for the non-targets)."""
    m, ids = model(), blocks(rows=1, length=12)
    ranks, predicted = released(partial_k=2).orders({"input_ids": ids}, torch.Generator().manual_seed(3))
    streams = TwoStreamInputs(ids, ranks, predicted, MASK)
    with torch.no_grad():
        states = streams.run(m)
        expected = torch.stack([two_stream_oracle(m, ids, ranks, int(z)) for z in streams.query_positions[0]])
    torch.testing.assert_close(states, expected)
