//! Gradient statistics: the per-step record, the stats protocol, and the noise-scale
//! estimators with smoothing, intervals and diagnostics (docs/STATISTICS.md).
//!
//! Entry points: [`read_ndjson`] (protocol v1 stream → records; [`read_ndjson_bounded`] keeps
//! at most a bound of them, merging consecutive steps, [`coarsen`]), [`analyze`] /
//! [`analyze_outcome`] (records → [`AnalyzeReport`]).

pub mod analyze;
pub mod cbs;
pub mod coarsen;
pub mod compare;
pub mod diagnostics;
pub mod estimate;
mod fft;
pub mod incremental;
pub mod interval;
mod kernel_sums;
mod lagged;
pub mod layer_map;
pub mod layers;
pub mod precond;
pub mod protocol;
mod protocol_fast;
mod protocol_scan;
pub mod reader;
pub mod report;
pub mod report_stream;
mod row_json;
pub mod settings;
pub mod smoothed;
pub mod smoothing;
pub mod step;
mod summary_diags;
pub mod window;

pub use analyze::{
    InputCounts, StatsError, analyze, analyze_outcome, analyze_outcome_split, analyze_split,
    analyze_with_counts, analyze_with_inflation,
};
pub use coarsen::{Coarsener, Coarsening, MAX_ANALYSED_RECORDS, RecordBound};
pub use compare::{Comparison, compare};
pub use diagnostics::{Diagnostic, DiagnosticKind, Severity};
pub use estimate::{EstimatorKind, TwoBatch, two_batch};
pub use layer_map::{LayerMap, LayerName, intern};
pub use protocol::{ProtocolError, parse_line};
pub use reader::{LineError, ReadOutcome, read_ndjson, read_ndjson_bounded};
pub use report::{AnalyzeReport, LayerPoint, LayerRow, Reason, StepRow, Summary, Verdict};
pub use settings::{EstimatorSettings, SmootherKind};
pub use step::{LayerSq, StepConfig, StepStats};
pub use window::{Drift, WindowEstimate};
