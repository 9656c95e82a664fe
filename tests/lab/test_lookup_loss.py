"""The lookup loss (lab/training/step.py, lab/README.md §3): each answer row's ratio-1 attention asked onto the
entry of the token it repeats, and `lookup_reads`, which reads that target back."""

from __future__ import annotations

import contextlib

import pytest
import torch

from lab.training.lookup import LookupRecorder


def looked(m, x, target, **kw):
    """A forward with the lookup loss's recorder on `target` -> (the model's output, the lookup loss)."""
    rec = LookupRecorder(target)
    return m(x, trace=rec, **kw), rec.loss()


@contextlib.contextmanager
def kept_attention():
    """Every attention's probabilities in the forwards run inside the block, in call order (detached)."""
    import model.arch.attention as attention

    probs, real = {}, attention.attend

    def keep(*a):
        out = real(*a)
        probs[len(probs)] = out[1].detach()
        return out

    attention.attend = keep
    try:
        yield probs
    finally:
        attention.attend = real


def three_far_answers():
    """A random `tiny` narrowed to window 2 and two rows of 64 tokens whose answers at (0, 40), (1, 50), (1, 60)
    read positions 7, 12 and 33, all beyond the window."""
    from lab.training.step import set_window
    from model import random_tiny

    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (2, 64))
    sources = torch.full((2, 64), -1)
    sources[0, 40], sources[1, 50], sources[1, 60] = 7, 12, 33
    return m, x, sources


@pytest.mark.slow
def test_lookup_loss_asks_some_head_to_read_each_answers_source_over_its_rivals_and_training_on_it_does():
    """The lookup loss leaves the forward unchanged; it is -log P(some ratio-1 head reads the source's entry) -
    log(the source's share of the attention on it and its rivals, the row's other sources), recomputed here from the
    attention itself; dense and gathered reads agree when every entry is selected; rows whose source lies inside the
    window are not asked (their sources still rival); a few steps on it alone raise the attention on the sources."""
    from lab.training.lookup import lookup_target
    from model import Ablation

    m, x, sources = three_far_answers()
    sources[1, 20] = 19                                                  # one row back
    target = lookup_target(sources, 2)
    assert target.row.tolist() == [40, 50, 60] and target.position.tolist() == [7, 12, 33]
    assert target.rivals.tolist() == [[-1, -1], [19, 33], [12, 19]]
    dense = Ablation(dense_compressed=True)
    plain = m(x, ablation=dense)
    with kept_attention() as probs:
        out, lookup_loss = looked(m, x, target, ablation=dense)
    assert torch.equal(plain.logits, out.logits)
    w = m.cfg.sliding_window
    ratio1 = [i for i, layer in enumerate(m.layers) if layer.attn.ratio == 1]
    expected = []
    for b, r, e, rivals in [(0, 40, 7, []), (1, 50, 12, [19, 33]), (1, 60, 33, [12, 19])]:
        miss = torch.tensor(1.0)
        on = torch.zeros(1 + len(rivals))
        for i in ratio1:
            miss = miss * (1 - probs[i][b, r, :, w + e]).prod()
            on += probs[i][b, r, :, [w + p for p in [e] + rivals]].sum(0)
        expected.append(-torch.log(1 - miss) - torch.log(on[0] / on.sum()))
    assert abs(float(lookup_loss.detach()) - float(torch.stack(expected).mean())) < 1e-4
    _, gathered = looked(m, x, lookup_target(sources, 2), ablation=Ablation(index_topk=64))
    assert abs(float(gathered.detach()) - float(lookup_loss.detach())) < 1e-3
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    first = None
    for _ in range(8):
        opt.zero_grad()
        loss = looked(m, x, lookup_target(sources, 2), ablation=dense)[1]
        first = first if first is not None else float(loss.detach())
        loss.backward()
        opt.step()
    assert float(loss.detach()) < first - 1.0
    assert lookup_target(torch.full((1, 8), -1), 2) is None


