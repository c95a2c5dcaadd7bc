//! The two-sided Gaussian kernel sums of the smoother in O(n), whatever the bandwidth and
//! however step numbers repeat (issue 15).
//!
//! The kernel weight depends only on the distance between two step numbers, so records that
//! share a step are summed first into one bucket (count, Σt, Σg, Σt², Σt·g, Σg²). Each
//! distinct step then needs Σ w(d)·bucket for the kernel w and Σ w(d)²·bucket for w²: a
//! discrete convolution of the buckets, laid on the grid of step numbers (divided by their
//! common step), with the tabulated kernel. Stretches of steps further apart than the
//! kernel's reach (4σ) do not interact and are handled separately. Each stretch is summed
//! directly when its windows are small, otherwise by FFT convolution in overlap-save blocks of
//! a few kernel widths (so rounding stays relative to nearby values); the choice follows the
//! estimated cost of each. Both give the sums of the old record-by-record loop up to rounding.

use crate::smoothing::Moments;
use crate::smoothing::fft::Fft;
use rayon::prelude::*;
use rustfft::num_complex::Complex64;
use std::ops::Range;

/// How the sums of one stretch are computed (tests force each one).
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Whichever is estimated cheaper.
    Auto,
    /// Distinct step by distinct step over the window.
    Direct,
    /// FFT convolution (a stretch of one distinct step is always direct).
    Fft,
}

/// Per distinct step (sorted ascending): the step and [count, Σt, Σg, Σt², Σt·g, Σg²].
struct Buckets<'a> {
    step: std::borrow::Cow<'a, [u64]>,
    sums: Sums<'a>,
}

/// The six sums of each bucket: held, or computed from the records' own values where every
/// bucket holds one record (distinct steps: no copy of the series, 48 bytes a record).
enum Sums<'a> {
    Held(Vec<[f64; 6]>),
    OneRecordEach { t: &'a [f64], g: &'a [f64] },
}

impl Buckets<'_> {
    /// Bucket `j`'s six sums (count, Σt, Σg, Σt², Σtg, Σg²).
    #[inline(always)]
    fn sums(&self, j: usize) -> [f64; 6] {
        match &self.sums {
            Sums::Held(s) => s[j],
            Sums::OneRecordEach { t, g } => record_sums(t[j], g[j]),
        }
    }
}

/// Gaussian weight of a distance of `d` steps for standard deviation `h` steps.
fn gauss(d: u64, h: f64) -> f64 {
    let x = d as f64 / h;
    (-0.5 * x * x).exp()
}

/// Each record's kernel moments and its own normalised weight 1/Σw (see
/// [`crate::smoothing::two_sided`]): steps need not be distinct; unsorted input is sorted
/// first and the results put back in input order.
pub(crate) fn kernel_moments(
    t: &[f64],
    g: &[f64],
    steps: &[u64],
    bandwidth: f64,
    method: Method,
) -> Vec<(Moments, f64)> {
    record_moments(t, g, steps, bandwidth, method)
        .into_iter()
        .map(|m| (m, 1.0 / m.w))
        .collect()
}

/// Each record's kernel moments ([`kernel_moments`] without the self weights, which are
/// 1/`w`): one value per record, in input order.
pub(crate) fn record_moments(
    t: &[f64],
    g: &[f64],
    steps: &[u64],
    bandwidth: f64,
    method: Method,
) -> Vec<Moments> {
    let n = t.len().min(g.len()).min(steps.len());
    if steps[..n].windows(2).any(|w| w[1] < w[0]) {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| steps[i]);
        let pick = |x: &[f64]| order.iter().map(|&i| x[i]).collect::<Vec<f64>>();
        let s: Vec<u64> = order.iter().map(|&i| steps[i]).collect();
        let sorted = record_moments(&pick(t), &pick(g), &s, bandwidth, method);
        let mut out = vec![Moments::default(); n];
        for (k, &i) in order.iter().enumerate() {
            out[i] = sorted[k];
        }
        return out;
    }
    let (b, count) = buckets(t, g, &steps[..n]);
    let reach = (4.0 * bandwidth).floor() as u64;
    let mut per_bucket = vec![Moments::default(); b.step.len()];
    let mut a = 0;
    while a < b.step.len() {
        let mut e = a + 1;
        while e < b.step.len() && b.step[e] - b.step[e - 1] <= reach {
            e += 1;
        }
        stretch(&b, a..e, reach, bandwidth, method, &mut per_bucket);
        a = e;
    }
    // Distinct steps: one bucket per record.
    let Some(count) = count else {
        return per_bucket;
    };
    let mut out = Vec::with_capacity(n);
    for (m, k) in per_bucket.iter().zip(count) {
        out.extend(std::iter::repeat_n(*m, k));
    }
    out
}

