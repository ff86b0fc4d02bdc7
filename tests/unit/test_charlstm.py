"""CharLSTM: textgenrnn's network recomputed independently in numpy, trees, generation, errors."""

from __future__ import annotations

import json
import math
from importlib.resources import files

import h5py
import numpy as np
import pytest

from brwsim import CharLSTM, UserError, parse_family, simulate
from brwsim.cli import main
from brwsim.families.ngram import CORPUS_DIR
from brwsim.environment import node_logprobs, path_uniform
from brwsim.generate import generate
from brwsim.reference import best_first

DATA = files("brwsim").joinpath("data", "textgenrnn")
MAXLEN = 40


class NumpyTextgenrnn:
    """textgenrnn's model.py in plain float64 numpy, from the HDF5 file (independent of brwsim).

    Keras' HDF5 loader turns a CuDNNLSTM's saved weights (bias of 8u entries) into an LSTM's:
    per gate, the input kernel k becomes k.T.reshape(k.shape, order='F') and the recurrent
    kernel k.T; the two biases add. LSTM: gates i, f, c, o, sigmoid / tanh, zero state.
    AttentionWeightedAverage: softmax over time of x_t . W (max trick), divided by the sum
    plus 1e-7. Output: dense softmax over len(vocab) + 1 classes.
    """

    def __init__(self) -> None:
        with h5py.File(str(DATA / "textgenrnn_weights.hdf5"), "r") as f:
            w = {k: np.array(f[k][k][n], dtype=np.float64) for k, n in [
                ("embedding", "embeddings:0"), ("attention", "attention_W:0"),
                ("output", "kernel:0")]}
            self.bo = np.array(f["output"]["output"]["bias:0"], dtype=np.float64)
            self.layers = []
            for name in ("rnn_1", "rnn_2"):
                g = f[name][name]
                k, r, b = (np.array(g[n], dtype=np.float64) for n in
                           ("kernel:0", "recurrent_kernel:0", "bias:0"))
                u = r.shape[0]
                k = np.concatenate([blk.T.reshape(blk.shape, order="F")
                                    for blk in np.split(k, 4, axis=1)], axis=1)
                r = np.concatenate([blk.T for blk in np.split(r, 4, axis=1)], axis=1)
                self.layers.append((k, r, b[:4 * u] + b[4 * u:]))
        self.emb, self.wa, self.wo = w["embedding"], w["attention"][:, 0], w["output"]
        self.vocab = json.loads((DATA / "textgenrnn_vocab.json").read_text(encoding="utf-8"))

    def encode_sequence(self, tokens) -> list[int]:
        """textgenrnn_encode_sequence: vocab.get(x, 0), pre-padded / pre-truncated to 40."""
        ids = [self.vocab.get(x, 0) for x in tokens][-MAXLEN:]
        return [0] * (MAXLEN - len(ids)) + ids

    def softmax(self, classes) -> np.ndarray:
        """The model's output (all classes, padding included) over the class sequence."""
        x = self.emb[np.asarray(classes)]
        seq = [x]
        for k, r, b in self.layers:
            u = r.shape[0]
            h, c, out = np.zeros(u), np.zeros(u), []
            for xt in seq[-1]:
                z = xt @ k + h @ r + b
                sig = 1.0 / (1.0 + np.exp(-z))
                c = sig[u:2 * u] * c + sig[:u] * np.tanh(z[2 * u:3 * u])
                h = sig[3 * u:] * np.tanh(c)
                out.append(h)
            seq.append(np.array(out))
        s = np.concatenate(seq, axis=1)
        logit = s @ self.wa
        a = np.exp(logit - logit.max())
        att = (a[:, None] * s).sum(axis=0) / (a.sum() + 1e-7)
        z = att @ self.wo + self.bo
        e = np.exp(z - z.max())
        return e / e.sum()

    def chars(self, classes, temperature: float = 1.0) -> np.ndarray:
        """Distribution over the characters (classes 1..V), padding dropped, tempered."""
        p = self.softmax(classes)[1:] ** (1.0 / temperature)
        return p / p.sum()


@pytest.fixture(scope="module")
def ref() -> NumpyTextgenrnn:
    return NumpyTextgenrnn()


@pytest.fixture(scope="module")
def fam() -> CharLSTM:
    return CharLSTM()


def g(seq, carry: int) -> int:
    """Characters a node carries beyond the 40-class window: depth mod (carry + 1)."""
    return (len(seq) - MAXLEN) % (carry + 1)