@pytest.mark.slow
def test_inside_the_window_the_lookup_loss_reads_every_layers_window_share_on_the_source_and_trains_it():
    """`inside`: rows whose source lies inside the window are asked too, through the window slot that holds the
    source in every layer (window-only layers included; in a ratio-1 layer plus the source's own entry), recomputed
    here from the attention itself; without it those rows are not asked at all; a few steps on it alone raise that
    share (an induction head's target)."""
    from lab.training.lookup import lookup_target
    from model import Ablation, random_tiny

    m = random_tiny()
    w = m.cfg.sliding_window
    x = torch.randint(5, 4000, (2, 64))
    sources = torch.full((2, 64), -1)
    sources[0, 40], sources[1, 30], sources[1, 36] = 40 - (w - 1), 26, 20      # distances w-1, 4 and 16
    assert lookup_target(sources, w) is None
    target = lookup_target(sources, w, inside=True)
    assert target.row.tolist() == [40, 30, 36] and target.position.tolist() == [41 - w, 26, 20]
    assert target.rivals.tolist() == [[-1], [20], [26]]   # the row's other sources before it
    with kept_attention() as probs:
        out, lookup_loss = looked(m, x, target, ablation=Ablation(dense_compressed=True))
    assert len(probs) == len(m.layers)
    expected = []
    for b, r, e, rivals in [(0, 40, 41 - w, []), (1, 30, 26, [20]), (1, 36, 20, [26])]:
        miss = torch.tensor(1.0)
        on = torch.zeros(1 + len(rivals))
        for i, p in probs.items():
            on_each = p[b, r, :, [w - 1 - (r - q) for q in [e] + rivals]]    # slot j: position r - (w - 1) + j
            if m.layers[i].attn.ratio == 1:                                  # and the one-token entries, dense
                on_each = on_each + p[b, r, :, [w + q for q in [e] + rivals]]
            miss = miss * (1 - on_each[:, 0]).prod()
            on += on_each.sum(0)
        expected.append(-torch.log(1 - miss) - torch.log(on[0] / on.sum()))
    assert abs(float(lookup_loss.detach()) - float(torch.stack(expected).mean())) < 1e-4
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    first = None
    for _ in range(8):
        opt.zero_grad()
        loss = looked(m, x, lookup_target(sources, w, inside=True))[1]
        first = first if first is not None else float(loss.detach())
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.2 * first


def test_lookup_reads_counts_an_answer_read_when_its_source_gets_more_attention_than_its_rivals(monkeypatch):
    """lookup_reads: an attention that puts every ratio-1 row's entry mass `shift` positions back reads every source
    when the sources sit that far back, none when they sit one further; a random pick among three facts: 1/3."""
    import model.arch.attention as attention
    from lab.probes.evaluation import lookup_reads
    from lab.training import Rows, set_window
    from model import random_tiny

    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (1, 64))
    real = attention.attend

    def pointing(shift):
        def attend(q, kv, prev, values, mask, sink, w, limit):
            out, probs = real(q, kv, prev, values, mask, sink, w, limit)
            fake = torch.zeros_like(probs)
            for s in range(probs.shape[1]):
                if 0 <= s - shift < probs.shape[-1] - 1 - w:
                    fake[:, s, :, w + s - shift] = 1.0
            return out, fake
        return attend

    sources = torch.full((1, 64), -1)
    sources[0, 40], sources[0, 45], sources[0, 60] = 7, 12, 27            # each 33 back
    rows = Rows(x, x, sources >= 0, sources)
    monkeypatch.setattr(attention, "attend", pointing(33))
    assert lookup_reads(m, rows) == (1.0, pytest.approx(1 / 3))
    monkeypatch.setattr(attention, "attend", pointing(34))
    assert lookup_reads(m, rows)[0] == 0.0