/// One record's contribution to its bucket, as the bucket's sums hold it after adding it
/// to zeros (`0.0 + x`: the same bits as the accumulation, a zero's sign included).
#[inline(always)]
fn record_sums(t: f64, g: f64) -> [f64; 6] {
    [1.0, t, g, t * t, t * g, g * g].map(|x| 0.0 + x)
}

/// The buckets of records at sorted `steps`, and how many records each holds; `None` for
/// the counts when the steps are distinct (one record a bucket, no count kept).
fn buckets<'a>(t: &'a [f64], g: &'a [f64], steps: &'a [u64]) -> (Buckets<'a>, Option<Vec<usize>>) {
    let n = steps.len();
    if steps.windows(2).all(|w| w[0] < w[1]) {
        let b = Buckets {
            step: std::borrow::Cow::Borrowed(steps),
            sums: Sums::OneRecordEach {
                t: &t[..n],
                g: &g[..n],
            },
        };
        return (b, None);
    }
    // At most one bucket per record: room for all of them up front (no growth copies).
    let mut step: Vec<u64> = Vec::with_capacity(n);
    let mut sums: Vec<[f64; 6]> = Vec::with_capacity(n);
    let mut count: Vec<usize> = Vec::with_capacity(n);
    for i in 0..n {
        if step.last() != Some(&steps[i]) {
            step.push(steps[i]);
            sums.push([0.0; 6]);
            count.push(0);
        }
        let (s, k) = (sums.last_mut(), count.last_mut());
        if let (Some(s), Some(k)) = (s, k) {
            for (acc, x) in s.iter_mut().zip(record_sums(t[i], g[i])) {
                *acc += x;
            }
            *k += 1;
        }
    }
    let b = Buckets {
        step: std::borrow::Cow::Owned(step),
        sums: Sums::Held(sums),
    };
    (b, Some(count))
}