def sorted_desc(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, classes) by probability descending, ties by ascending class."""
    order = np.lexsort((np.arange(p.size), -p))
    return p[order], order + 1


def test_textgenrnn_windows_match_numpy_reference(ref, fam):
    """textgenrnn's own prediction (its padded 40-character window) on 60 contexts."""
    text = (CORPUS_DIR / "prose.txt").read_text(encoding="utf-8")
    rng = np.random.default_rng(7)
    contexts = [["<s>"], ["<s>"] + list("Hello, world"), list("x" * 60), ["<s>"] + list("é€😀")]
    while len(contexts) < 60:
        n = int(rng.integers(1, 70))
        if len(contexts) % 2:
            i = int(rng.integers(0, len(text) - n))
            contexts.append(list(text[i:i + n]))
        else:
            contexts.append([fam.alphabet[c] for c in rng.integers(0, fam.vocab_size, n)])
    worst = 0.0
    for ctx in contexts:
        win = ref.encode_sequence(ctx)
        np.testing.assert_array_equal(fam.window(ctx), win)
        mine = fam.next_token_probs(ctx)
        assert mine[0] == 0.0 and mine.sum() == pytest.approx(1.0, abs=1e-12)
        worst = max(worst, np.abs(mine[1:] - ref.chars(win)).max())
    assert worst < 1e-9


def test_tree_nodes_match_numpy_reference(ref, fam):
    """50 nodes below drawn roots (carry 20 and 3): carried states equal the recomputation."""
    spec = fam.spec()
    short = CharLSTM(carry=3)
    short_spec = short.spec()
    rng = np.random.default_rng(3)
    corpus = np.asarray(fam.context_program()[5:], dtype=np.int64)
    for n in range(50):
        it = int(rng.integers(0, 10_000))
        path = [int(r) for r in rng.integers(0, 4, int(rng.integers(0, 25)))]
        f, sp = (fam, spec) if n % 2 else (short, short_spec)
        got = node_logprobs(sp, 5, it, path, k=fam.vocab_size)
        seq = list(fam.root_window(5, it))
        if n < 5:                           # a real corpus window
            assert (np.lib.stride_tricks.sliding_window_view(corpus, MAXLEN) == seq).all(1).any()
        for r in path:                      # the reference ranks the characters itself
            seq.append(int(sorted_desc(ref.chars(seq[-(MAXLEN + g(seq, f.carry)):]))[1][r]))
        q, _ = sorted_desc(ref.chars(seq[-(MAXLEN + g(seq, f.carry)):]))
        np.testing.assert_allclose(np.exp(got), q, rtol=0, atol=1e-9)
        assert np.exp(got).sum() == pytest.approx(1.0, abs=1e-12)
        if n < 5:
            np.testing.assert_array_equal(f.path_classes(5, it, path), seq)


def test_carry_zero_is_textgenrnn_at_every_node(ref):
    """carry=0: every node is textgenrnn's own prediction from its last 40 classes."""
    fam = CharLSTM(carry=0)
    spec = fam.spec()
    rng = np.random.default_rng(5)
    for _ in range(10):
        it = int(rng.integers(0, 10_000))
        path = [int(r) for r in rng.integers(0, 3, int(rng.integers(1, 8)))]
        seq = list(fam.root_window(2, it))
        for r in path:
            seq.append(int(sorted_desc(ref.chars(seq[-MAXLEN:]))[1][r]))
        q, _ = sorted_desc(ref.chars(seq[-MAXLEN:]))
        np.testing.assert_allclose(np.exp(node_logprobs(spec, 2, it, path, k=fam.vocab_size)), q,
                                   rtol=0, atol=1e-9)
    ds = simulate(fam, [1, 4, 8], 1, seed=2)
    cache = {}

    def provide(p):
        if p not in cache:
            cache[p] = node_logprobs(spec, 2, 0, p, k=fam.vocab_size)
        return cache[p]

    e, a, d = best_first(provide, [1, 4, 8], lambda p: path_uniform(2, 0, p))
    np.testing.assert_allclose(ds.expected_accepted.values[:, 0], e, rtol=0, atol=1e-12)


def test_determinism_and_temperature(ref, fam):
    spec = fam.spec()
    a = node_logprobs(spec, 1, 9, (0, 2, 1), k=32)
    b = node_logprobs(CharLSTM().spec(), 1, 9, (0, 2, 1), k=32)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, node_logprobs(spec, 1, 10, (0, 2, 1), k=32))
    seq = list(fam.root_window(1, 9))
    for t in (0.5, 1.7):
        hot = CharLSTM(temperature=t)
        q, _ = sorted_desc(ref.chars(seq, temperature=t))
        np.testing.assert_allclose(np.exp(node_logprobs(hot.spec(), 1, 9, (), k=hot.vocab_size)), q,
                                   rtol=0, atol=1e-9)