@pytest.mark.slow
def test_entry_probe_reads_the_object_said_just_before_each_source_and_training_on_it_moves_the_model():
    """The entry probe's targets are the sources (positions some answer reads), each with the nearest object id in
    the 5 tokens before it; a source with none that near is left out. Its loss is the cross entropy of a linear
    read-out of the decoder KV source's latent at that position (and of a second read-out against the entry's own
    token, which the answer reads from it): the latent recomputed here through the layer's own
    compressor, the gradient reaches the encoder below it, and a few steps on the loss alone lower it."""
    from lab.training.schedule import TrainConfig
    from lab.training.step import EntryProbe, LatentTap, entry_loss, forward_backward
    from model import random_tiny

    m = random_tiny()
    objects = [500, 501, 502]
    probe = EntryProbe(m, objects)
    assert probe.layer == 6 and m.layers[6].attn.ratio == 1 and m.layers[6].attn.spec.makes_entries  # the decoder's
    x = torch.randint(1000, 4000, (2, 64))
    sources = torch.full((2, 64), -1)
    x[0, 10], x[0, 12] = 500, 501                      # two objects before position 14: the nearer (12) counts
    x[0, 30] = 502                                     # 6 tokens before 36: out of reach
    x[1, 5] = 500
    sources[0, 40], sources[0, 50], sources[1, 60], sources[1, 61] = 14, 36, 8, 8   # 8 read twice: one target
    b, p, obj = probe.targets(x, sources)
    assert sorted(zip(b.tolist(), p.tolist(), obj.tolist())) == [(0, 14, 501), (1, 8, 500)]
    tap = LatentTap(probe.layer)
    m(x, trace=tap)
    attn = m.layers[probe.layer].attn
    hidden = {}
    handle = attn.register_forward_pre_hook(lambda mod, args: hidden.update(x=args[0]))
    m(x)
    handle.remove()
    assert torch.allclose(tap.got, attn.compressor.forward_full(hidden["x"]), atol=1e-5)
    lat = tap.got[[0, 1], [14, 8]]
    want = torch.nn.functional.cross_entropy(probe.head(lat), torch.tensor([501, 500])) + \
        torch.nn.functional.cross_entropy(probe.own(lat), x[[0, 1], [14, 8]])
    assert abs(float(entry_loss(probe, tap.got, x, sources).detach()) - float(want.detach())) < 1e-5
    m.zero_grad()
    entry_loss(probe, tap.got, x, sources).backward()
    assert float(m.layers[0].attn.wkv.weight.grad.abs().sum()) > 0          # the encoder's first layer
    assert m.layers[probe.layer + 1].attn.wq_b.weight.grad is None           # nothing above the source
    m.zero_grad()
    en = forward_backward(m, x, x, TrainConfig(entry_weight=1.0), True, None, sources, probe).entry
    assert abs(float(en.detach()) - float(want.detach())) < 1e-4 and probe.head.weight.grad is not None
    opt = torch.optim.Adam(list(probe.parameters()) + list(m.parameters()), lr=3e-3)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        tap = LatentTap(probe.layer)
        m(x, trace=tap)
        loss = entry_loss(probe, tap.got, x, sources)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


def test_a_run_with_the_entry_probe_saves_and_resumes_its_model_state(tmp_path):
    """The probe's read-out is a parameter group of the optimizer but not of the model: a checkpoint holds the
    model and its moments only, and loads back into a run that has the probe again."""
    from lab.training.schedule import TrainConfig
    from lab.training.state import load_state, save_state
    from lab.training.step import EntryProbe, make_optimizer, train_step
    from model import random_tiny

    m = random_tiny()
    tc = TrainConfig(entry_weight=1.0, steps=2, warmup_steps=1)
    probe = EntryProbe(m, [500])
    opt = make_optimizer(m, tc, probe)
    x = torch.randint(1000, 4000, (1, 32))
    x[0, 3] = 500
    sources = torch.full((1, 32), -1)
    sources[0, 20] = 5
    rec = train_step(m, opt, x, x, tc, 0, None, sources, probe)
    assert rec["entry"] > 0
    save_state(tmp_path, m, opt, 1, tc, [rec])
    m2 = random_tiny()
    opt2 = make_optimizer(m2, tc, EntryProbe(m2, [500]))
    step, log = load_state(tmp_path, m2, opt2)
    assert step == 1 and torch.equal(m2.layers[0].attn.wkv.weight, m.layers[0].attn.wkv.weight)
    own = {id(p) for p in m.parameters()}
    assert len(opt2.state) == sum(1 for p in opt.state if id(p) in own) > 0     # the model's moments, not the probe's


def test_the_entry_probe_gradient_is_clipped_on_its_own():
    """The read-out's gradient is clipped to the same bound as the model's but separately, so a large probe
    gradient neither escapes the clip nor shrinks the model's step."""
    from lab.training.schedule import TrainConfig
    from lab.training.step import EntryProbe, make_optimizer, train_step
    from model import random_tiny

    m = random_tiny()
    tc = TrainConfig(entry_weight=1.0, steps=2, warmup_steps=1, clip=1e-3)
    probe = EntryProbe(m, [500])
    x = torch.randint(1000, 4000, (1, 32))
    x[0, 3] = 500
    sources = torch.full((1, 32), -1)
    sources[0, 20] = 5
    rec = train_step(m, make_optimizer(m, tc, probe), x, x, tc, 0, None, sources, probe)
    probe_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in probe.parameters()]))
    model_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in m.parameters() if p.grad is not None]))
    assert rec["grad_norm"] > 1e-3                       # there was something to clip
    assert float(probe_norm) <= 1e-3 * 1.001 and float(model_norm) <= 1e-3 * 1.001
    assert float(model_norm) > 0.9e-3                    # the model's step is the full clip, not shared with the probe