/// Sums for the buckets `seg` (no bucket outside it lies within `reach`).
fn stretch(
    b: &Buckets,
    seg: Range<usize>,
    reach: u64,
    h: f64,
    method: Method,
    out: &mut [Moments],
) {
    let first = b.step[seg.start];
    // The common divisor of the offsets; once it is 1 it stays 1 (the usual case, every
    // step present), so the rest need not be divided.
    let mut gcd_all = 0u64;
    for &s in &b.step[seg.clone()] {
        gcd_all = gcd(gcd_all, s - first);
        if gcd_all == 1 {
            break;
        }
    }
    let gcd = gcd_all;
    let use_fft = match method {
        _ if seg.len() < 2 || gcd == 0 => false,
        Method::Direct => false,
        Method::Fft => true,
        Method::Auto => {
            let plan = Plan::new(b, &seg, reach, gcd);
            plan.cost() < direct_cost(b, &seg, reach)
        }
    };
    if use_fft {
        Plan::new(b, &seg, reach, gcd).run(b, &seg, h, out);
    } else {
        direct(b, seg, reach, h, out);
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Kernel-weight evaluations of the direct sums (two pointers, O(buckets)).
fn direct_cost(b: &Buckets, seg: &Range<usize>, reach: u64) -> f64 {
    let (mut lo, mut hi, mut pairs) = (seg.start, seg.start, 0usize);
    for k in seg.clone() {
        let c = b.step[k];
        while b.step[lo].saturating_add(reach) < c {
            lo += 1;
        }
        while hi < seg.end && b.step[hi] <= c.saturating_add(reach) {
            hi += 1;
        }
        pairs += hi - lo;
    }
    // One pair: a table look-up and nine multiply-adds, about two butterflies.
    2.0 * pairs as f64
}

/// The direct sums, distinct step by distinct step (the old loop over buckets).
fn direct(b: &Buckets, seg: Range<usize>, reach: u64, h: f64, out: &mut [Moments]) {
    let table: Vec<f64> = (0..=reach.min(1 << 16)).map(|d| gauss(d, h)).collect();
    let mut lo = seg.start;
    for k in seg.clone() {
        let c = b.step[k];
        while b.step[lo].saturating_add(reach) < c {
            lo += 1;
        }
        let mut m = Moments::default();
        for j in lo..seg.end {
            let d = b.step[j].abs_diff(c);
            if b.step[j] > c && d > reach {
                break;
            }
            let w = table
                .get(d as usize)
                .copied()
                .unwrap_or_else(|| gauss(d, h));
            m.add_sums(w, &b.sums(j));
        }
        out[k] = m;
    }
}

/// The FFT convolution of one stretch on its grid of steps (step numbers / `gcd`).
struct Plan {
    /// Grid steps spanned by the stretch.
    span: u64,
    /// Kernel reach on the grid (at most the span).
    r: usize,
    /// FFT size.
    len: usize,
    gcd: u64,
}

/// One overlap-save block of a stretch: its grid origin (the grid position of its first
/// point, possibly before the stretch), the buckets it reads and those it writes.
struct Block {
    origin: i64,
    input: Range<usize>,
    output: Range<usize>,
}

/// The six channels (count, Σt, Σg, Σt², Σtg, Σg²) packed two to a complex transform: three
/// forward transforms. Channels 0–2 are convolved with w and all six with w², so the first
/// two spectra are multiplied by both kernels (the w product of the second also carries Σt²,
/// which is not read): five inverse transforms, into buffers in the order of [`W_PRODUCTS`]
/// then the three spectra.
const PACKED: [(usize, usize); 3] = [(0, 1), (2, 3), (4, 5)];
/// Spectra (indices into [`PACKED`]) also multiplied by w, into buffers 0 and 1.
const W_PRODUCTS: [usize; 2] = [0, 1];

impl Plan {
    fn new(b: &Buckets, seg: &Range<usize>, reach: u64, gcd: u64) -> Self {
        let span = (b.step[seg.end - 1] - b.step[seg.start]) / gcd;
        let r = (reach / gcd).min(span) as usize;
        let block = (4 * (2 * r + 1)).next_power_of_two().max(64);
        let whole = (span as usize + 1 + 2 * r).next_power_of_two();
        Self {
            span,
            r,
            len: block.min(whole),
            gcd,
        }
    }

    /// Grid position of an offset of `steps` from the stretch's first step (no division
    /// when every step is on the grid: an integer division per bucket was a fifth of the
    /// sums' time).
    #[inline(always)]
    fn grid(&self, steps: u64) -> usize {
        (if self.gcd == 1 {
            steps
        } else {
            steps / self.gcd
        }) as usize
    }

    /// Output positions per block.
    fn step(&self) -> usize {
        self.len - 2 * self.r
    }

    /// Estimated cost in butterflies: three forward and five inverse transforms per block.
    fn cost(&self) -> f64 {
        let blocks = (self.span as f64 + 1.0) / self.step() as f64;
        let l = self.len as f64;
        blocks.ceil() * (4.0 * l * l.log2() + 12.0 * l)
    }

    /// The blocks of the stretch, in order: where each one's grid starts and which buckets
    /// it reads and writes.
    fn blocks(&self, b: &Buckets, seg: &Range<usize>) -> Vec<Block> {
        let first = b.step[seg.start];
        let pos = |j: usize| self.grid(b.step[j] - first);
        let (len, r) = (self.len, self.r);
        let mut blocks = Vec::new();
        let (mut in_lo, mut out_lo) = (seg.start, seg.start);
        let mut s = 0usize;
        while out_lo < seg.end {
            // Skip empty blocks: start at the next bucket that needs an output.
            s = s.max(pos(out_lo));
            let lo = s.saturating_sub(r);
            let origin = s as i64 - r as i64;
            while pos(in_lo) < lo {
                in_lo += 1;
            }
            let mut in_hi = in_lo;
            while in_hi < seg.end && (pos(in_hi) as i64) < origin + len as i64 {
                in_hi += 1;
            }
            let end = s + self.step();
            let mut out_hi = out_lo;
            while out_hi < seg.end && pos(out_hi) < end {
                out_hi += 1;
            }
            blocks.push(Block {
                origin,
                input: in_lo..in_hi,
                output: out_lo..out_hi,
            });
            out_lo = out_hi;
            s = end;
        }
        blocks
    }

    fn run(&self, b: &Buckets, seg: &Range<usize>, h: f64, out: &mut [Moments]) {
        let (len, r) = (self.len, self.r);
        let mut fft = Fft::new(len);
        let zero = Complex64::new(0.0, 0.0);
        // Kernel spectra of w and w², laid circularly (symmetric around 0).
        let mut spectra = [vec![zero; len], vec![zero; len]];
        for m in 0..=r {
            let w = gauss(m as u64 * self.gcd, h);
            for (sq, x) in spectra.iter_mut().enumerate() {
                let v = if sq == 1 { w * w } else { w };
                x[m] = Complex64::new(v, 0.0);
                x[(len - m) % len] = Complex64::new(v, 0.0);
            }
        }
        for x in spectra.iter_mut() {
            fft.forward(x);
        }
        // Blocks are independent: each in its own task, writing its own outputs.
        let blocks = self.blocks(b, seg);
        let mut rest = &mut out[seg.start..seg.end];
        let mut work: Vec<(&Block, &mut [Moments])> = Vec::with_capacity(blocks.len());
        for block in &blocks {
            let (mine, after) = std::mem::take(&mut rest).split_at_mut(block.output.len());
            work.push((block, mine));
            rest = after;
        }
        let spectra = &spectra;
        work.into_par_iter().for_each_init(
            || (fft.clone(), vec![vec![zero; len]; 5]),
            |(fft, bufs), (block, out)| self.convolve(b, seg, block, spectra, fft, bufs, out),
        );
    }

    /// One block's convolution: the moments of the buckets `block.output`, into `out`.
    #[allow(clippy::too_many_arguments)]
    fn convolve(
        &self,
        b: &Buckets,
        seg: &Range<usize>,
        block: &Block,
        spectra: &[Vec<Complex64>; 2],
        fft: &mut Fft,
        bufs: &mut [Vec<Complex64>],
        out: &mut [Moments],
    ) {
        let first = b.step[seg.start];
        let pos = |j: usize| self.grid(b.step[j] - first);
        let origin = block.origin;
        let zero = Complex64::new(0.0, 0.0);
        // Scale each channel to unit size in the block, so a pair's rounding error is
        // relative to each channel's own values.
        let mut scale = [0.0f64; 6];
        for j in block.input.clone() {
            for (c, x) in b.sums(j).iter().enumerate() {
                scale[c] = scale[c].max(x.abs());
            }
        }
        let scale = scale.map(|x| if x > 0.0 && x.is_finite() { x } else { 1.0 });
        // Buffers 0 and 1 are written whole by the w products below.
        for x in bufs[2..].iter_mut() {
            x.fill(zero);
        }
        for j in block.input.clone() {
            let idx = (pos(j) as i64 - origin) as usize;
            let sums = b.sums(j);
            let val = |c: usize| sums[c] / scale[c];
            for (x, &(cr, ci)) in bufs[2..].iter_mut().zip(&PACKED) {
                x[idx] = Complex64::new(val(cr), val(ci));
            }
        }
        let (by_w, spectra_of) = bufs.split_at_mut(2);
        for x in spectra_of.iter_mut() {
            fft.forward(x);
        }
        for (o, &p) in by_w.iter_mut().zip(&W_PRODUCTS) {
            for ((v, x), k) in o.iter_mut().zip(&spectra_of[p]).zip(&spectra[0]) {
                *v = x * k;
            }
        }
        for x in spectra_of.iter_mut() {
            for (v, k) in x.iter_mut().zip(&spectra[1]) {
                *v *= k;
            }
        }
        for x in bufs.iter_mut() {
            fft.inverse(x);
        }
        for (o, j) in out.iter_mut().zip(block.output.clone()) {
            let idx = (pos(j) as i64 - origin) as usize;
            let get = |p: usize, imag: bool, c: usize| {
                let v = bufs[p][idx];
                (if imag { v.im } else { v.re }) * scale[c]
            };
            *o = Moments {
                w: get(0, false, 0),
                wt: get(0, true, 1),
                wg: get(1, false, 2),
                w2: get(2, false, 0),
                qt: get(2, true, 1),
                qg: get(3, false, 2),
                qtt: get(3, true, 3),
                qtg: get(4, false, 4),
                qgg: get(4, true, 5),
            };
        }
    }
}