def test_prompt_roots_are_textgenrnn_generation_start(ref):
    fam = CharLSTM(prompt="The quick brown fox")
    win = ref.encode_sequence(["<s>"] + list("The quick brown fox"))
    for it in (0, 1):
        np.testing.assert_array_equal(fam.root_window(0, it), win)
        q, _ = sorted_desc(ref.chars(win))
        np.testing.assert_allclose(np.exp(node_logprobs(fam.spec(), 0, it, (), k=fam.vocab_size)),
                                   q, rtol=0, atol=1e-9)
    # a long prompt keeps its last 40 classes, as textgenrnn does
    long = CharLSTM(prompt="a" * 30 + "b" * 30)
    np.testing.assert_array_equal(long.root_window(0, 0), ref.encode_sequence(list("a" * 30 + "b" * 30)))


def test_trees_match_heapq_reference(fam):
    budgets = [1, 8, 64]
    ds = simulate(fam, budgets, 2, seed=11)
    spec = fam.spec()
    for it in range(2):
        cache = {}

        def provide(p, it=it):
            if p not in cache:
                cache[p] = node_logprobs(spec, 11, it, p, k=fam.vocab_size)
            return cache[p]

        e, a, d = best_first(provide, budgets, lambda p, it=it: path_uniform(11, it, p))
        np.testing.assert_allclose(ds.expected_accepted.values[:, it], e, rtol=0, atol=1e-12)
        assert list(ds.accepted.values[:, it]) == a
        assert list(ds.depth.values[:, it]) == d


def test_generation_run_carries_the_state(fam):
    """Call c's tree is the optimal tree at the node its predecessors' sampled path reached."""
    spec = fam.spec()
    g = generate(fam, None, 16, 40, seed=4, run=2)
    prefix: tuple[int, ...] = ()
    for c in range(4):
        def provide(p, prefix=prefix):
            return node_logprobs(spec, 4, 2, prefix + p, k=fam.vocab_size)

        e, a, d = best_first(provide, [16], lambda p, prefix=prefix: path_uniform(4, 2, prefix + p))
        assert g.expected_accepted.values[c] == pytest.approx(e[0], abs=1e-12)
        assert g.accepted.values[c] == a[0]
        for _ in range(a[0] + 1):           # advance along the target's sampled path
            lq = node_logprobs(spec, 4, 2, prefix, k=fam.vocab_size)
            u = path_uniform(4, 2, prefix)
            prefix += (int(np.searchsorted(np.cumsum(np.exp(lq)), u)),)


def _sampled_step(spec, prefix, fam):
    lq = node_logprobs(spec, 4, 2, prefix, k=fam.vocab_size)
    return int(np.searchsorted(np.cumsum(np.exp(lq)), path_uniform(4, 2, prefix)))


def test_policy_generation_runs_carry_the_state(fam):
    """A chain's calls, recomputed at the nodes the run reached; every policy kernel agrees.

    ``dynamic(depth=8, topk=1)`` is the same chain through the dynamic kernel, and
    ``noisy(sigma=0)`` is the optimal tree through the noisy kernel (bit for bit).
    """
    spec = fam.spec()
    g = generate(fam, "chain()", 8, 40, seed=4, run=2)
    prefix: tuple[int, ...] = ()
    for c in range(4):
        e, mass = 0.0, 1.0
        for j in range(8):
            mass *= math.exp(node_logprobs(spec, 4, 2, prefix + (0,) * j, k=fam.vocab_size)[0])
            e += mass
        x = 0
        while x < 8 and _sampled_step(spec, prefix + (0,) * x, fam) == 0:
            x += 1
        assert g.expected_accepted.values[c] == pytest.approx(e, abs=1e-12)
        assert g.accepted.values[c] == x
        for _ in range(x + 1):              # advance along the target's sampled path
            prefix += (_sampled_step(spec, prefix, fam),)
    same = generate(fam, "dynamic(depth=8, topk=1)", 8, 40, seed=4, run=2)
    np.testing.assert_array_equal(same.accepted.values, g.accepted.values)
    np.testing.assert_allclose(same.expected_accepted.values, g.expected_accepted.values,
                               rtol=0, atol=1e-12)
    opt = generate(fam, None, 16, 60, seed=4, run=2)
    noisy = generate(fam, "noisy(sigma=0)", 16, 60, seed=4, run=2)
    np.testing.assert_array_equal(noisy.accepted.values, opt.accepted.values)
    np.testing.assert_allclose(noisy.expected_accepted.values, opt.expected_accepted.values,
                               rtol=0, atol=1e-12)


