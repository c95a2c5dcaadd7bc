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

/// A read-only strided matrix over a slice: element (i, j) is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
struct Mat<'a> {
    data: &'a [f64],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// The row-major `r × c` matrix stored in `s`.
fn rows(s: &[f64], r: usize, c: usize) -> Mat<'_> {
    Mat {
        data: s,
        rows: r,
        cols: c,
        rs: c,
        cs: 1,
    }
}

/// The transpose (`c × r`) of the row-major `r × c` matrix stored in `s`, without copying.
fn rows_t(s: &[f64], r: usize, c: usize) -> Mat<'_> {
    Mat {
        data: s,
        rows: c,
        cols: r,
        rs: 1,
        cs: c,
    }
}

/// `y = a·b + beta·y` with `y` row-major. Large products go through nalgebra's GEMM
/// (matrixmultiply, optimised even in debug builds); small ones use plain loops, because
/// nalgebra's small-matrix fallback mis-handles strided views (it loops over the view's
/// storage span instead of its rows).
fn gemm(y: &mut [f64], a: Mat<'_>, b: Mat<'_>, beta: f64) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    debug_assert_eq!(b.rows, k);
    if m > 5 && k > 5 && n > 5 {
        let av = View::from_slice_with_strides(a.data, m, k, a.rs, a.cs);
        let bv = View::from_slice_with_strides(b.data, k, n, b.rs, b.cs);
        ViewMut::from_slice_with_strides_mut(y, m, n, n, 1).gemm(1.0, &av, &bv, beta);
        return;
    }
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|l| a.data[i * a.rs + l * a.cs] * b.data[l * b.rs + j * b.cs])
                .sum();
            let out = &mut y[i * n + j];
            *out = dot + if beta == 0.0 { 0.0 } else { beta * *out };
        }
    }
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
    gemm(&mut ws.a, rows(&ws.x, n, inp), rows_t(w1, h, inp), 0.0);
    for row in ws.a.chunks_exact_mut(h) {
        row.iter_mut()
            .zip(b1)
            .for_each(|(a, b)| *a = (*a + b).tanh());
    }
    gemm(&mut ws.p, rows(&ws.a, n, h), rows_t(w2, v, h), 0.0);
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
    gemm(g_w2, rows_t(&ws.p, n, v), rows(&ws.a, n, h), 1.0);
    add_column_sums(g_b2, &ws.p);
    gemm(&mut ws.da, rows(&ws.p, n, v), rows(w2, v, h), 0.0);
    ws.da
        .iter_mut()
        .zip(&ws.a)
        .for_each(|(d, a)| *d *= 1.0 - a * a);
    gemm(g_w1, rows_t(&ws.da, n, h), rows(&ws.x, n, inp), 1.0);
    add_column_sums(g_b1, &ws.da);
    gemm(&mut ws.dx, rows(&ws.da, n, h), rows(w1, h, inp), 0.0);
    for ((ctx, _), dx) in samples.iter().zip(ws.dx.chunks_exact(inp)) {
        for (&id, dxc) in ctx.iter().zip(dx.chunks_exact(e)) {
            let id = id as usize;
            let g = &mut g_emb[id * e..(id + 1) * e];
            g.iter_mut().zip(dxc).for_each(|(g, d)| *g += d);
        }
    }
    loss * scale
}
