//! A character-level MLP language model (Bengio et al. 2003 style) with a hand-written
//! forward and backward pass: `context` characters → embeddings → one tanh hidden layer →
//! softmax over the vocabulary. Parameters and gradients live in one flat `f64` vector.

use nalgebra::{DMatrixView, DMatrixViewMut, Dyn};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use std::ops::Range;

/// Sizes of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpShape {
    /// Vocabulary size (characters).
    pub vocab: usize,
    /// Characters of context per prediction.
    pub context: usize,
    /// Embedding width per character.
    pub embed: usize,
    /// Hidden units.
    pub hidden: usize,
}

impl MlpShape {
    fn input(&self) -> usize {
        self.context * self.embed
    }
    fn emb(&self) -> Range<usize> {
        0..self.vocab * self.embed
    }
    fn w1(&self) -> Range<usize> {
        let s = self.emb().end;
        s..s + self.hidden * self.input()
    }
    fn b1(&self) -> Range<usize> {
        let s = self.w1().end;
        s..s + self.hidden
    }
    fn w2(&self) -> Range<usize> {
        let s = self.b1().end;
        s..s + self.vocab * self.hidden
    }
    fn b2(&self) -> Range<usize> {
        let s = self.w2().end;
        s..s + self.vocab
    }

    /// Total number of parameters.
    pub fn n_params(&self) -> usize {
        self.b2().end
    }

    /// The parameter groups reported per layer in `StepStats::layers`, as ranges of the flat
    /// vector: `embedding`, `hidden` (weights and bias), `output` (weights and bias).
    pub fn layer_groups(&self) -> [(&'static str, Range<usize>); 3] {
        [
            ("embedding", self.emb()),
            ("hidden", self.w1().start..self.b1().end),
            ("output", self.w2().start..self.b2().end),
        ]
    }

    /// Random initial parameters: unit-normal embeddings, fan-in scaled hidden weights, small
    /// output weights (so the first loss is close to ln(vocab)), zero biases.
    pub fn init(&self, rng: &mut impl Rng) -> Vec<f64> {
        let mut p = vec![0.0; self.n_params()];
        let mut fill = |r: Range<usize>, scale: f64| {
            for x in &mut p[r] {
                let z: f64 = StandardNormal.sample(rng);
                *x = z * scale;
            }
        };
        fill(self.emb(), 1.0);
        fill(self.w1(), (self.input() as f64).sqrt().recip());
        fill(self.w2(), 0.1 / (self.hidden as f64).sqrt());
        p
    }
}

/// Scratch buffers of one micro-batch, reused across micro-batches.
#[derive(Debug, Clone, Default)]
pub struct Workspace {
    x: Vec<f64>,
    a: Vec<f64>,
    p: Vec<f64>,
    da: Vec<f64>,
    dx: Vec<f64>,
}

impl Workspace {
    /// Empty buffers; they grow to the micro-batch on first use.
    pub fn new() -> Self {
        Self::default()
    }
}

type View<'a> = DMatrixView<'a, f64, Dyn, Dyn>;
type ViewMut<'a> = DMatrixViewMut<'a, f64, Dyn, Dyn>;

/// A row-major `r × c` matrix stored in `s`.
fn rows(s: &[f64], r: usize, c: usize) -> View<'_> {
    View::from_slice_with_strides(s, r, c, c, 1)
}

/// The transpose (`c × r`) of the row-major `r × c` matrix stored in `s`, without copying.
fn rows_t(s: &[f64], r: usize, c: usize) -> View<'_> {
    View::from_slice_with_strides(s, c, r, 1, c)
}

fn rows_mut(s: &mut [f64], r: usize, c: usize) -> ViewMut<'_> {
    ViewMut::from_slice_with_strides_mut(s, r, c, c, 1)
}

/// Add each row of the row-major `matrix` (rows of `v.len()`) to `v`.
fn add_column_sums(v: &mut [f64], matrix: &[f64]) {
    for row in matrix.chunks_exact(v.len()) {
        v.iter_mut().zip(row).for_each(|(v, x)| *v += x);
    }
}