@pytest.mark.slow
def test_selection_loss_asks_the_indexers_to_rank_each_answers_source_first_and_training_on_it_does():
    """The selection loss leaves the forward unchanged; it is the cross entropy of each selecting ratio-1 layer's
    index scores at the answer row (every visible entry) against the source's entry, recomputed here from the
    indexers themselves; its gradient reaches the indexers and nothing else; a few steps on it alone bring the
    sources into the top-k of sparse attention."""
    from lab.training.lookup import LookupRecorder, lookup_target
    from lab.training.schedule import TrainConfig
    from lab.training.step import forward_backward, set_window
    from model import Ablation, random_tiny
    from model.arch.indexer import mask_visible
    from model.arch.rope import RopeTables

    torch.manual_seed(0)
    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (2, 200))
    sources = torch.full((2, 200), -1)
    sources[0, 150], sources[1, 190], sources[1, 120] = 7, 33, 60
    selecting = [i for i, layer in enumerate(m.layers) if layer.attn.ratio == 1 and layer.attn.spec.selects]
    assert len(selecting) >= 2
    target = lookup_target(sources, 2, select=True)
    plain = m(x)
    out = m(x, trace=LookupRecorder(target))
    assert torch.equal(plain.logits, out.logits) and len(target.scores) == len(selecting)
    # recompute from the indexers: keys from the source layer's latents, queries from each layer's input
    hidden = {}
    hooks = [m.layers[i].attn.register_forward_pre_hook(lambda mod, a, i=i: hidden.update({i: a[0]}))
             for i in set(selecting)]
    m(x)
    for h in hooks:
        h.remove()
    src = m.layers[selecting[0]].attn
    positions = torch.arange(200)
    rope = RopeTables.at(m.rotary, positions)
    cos, sin = rope.compress
    keys = src.indexer.keys(src.compressor.forward_full(hidden[selecting[0]]), cos, sin)
    expected = []
    for i in selecting:
        attn = m.layers[i].attn
        q_res = attn.q_norm(attn.wq_a(hidden[i]))
        sc = mask_visible(attn.indexer.scores(hidden[i], q_res, cos, sin, keys), positions, 1)
        rows = sc[target.batch, target.row]
        expected.append(torch.nn.functional.cross_entropy(rows, target.position))
    assert abs(float(target.select_loss().detach()) - float(torch.stack(expected).mean().detach())) < 1e-3
    got = forward_backward(m, x, x, TrainConfig(select_weight=1.0), True, None, sources)
    dense = lookup_target(sources, 2, select=True)
    m(x, trace=LookupRecorder(dense), ablation=Ablation(dense_compressed=True))   # the step's dense forward
    assert abs(float(got.select.detach()) - float(dense.select_loss().detach())) < 1e-4
    m.zero_grad()
    t = lookup_target(sources, 2, select=True)
    m(x, trace=LookupRecorder(t))
    t.select_loss().backward()
    moved = {n for n, p in m.named_parameters() if p.grad is not None and float(p.grad.abs().sum()) > 0}
    assert moved and all(".indexer." in n for n in moved), sorted(moved)[:5]
    assert any(".indexer.wk." in n for n in moved) and any(".indexer.wq_b." in n for n in moved)

    def ranks():
        t = lookup_target(sources, 2, select=True)
        m(x, trace=LookupRecorder(t))
        return [int((s > s.gather(1, t.position.view(-1, 1))).sum(1).max()) for s in t.scores]

    before = ranks()
    indexer_params = [p for n, p in m.named_parameters() if ".indexer." in n]
    opt = torch.optim.Adam(indexer_params, lr=1e-2)
    for _ in range(30):
        opt.zero_grad()
        t = lookup_target(sources, 2, select=True)
        m(x, trace=LookupRecorder(t))
        t.select_loss().backward()
        opt.step()
    after = ranks()
    assert max(after) < m.cfg.index_topk <= max(before)     # every source now inside every layer's top-k
    with torch.no_grad():
        sparse = m(x, ablation=Ablation())
    assert sparse.logits.shape == plain.logits.shape