def test_string_form_and_moments(fam):
    assert repr(fam) == ("charlstm(weights='textgenrnn', temperature=1.0, carry=20, "
                         "corpus='prose')")
    assert parse_family(repr(fam)) == fam
    p = parse_family("charlstm(temperature=0.8, prompt='Hi there')")
    assert p.prompt == "Hi there" and parse_family(repr(p)) == p
    m = fam.moments(n=200)
    assert 0.3 < m.mu < 4.0 and m.mu_se > 0 and not m.exact
    q = fam.sample_full(np.random.default_rng(0))
    assert q.size == fam.vocab_size and np.all(np.diff(q) <= 0)


def test_errors(tmp_path, fam):
    corrupt = tmp_path / "corrupt.hdf5"
    corrupt.write_bytes(b"\x89HDF\r\n\x1a\n" + b"garbage" * 100)
    empty = tmp_path / "empty.hdf5"
    with h5py.File(empty, "w") as f:
        f.create_group("embedding")
    vocab = str(DATA / "textgenrnn_vocab.json")
    cases = [
        (lambda: CharLSTM(weights=tmp_path / "none.hdf5", vocab=vocab), "not found"),
        (lambda: CharLSTM(weights=corrupt, vocab=vocab), "not a readable HDF5"),
        (lambda: CharLSTM(weights=empty, vocab=vocab), "no embedding"),
        (lambda: CharLSTM(weights=corrupt), "needs vocab"),
        (lambda: CharLSTM(weights=3), "weights must be"),
        (lambda: CharLSTM(weights=empty, vocab=tmp_path / "nov.json"), "vocabulary file .* not found"),
        (lambda: CharLSTM(prompt="tab\there"), "not in the model's vocabulary"),
        (lambda: CharLSTM(prompt=5), "prompt must be"),
        (lambda: CharLSTM(temperature=0), "temperature"),
        (lambda: CharLSTM(temperature=-1.0), "temperature"),
        (lambda: CharLSTM(temperature="hot"), "temperature"),
        (lambda: CharLSTM(corpus="short"), "root window needs"),
        (lambda: CharLSTM(carry=-1), "carry"),
        (lambda: CharLSTM(carry=2.5), "carry"),
        (lambda: fam.path_classes(0, 0, (500,)), "outside the vocabulary"),
        (lambda: fam.probs([]), "classes must be"),
    ]
    for make, words in cases:
        with pytest.raises(UserError, match=words):
            make()


@pytest.mark.parametrize("family,needle", [
    ("charlstm(prompt='tab\there')", "vocabulary"),
    ("charlstm(weights=/nonexistent/w.hdf5, vocab=/nonexistent/v.json)", "not found"),
    ("charlstm(temperature=0)", "temperature"),
])
def test_cli_bad_input_exit_2_no_file(tmp_path, capsys, family, needle):
    out = tmp_path / "bad.nc"
    code = main(["run", "--family", family, "--iterations", "2", "--budgets", "4",
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_matches_keras(ref, fam):
    """The same weights through Keras 2 (``tf_keras``: textgenrnn's ``tf.keras``, whose
    legacy HDF5 loader converts the file's CuDNNLSTM weights to LSTM; Keras 3 does not)."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("tf_keras")

    class Attention(keras.layers.Layer):        # AttentionWeightedAverage's formula
        def build(self, shape):
            self.W = self.add_weight(shape=(shape[2], 1), name="attention_W")

        def call(self, x):
            logits = tf.squeeze(tf.tensordot(x, self.W, 1), -1)
            a = tf.exp(logits - tf.reduce_max(logits, axis=-1, keepdims=True))
            a = a / (tf.reduce_sum(a, axis=1, keepdims=True) + 1e-7)
            return tf.reduce_sum(x * a[..., None], axis=1)

    n = len(ref.vocab) + 1
    inp = keras.Input(shape=(MAXLEN,), name="input")
    emb = keras.layers.Embedding(n, 100, name="embedding")(inp)
    r1 = keras.layers.LSTM(128, return_sequences=True, recurrent_activation="sigmoid", name="rnn_1")(emb)
    r2 = keras.layers.LSTM(128, return_sequences=True, recurrent_activation="sigmoid", name="rnn_2")(r1)
    att = Attention(name="attention")(keras.layers.concatenate([emb, r1, r2], name="rnn_concat"))
    out = keras.layers.Dense(n, activation="softmax", name="output")(att)
    model = keras.Model(inp, out)
    model.load_weights(str(DATA / "textgenrnn_weights.hdf5"), by_name=True)
    rng = np.random.default_rng(1)
    wins = np.array([ref.encode_sequence([fam.alphabet[c] for c in rng.integers(0, 100, k)])
                     for k in rng.integers(1, 60, 50)])
    keras_p = model.predict(wins, verbose=0).astype(np.float64)
    for w, kp in zip(wins, keras_p):
        kq = kp[1:] / kp[1:].sum()
        np.testing.assert_allclose(fam.probs(w)[1:], kq, rtol=0, atol=1e-5)