/// Add the gradient of the mean cross-entropy over `samples` to `grad` and return that mean
/// loss (nats). Each sample is `(context ids, target id)`; `grad` has `shape.n_params()`
/// entries in the same layout as `params`. Matrix products go through nalgebra's GEMM.
pub fn accumulate_grad(
    shape: &MlpShape,
    params: &[f64],
    samples: &[(&[u8], u8)],
    grad: &mut [f64],
    ws: &mut Workspace,
) -> f64 {
    let (n, e, inp, h, v) = (
        samples.len(),
        shape.embed,
        shape.input(),
        shape.hidden,
        shape.vocab,
    );
    if n == 0 {
        return 0.0;
    }
    let scale = 1.0 / n as f64;
    let (emb, w1, b1, w2, b2) = (
        &params[shape.emb()],
        &params[shape.w1()],
        &params[shape.b1()],
        &params[shape.w2()],
        &params[shape.b2()],
    );
    let (g_emb, rest) = grad.split_at_mut(shape.w1().start);
    let (g_w1, rest) = rest.split_at_mut(inp * h);
    let (g_b1, rest) = rest.split_at_mut(h);
    let (g_w2, g_b2) = rest.split_at_mut(v * h);
    ws.x.resize(n * inp, 0.0);
    ws.a.resize(n * h, 0.0);
    ws.p.resize(n * v, 0.0);
    ws.da.resize(n * h, 0.0);
    ws.dx.resize(n * inp, 0.0);
    // Forward: X (n × inp) gathered from the embeddings, A = tanh(X W1ᵀ + b1), logits A W2ᵀ + b2.
    for ((ctx, _), x) in samples.iter().zip(ws.x.chunks_exact_mut(inp)) {
        for (&id, xc) in ctx.iter().zip(x.chunks_exact_mut(e)) {
            let id = id as usize;
            xc.copy_from_slice(&emb[id * e..(id + 1) * e]);
        }
    }
    rows_mut(&mut ws.a, n, h).gemm(1.0, &rows(&ws.x, n, inp), &rows_t(w1, h, inp), 0.0);
    for row in ws.a.chunks_exact_mut(h) {
        row.iter_mut()
            .zip(b1)
            .for_each(|(a, b)| *a = (*a + b).tanh());
    }
    rows_mut(&mut ws.p, n, v).gemm(1.0, &rows(&ws.a, n, h), &rows_t(w2, v, h), 0.0);
    // Softmax, loss, and d logits = (softmax − onehot) / n, in place.
    let mut loss = 0.0;
    for ((_, target), row) in samples.iter().zip(ws.p.chunks_exact_mut(v)) {
        row.iter_mut().zip(b2).for_each(|(l, b)| *l += b);
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut z = 0.0;
        for l in row.iter_mut() {
            *l = (*l - max).exp();
            z += *l;
        }
        let t = *target as usize;
        loss -= (row[t] / z).ln();
        row.iter_mut().for_each(|l| *l *= scale / z);
        row[t] -= scale;
    }
    // Backward.
    rows_mut(g_w2, v, h).gemm(1.0, &rows_t(&ws.p, n, v), &rows(&ws.a, n, h), 1.0);
    add_column_sums(g_b2, &ws.p);
    rows_mut(&mut ws.da, n, h).gemm(1.0, &rows(&ws.p, n, v), &rows(w2, v, h), 0.0);
    ws.da
        .iter_mut()
        .zip(&ws.a)
        .for_each(|(d, a)| *d *= 1.0 - a * a);
    rows_mut(g_w1, h, inp).gemm(1.0, &rows_t(&ws.da, n, h), &rows(&ws.x, n, inp), 1.0);
    add_column_sums(g_b1, &ws.da);
    rows_mut(&mut ws.dx, n, inp).gemm(1.0, &rows(&ws.da, n, h), &rows(w1, h, inp), 0.0);
    for ((ctx, _), dx) in samples.iter().zip(ws.dx.chunks_exact(inp)) {
        for (&id, dxc) in ctx.iter().zip(dx.chunks_exact(e)) {
            let id = id as usize;
            let g = &mut g_emb[id * e..(id + 1) * e];
            g.iter_mut().zip(dxc).for_each(|(g, d)| *g += d);
        }
    }
    loss * scale
}