def test_rival_positions_are_the_other_facts_colours_and_never_the_asked_one():
    """In held-out stories with other facts, each found position holds one of the distractors' colours, every
    distractor's colour is found, and the asked fact's own colour token is left out."""
    from lab.probes.evaluation import rival_positions
    from model.heldout import load_heldout_stories, token_index_at_char
    from model.tokenizer import load_tokenizer

    tok = load_tokenizer()
    rows = [r for r in load_heldout_stories() if r["distractors"]][:20]
    assert rows
    for r in rows:
        enc = tok.encode(r["text"], add_special_tokens=False)
        f = token_index_at_char(enc.offsets, r["fact_answer_start"])
        found = rival_positions(r["text"], enc, r["distractors"], f)
        said = {tok.decode([enc.ids[p]]).strip() for p in found}
        assert f not in found
        assert said == {c for _, c, _ in r["distractors"]}


@pytest.mark.slow
def test_rival_reads_count_the_top_k_and_the_index_order_of_the_asked_fact_against_its_rivals(monkeypatch):
    """With index scores that grow with the entry's position, the top-k holds only the latest entries (never a far
    fact), and at the candidate source the asked fact outranks its rivals exactly when it was said after all of them
    (read from the text's character offsets, not from token positions); scores that fall with position reverse the
    order. The layers that search the pool see neither far fact inside it: a tie, never first."""
    import model.arch.indexer as indexer
    from lab.probes.evaluation import rival_reads
    from model import random_tiny
    from model.heldout import load_heldout_stories

    m = random_tiny()
    rows = [r for r in load_heldout_stories() if r["bucket"] == "far" and r["distractors"]][:6]

    def after_all(r):
        starts = [r["text"].find(f"the {c} {k}") for _, c, k in r["distractors"]]
        return r["fact_answer_start"] > max(s for s in starts if s >= 0)

    for sign, want in ((1.0, sum(after_all(r) for r in rows) / 6), (-1.0, sum(not after_all(r) for r in rows) / 6)):
        def scores(self, x, q_res, cos, sin, keys, sign=sign):
            return sign * torch.arange(keys.shape[1], dtype=torch.float32).expand(x.shape[0], x.shape[1], -1)
        monkeypatch.setattr(indexer.Indexer, "scores", scores)
        reads = rival_reads(m, max_stories=6)
        assert reads and all(r.stories == 6 for r in reads.values())
        source = m.cfg.candidate_source_layer_id
        assert reads[source].fact_first == pytest.approx(want)
        for r in reads.values():
            assert 0.0 < r.chance <= 0.5
            if sign > 0:
                assert r.fact_in_topk == 0.0
                assert r.layer == source or r.fact_first == 0.0


