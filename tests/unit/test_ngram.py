"""NGram: Kneser-Ney distributions from first principles, contexts along paths, trees."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from brwsim import (
    MarkovRegime,
    Mixture,
    NGram,
    Tempered,
    Uniform,
    UserError,
    parse_family,
    simulate,
)
from brwsim.environment import node_logprobs, path_uniform
from brwsim.families.ngram import load_corpus
from brwsim.reference import best_first, env_provider

TOY = "abracadabra"
TOY_LONG = "abracadabra cadabra abra\nbarbara dabbed a crab\n"


def kn_reference(text: str, order: int, context: str, discount: float = 0.75) -> np.ndarray:
    """Interpolated Kneser-Ney P(w | context) over sorted(set(text)), straight from counts.

    Order ``order`` uses raw counts c(h w); lower orders the continuation counts
    N1+(. h w) = the number of distinct characters seen before h w; the recursion ends
    in the uniform distribution.
    """
    alphabet = sorted(set(text))
    grams = {m: [text[i:i + m] for i in range(len(text) - m + 1)] for m in range(1, order + 2)}

    def count(m: int, g: str) -> int:
        if m == order:
            return grams[m].count(g)
        return len({x[0] for x in set(grams[m + 1]) if x[1:] == g})

    def prob(m: int, h: str) -> np.ndarray:
        if m == 0:
            return np.full(len(alphabet), 1.0 / len(alphabet))
        lower = prob(m - 1, h[1:])
        c = np.array([count(m, h + w) for w in alphabet], dtype=float)
        if c.sum() == 0:
            return lower
        lam = discount * np.count_nonzero(c) / c.sum()
        return lam * lower + np.maximum(c - discount, 0.0) / c.sum()

    h = context[max(0, len(context) - order + 1):] if order > 1 else ""
    return prob(len(h) + 1, h)


@pytest.mark.parametrize("text,order", [(TOY, 1), (TOY, 2), (TOY, 3), (TOY_LONG, 2),
                                        (TOY_LONG, 3), (TOY_LONG, 4)])
def test_distributions_match_counts(text, order):
    fam = NGram(text, order)
    assert fam.alphabet == "".join(sorted(set(text)))
    contexts = {text[i:i + order - 1] for i in range(len(text) - order + 2)}
    contexts |= {"".join(p) for p in itertools.product("abr", repeat=order - 1)}  # unseen ones too
    for ctx in sorted(contexts):
        q = fam.next_token_probs(ctx)
        np.testing.assert_allclose(q, kn_reference(text, order, ctx), rtol=1e-12, atol=0)
        assert q.sum() == pytest.approx(1.0, abs=1e-14)
        assert q.min() > 0


def nltk_kneser_ney(text: str, order: int, discount: float):
    """NLTK's KneserNeyInterpolated fitted on ``text`` as one character sequence.

    NLTK ends its recursion in the undiscounted continuation unigram; brwsim (like Chen &
    Goodman's interpolated KN) discounts that order too and interpolates it with the
    uniform distribution. The adapter below gives NLTK that last step, built from NLTK's
    own continuation counts; every higher order is NLTK's.
    """
    lm = pytest.importorskip("nltk.lm")
    from nltk.util import everygrams

    model = lm.KneserNeyInterpolated(order, discount=discount)
    model.fit([everygrams(list(text), max_len=order)], vocabulary_text=list(text))
    alphabet = sorted(set(text))
    est = model.estimator
    cont = {w: est._continuation_counts(w) for w in alphabet}
    total = cont[alphabet[0]][1]
    types = sum(c > 0 for c, _ in cont.values())
    est.unigram_score = lambda w: (max(cont[w][0] - discount, 0.0) / total
                                   + discount * types / total / len(alphabet))
    return lambda context: np.array([model.score(w, list(context) or None) for w in alphabet])


def test_short_contexts_match_nltk_kneser_ney():
    """Contexts shorter than order - 1 use all their characters ('ilt' is not 't').

    The reference is NLTK's KneserNeyInterpolated on 6000 characters of the prose corpus,
    order 5, on contexts of every length 0..4, seen and unseen.
    """
    text = load_corpus("prose")[:6000]
    fam = NGram(text, 5)
    nltk_q = nltk_kneser_ney(text, 5, fam.discount)
    contexts = ["", "t", "he", "ilt", "ion", " of", "the ", "ilty", "zq", "Zx~"]
    for ctx in contexts:
        ctx = "".join(c for c in ctx if c in fam.alphabet)
        q, ref = fam.next_token_probs(ctx), nltk_q(ctx)
        np.testing.assert_allclose(q, ref, rtol=0, atol=1e-14, err_msg=repr(ctx))
    # the bug this guards against: a 3-character context read as its last character
    assert 0.5 * np.abs(fam.next_token_probs("ilt") - fam.next_token_probs("t")).sum() > 0.1


def test_hand_counts_order_2():
    """'abracadabra': 'r' is always followed by 'a' (twice); 7 distinct bigrams, 3 end in 'a'."""
    fam = NGram(TOY, 2)
    p1_a = (3 - 0.75) / 7 + 0.75 * 5 / 7 / 5                     # continuation unigram
    q = fam.next_token_probs("r")
    assert q[fam.alphabet.index("a")] == pytest.approx((2 - 0.75) / 2 + 0.75 / 2 * p1_a, rel=1e-14)
    q1 = NGram(TOY, 1).next_token_probs("")                       # raw unigram counts
    assert q1[0] == pytest.approx((5 - 0.75) / 11 + 0.75 * 5 / 11 / 5, rel=1e-14)


@pytest.mark.parametrize("corpus,order", [(TOY_LONG, 3), ("prose", 5), ("code", 5)])
def test_node_distributions_sum_to_one_and_follow_the_path(corpus, order):
    """node_logprobs(path) is the model's distribution for the text the path spells."""
    fam = NGram(corpus, order)
    spec = fam.spec()
    v = fam.vocab
    rng = np.random.default_rng(0)
    paths = [()] + [tuple(rng.integers(0, 3, size=n)) for n in (1, 2, 5, 9)] + [(v - 1, 0, v - 2)]
    text = fam.path_text(0, 0) if corpus == TOY_LONG else None
    for it in range(3):
        for path in paths:
            lq = node_logprobs(spec, 5, it, path, k=v + 2)
            assert np.all(np.isfinite(lq[:v])) and np.all(lq[v:] == -np.inf)
            assert np.all(np.diff(lq[:v]) <= 0)
            assert np.exp(lq[:v]).sum() == pytest.approx(1.0, abs=1e-12)
            spelled = fam.path_text(5, it, path)
            assert len(spelled) == order - 1 + len(path)
            q = fam.next_token_probs(spelled)
            np.testing.assert_allclose(np.exp(lq[:v]), np.sort(q)[::-1], rtol=1e-12)
            if path:                    # the last token is the parent's rank path[-1]
                parent = fam.next_token_probs(spelled[:-1])
                lq_parent = node_logprobs(spec, 5, it, path[:-1], k=v)
                assert parent[fam.alphabet.index(spelled[-1])] == pytest.approx(
                    np.exp(lq_parent[path[-1]]), rel=1e-12)
    if text is not None:
        assert text in corpus           # roots start at real corpus contexts


def test_tempered_ngram():
    fam = NGram(TOY_LONG, 3)
    hot = Tempered(fam, 0.5)
    for path in [(), (0,), (1, 2)]:
        q = fam.next_token_probs(fam.path_text(2, 1, path)) ** 2
        lq = node_logprobs(hot, 2, 1, path, k=fam.vocab)
        np.testing.assert_allclose(np.exp(lq), np.sort(q / q.sum())[::-1], rtol=1e-12)


def test_order_one_has_no_context():
    fam = NGram(TOY_LONG, 1)
    root = node_logprobs(fam, 0, 0, (), k=fam.vocab)
    np.testing.assert_array_equal(node_logprobs(fam, 0, 3, (2, 0, 1), k=fam.vocab), root)


@pytest.mark.parametrize("corpus", ["prose", "code"])
def test_trees_match_reference(corpus):
    """Order 5 on a shipped corpus: the kernel's trees are the heapq reference's, P up to 256."""
    fam = NGram(corpus, 5)
    budgets = [1, 8, 64, 256]
    ds = simulate(fam, budgets, 3, seed=11)
    for it in range(3):
        e, a, d = best_first(env_provider(fam, 11, it, k=fam.vocab), budgets,
                             lambda p, it=it: path_uniform(11, it, p))
        np.testing.assert_allclose(ds.expected_accepted.values[:, it], e, rtol=0, atol=1e-12)
        assert list(ds.accepted.values[:, it]) == a
        assert list(ds.depth.values[:, it]) == d
    assert float(ds.mu) > 0
    # no proven bound for an n-gram context: NaN with the reason, never the marginal's value
    for name in ("prediction", "upper_bound"):
        assert np.isnan(ds[name].values).all()
        assert "context-dependent" in ds[name].attrs["reason"]


def test_moments_are_the_stationary_marginal():
    fam = NGram(TOY_LONG, 3)
    mom = fam.moments()
    n_pos = len(TOY_LONG) - 2
    hs = []
    for i in range(2, len(TOY_LONG)):            # every corpus position's context
        q = kn_reference(TOY_LONG, 3, TOY_LONG[i - 2:i])
        hs.append((-(q * np.log(q)).sum(), (q * np.log(q) ** 2).sum()))
    hs = np.array(hs)
    assert len(hs) == n_pos
    assert mom.exact and mom.mu == pytest.approx(hs[:, 0].mean(), rel=1e-12)
    assert mom.mu2 == pytest.approx(hs[:, 1].mean(), rel=1e-12)
    steps = fam.spine_law()
    assert steps.mass == pytest.approx(1.0, abs=1e-12)
    assert (steps.values * steps.weights).sum() == pytest.approx(mom.mu, rel=1e-12)
    q = fam.sample_full(np.random.default_rng(0))
    assert q.size == fam.vocab and np.all(np.diff(q) <= 0) and q.sum() == pytest.approx(1.0)


def test_string_forms(tmp_path):
    for text in ["ngram(corpus=prose, order=3)", "ngram('code', 2, discount=0.5)"]:
        fam = parse_family(text)
        assert isinstance(fam, NGram)
        assert parse_family(repr(fam)) == fam
    path = tmp_path / "toy.txt"
    path.write_text(TOY_LONG, encoding="utf-8")
    fam = parse_family(f"ngram(corpus='{path}', order=2)")
    assert fam.alphabet == NGram(TOY_LONG, 2).alphabet
    assert parse_family(repr(fam)) == fam
    assert repr(NGram("prose")) == "ngram(corpus='prose', order=5, discount=0.75)"


def test_errors(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 caf\xe9".encode("latin-1"))
    cases = [
        (lambda: NGram(TOY, 0), "order"),
        (lambda: NGram(TOY, 2.5), "order"),
        (lambda: NGram(TOY, 2, discount=0), "discount"),
        (lambda: NGram(TOY, 2, discount=1.5), "discount"),
        (lambda: NGram("aaaaaaa", 2), "2 distinct"),
        (lambda: NGram("abab", 5), "needs at least"),
        (lambda: NGram("ab" * 200, 60), "too high"),
        (lambda: NGram("missing_corpus.txt"), "not found"),
        (lambda: NGram(tmp_path / "none.txt"), "not found"),
        (lambda: NGram(str(bad)), "UTF-8"),
        (lambda: NGram(3), "corpus must be"),
        (lambda: NGram(TOY, 2).next_token_probs("xyz"), "not in the corpus alphabet"),
        (lambda: NGram(TOY, 2).path_text(0, 0, (7,)), "outside the vocabulary"),
        (lambda: MarkovRegime([NGram(TOY, 2), Uniform(2)], weights=[0.5, 0.5], persistence=0.5),
         "do not nest"),
        (lambda: Mixture([NGram(TOY, 2), Uniform(2)]), "context-dependent"),
        (lambda: parse_family("ngram(corpus=prose, order=0)"), "order"),
    ]
    for make, words in cases:
        with pytest.raises(UserError, match=words):
            make()