def test_readout_forcing_hands_the_lookup_rows_their_source_entry_whatever_the_heads_look_at():
    """`forcing` (training only): at the lookup rows, every layer reading ratio-1 entries returns its output mixed
    that much with the source entry's value. At 1 the forced rows' logits no longer depend on where the decoder's
    queries point (every decoder layer of `tiny` reads ratio-1 entries), while at 0 they do; rows before the first
    forced row are untouched; the attention (and so the lookup loss) is what it was; a share outside [0, 1] is
    refused."""
    from lab.training.lookup import lookup_target
    from model import Ablation

    m, x, sources = three_far_answers()
    dense = Ablation(dense_compressed=True)
    reading = [i for i, layer in enumerate(m.layers) if layer.attn.ratio == 1]
    assert reading and reading == list(range(reading[0], len(m.layers)))

    def run(forcing: float):
        with kept_attention() as probs:
            out = m(x, ablation=dense, trace=LookupRecorder(lookup_target(sources, 2, forcing=forcing)))
        return out, probs

    plain, _ = run(0.0)
    forced, probs = run(1.0)
    half, probs_half = run(0.5)
    rows = [(0, 40), (1, 50), (1, 60)]
    for b, r in rows:
        assert not torch.allclose(plain.logits[b, r], forced.logits[b, r])
        assert not torch.allclose(half.logits[b, r], forced.logits[b, r])
    assert torch.equal(plain.logits[0, :40], forced.logits[0, :40])
    assert torch.equal(plain.logits[1, :50], forced.logits[1, :50])
    # the first reading layer sees the same inputs either way, so its attention is unchanged
    assert torch.equal(probs[reading[0]], probs_half[reading[0]])
    with torch.no_grad():
        for i in reading:
            m.layers[i].attn.wq_b.weight.mul_(-3.0)
    moved, _ = run(0.0)
    forced_moved, _ = run(1.0)
    for b, r in rows:
        assert not torch.allclose(moved.logits[b, r], plain.logits[b, r], atol=1e-4)
        assert torch.allclose(forced_moved.logits[b, r], forced.logits[b, r], atol=1e-5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        lookup_target(sources, 2, forcing=1.5)


def test_readout_forcing_on_a_share_of_the_rows_leaves_the_others_to_the_heads():
    """`forcing_rows`: the forcing is drawn per lookup row from its generator. Lookup rows before the first forced
    one keep the logits of a run forcing none (their answers still need the heads); the first forced row's
    logits change; a share outside [0, 1] is refused."""
    from lab.training.lookup import LookupRecorder, lookup_target
    from lab.training.step import set_window
    from model import Ablation, random_tiny

    m = random_tiny()
    set_window(m, 2)
    x = torch.randint(5, 4000, (1, 96))
    sources = torch.full((1, 96), -1)
    at = list(range(30, 94, 4))
    for r in at:
        sources[0, r] = r - 20
    dense = Ablation(dense_compressed=True)
    seed = next(s for s in range(100)
                if not lookup_target(sources, 2, forcing=1.0, forcing_rows=0.5,
                                     generator=torch.Generator().manual_seed(s)).forced[:2].any())
    part = lookup_target(sources, 2, forcing=1.0, forcing_rows=0.5, generator=torch.Generator().manual_seed(seed))
    again = lookup_target(sources, 2, forcing=1.0, forcing_rows=0.5, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(part.forced, again.forced) and 0 < int(part.forced.sum()) < len(at)
    with torch.no_grad():
        mixed = m(x, ablation=dense, trace=LookupRecorder(part)).logits
        none = m(x, ablation=dense, trace=LookupRecorder(lookup_target(sources, 2))).logits
    first = int(part.row[part.forced][0])
    assert first >= at[2]
    # unchanged up to summation order (a forced row changes a matrix product's shape: 5e-5 seen on an AMD EPYC)
    assert torch.allclose(mixed[0, :first], none[0, :first], atol=2e-4)
    assert not torch.allclose(mixed[0, first], none[0, first], atol=1e-2)
    assert lookup_target(sources, 2, forcing=1.0).forced is None      # every row: no draw
    with pytest.raises(ValueError, match="between 0 and 1"):
        lookup_target(sources, 2, forcing=1.0, forcing_rows=-0.1)


@pytest.mark.slow
def test_every_head_lookup_asks_each_ratio1_head_for_the_source_not_just_one():
    """`every_head`: the read term becomes the mean over the ratio-1 heads of -log their share on the source,
    recomputed here from the attention; the rival term is unchanged; and a few steps on it raise the weakest
    ratio-1 head's share on the source, which the noisy-or term leaves to whichever head reads already."""
    from lab.training.lookup import lookup_target
    from model import Ablation

    m, x, sources = three_far_answers()
    dense = Ablation(dense_compressed=True)
    with kept_attention() as probs:
        _, lookup_loss = looked(m, x, lookup_target(sources, 2, every_head=True), ablation=dense)
    w = m.cfg.sliding_window
    ratio1 = [i for i, layer in enumerate(m.layers) if layer.attn.ratio == 1]
    expected = []
    for b, r, e, rivals in [(0, 40, 7, []), (1, 50, 12, [33]), (1, 60, 33, [12])]:
        shares = torch.cat([probs[i][b, r, :, w + e] for i in ratio1])
        on = sum(probs[i][b, r, :, [w + p for p in [e] + rivals]].sum(0) for i in ratio1)
        expected.append(-torch.log(shares).mean() - torch.log(on[0] / on.sum()))
    assert abs(float(lookup_loss.detach()) - float(torch.stack(expected).mean())) < 1e-4
    _, some = looked(m, x, lookup_target(sources, 2), ablation=dense)
    assert float(lookup_loss.detach()) > float(some.detach()) + 1.0   # one head's read is not enough

    def weakest() -> float:
        with torch.no_grad(), kept_attention() as pr:
            m(x, ablation=dense)
        return min(float(pr[i][b, r, :, w + e].min()) for i in ratio1 for b, r, e in [(0, 40, 7), (1, 50, 12)])

    before = weakest()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(8):
        opt.zero_grad()
        looked(m, x, lookup_target(sources, 2, every_head=True), ablation=dense)[1].backward()
        opt.step()
    assert weakest() > 2 * before
